//! Plug-and-play proximal gradient descent (deepinv's `PnP` with `optim_algo="PGD"`):
//!
//! `zₖ = xₖ − τ∇f(xₖ)`, `xₖ₊₁ = (1 − β)xₖ + β·D(zₖ, σ_d)`, optionally clamped,
//! with `τ = 0.99/L` when not given, `L` the Lipschitz constant of ∇f (‖A‖²/σ² for L2).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{ComponentTimes, IterationCallback, IterationReport, Monitor, Reconstruction};
use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::physics::StackedLinearPhysics;
use crate::tensor::Tensor;

/// How the iterate starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Init {
    Zeros,
    /// `Σ Aᵢᵀyᵢ`.
    #[default]
    Adjoint,
    /// The least-squares solution `A†y` (CG).
    Pinv,
}

/// Parameters of PnP proximal gradient.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PnpConfig {
    pub iterations: usize,
    /// Gradient step τ; `None` means 0.99/L.
    pub step: Option<f32>,
    /// Noise level σ_d handed to the denoiser.
    pub denoiser_sigma: f32,
    /// Relaxation β ∈ (0, 1]; 1 is plain PnP-PGD.
    pub relaxation: f32,
    /// Clamp every iterate into [lo, hi].
    pub clamp: Option<[f32; 2]>,
    pub init: Init,
    /// Stop when ‖xₖ − xₖ₋₁‖/‖xₖ‖ falls below this.
    pub tol: Option<f64>,
    /// Report the data-fidelity value every iteration (one extra forward pass).
    pub track_objective: bool,
}

impl Default for PnpConfig {
    fn default() -> Self {
        PnpConfig {
            iterations: 50,
            step: None,
            denoiser_sigma: 0.05,
            relaxation: 1.0,
            clamp: None,
            init: Init::Adjoint,
            tol: None,
            track_objective: false,
        }
    }
}

impl PnpConfig {
    pub fn validate(&self) -> Result<()> {
        if self.iterations == 0 || self.iterations > 100_000 {
            return Err(Error::config(
                "algorithm.iterations",
                format!("must be between 1 and 100000, got {}", self.iterations),
            ));
        }
        if let Some(step) = self.step
            && !(step > 0.0 && step.is_finite())
        {
            return Err(Error::config(
                "algorithm.step",
                format!("must be a finite number > 0, got {step}"),
            ));
        }
        if !(self.denoiser_sigma >= 0.0 && self.denoiser_sigma.is_finite()) {
            return Err(Error::config(
                "algorithm.denoiser_sigma",
                format!("must be a finite number ≥ 0, got {}", self.denoiser_sigma),
            ));
        }
        if !(self.relaxation > 0.0 && self.relaxation <= 1.0) {
            return Err(Error::config(
                "algorithm.relaxation",
                format!("must be in (0, 1], got {}", self.relaxation),
            ));
        }
        if let Some([lo, hi]) = self.clamp
            && lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less)
        {
            return Err(Error::config(
                "algorithm.clamp",
                format!("needs lo < hi, got [{lo}, {hi}]"),
            ));
        }
        Ok(())
    }
}

/// Computes the starting point.
pub fn initial_point(
    physics: &dyn StackedLinearPhysics,
    ys: &[Tensor],
    x_shape: &[usize],
    init: Init,
) -> Result<Tensor> {
    match init {
        Init::Zeros => Ok(Tensor::zeros(x_shape)),
        Init::Adjoint => physics.adjoint(ys),
        Init::Pinv => physics.pinv(ys),
    }
}

/// Runs PnP-PGD on measurements `ys` of an image of shape `x_shape`.
#[allow(clippy::too_many_arguments)]
pub fn pnp(
    physics: &dyn StackedLinearPhysics,
    fidelity: &FidelityConfig,
    denoiser: &dyn Denoiser,
    ys: &[Tensor],
    x_shape: &[usize],
    cfg: &PnpConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut IterationCallback<'_>,
) -> Result<Reconstruction> {
    cfg.validate()?;
    fidelity.validate()?;
    let step = match cfg.step {
        Some(s) => s,
        None => {
            let l = super::lipschitz(physics, fidelity, x_shape)?;
            if !(l > 0.0 && l.is_finite()) {
                return Err(Error::config(
                    "algorithm.step",
                    format!("cannot derive a step: the operator norm is {l}; give `step`"),
                ));
            }
            (0.99 / l) as f32
        }
    };
    tracing::debug!(step, "PnP step size");
    let mut x = initial_point(physics, ys, x_shape, cfg.init)?;
    if let Some([lo, hi]) = cfg.clamp {
        x.clamp(lo, hi);
    }
    let mut history = Vec::with_capacity(cfg.iterations);
    let mut stopped = false;
    for k in 1..=cfg.iterations {
        let t_grad = Instant::now();
        let grad = fidelity.grad(physics, &x, ys)?;
        let mut z = x.clone();
        z.axpy(-step, &grad);
        let gradient_secs = super::secs(t_grad);

        let t_den = Instant::now();
        let d = denoiser.denoise(&z, cfg.denoiser_sigma)?;
        if d.shape() != x.shape() {
            return Err(Error::shape("denoiser output", x.shape(), d.shape()));
        }
        let denoiser_secs = super::secs(t_den);

        let t_other = Instant::now();
        let mut next = if cfg.relaxation < 1.0 {
            let mut n = x.scaled(1.0 - cfg.relaxation);
            n.axpy(cfg.relaxation, &d);
            n
        } else {
            d
        };
        if let Some([lo, hi]) = cfg.clamp {
            next.clamp(lo, hi);
        }
        let relative_change = super::relative_change(&next, &x);
        x = next;
        let last = k == cfg.iterations;
        let (psnr_db, ssim) = monitor.quality(&x, k, last)?;
        let objective = if cfg.track_objective {
            Some(fidelity.value(physics, &x, ys)?)
        } else {
            None
        };
        let report = IterationReport {
            iteration: k,
            iterations: cfg.iterations,
            psnr_db,
            ssim,
            objective,
            relative_change,
            times: ComponentTimes {
                gradient_secs,
                denoiser_secs,
                other_secs: super::secs(t_other),
                ..Default::default()
            },
        };
        let flow = on_iter(&report, &x);
        history.push(report);
        if flow.is_break() {
            stopped = true;
            break;
        }
        if cfg.tol.is_some_and(|tol| relative_change < tol) {
            break;
        }
    }
    Ok(Reconstruction {
        x,
        history,
        stopped,
    })
}
