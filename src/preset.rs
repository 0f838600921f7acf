//! Presets: a whole experiment (image, physics stack, noise, fidelity, denoiser, tiling, algorithm,
//! outputs) as versioned TOML.
//!
//! Presets hold configs, never live objects; [`crate::job`] builds and runs them. Unknown fields are
//! rejected with the field's name, every value is range-checked by the configs' `validate`, and
//! `--set key=value` overrides are applied to the TOML tree before it is typed, so an override is
//! checked exactly like a value written in the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::denoise::DenoiserConfig;
use crate::dist::denoise::TileAssignment;
use crate::dist::physics::{GatherStrategy, SumOrder};
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::optim::AlgorithmConfig;
use crate::physics::channels::{ChannelPart, OperatorSpec};
use crate::physics::{NoiseConfig, PhysicsConfig};
use crate::samples::Sample;
use crate::tiling::TilingConfig;

/// Largest unknown image `[image] shape` may declare (2³², 16 GiB of f32).
const MAX_SHAPE_ELEMENTS: usize = 1 << 32;

/// The preset format version this build reads and writes.
pub const PRESET_VERSION: u32 = 1;

/// One experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Format version; must be [`PRESET_VERSION`].
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of the simulated noise (and of generated samples).
    #[serde(default)]
    pub seed: u64,
    pub image: ImageSource,
    /// The operators; one measurement each.
    pub physics: Vec<PhysicsConfig>,
    /// Noise added to every simulated measurement.
    #[serde(default)]
    pub noise: Option<NoiseConfig>,
    /// Clamp the simulated measurements into `[lo, hi]` after the noise, as a sensor saturates (the
    /// reference scaling study's colour workload keeps its blurred, noisy images in `[0, 1]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement_clamp: Option<[f32; 2]>,
    /// Measured data to reconstruct from, one array per operator, instead of simulating
    /// `A(x) + noise` from the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<MeasurementSource>,
    #[serde(default)]
    pub fidelity: FidelityConfig,
    #[serde(default)]
    pub denoiser: Option<DenoiserConfig>,
    #[serde(default)]
    pub tiling: Option<TilingConfig>,
    pub algorithm: AlgorithmConfig,
    #[serde(default)]
    pub output: OutputConfig,
    #[serde(default)]
    pub distributed: DistributedConfig,
}

/// Iterations (epochs) between an elastic run's checkpoints when the preset does not say.
pub const DEFAULT_CHECKPOINT_EVERY: usize = 10;

/// How the experiment is spread over ranks (ignored on one rank, where it changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributedConfig {
    /// How measurements `A(x)` are gathered.
    pub gather: GatherStrategy,
    /// `exact` (identical to one rank) or `all_reduce` (less traffic, rounding-level differences).
    pub sum_order: SumOrder,
    /// How tiles are shared among ranks.
    pub tile_assignment: TileAssignment,
    /// Offset the noise seed by the rank (deepinv's `seed_offset`): each rank draws from its own
    /// stream. The measurements then depend on the number of ranks; off (the default), operator i's
    /// noise is seeded by `seed + i` wherever it runs, so 1, 2 and 3 ranks measure the same data.
    pub seed_offset_by_rank: bool,
    /// Compute threads per rank process; unset: the host's cores divided by its ranks
    /// (`dist::placement`). `--threads-per-rank` overrides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_per_rank: Option<usize>,
    /// Split every tomography operator by angle into this many operators (contiguous runs of its
    /// angles, as deepinv's distributed tomography splits the sinogram), so that more ranks than
    /// `[[physics]]` entries share the gradient step. A property of the experiment, not of the
    /// group: 1 rank runs the same split stack and computes the same numbers as N ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_by_angle: Option<usize>,
    /// Split every operator by channel into this many operators (contiguous runs of the image's
    /// channels, `physics::channels`), so that more ranks than operators share the gradient step
    /// of a colour image. A property of the experiment like `split_by_angle` (applied after it):
    /// 1 rank runs the same split stack as N ranks. Parts of a circular blur no longer share FFTs
    /// with the rest of the stack, whose gradient every rank otherwise computes in full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_by_channel: Option<usize>,
    /// Survive lost ranks (`tessera run --elastic`, `docs/ELASTIC.md`): the launcher keeps the
    /// others running and they go on as a smaller group, with the same result.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub elastic: bool,
    /// The fewest ranks an elastic run may shrink to before it stops (`None`: 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ranks: Option<usize>,
    /// Elastic runs write a checkpoint (what `tessera run --resume DIR` continues from) every this
    /// many iterations (`None`: [`DEFAULT_CHECKPOINT_EVERY`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_every: Option<usize>,
    /// Where every rank computes: `cpu`, `cuda` (GPU `LOCAL_RANK % count`) or `cuda:N`, parsed by
    /// `device::Device` when the run starts (`--device` overrides it; docs/GPU.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// Loaded measurements: `paths` (files) or `inline` (arrays sent with the job), one per operator in
