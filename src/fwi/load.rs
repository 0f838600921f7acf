//! Models, observed data and acquisition cells from files: `.npy`, raw float32 with a shape, SEG-Y.

use std::path::Path;

use super::config::ArrayFile;
use crate::error::{Error, Result};
use crate::io;

fn kind(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// An array with its shape, as f64.
pub fn read_array(file: &ArrayFile, base_dir: &Path) -> Result<(Vec<usize>, Vec<f64>)> {
    let path = io::resolve(base_dir, &file.path);
    let (shape, data) = match kind(&path).as_str() {
        "npy" => io::read_npy_f64(&path)?,
        "bin" | "raw" | "f32" => {
            let shape = file.shape.clone().ok_or_else(|| {
                Error::config(
                    "shape",
                    format!("a raw float32 file needs `shape`: {}", path.display()),
                )
            })?;
            let data = io::read_raw_f32(&path, &shape)?;
            (shape, data.into_iter().map(f64::from).collect())
        }
        "segy" | "sgy" => {
            let s = io::read_segy(&path)?;
            (
                vec![s.traces(), s.samples],
                s.data.into_iter().map(f64::from).collect(),
            )
        }
        other => {
            return Err(Error::Unsupported(format!(
                "reading `.{other}` arrays (use .npy, .bin/.raw/.f32 with a shape, or .segy/.sgy): {}",
                path.display()
            )));
        }
    };
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(Error::format(&path, format!("value {i} is not finite")));
    }
    Ok((shape, data))
}

/// A velocity model `(nz, nx)`: SEG-Y traces are columns (samples run down in depth) unless
/// `transpose`; other files are `(nz, nx)` with optional leading axes of size 1.
pub fn read_model(file: &ArrayFile, base_dir: &Path) -> Result<(usize, usize, Vec<f64>)> {
    let (shape, data) = read_array(file, base_dir)?;
    let segy = matches!(kind(&file.path).as_str(), "segy" | "sgy");
    let (a, b) = crate::physics::wave::velocity::grid_of(&shape, "model")?;
    if segy != file.transpose {
        // Stored (x, z): transpose to (z, x).
        let mut t = vec![0.0; data.len()];
        for i in 0..a {
            for j in 0..b {
                t[j * a + i] = data[i * b + j];
            }
        }
        return Ok((b, a, t));
    }
    Ok((a, b, data))
}

/// Observed data `(shots, receivers, nt)`; SEG-Y traces are grouped `receivers` per shot in file
/// order.
pub fn read_data(
    file: &ArrayFile,
    base_dir: &Path,
    shots: usize,
    receivers: usize,
) -> Result<(usize, Vec<f64>)> {
    let (shape, data) = read_array(file, base_dir)?;
    let path = io::resolve(base_dir, &file.path);
    let nt = match shape.as_slice() {
        [s, r, nt] if *s == shots && *r == receivers => *nt,
        [traces, nt] if *traces == shots * receivers => *nt,
        _ => {
            return Err(Error::format(
                &path,
                format!(
                    "observed data of shape {shape:?} does not fit {shots} shots × {receivers} receivers × nt"
                ),
            ));
        }
    };
    Ok((nt, data))
}
