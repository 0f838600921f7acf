//! PLACEHOLDER — to be implemented.
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tomography3dConfig {}
impl Tomography3dConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
    pub fn build(&self, _x_shape: &[usize]) -> Result<Box<dyn crate::physics::LinearPhysics>> {
        Err(Error::Unsupported("tomography3d".into()))
    }
}
