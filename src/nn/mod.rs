//! Neural denoisers (DRUNet, DnCNN): network definitions, weights, and the engines that run them.
//!
//! A network is described by plain data (its architecture config) plus a [`StateDict`] of named
//! weights, as PyTorch stores them. The native engine (default build) runs the networks with
//! tessera's own convolution kernels ([`kernels::conv`]); the `torch` feature runs the same
//! networks, or any TorchScript denoiser, on libtorch. Both appear to the rest of tessera as a
//! [`crate::denoise::Denoiser`], so tiling and distribution work unchanged.
//!
//! The folders are layers; each imports only those below it, and `weights` depends on none:
//!
//! ```text
//! config, bundled, device, torch   preset configs → live denoisers on an engine; shipped weights
//!   opponent                       a one-channel network on colour images (opponent colour space)
//!   models                         DRUNet, DnCNN, the spatial study's test networks
//!   layers                         graph (forward, backward), partition (blocks, halos), pool, dense, losses
//!   kernels                        conv (im2col strips), patch_gemm, patch_dot, winograd, simd
//! weights (beside them all)        StateDict, .pth, .safetensors, random and inflated weight sources
//! ```
//!
//! The rest of tessera names the types through the re-exports below (`crate::nn::Network`,
//! `crate::nn::Features`, …) and functions by their folder (`nn::models::drunet::dims3`).

pub mod bundled;
pub mod config;
pub mod device;
pub mod kernels;
pub mod layers;
pub mod models;
pub mod opponent;
pub mod weights;

#[cfg(feature = "torch")]
pub mod torch;

pub use config::{DncnnConfig, DrunetConfig, Engine, TorchDevice, TorchScriptConfig};
pub use kernels::conv::{Conv, ConvTranspose, Features};
pub use layers::graph::{Gradients, Network, Tape};
pub use layers::partition::{BlockDenoiser, Grid, Partition, Region, Whole};
pub use models::dncnn::{Dncnn, DncnnArch};
pub use models::drunet::{Drunet, DrunetArch};
pub use models::test_models::TestModel;
pub use weights::StateDict;
