//! What the algorithms need of an iterate and a denoiser, so that each loop is written once for
//! every storage (issue 28): an [`Iterate`] (a `Tensor` in host memory, or `device::Array` whose
//! values may stay on a GPU for the whole run) and a [`Prox`] (the data term is
//! `optim::pnp::Objective`). The host implementations call today's `Tensor` code, so CPU runs keep
//! their bits.

use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The vector operations of the algorithms' loops; errors come from a device (a failed launch, a
/// lost GPU) or from mixing storages.
pub trait Iterate: Sized {
    fn shape(&self) -> &[usize];

    /// An independent copy in the same storage.
    fn duplicate(&self) -> Result<Self>;

    /// `self ← self + a·x`.
    fn axpy(&mut self, a: f32, x: &Self) -> Result<()>;

    /// `a·self` as a new value.
    fn scaled(&self, a: f32) -> Result<Self>;

    /// Clamps every value into `[lo, hi]`.
    fn clamp(&mut self, lo: f32, hi: f32) -> Result<()>;

    /// `‖self − old‖ / ‖self‖` (0 when `self` is zero), as `optim::relative_change`.
    fn relative_change(&self, old: &Self) -> Result<f64>;

    /// Runs `f` on the values in host memory (a copy from a device, the values themselves on the
    /// host): metrics against the ground truth and the per-iteration callback.
    fn with_host<R>(&self, f: impl FnOnce(&Tensor) -> R) -> Result<R>;

    /// The values in host memory (the final result).
    fn into_host(self) -> Result<Tensor>;
}

impl Iterate for Tensor {
    fn shape(&self) -> &[usize] {
        Tensor::shape(self)
    }

    fn duplicate(&self) -> Result<Self> {
        Ok(self.clone())
    }

    fn axpy(&mut self, a: f32, x: &Self) -> Result<()> {
        if Tensor::shape(self) != Tensor::shape(x) {
            return Err(Error::shape("axpy", Tensor::shape(self), Tensor::shape(x)));
        }
        Tensor::axpy(self, a, x);
        Ok(())
    }

    fn scaled(&self, a: f32) -> Result<Self> {
        Ok(Tensor::scaled(self, a))
    }

    fn clamp(&mut self, lo: f32, hi: f32) -> Result<()> {
        Tensor::clamp(self, lo, hi);
        Ok(())
    }

    fn relative_change(&self, old: &Self) -> Result<f64> {
        Ok(super::relative_change(self, old))
    }

    fn with_host<R>(&self, f: impl FnOnce(&Tensor) -> R) -> Result<R> {
        Ok(f(self))
    }

    fn into_host(self) -> Result<Tensor> {
        Ok(self)
    }
}

/// A denoiser (a proximal operator) on iterates `V`.
pub trait Prox<V> {
    /// `D(z, σ)`.
    fn denoise(&self, z: &V, sigma: f32) -> Result<V>;
}

impl<D: Denoiser + ?Sized> Prox<Tensor> for D {
    fn denoise(&self, z: &Tensor, sigma: f32) -> Result<Tensor> {
        Denoiser::denoise(self, z, sigma)
    }
}