/// operator order. Each must have the shape its operator produces, e.g. `(B, C, H, W)` for a
/// circular blur or `(B, C, N_det, N_angles)` for tomography; missing leading batch/channel axes of
/// size 1 are added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasurementSource {
    /// `.npy` (or image/NIfTI) files, relative to the preset's folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathBuf>,
    /// Names of arrays sent along with the job (`tessera serve`, the workbench).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inline: Vec<String>,
}

impl MeasurementSource {
    /// How many measurements it names.
    pub fn len(&self) -> usize {
        self.paths.len() + self.inline.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn validate(&self, operators: usize) -> Result<()> {
        match (self.paths.is_empty(), self.inline.is_empty()) {
            (false, false) => {
                return Err(Error::config(
                    "measurements",
                    "give either `paths` or `inline`, not both",
                ));
            }
            (true, true) => {
                return Err(Error::config(
                    "measurements",
                    "give `paths` (one file per operator) or `inline`",
                ));
            }
            _ => {}
        }
        if self.len() != operators {
            return Err(Error::config(
                "measurements",
                format!(
                    "{} measurement(s) for {operators} operator(s): give one per [[physics]] entry, in order",
                    self.len()
                ),
            ));
        }
        if let Some(i) = self.paths.iter().position(|p| p.as_os_str().is_empty()) {
            return Err(Error::config(
                format!("measurements.paths[{i}]"),
                format!("no file given for operator {i}"),
            ));
        }
        if let Some(i) = self.inline.iter().position(|n| n.trim().is_empty()) {
            return Err(Error::config(
                format!("measurements.inline[{i}]"),
                "must name an array",
            ));
        }
        Ok(())
    }
}

/// Where the ground-truth image comes from: a built-in sample, a file, an array sent with the job,
/// or nowhere (`shape`: real measured data, whose image is unknown).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSource {
    /// A built-in sample (exclusive with `path`).
    #[serde(default)]
    pub sample: Option<Sample>,
    /// Sample size: `[H, W]` for images, `[D, H, W]` for volumes.
    #[serde(default)]
    pub size: Option<Vec<usize>>,
    /// An image or volume file (.png, .jpg, .tif, .npy, .nii, .nii.gz), relative to the preset's folder.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Convert a colour image to one channel (mean of R, G, B).
    #[serde(default)]
    pub grayscale: bool,
    /// The name of an array sent along with the job (`tessera serve`: the image the user opened in
    /// the workbench); exclusive with `sample` and `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// No ground truth: the unknown image has this shape, `[C, H, W]` (or `[C, D, H, W]` for
    /// volumes). Only with loaded `[measurements]`; quality metrics are then not computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<usize>>,
}

impl ImageSource {
    /// Whether the source holds an image (every source but `shape`).
    pub fn has_truth(&self) -> bool {
        self.shape.is_none()
    }
}

/// What to write and what to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Output folder (relative to the working directory); `--out` overrides it.
    pub dir: Option<PathBuf>,
    /// Also write the simulated measurements as `.npy`.
    pub save_measurements: bool,
    /// Compute SSIM every N iterations (and at the last); 0 disables it.
    pub ssim_every: usize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            dir: None,
            save_measurements: true,
            ssim_every: 10,
        }
    }
}

