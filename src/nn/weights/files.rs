//! Weight files in and out of a [`StateDict`]: the format is recognised by content and handed to
//! its parser (`super::pth` for torch.save archives, `super::safetensors`); the parsers fill a
//! `StateDict`, so they and it do not depend on each other.

use std::path::Path;

use super::state_dict::StateDict;
use crate::error::{Error, Result};

impl StateDict {
    /// Reads a weight file: torch.save's archive (`.pth`, `.pt`, also the legacy pre-1.6 format) or
    /// `.safetensors`, recognised by content (zip, legacy pickle or safetensors header) rather than by
    /// extension. Tensors stored as f32, f16, bf16 or f64 load as f32; any other dtype is an error
    /// naming the key. A checkpoint dict that wraps exactly one tensor dict (`{"state_dict": …,
    /// "epoch": 3}`) yields that inner dict.
    pub fn load(path: &Path) -> Result<StateDict> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("reading weights", path, e))?;
        Self::from_bytes(path, &bytes)
    }

    /// [`StateDict::load`] on a file's content already in memory; `path` names it in errors.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<StateDict> {
        if super::safetensors::looks_like(bytes) {
            super::safetensors::parse(path, bytes)
        } else if super::pth::looks_like(bytes) {
            super::pth::parse(path, bytes)
        } else {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            Err(Error::format(
                path,
                format!(
                    "weights: not a torch.save file (.pth/.pt) nor a .safetensors file \
                     (extension `.{ext}`, first bytes {:02x?})",
                    &bytes[..bytes.len().min(8)]
                ),
            ))
        }
    }

    /// Writes all tensors as f32 to a `.safetensors` file (keys sorted, header padded to 8 bytes),
    /// readable by the `safetensors` Python package and by [`StateDict::load`].
    pub fn save_safetensors(&self, path: &Path) -> Result<()> {
        super::safetensors::write(self, path)
    }
}
