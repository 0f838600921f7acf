//! What the algorithms need of an iterate and a denoiser, so that each loop is written once for
//! every storage (issue 28): an [`Iterate`] (a `Tensor` in host memory, or `device::Array` whose
//! values may stay on a GPU for the whole run) and a [`Prox`] (the data term is
//! `optim::pnp::Objective`), and a [`HostView`] of the iterate for the per-iteration callback, which
//! copies a device iterate to host memory only when the callback asks (a preview is due). The host
//! implementations call today's `Tensor` code, so CPU runs keep their bits.

use std::borrow::Cow;

use super::{IterationReport, Reconstruction};
use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// An iterate as the per-iteration callback sees it: its values reach host memory only when
/// asked for (a device iterate is downloaded then; a host one is lent).
pub trait HostView {
    fn view_shape(&self) -> &[usize];

    /// The values in host memory: borrowed on the host, a download from a device.
    fn to_host(&self) -> Result<Cow<'_, Tensor>>;
}

impl std::fmt::Debug for dyn HostView + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "iterate of shape {:?}", self.view_shape())
    }
}

impl HostView for Tensor {
    fn view_shape(&self) -> &[usize] {
        self.shape()
    }

    fn to_host(&self) -> Result<Cow<'_, Tensor>> {
        Ok(Cow::Borrowed(self))
    }
}

/// The ground truth of a run beside its iterate: `host` always, and a copy in the iterate's
/// storage (`here`) when that is not host memory, uploaded once per run.
pub struct Truth<'a, V> {
    pub host: &'a Tensor,
    pub here: Option<V>,
}

/// The vector operations of the algorithms' loops; errors come from a device (a failed launch, a
/// lost GPU) or from mixing storages.
pub trait Iterate: HostView + Sized {
    fn shape(&self) -> &[usize];

    /// An independent copy in the same storage.
    fn duplicate(&self) -> Result<Self>;

    /// `self ← self + a·x`.
    fn axpy(&mut self, a: f32, x: &Self) -> Result<()>;

    /// `a·self` as a new value.
    fn scaled(&self, a: f32) -> Result<Self>;

    /// Zeros of this shape, in the same storage.
    fn zeros_like(&self) -> Result<Self>;

    /// `⟨self, x⟩` accumulated in f64 (`Tensor::dot`; a device reduces in its own order).
    fn dot(&self, x: &Self) -> Result<f64>;

    /// Clamps every value into `[lo, hi]`.
    fn clamp(&mut self, lo: f32, hi: f32) -> Result<()>;

    /// `‖self − old‖ / ‖self‖` (0 when `self` is zero), as `optim::relative_change`.
    fn relative_change(&self, old: &Self) -> Result<f64>;

    /// The ground truth `host` beside this iterate: in its storage when that is a device's.
    fn truth_beside<'a>(&self, host: &'a Tensor) -> Result<Truth<'a, Self>>;

    /// `metrics::psnr(self, truth, data_range)`; a device computes it by reductions there.
    fn psnr(&self, truth: &Truth<'_, Self>, data_range: f32) -> Result<f64>;

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

    fn zeros_like(&self) -> Result<Self> {
        Ok(Tensor::zeros_like(self))
    }

    fn dot(&self, x: &Self) -> Result<f64> {
        if Tensor::shape(self) != Tensor::shape(x) {
            return Err(Error::shape("dot", Tensor::shape(self), Tensor::shape(x)));
        }
        Ok(Tensor::dot(self, x))
    }

    fn clamp(&mut self, lo: f32, hi: f32) -> Result<()> {
        Tensor::clamp(self, lo, hi);
        Ok(())
    }

    fn relative_change(&self, old: &Self) -> Result<f64> {
        Ok(super::relative_change(self, old))
    }

    fn truth_beside<'a>(&self, host: &'a Tensor) -> Result<Truth<'a, Self>> {
        Ok(Truth { host, here: None })
    }

    fn psnr(&self, truth: &Truth<'_, Self>, data_range: f32) -> Result<f64> {
        crate::metrics::psnr(self, truth.host, data_range)
    }

    fn into_host(self) -> Result<Tensor> {
        Ok(self)
    }
}

/// PSNR of `x` against `truth` (computed in `x`'s storage) and, when one is due at iteration `k`
/// (`Monitor::ssim_due`), its SSIM (the iterate is downloaded for it); `None`s without a truth.
pub fn quality<V: Iterate>(
    x: &V,
    truth: Option<&Truth<'_, V>>,
    monitor: &super::Monitor<'_>,
    k: usize,
    last: bool,
) -> Result<(Option<f64>, Option<f64>)> {
    let Some(t) = truth else {
        return Ok((None, None));
    };
    let psnr_db = x.psnr(t, monitor.data_range)?;
    let ssim = match monitor.ssim_due(x.shape(), k, last) {
        true => Some(crate::metrics::ssim(
            &*x.to_host()?,
            t.host,
            monitor.data_range,
        )?),
        false => None,
    };
    Ok((Some(psnr_db), ssim))
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

/// What an algorithm's loop (`pnp::pnp_loop`, `cg::cg_loop`) ends with: the last iterate, in its storage.
pub struct Run<V> {
    pub x: V,
    pub history: Vec<IterationReport>,
    /// Whether the callback stopped the run early.
    pub stopped: bool,
}

impl<V: Iterate> Run<V> {
    /// The run as the algorithms' result: the iterate in host memory (a download for a device's).
    pub fn into_reconstruction(self) -> Result<Reconstruction> {
        Ok(Reconstruction {
            x: self.x.into_host()?,
            history: self.history,
            stopped: self.stopped,
        })
    }
}
