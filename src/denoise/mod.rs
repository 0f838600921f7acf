//! Denoisers: one trait for every denoiser, applied to a batch of patches at a noise level.
//!
//! Classical denoisers live here (TV, wavelet thresholding, median, Gaussian); neural ones (DRUNet,
//! DnCNN) come later behind the same trait. Tiling wraps any denoiser ([`crate::tiling::TiledDenoiser`]).

use crate::error::Result;
use crate::tensor::Tensor;

/// A denoiser `D(x, σ)`.
pub trait Denoiser: Send + Sync {
    /// A short description, e.g. `wavelet(db4, 3 levels, soft)`.
    fn name(&self) -> String;

    /// Denoises a batch `(B, C, H, W)` or `(B, C, D, H, W)` at noise level `sigma` (the threshold or
    /// regularisation strength); returns an array of the same shape. Batch items are independent.
    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor>;
}

/// The identity denoiser: returns its input (for tests and for plain gradient descent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Denoiser for Identity {
    fn name(&self) -> String {
        "identity".into()
    }
    fn denoise(&self, x: &Tensor, _sigma: f32) -> Result<Tensor> {
        Ok(x.clone())
    }
}

pub mod config;
pub use config::DenoiserConfig;
