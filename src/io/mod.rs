//! Reading and writing arrays: `.npy`, images (PNG/JPEG/TIFF) and NIfTI volumes, with atomic writes.
//!
//! Everything here maps a file to a [`Tensor`] in deepinv's layout and back. Writers go through
//! [`write_atomic`] so an interrupted run never leaves a half-written output in place of a good one.
//! `checkpoint` is the file an elastic run continues from.

pub mod checkpoint;
pub mod image;
pub mod nifti;
pub mod npy;
pub mod run_dir;
pub mod segy;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use self::image::{encode_png_rgb8, read_image, write_png, write_png16, write_tiff_f32};
pub use nifti::{read_nifti, write_nifti};
pub use npy::{read_npy, read_npy_f64, write_npy};
pub use run_dir::{RunDir, Staging};
pub use segy::{Segy, read_raw_f32, read_segy, write_segy};

/// The file a complete run folder holds, written last (by `job` and `fwi`; read back by `scaling`
/// and the workbench's history): a folder with it under its final name holds a whole run.
pub const METRICS_FILE: &str = "metrics.json";

/// The file a complete denoiser or Multi-DSN training run holds, written last (by `train` and
/// `dsn`; read back by `tessera report`, serve's file lists and the workbench).
pub const TRAIN_SUMMARY_FILE: &str = "train.json";

/// File kinds known to [`read_array`] and [`write_array`], chosen by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Npy,
    Png,
    Jpeg,
    Tiff,
    Nifti,
}

const SUPPORTED_READ: &str = ".npy, .png, .jpg, .jpeg, .tif, .tiff, .nii, .nii.gz";
const SUPPORTED_WRITE: &str = ".npy, .png, .tif, .tiff (float32), .nii, .nii.gz";

impl FileKind {
    /// The kind named by `path`'s extension (case-insensitive), if any.
    pub fn from_path(path: &Path) -> Option<FileKind> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        if name.ends_with(".nii") || name.ends_with(".nii.gz") {
            return Some(FileKind::Nifti);
        }
        let ext = name.rsplit_once('.')?.1;
        Some(match ext {
            "npy" => FileKind::Npy,
            "png" => FileKind::Png,
            "jpg" | "jpeg" => FileKind::Jpeg,
            "tif" | "tiff" => FileKind::Tiff,
            _ => return None,
        })
    }
}

/// A path named in a config: absolute as given, relative to `base_dir` (the config's folder)
/// otherwise.
pub fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    }
}

/// The shape [`read_array`] would return for `path`, from the file's header alone: what a job's
/// memory estimate needs before the file is loaded (a small file may declare a huge array).
pub fn peek_shape(path: &Path) -> Result<Vec<usize>> {
    match FileKind::from_path(path) {
        Some(FileKind::Npy) => npy::peek_npy_shape(path),
        Some(FileKind::Png | FileKind::Jpeg | FileKind::Tiff) => image::peek_image_shape(path),
        Some(FileKind::Nifti) => nifti::peek_nifti_shape(path),
        None => Err(Error::Unsupported(format!(
            "reading this file type (supported: {SUPPORTED_READ}): {}",
            path.display()
        ))),
    }
}

/// Reads an array from `.npy`, an image (`.png`, `.jpg`/`.jpeg`, `.tif`/`.tiff`) or a NIfTI volume
/// (`.nii`, `.nii.gz`), chosen by extension. Images come back as `(1, C, H, W)`, NIfTI volumes as
/// `(1, 1, D, H, W)`; `.npy` keeps its stored shape. Values are not checked for NaN/Inf: callers that
/// need finite data call [`Tensor::check_finite`]. An array without elements (a zero-size axis)
/// is an error: nothing in tessera can use it.
pub fn read_array(path: &Path) -> Result<Tensor> {
    let x = match FileKind::from_path(path) {
        Some(FileKind::Npy) => read_npy(path)?,
        Some(FileKind::Png | FileKind::Jpeg | FileKind::Tiff) => read_image(path)?,
        Some(FileKind::Nifti) => read_nifti(path)?,
        None => {
            return Err(Error::Unsupported(format!(
                "reading this file type (supported: {SUPPORTED_READ}): {}",
                path.display()
            )));
        }
    };
    if x.numel() == 0 {
        return Err(Error::format(
            path,
            format!("the array of shape {:?} has no elements", x.shape()),
        ));
    }
    Ok(x)
}

/// Writes an array as `.npy`, 8-bit `.png` (clamped to [0, 1]), float32 `.tif`/`.tiff`, or NIfTI
/// float32 (`.nii`, `.nii.gz`), chosen by extension; atomically in every case.
pub fn write_array(path: &Path, tensor: &Tensor) -> Result<()> {
    match FileKind::from_path(path) {
        Some(FileKind::Npy) => write_npy(path, tensor),
        Some(FileKind::Png) => write_png(path, tensor),
        Some(FileKind::Tiff) => write_tiff_f32(path, tensor),
        Some(FileKind::Nifti) => write_nifti(path, tensor),
        Some(FileKind::Jpeg) => Err(Error::Unsupported(format!(
            "writing JPEG (lossy; use .png or .tif instead): {}",
            path.display()
        ))),
        None => Err(Error::Unsupported(format!(
            "writing this file type (supported: {SUPPORTED_WRITE}): {}",
            path.display()
        ))),
    }
}

/// Writes `bytes` to `path` via a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::format(path, "output path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io("writing", path, e));
    }
    Ok(())
}

/// Writes `value` as pretty-printed JSON through [`write_atomic`] (`metrics.json`, `train.json`, the
/// workbench's state). Everything tessera writes this way is plain data, so a value that does not
/// encode is a bug, `Internal`, wherever it happens — never a config error a user could fix.
pub fn write_json_atomic<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec_pretty(value).map_err(|e| {
        let name = path
            .file_name()
            .unwrap_or(path.as_os_str())
            .to_string_lossy();
        Error::Internal(format!("encoding {name}: {e}"))
    })?;
    write_atomic(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_does_not_encode_is_an_internal_error_and_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("tessera-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(METRICS_FILE);
        // JSON object keys must be strings: a map keyed by arrays cannot be written.
        let unencodable: std::collections::BTreeMap<Vec<u8>, u8> = [(vec![1, 2], 3)].into();
        let e = write_json_atomic(&path, &unencodable).unwrap_err();
        assert!(
            matches!(&e, Error::Internal(m) if m.starts_with("encoding metrics.json")),
            "{e:?}"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        write_json_atomic(&path, &[1.5f64, 2.0]).unwrap();
        let back: Vec<f64> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, [1.5, 2.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
