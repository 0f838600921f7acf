//! STUB (replaced by the tiling branch).
use crate::denoise::Denoiser;
use crate::error::Result;
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilingConfig {}
impl TilingConfig {
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
}
pub struct TiledDenoiser {
    inner: Box<dyn Denoiser>,
}
impl TiledDenoiser {
    pub fn from_config(inner: Box<dyn Denoiser>, _c: &TilingConfig) -> Result<Self> {
        Ok(Self { inner })
    }
}
impl Denoiser for TiledDenoiser {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn denoise(&self, x: &Tensor, s: f32) -> Result<Tensor> {
        self.inner.denoise(x, s)
    }
}
