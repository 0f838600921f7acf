//! PLACEHOLDER — to be implemented.
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TomographyConfig {}
impl TomographyConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
    pub fn build(&self, _x_shape: &[usize]) -> Result<Box<dyn crate::physics::LinearPhysics>> {
        Err(Error::Unsupported("tomography".into()))
    }
}
