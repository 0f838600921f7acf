//! PLACEHOLDER — to be implemented.
use serde::{Deserialize, Serialize};
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TomographyConfig {}
impl TomographyConfig {
    pub fn validate(&self) -> Result<()> { Ok(()) }
    pub fn build(&self, _x_shape: &[usize]) -> Result<Box<dyn crate::physics::LinearPhysics>> { Err(Error::Unsupported("tomography".into())) }
}
