//! Denoisers: one trait for every denoiser, applied to a batch of patches at a noise level.
//!
//! Classical denoisers live here (TV, wavelet thresholding, median, Gaussian); the neural ones
//! (DRUNet, DnCNN, TorchScript) live in [`crate::nn`] behind the same trait, and [`DenoiserConfig`]
//! builds either kind. Tiling wraps any denoiser ([`crate::tiling::TiledDenoiser`]).
//! Presets describe a denoiser with a [`DenoiserConfig`], whose `build` gives the live object.
//!
//! Every classical denoiser works plane by plane: the `B·C` spatial planes of a batch are independent
//! and run in parallel (rayon); a large plane is further split across rows inside each denoiser.

pub mod config;
pub mod gaussian;
pub mod median;
pub mod tv;
pub mod wavelet;

pub use config::{DenoiserConfig, GaussianConfig, MedianConfig, TvConfig, WaveletConfig};
pub use gaussian::GaussianDenoiser;
pub use median::MedianFilter;
pub use tv::TvDenoiser;
pub use wavelet::{Threshold, WaveletDenoiser, WaveletKind};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A denoiser `D(x, σ)`.
pub trait Denoiser: Send + Sync {
    /// A short description, e.g. `wavelet(db4, 3 levels, soft)`.
    fn name(&self) -> String;

    /// Denoises a batch `(B, C, H, W)` or `(B, C, D, H, W)` at noise level `sigma` (the threshold or
    /// regularisation strength); returns an array of the same shape. Batch items are independent.
    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor>;

    /// The same denoiser on blocks of a spatially decomposed image (native DnCNN and DRUNet), for
    /// the exact "spatial" tiling; `None` for denoisers that cannot run on blocks.
    fn as_block_denoiser(&self) -> Option<&dyn crate::nn::BlockDenoiser> {
        None
    }
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

/// Fails unless `sigma` is a finite number ≥ 0 (a threshold or a regularisation weight).
pub(crate) fn check_sigma(op: &str, sigma: f32) -> Result<()> {
    if sigma >= 0.0 && sigma.is_finite() {
        Ok(())
    } else {
        Err(Error::config(
            format!("{op}.sigma"),
            format!("the noise level must be a finite number ≥ 0, got {sigma}"),
        ))
    }
}

/// Runs `f(input_plane, output_plane, spatial_dims)` on every spatial plane of a 4-D or 5-D batch,
/// planes in parallel. `spatial_dims` is `[H, W]` or `[D, H, W]`.
pub(crate) fn map_planes(
    op: &str,
    x: &Tensor,
    f: impl Fn(&[f32], &mut [f32], &[usize]) + Sync,
) -> Result<Tensor> {
    x.expect_rank(op, &[4, 5])?;
    let mut out = x.zeros_like();
    if x.numel() == 0 {
        return Ok(out);
    }
    let dims = x.spatial().to_vec();
    let n = x.plane_len();
    out.data_mut()
        .par_chunks_mut(n)
        .zip(x.data().par_chunks(n))
        .for_each(|(o, i)| f(i, o, &dims));
    Ok(out)
}

/// Index of sample `i` in a signal of length `n` extended by whole-sample symmetry (`d c b | a b c d |
/// c b a`, torch's and numpy's `reflect`), repeated as often as needed so any offset is valid.
pub(crate) fn reflect_index(i: isize, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let r = i.rem_euclid(period);
    (if r < n as isize { r } else { period - r }) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_index_mirrors_without_repeating_the_edge() {
        let got: Vec<usize> = (-4..8).map(|i| reflect_index(i, 4)).collect();
        assert_eq!(got, vec![2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1]);
        assert_eq!(reflect_index(-7, 1), 0);
        assert_eq!(reflect_index(5, 2), 1);
    }

    #[test]
    fn check_sigma_names_the_denoiser() {
        let e = check_sigma("tv", -1.0).unwrap_err().to_string();
        assert!(e.contains("tv.sigma"), "{e}");
        assert!(check_sigma("tv", f32::NAN).is_err());
        assert!(check_sigma("tv", 0.0).is_ok());
    }
}