/// The presets shipped in `presets/`, embedded in the binary so they run from anywhere.
pub const BUNDLED: &[(&str, &str)] = &[
    ("quick", include_str!("../presets/quick.toml")),
    ("multiblur", include_str!("../presets/multiblur.toml")),
    ("tomography2d", include_str!("../presets/tomography2d.toml")),
    ("tomography3d", include_str!("../presets/tomography3d.toml")),
    ("photo_deblur", include_str!("../presets/photo_deblur.toml")),
    (
        "scaling_colour",
        include_str!("../presets/scaling_colour.toml"),
    ),
    (
        "scaling_tomo2d",
        include_str!("../presets/scaling_tomo2d.toml"),
    ),
    (
        "scaling_tomo3d",
        include_str!("../presets/scaling_tomo3d.toml"),
    ),
];

/// A preset as loaded: every file it names is absolute (see [`Preset::resolve_paths`]).
#[derive(Debug, Clone)]
pub struct LoadedPreset {
    pub preset: Preset,
    /// Where it came from, for messages: a path or `bundled:NAME`.
    pub origin: String,
}

impl Preset {
    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<Preset> {
        // A training preset given to `run` would fail on its first field of another kind
        // (`domains`, `train`): say what it is and which command runs it.
        if let Ok(table) = toml::from_str::<toml::Table>(text) {
            let kind = match table.get("kind").and_then(|k| k.as_str()) {
                Some("dsn") => Some("a Multi-DSN training preset"),
                _ if table.get("train").is_some_and(toml::Value::is_table) => {
                    Some("a denoiser training preset")
                }
                _ => None,
            };
            if let Some(kind) = kind {
                let name = origin.strip_prefix("bundled:").unwrap_or(origin);
                return Err(Error::config(
                    "preset",
                    format!("`{name}` is {kind}: run it with `tessera train {name}`"),
                ));
            }
        }
        let preset: Preset = parse_versioned(text, origin, overrides, "preset", PRESET_VERSION)?;
        preset.validate()?;
        Ok(preset)
    }

