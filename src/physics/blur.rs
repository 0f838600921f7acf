//! PLACEHOLDER — to be implemented (2-D/3-D blur).
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    #[default]
    Valid,
    Circular,
    Replicate,
    Reflect,
    Constant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlurConfig {}
impl BlurConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
    pub fn build(&self) -> Result<Box<dyn crate::physics::LinearPhysics>> {
        Err(Error::Unsupported("blur".into()))
    }
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blur3dConfig {}
impl Blur3dConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
    pub fn build(&self) -> Result<Box<dyn crate::physics::LinearPhysics>> {
        Err(Error::Unsupported("blur3d".into()))
    }
}
