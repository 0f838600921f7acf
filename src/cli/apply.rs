//! `tessera apply` and `tessera denoise`: one operator or one denoiser, from a TOML file, on one
//! array.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use tessera::denoise::DenoiserConfig;
use tessera::physics::{NoiseConfig, PhysicsConfig};
use tessera::tiling::{Decomposition, TiledDenoiser, TilingConfig};
use tessera::{Tensor, io};

/// An operator file: the operator's own fields plus an optional [noise] table.
#[derive(Deserialize)]
struct PhysicsFile {
    #[serde(flatten)]
    physics: PhysicsConfig,
    #[serde(default)]
    noise: Option<NoiseConfig>,
}

fn read_input(path: &Path) -> Result<Tensor> {
    let x = io::read_array(path)?;
    x.check_finite(&path.display().to_string())?;
    Ok(x)
}

fn read_toml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("invalid TOML: {}: {}", e.message(), path.display()))
}

pub(super) fn apply(
    physics_file: &Path,
    adjoint: bool,
    input_shape: Option<Vec<usize>>,
    noisy: bool,
    seed: u64,
    input: &Path,
    output: &Path,
) -> Result<()> {
    let mut file: PhysicsFile = read_toml(physics_file)?;
    // A kernel file is relative to the operator file's folder, as in presets.
    let base = physics_file.parent().unwrap_or(Path::new(""));
    for p in file.physics.paths_mut() {
        *p = io::resolve(base, p);
    }
    let x = read_input(input)?;
    let noise = if noisy { file.noise.as_ref() } else { None };
    let result = if adjoint {
        // The operator is built for A's input shape; assume it equals the adjoint's input (true for
        // shape-preserving operators) unless told otherwise, and check that A maps it to this array.
        let x_shape = input_shape.unwrap_or_else(|| x.shape().to_vec());
        let op = file
            .physics
            .build(&x_shape, None)
            .with_context(|| physics_file.display().to_string())?;
        let y_shape = op.output_shape(&x_shape)?;
        if y_shape != x.shape() {
            bail!(
                "{} has shape {:?} but this operator maps inputs of shape {x_shape:?} to {y_shape:?}; \
                 pass --input-shape with the shape of A's input",
                input.display(),
                x.shape()
            );
        }
        op.adjoint(&x)?
    } else {
        let op = file
            .physics
            .build(x.shape(), noise)
            .with_context(|| physics_file.display().to_string())?;
        op.measure(&x, seed)?
    };
    io::write_array(output, &result)?;
    Ok(())
}

/// A denoiser file: the denoiser's own fields plus an optional [tiling] table.
#[derive(Deserialize)]
struct DenoiserFile {
    #[serde(flatten)]
    denoiser: DenoiserConfig,
    #[serde(default)]
    tiling: Option<TilingConfig>,
}

pub(super) fn denoise(denoiser_file: &Path, sigma: f32, input: &Path, output: &Path) -> Result<()> {
    if !(sigma >= 0.0 && sigma.is_finite()) {
        bail!("--sigma must be a finite number ≥ 0, got {sigma}");
    }
    let mut file: DenoiserFile = read_toml(denoiser_file)?;
    // Sized from the input's header before it is read.
    let x_shape = io::peek_shape(input)?;
    if let Some(available) = tessera::memory::available_bytes() {
        tessera::memory::denoise(&file.denoiser, file.tiling.as_ref(), &x_shape)?
            .check_fits(available)?;
    }
    let x = read_input(input)?;
    // A weights path in the file is relative to the file's folder, as in presets.
    let base = denoiser_file.parent().unwrap_or(Path::new(""));
    for p in file.denoiser.paths_mut() {
        *p = io::resolve(base, p);
    }
    let inner = file
        .denoiser
        .build()
        .with_context(|| denoiser_file.display().to_string())?;
    let d: Box<dyn tessera::denoise::Denoiser> = match &file.tiling {
        Some(t) => match t.decomposition()? {
            Decomposition::Tiles(strategy) => {
                Box::new(TiledDenoiser::new(inner, strategy, t.max_batch_size))
            }
            // One process: the exact decomposition is a single block (the untiled network).
            Decomposition::Spatial => Box::new(tessera::dist::spatial::SpatialDenoiser::new(
                std::sync::Arc::new(tessera::dist::SingleProcess),
                inner,
                t,
            )?),
        },
        None => inner,
    };
    let y = d.denoise(&x, sigma)?;
    io::write_array(output, &y)?;
    Ok(())
}
