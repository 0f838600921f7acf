//! Neural denoisers (DRUNet, DnCNN): network definitions, weights, and the engines that run them.
//!
//! A network is described by plain data (its architecture config) plus a [`StateDict`] of named
//! weights, as PyTorch stores them. The native engine (default build) runs the networks with
//! tessera's own convolution kernels ([`conv`]); the `torch` feature runs the same networks, or any
//! TorchScript denoiser, on libtorch. Both appear to the rest of tessera as a
//! [`crate::denoise::Denoiser`], so tiling and distribution work unchanged.

pub mod bundled;
pub mod config;
pub mod conv;
pub mod dense;
pub mod device;
pub mod dncnn;
pub mod domain;
pub mod drunet;
pub mod graph;
pub mod losses;
pub mod models;
pub(crate) mod patch_dot;
pub mod patch_gemm;
pub mod pool;
pub mod pth;
pub mod safetensors;
pub mod scalar;
pub mod simd;
mod weight_files;
pub mod weights;
pub(crate) mod weights_source;
pub mod winograd;

pub use config::{DncnnConfig, DrunetConfig, Engine, TorchDevice, TorchScriptConfig};
pub use dncnn::{Dncnn, DncnnArch};
pub use drunet::{Drunet, DrunetArch};
pub use weights::StateDict;

#[cfg(feature = "torch")]
pub mod torch;
