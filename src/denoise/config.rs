//! STUB (replaced by the denoise branch).
use super::{Denoiser, Identity};
use crate::error::Result;
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DenoiserConfig {
    Identity,
}
impl DenoiserConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
    pub fn build(&self) -> Result<Box<dyn Denoiser>> {
        Ok(Box::new(Identity))
    }
}