    /// Loads a preset by file path or bundled name, applying `--set` overrides.
    pub fn load(name_or_path: &str, overrides: &[String]) -> Result<LoadedPreset> {
        let Some(found) = find_text(name_or_path, BUNDLED)? else {
            return Err(Error::config(
                "preset",
                format!(
                    "no preset file `{name_or_path}` and no bundled preset of that name (bundled: {})",
                    BUNDLED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let mut preset = Preset::from_toml(&found.text, &found.origin, overrides)?;
        // A bundled preset has no folder: its paths (given by overrides) are the user's, relative
        // to where they stand.
        preset.resolve_paths(&found.base_dir)?;
        Ok(LoadedPreset {
            preset,
            origin: found.origin,
        })
    }

    /// Makes every file the preset names absolute — images, measurements, blur kernels, weights,
    /// TorchScript models — resolving relative ones against `base_dir` (the preset's folder;
    /// relative itself, it is taken from the working directory). The one place paths are
    /// resolved: the CLI, `tessera serve` and the workbench load presets through it, and
    /// everything after reads the paths as they are. `output.dir` stays relative to the working
    /// directory, as documented.
    pub fn resolve_paths(&mut self, base_dir: &Path) -> Result<()> {
        let base = match base_dir.as_os_str().is_empty() {
            true => std::env::current_dir(),
            false => std::path::absolute(base_dir),
        }
        .map_err(|e| Error::io("finding the preset's folder", base_dir, e))?;
        let physics = self.physics.iter_mut().flat_map(PhysicsConfig::paths_mut);
        let denoiser = self.denoiser.iter_mut().flat_map(DenoiserConfig::paths_mut);
        let image = self.image.path.iter_mut();
        let measurements = self
            .measurements
            .iter_mut()
            .flat_map(|m| m.paths.iter_mut());
        for p in image.chain(measurements).chain(physics).chain(denoiser) {
            *p = crate::io::resolve(&base, p);
        }
        Ok(())
    }

    /// The preset as TOML (what the GUI saves).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::config("preset", e.to_string()))
    }

    /// The operators the job builds: `[[physics]]`, with tomography operators split by angle when
    /// `[distributed] split_by_angle` asks for it, then every operator split by channel when
    /// `split_by_channel` does (parts of one operator are consecutive). Operator `i` of this list is
    /// seeded `seed + i`.
    pub fn operators(&self) -> Result<Vec<OperatorSpec>> {
        let mut configs = Vec::new();
        for (i, p) in self.physics.iter().enumerate() {
            match self.distributed.split_by_angle {
                None => configs.push(p.clone()),
                Some(parts) => {
                    let field = format!("distributed.split_by_angle (physics[{i}])");
                    configs.extend(p.split_by_angle(parts, &field)?);
                }
            }
        }
        Ok(match self.distributed.split_by_channel {
            None => configs.into_iter().map(OperatorSpec::whole).collect(),
            Some(parts) => configs
                .into_iter()
                .flat_map(|config| {
                    (0..parts).map(move |index| OperatorSpec {
                        config: config.clone(),
                        channels: Some(ChannelPart { index, parts }),
                    })
                })
                .collect(),
        })
    }

    /// The single whole tomography operator FBP inverts, if the stack is one.
    pub fn fbp_operator(&self) -> Result<Option<PhysicsConfig>> {
        Ok(match &self.operators()?[..] {
            [
                OperatorSpec {
                    config: c @ (PhysicsConfig::Tomography(_) | PhysicsConfig::Tomography3d(_)),
                    channels: None,
                },
            ] => Some(c.clone()),
            _ => None,
        })
    }

    /// Whether the experiment works on volumes.
    pub fn is_volumetric(&self) -> bool {
        self.physics.iter().any(PhysicsConfig::is_volumetric)
    }

    /// Checks every section and their consistency.
    pub fn validate(&self) -> Result<()> {
        if self.version != PRESET_VERSION {
            return Err(Error::config(
                "version",
                format!(
                    "preset version {} is not supported (this tessera reads version {PRESET_VERSION})",
                    self.version
                ),
            ));
        }
        if self.name.trim().is_empty() {
            return Err(Error::config("name", "must not be empty"));
        }
        self.image.validate(self.is_volumetric())?;
        if self.physics.is_empty() {
            return Err(Error::config(
                "physics",
                "needs at least one operator ([[physics]])",
            ));
        }
        let volumetric = self.is_volumetric();
        for (i, p) in self.physics.iter().enumerate() {
            p.validate()?;
            if p.is_volumetric() != volumetric {
                return Err(Error::config(
                    format!("physics[{i}]"),
                    "cannot mix 2-D and 3-D operators in one stack",
                ));
            }
        }
        if let Some(n) = &self.noise {
            n.validate()?;
        }
        match &self.measurements {
            Some(m) => {
                m.validate(self.physics.len())?;
                if self.noise.is_some() {
                    return Err(Error::config(
                        "noise",
                        "only applies to simulated measurements; remove [noise] or [measurements]",
                    ));
                }
            }
            None if !self.image.has_truth() => {
                return Err(Error::config(
                    "image.shape",
                    "an image known only by its shape needs loaded [measurements] to reconstruct from",
                ));
            }
            None => {}
        }
        if let Some([lo, hi]) = self.measurement_clamp {
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return Err(Error::config(
                    "measurement_clamp",
                    format!("must be [lo, hi] with finite lo < hi, got [{lo}, {hi}]"),
                ));
            }
            if self.measurements.is_some() {
                return Err(Error::config(
                    "measurement_clamp",
                    "applies to simulated measurements, not to loaded [measurements]",
                ));
            }
        }
        self.fidelity.validate()?;
        if let Some(t) = self.distributed.threads_per_rank {
            crate::dist::placement::check_threads("distributed.threads_per_rank", t)?;
        }
        if self.distributed.min_ranks == Some(0) {
            return Err(Error::config("distributed.min_ranks", "must be at least 1"));
        }
        if self.distributed.checkpoint_every == Some(0) {
            return Err(Error::config(
                "distributed.checkpoint_every",
                "must be at least 1 (iterations between checkpoints)",
            ));
        }
        let splits = [
            (
                "distributed.split_by_angle",
                self.distributed.split_by_angle,
            ),
            (
                "distributed.split_by_channel",
                self.distributed.split_by_channel,
            ),
        ];
        for (field, parts) in splits {
            match parts {
                Some(0) => {
                    return Err(Error::config(
                        field,
                        "must be at least 1 (1: operators stay whole)",
                    ));
                }
                Some(_) if self.measurements.is_some() => {
                    return Err(Error::config(
                        field,
                        "applies to simulated measurements; loaded [measurements] hold one measurement per [[physics]] entry",
                    ));
                }
                _ => {}
            }
        }
        if self.distributed.split_by_angle.is_some() {
            self.operators()?;
        }
        if let Some(d) = &self.denoiser {
            d.validate()?;
        }
        if let Some(t) = &self.tiling {
            t.validate()?;
        }
        self.algorithm.validate()?;
        match &self.algorithm {
            AlgorithmConfig::Pnp(_) if self.denoiser.is_none() => Err(Error::config(
                "denoiser",
                "the pnp algorithm needs a [denoiser] section",
            )),
            AlgorithmConfig::Fbp(_) if self.fbp_operator()?.is_none() => Err(Error::config(
                "algorithm.kind",
                "fbp needs exactly one tomography operator (not split by angle or channel)",
            )),
            _ => Ok(()),
        }
    }
}

impl ImageSource {
    fn validate(&self, volumetric: bool) -> Result<()> {
        if let Some(shape) = &self.shape {
            if self.sample.is_some() || self.path.is_some() || self.inline.is_some() {
                return Err(Error::config(
                    "image.shape",
                    "give one of `sample`, `path`, `inline` or `shape`",
                ));
            }
            if self.size.is_some() {
                return Err(Error::config(
                    "image.size",
                    "only applies to samples; with `shape` give the channels too",
                ));
            }
            let want = if volumetric { 4 } else { 3 };
            if shape.len() != want || shape.contains(&0) {
                return Err(Error::config(
                    "image.shape",
                    format!(
                        "needs {want} positive numbers ({}) for a {} experiment, got {shape:?}",
                        if volumetric { "C, D, H, W" } else { "C, H, W" },
                        if volumetric { "3-D" } else { "2-D" }
                    ),
                ));
            }
            if shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none_or(|n| n > MAX_SHAPE_ELEMENTS)
            {
                return Err(Error::config(
                    "image.shape",
                    format!("{shape:?} has more than {MAX_SHAPE_ELEMENTS} elements"),
                ));
            }
            if self.grayscale {
                return Err(Error::config(
                    "image.grayscale",
                    "does not apply to an image known only by its shape",
                ));
            }
            return Ok(());
        }
        if let Some(name) = &self.inline {
            if self.sample.is_some() || self.path.is_some() {
                return Err(Error::config(
                    "image.inline",
                    "give one of `sample`, `path` or `inline`",
                ));
            }
            if name.trim().is_empty() {
                return Err(Error::config("image.inline", "must name an array"));
            }
            if self.size.is_some() {
                return Err(Error::config(
                    "image.size",
                    "only applies to samples; an inline array has its own size",
                ));
            }
            return Ok(());
        }
        match (&self.sample, &self.path) {
            (Some(_), Some(_)) => Err(Error::config(
                "image",
                "give either `sample` or `path`, not both",
            )),
            (None, None) => Err(Error::config("image", "give `sample`, `path` or `inline`")),
            (Some(sample), None) => {
                if let Some(size) = &self.size {
                    let want = if volumetric { 3 } else { 2 };
                    if size.len() != want {
                        return Err(Error::config(
                            "image.size",
                            format!(
                                "needs {want} numbers for a {} experiment, got {size:?}",
                                if volumetric { "3-D" } else { "2-D" }
                            ),
                        ));
                    }
                }
                if volumetric != matches!(sample, Sample::SheppLogan3d) {
                    return Err(Error::config(
                        "image.sample",
                        format!(
                            "{sample:?} does not suit {} operators",
                            if volumetric { "3-D" } else { "2-D" }
                        ),
                    ));
                }
                Ok(())
            }
            (None, Some(_)) if self.size.is_some() => Err(Error::config(
                "image.size",
                "only applies to samples; a file has its own size",
            )),
            (None, Some(_)) => Ok(()),
        }
    }
}

/// A preset's text as found by [`find_text`], before it is typed.
#[derive(Debug, Clone)]
pub struct PresetText {
    pub text: String,
    /// Where it came from, for messages: the path as given, or `bundled:NAME`.
    pub origin: String,
    /// The folder its relative paths are taken from: the file's folder, or empty (the working
    /// directory) for a bundled preset.
    pub base_dir: PathBuf,
}

/// Finds a preset of one kind (imaging, training, Multi-DSN, FWI) by file path, else by name among
/// `bundled` (`name` or `presets/name.toml`); `Ok(None)` when it is neither. A folder named like a
/// bundled preset (e.g. its output folder) does not shadow it.
pub fn find_text(name_or_path: &str, bundled: &[(&str, &str)]) -> Result<Option<PresetText>> {
    let path = Path::new(name_or_path);
    if path.exists() && !path.is_dir() {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io("reading preset", path, e))?;
        return Ok(Some(PresetText {
            text,
            origin: name_or_path.to_string(),
            base_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        }));
    }
    let name = name_or_path.trim_end_matches(".toml");
    let name = name.strip_prefix("presets/").unwrap_or(name);
    Ok(bundled
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| PresetText {
            text: (*text).to_string(),
            origin: format!("bundled:{n}"),
            base_dir: PathBuf::new(),
        }))
}

