//! Reconstruction algorithms: PnP proximal gradient, CG least squares (and FBP, run by the job for
//! tomography), with a per-iteration report.
//!
//! Algorithms see only the interfaces of the numeric core — a [`StackedLinearPhysics`], a
//! [`FidelityConfig`] and a [`Denoiser`] — so the same code runs on one process or, with a distributed
//! stack and denoiser, across ranks. Each iteration calls a callback with an [`IterationReport`]
//! (metrics against the ground truth when known, time per component) and the current iterate; the
//! callback can stop the run.

pub mod adam;
pub mod cg;
pub mod pnp;
pub mod space;

use std::ops::ControlFlow;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use cg::{CgConfig, least_squares};
pub use pnp::{Init, PnpConfig, SigmaSchedule, Splitting, pnp};

use crate::error::Result;
use crate::metrics;
use crate::physics::StackedLinearPhysics;
use crate::tensor::Tensor;

/// Which algorithm a preset runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AlgorithmConfig {
    /// Plug-and-play proximal gradient descent.
    Pnp(PnpConfig),
    /// Least squares by conjugate gradient on the normal equations.
    Cg(CgConfig),
    /// Filtered back-projection (tomography only).
    Fbp(FbpConfig),
}

impl AlgorithmConfig {
    pub fn validate(&self) -> Result<()> {
        match self {
            AlgorithmConfig::Pnp(c) => c.validate(),
            AlgorithmConfig::Cg(c) => c.validate(),
            AlgorithmConfig::Fbp(_) => Ok(()),
        }
    }

    /// Number of iterations the algorithm will run at most.
    pub fn iterations(&self) -> usize {
        match self {
            AlgorithmConfig::Pnp(c) => c.iterations,
            AlgorithmConfig::Cg(c) => c.iterations,
            AlgorithmConfig::Fbp(_) => 1,
        }
    }
}

/// Filtered back-projection has no parameters yet (ramp filter).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FbpConfig {}

/// Seconds spent per component in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComponentTimes {
    /// Data-fidelity gradient (forward and adjoint operators).
    pub gradient_secs: f64,
    /// Denoiser (all tiles).
    pub denoiser_secs: f64,
    /// Everything else: updates, metrics, the callback's own bookkeeping excluded.
    pub other_secs: f64,
    /// Time inside collectives (already part of the gradient and denoiser times); filled by the job.
    #[serde(default)]
    pub communication_secs: f64,
}

/// What an algorithm reports after each iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    /// 1-based iteration number.
    pub iteration: usize,
    /// Planned number of iterations.
    pub iterations: usize,
    /// PSNR (dB) against the ground truth, when known.
    pub psnr_db: Option<f64>,
    /// SSIM against the ground truth, when known and requested.
    pub ssim: Option<f64>,
    /// Data-fidelity value, when requested.
    pub objective: Option<f64>,
    /// ‖xₖ − xₖ₋₁‖ / ‖xₖ‖.
    pub relative_change: f64,
    pub times: ComponentTimes,
}

/// The callback type: sees the report and the current iterate; `Break` stops the algorithm.
pub type IterationCallback<'a> = dyn FnMut(&IterationReport, &Tensor) -> ControlFlow<()> + 'a;

/// The callback of the loops written for any storage (`optim::pnp::pnp_loop`): the iterate reaches
/// host memory only if the callback asks for it (`HostView::to_host`), e.g. when a preview is due.
pub type ViewCallback<'a> =
    dyn FnMut(&IterationReport, &dyn space::HostView) -> ControlFlow<()> + 'a;

/// Runs `f` with a [`ViewCallback`] that hands every iterate to `on_iter` in host memory (from a
/// device, one download per iteration); the first failed download ends the run with its error.
pub fn with_host_iterates<R>(
    on_iter: &mut IterationCallback<'_>,
    f: impl FnOnce(&mut ViewCallback<'_>) -> Result<R>,
) -> Result<R> {
    let mut failed = None;
    let out = f(
        &mut |report: &IterationReport, x: &dyn space::HostView| match x.to_host() {
            Ok(host) => on_iter(report, &host),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        },
    );
    match failed {
        Some(e) => Err(e),
        None => out,
    }
}

/// Result of a reconstruction.
#[derive(Debug, Clone)]
pub struct Reconstruction {
    pub x: Tensor,
    pub history: Vec<IterationReport>,
    /// Whether the callback stopped the run early.
    pub stopped: bool,
}

/// What the monitor measures against, shared by the algorithms.
pub struct Monitor<'a> {
    pub ground_truth: Option<&'a Tensor>,
    /// Dynamic range for PSNR/SSIM (1 for images in [0, 1]).
    pub data_range: f32,
    /// Compute SSIM every `ssim_every` iterations (0: never); it is costlier than PSNR. Images
    /// smaller than SSIM's window get none (reported as absent).
    pub ssim_every: usize,
}

impl Monitor<'_> {
    /// Measures PSNR/SSIM of `x` for iteration `k`.
    pub fn quality(&self, x: &Tensor, k: usize, last: bool) -> Result<(Option<f64>, Option<f64>)> {
        let Some(gt) = self.ground_truth else {
            return Ok((None, None));
        };
        let psnr = metrics::psnr(x, gt, self.data_range)?;
        let ssim = if self.ssim_due(x.shape(), k, last) {
            Some(metrics::ssim(x, gt, self.data_range)?)
        } else {
            None
        };
        Ok((Some(psnr), ssim))
    }

    /// Whether iteration `k` of an image of `shape` gets an SSIM (it needs the image on the host).
    pub fn ssim_due(&self, shape: &[usize], k: usize, last: bool) -> bool {
        self.ground_truth.is_some()
            && self.ssim_every > 0
            && (k.is_multiple_of(self.ssim_every) || last)
            && metrics::ssim_fits(shape)
    }
}

/// ‖a − b‖ / ‖a‖ (0 when a is zero).
pub(crate) fn relative_change(new: &Tensor, old: &Tensor) -> f64 {
    let n = new.norm();
    if n == 0.0 {
        0.0
    } else {
        new.sub(old).norm() / n
    }
}

/// Seconds since `t`.
pub(crate) fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// The Lipschitz constant of the L2 gradient for a stack: w·‖A‖² with the fidelity's weight w.
pub(crate) fn lipschitz(
    physics: &dyn StackedLinearPhysics,
    fidelity: &crate::fidelity::FidelityConfig,
    x_shape: &[usize],
) -> Result<f64> {
    let norm_sq = physics.op_norm_sq(x_shape)?;
    Ok(norm_sq * fidelity.gradient_weight(physics.len()))
}
