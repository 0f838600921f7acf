//! torch.save archives (`.pth`, `.pt`): a zip holding a pickled state_dict and raw storages.

use std::path::Path;

use super::weights::StateDict;
use crate::error::{Error, Result};

/// Whether `bytes` starts like a torch.save archive (zip).
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

/// Parses a torch.save archive held in memory; `path` is only used in error messages.
pub fn parse(path: &Path, _bytes: &[u8]) -> Result<StateDict> {
    Err(Error::format(path, "pth: not implemented yet"))
}