/// Types preset TOML of one kind: parses it (errors name `origin`), applies the `--set` overrides to
/// the tree, checks its `version` against the one this build reads, then deserialises it (unknown
/// fields are named). `what` names the kind in messages ("preset", "FWI preset", ...). The caller
/// validates the values.
pub fn parse_versioned<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
    overrides: &[String],
    what: &str,
    version: u32,
) -> Result<T> {
    let mut value: toml::Value = toml::from_str(text)
        .map_err(|e| Error::format(origin, format!("invalid TOML: {}", e.message())))?;
    for o in overrides {
        apply_override(&mut value, o)?;
    }
    match value.get("version") {
        None => {
            return Err(Error::format(
                origin,
                format!("{what} has no `version` field (this tessera reads version {version})"),
            ));
        }
        Some(toml::Value::Integer(v)) if *v == i64::from(version) => {}
        Some(v) => {
            return Err(Error::format(
                origin,
                format!(
                    "{what} version {v} is not supported (this tessera reads version {version})"
                ),
            ));
        }
    }
    value.try_into().map_err(|e: toml::de::Error| {
        // `--set denoiser.kind="dncnn"` keeps DRUNet's `nc` beside it: say how to switch kinds.
        let hint = overrides
            .iter()
            .filter_map(|o| o.split_once('=')?.0.trim().strip_suffix(".kind"))
            .next_back()
            .filter(|_| e.message().contains("unknown field"))
            .map(|section| {
                format!(
                    " (`--set {section}.kind=…` keeps the section's other fields, which belong to \
                     its old kind: replace the whole section instead, e.g. \
                     --set '{section}={{kind = \"…\"}}')"
                )
            })
            .unwrap_or_default();
        Error::format(origin, format!("invalid {what}: {}{hint}", e.message()))
    })
}

/// Applies one `dotted.key=value` override to a TOML tree. Numeric path segments index arrays
/// (`physics.0.sigma=[2,1]`); the value is read as a TOML literal, or as a string if it is not one.
pub fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<()> {
    let (key, raw) = assignment.split_once('=').ok_or_else(|| {
        Error::config(
            "--set",
            format!("`{assignment}` is not of the form key=value"),
        )
    })?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(Error::config(
            "--set",
            format!("`{assignment}` has an empty key"),
        ));
    }
    let raw = raw.trim();
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let segments: Vec<&str> = key.split('.').collect();
    let mut node = root;
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        node = match node {
            toml::Value::Table(t) => {
                if last {
                    t.insert(seg.to_string(), value);
                    return Ok(());
                }
                t.entry(seg.to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()))
            }
            toml::Value::Array(a) => {
                let idx: usize = seg.parse().map_err(|_| {
                    Error::config("--set", format!("`{key}`: `{seg}` must be an array index"))
                })?;
                let len = a.len();
                let slot = a.get_mut(idx).ok_or_else(|| {
                    Error::config(
                        "--set",
                        format!("`{key}`: index {idx} is out of range (the array has {len} items)"),
                    )
                })?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            _ => {
                return Err(Error::config(
                    "--set",
                    format!("`{key}`: `{}` is not a table", segments[..i].join(".")),
                ));
            }
        };
    }
    unreachable!("the loop returns at the last segment")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switching_a_kind_says_how_to_drop_the_old_kinds_fields() {
        let e = Preset::load("quick", &["denoiser.kind=\"dncnn\"".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field") && e.contains("--set 'denoiser={kind = \"…\"}'"),
            "{e}"
        );
        // The way it shows works.
        let p = Preset::load(
            "quick",
            &["denoiser={kind = \"dncnn\", weights = \"random\", depth = 5}".into()],
        )
        .unwrap()
        .preset;
        match p.denoiser {
            Some(crate::denoise::DenoiserConfig::Dncnn(c)) => assert_eq!(c.depth, 5),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_training_preset_given_to_run_says_which_command_runs_it() {
        for (text, kind) in [
            (crate::dsn::run::BUNDLED[0].1, "Multi-DSN"),
            (crate::train::BUNDLED[0].1, "denoiser training"),
        ] {
            let e = Preset::from_toml(text, "presets/x.toml", &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(kind) && e.contains("tessera train presets/x.toml"),
                "{e}"
            );
        }
    }

    #[test]
    fn bundled_presets_parse_and_validate() {
        for (name, text) in BUNDLED {
            Preset::from_toml(text, name, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_split_by_angle_cuts_tomography_like_tensor_split_and_bad_splits_are_named() {
        let load = |o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
            Preset::load("tomography2d", &o)
        };
        let p = load(&["distributed.split_by_angle=3"]).unwrap().preset;
        let ops = p.operators().unwrap();
        let angles: Vec<Vec<f32>> = ops
            .iter()
            .map(|o| match &o.config {
                PhysicsConfig::Tomography(c) => c.angles.to_degrees(),
                other => panic!("{other:?}"),
            })
            .collect();
        // 100 angles into 3: 34, 33, 33, contiguous, together the whole operator's.
        assert_eq!(
            angles.iter().map(Vec::len).collect::<Vec<_>>(),
            [34, 33, 33]
        );
        let PhysicsConfig::Tomography(whole) = &p.physics[0] else {
            panic!("{:?}", p.physics[0])
        };
        assert_eq!(angles.concat(), whole.angles.to_degrees());
        for (o, field) in [
            (
                &["distributed.split_by_angle=0"][..],
                "distributed.split_by_angle",
            ),
            (
                &["distributed.split_by_angle=101"][..],
                "split_by_angle (physics[0])",
            ),
            (
                &["distributed.split_by_angle=2", "physics.0.normalize=true"][..],
                "split_by_angle (physics[0])",
            ),
            (&["measurement_clamp=[1.0,0.0]"][..], "measurement_clamp"),
        ] {
            let e = load(o).unwrap_err().to_string();
            assert!(e.contains(field), "{o:?}: {e}");
        }
        // Blurs have no angles: they stay whole.
        let blur = Preset::load("multiblur", &["distributed.split_by_angle=4".into()])
            .unwrap()
            .preset;
        let whole: Vec<_> = blur
            .physics
            .iter()
            .cloned()
            .map(OperatorSpec::whole)
            .collect();
        assert_eq!(blur.operators().unwrap(), whole);
    }

    #[test]
    fn an_inline_image_excludes_sample_path_and_size() {
        let quick = BUNDLED[0].1;
        let with = |o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
            Preset::from_toml(quick, "quick", &o)
        };
        let err = with(&["image.inline=\"photo\""]).unwrap_err().to_string();
        assert!(err.contains("image.inline"), "{err}");
        let p = Preset::from_toml(
            &quick.replace(
                "sample = \"natural\"\nsize = [128, 128]",
                "inline = \"photo\"",
            ),
            "quick",
            &[],
        )
        .unwrap();
        assert_eq!(p.image.inline.as_deref(), Some("photo"));
        // It survives the round trip through TOML that a submission takes.
        let back = Preset::from_toml(&p.to_toml().unwrap(), "again", &[]).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn unknown_field_is_named() {
        let text = BUNDLED[0]
            .1
            .replace("[algorithm]", "[algorithm]\nitertions = 3");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("itertions"), "{e}");
    }

    #[test]
    fn version_is_checked() {
        let text = BUNDLED[0].1.replace("version = 1", "version = 7");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("version 7"), "{e}");
        let text = BUNDLED[0].1.replace("version = 1", "");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("no `version`"), "{e}");
    }

    #[test]
    fn every_kind_finds_files_before_bundled_names_and_names_itself_in_version_errors() {
        let dir = std::env::temp_dir().join(format!("tessera-find-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("quick")).unwrap();
        // A folder named like a bundled preset does not shadow it.
        let quick = dir.join("quick");
        let found = find_text(quick.to_str().unwrap(), BUNDLED).unwrap();
        assert!(found.is_none(), "a folder is not a preset");
        let found = find_text("quick.toml", BUNDLED).unwrap().unwrap();
        assert_eq!(found.origin, "bundled:quick");
        assert_eq!(found.base_dir, PathBuf::new());
        // A file wins, and its folder is where its relative paths start.
        let file = dir.join("quick.toml");
        std::fs::write(&file, BUNDLED[0].1).unwrap();
        let found = find_text(file.to_str().unwrap(), BUNDLED).unwrap().unwrap();
        assert_eq!(found.base_dir, dir);
        assert!(find_text("no-such-preset", BUNDLED).unwrap().is_none());
        let e = parse_versioned::<toml::Table>("version = 3", "f.toml", &[], "FWI preset", 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("FWI preset version 3") && e.contains("f.toml"),
            "{e}"
        );
        let e = parse_versioned::<toml::Table>("x = 1", "f.toml", &["version=1".into()], "p", 1);
        assert!(e.is_ok(), "an override can supply the version");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn overrides_are_typed_and_checked() {
        let p = Preset::from_toml(
            BUNDLED[0].1,
            "t",
            &["algorithm.iterations=3".into(), "seed=9".into()],
        )
        .unwrap();
        assert_eq!(p.algorithm.iterations(), 3);
        assert_eq!(p.seed, 9);
        let e = Preset::from_toml(BUNDLED[0].1, "t", &["algorithm.iterations=0".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("algorithm.iterations"), "{e}");
        let e = Preset::from_toml(BUNDLED[0].1, "t", &["physics.5.sigma=1".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        assert!(Preset::from_toml(BUNDLED[0].1, "t", &["novalue".into()]).is_err());
    }

    #[test]
    fn every_file_a_preset_names_is_resolved_against_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let text = BUNDLED[0]
            .1
            .replace(
                "sample = \"natural\"\nsize = [128, 128]",
                "path = \"images/photo.png\"",
            )
            .replace("sigma = [2.0, 1.0]\n", "kernel_file = \"k.npy\"\n")
            .replace(
                "opponent_colour = true",
                "opponent_colour = true\nweights = \"/abs/drunet.pth\"",
            );
        let file = dir.path().join("exp.toml");
        std::fs::write(&file, text).unwrap();
        let p = Preset::load(file.to_str().unwrap(), &[]).unwrap().preset;
        assert_eq!(p.image.path.unwrap(), dir.path().join("images/photo.png"));
        match &p.physics[0] {
            PhysicsConfig::Blur(b) => {
                assert_eq!(
                    b.kernel_file.as_deref(),
                    Some(dir.path().join("k.npy").as_path())
                )
            }
            other => panic!("{other:?}"),
        }
        match p.denoiser.unwrap() {
            DenoiserConfig::Drunet(d) => {
                assert_eq!(d.weights.unwrap(), PathBuf::from("/abs/drunet.pth"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let p = Preset::from_toml(BUNDLED[1].1, "t", &[]).unwrap();
        let again = Preset::from_toml(&p.to_toml().unwrap(), "t", &[]).unwrap();
        assert_eq!(p, again);
    }
}
