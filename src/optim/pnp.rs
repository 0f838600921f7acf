//! Plug-and-play proximal gradient descent (deepinv's `PnP` with `optim_algo="PGD"`):
//!
//! `zₖ = xₖ − τ∇f(xₖ)`, `xₖ₊₁ = (1 − β)xₖ + β·D(zₖ, σ_d)`, optionally clamped,
//! with `τ = 0.99/L` when not given, `L` the Lipschitz constant of ∇f (‖A‖²/σ² for L2).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::space::{Iterate, Prox};
use super::{
    ComponentTimes, IterationCallback, IterationReport, Monitor, Reconstruction, ViewCallback,
};
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

/// The step `τ`: the preset's, else `0.99/L` with `L` from the power method (the same bits on any
/// number of ranks, so a resumed run may carry it over instead of deriving it again).
pub fn step_size(
    physics: &dyn StackedLinearPhysics,
    fidelity: &FidelityConfig,
    x_shape: &[usize],
    cfg: &PnpConfig,
) -> Result<f32> {
    if let Some(s) = cfg.step {
        return Ok(s);
    }
    let l = super::lipschitz(physics, fidelity, x_shape)?;
    if !(l > 0.0 && l.is_finite()) {
        return Err(Error::config(
            "algorithm.step",
            format!("cannot derive a step: the operator norm is {l}; give `step`"),
        ));
    }
    Ok((0.99 / l) as f32)
}

/// The documented rule for PnP's denoiser noise level (docs/PNP.md): `σ_d = σ_n·√(τ·w)`, for noise
/// of standard deviation `noise_sigma` (σ_n) on the measurements, gradient step `step` (τ) and the
/// fidelity's gradient weight `gradient_weight` (w, 1 for the default L2). Why: one PnP-PGD step
/// is the proximal step of `w·½‖Ax − y‖² + w·σ_n²·φ` for the prior `−log p = φ`, and a denoiser
/// at noise level σ_d is the prox of `σ_d²·φ`; so `σ_d² = τ·w·σ_n²`. With the default step
/// `τ = 0.99/(w‖A‖²)` it is `σ_n·√0.99/‖A‖`: the measurement noise as it reaches the image.
pub fn rule_denoiser_sigma(noise_sigma: f64, step: f64, gradient_weight: f64) -> f64 {
    noise_sigma * (step * gradient_weight).sqrt()
}

/// The data term `f` with its measurements: gradient, value and the algorithms' starting points.
pub trait Objective<V> {
    /// `∇f(x)` (a subgradient for L1).
    fn gradient(&self, x: &V) -> Result<V>;

    /// `f(x)`.
    fn value(&self, x: &V) -> Result<f64>;

    /// The starting point `init` for an image of shape `x_shape`.
    fn initial_point(&self, init: Init, x_shape: &[usize]) -> Result<V>;
}

/// The data term on the host: a stack of operators, a fidelity and host measurements.
pub struct HostObjective<'a> {
    pub physics: &'a dyn StackedLinearPhysics,
    pub fidelity: &'a FidelityConfig,
    pub ys: &'a [Tensor],
}

impl Objective<Tensor> for HostObjective<'_> {
    fn gradient(&self, x: &Tensor) -> Result<Tensor> {
        self.fidelity.grad(self.physics, x, self.ys)
    }

    fn value(&self, x: &Tensor) -> Result<f64> {
        self.fidelity.value(self.physics, x, self.ys)
    }

    fn initial_point(&self, init: Init, x_shape: &[usize]) -> Result<Tensor> {
        initial_point(self.physics, self.ys, x_shape, init)
    }
}

/// Where a resumed run starts: after `iteration` completed iterations, from their iterate `x`.
#[derive(Debug, Clone, Copy)]
pub struct PnpStart<'a> {
    pub iteration: usize,
    pub x: &'a Tensor,
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
    pnp_from(
        physics, fidelity, denoiser, ys, x_shape, cfg, monitor, on_iter, None,
    )
}

/// [`pnp`] resumed from `start` (`None`: from the initial point). The returned history holds the
/// iterations run here, after `start.iteration`.
#[allow(clippy::too_many_arguments)]
pub fn pnp_from(
    physics: &dyn StackedLinearPhysics,
    fidelity: &FidelityConfig,
    denoiser: &dyn Denoiser,
    ys: &[Tensor],
    x_shape: &[usize],
    cfg: &PnpConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut IterationCallback<'_>,
    start: Option<PnpStart<'_>>,
) -> Result<Reconstruction> {
    cfg.validate()?;
    fidelity.validate()?;
    let step = step_size(physics, fidelity, x_shape, cfg)?;
    tracing::debug!(step, "PnP step size");
    let start = match start {
        Some(s) if s.x.shape() != x_shape => {
            return Err(Error::shape("resumed PnP iterate", x_shape, s.x.shape()));
        }
        Some(s) => Some((s.iteration, s.x.clone())),
        None => None,
    };
    let objective = HostObjective {
        physics,
        fidelity,
        ys,
    };
    let run = super::with_host_iterates(on_iter, |on_iter| {
        pnp_loop(
            &objective, denoiser, x_shape, step, cfg, monitor, on_iter, start,
        )
    })?;
    run.into_reconstruction()
}

/// What [`pnp_loop`] ends with: the last iterate, in its storage.
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

/// The PnP-PGD iteration for any storage of the iterate (the one loop of host and device runs):
/// from `start` (the completed iterations and their iterate) or the configured initial point,
/// with gradient step `step`. The iterate stays in its storage: PSNR is computed there (reductions
/// against the ground truth, uploaded once), and it reaches host memory only for an SSIM that is due
/// and when the callback asks for it (`HostView::to_host`).
#[allow(clippy::too_many_arguments)]
pub fn pnp_loop<V: Iterate, P: Prox<V> + ?Sized>(
    objective: &dyn Objective<V>,
    denoiser: &P,
    x_shape: &[usize],
    step: f32,
    cfg: &PnpConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut ViewCallback<'_>,
    start: Option<(usize, V)>,
) -> Result<Run<V>> {
    let (first, mut x) = match start {
        Some((iteration, x)) => (iteration + 1, x),
        None => {
            let mut x = objective.initial_point(cfg.init, x_shape)?;
            if let Some([lo, hi]) = cfg.clamp {
                x.clamp(lo, hi)?;
            }
            (1, x)
        }
    };
    let truth = match monitor.ground_truth {
        Some(t) => Some(x.truth_beside(t)?),
        None => None,
    };
    let mut history = Vec::with_capacity(cfg.iterations);
    let mut stopped = false;
    for k in first..=cfg.iterations {
        let t_grad = Instant::now();
        let grad = objective.gradient(&x)?;
        let mut z = x.duplicate()?;
        z.axpy(-step, &grad)?;
        let gradient_secs = super::secs(t_grad);

        let t_den = Instant::now();
        let d = denoiser.denoise(&z, cfg.denoiser_sigma)?;
        if d.shape() != x.shape() {
            return Err(Error::shape("denoiser output", x.shape(), d.shape()));
        }
        let denoiser_secs = super::secs(t_den);

        let t_other = Instant::now();
        let mut next = if cfg.relaxation < 1.0 {
            let mut n = x.scaled(1.0 - cfg.relaxation)?;
            n.axpy(cfg.relaxation, &d)?;
            n
        } else {
            d
        };
        if let Some([lo, hi]) = cfg.clamp {
            next.clamp(lo, hi)?;
        }
        let relative_change = next.relative_change(&x)?;
        x = next;
        let last = k == cfg.iterations;
        let (psnr_db, ssim) = super::space::quality(&x, truth.as_ref(), monitor, k, last)?;
        let objective_value = if cfg.track_objective {
            Some(objective.value(&x)?)
        } else {
            None
        };
        let report = IterationReport {
            iteration: k,
            iterations: cfg.iterations,
            psnr_db,
            ssim,
            objective: objective_value,
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
    Ok(Run {
        x,
        history,
        stopped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::denoise::gaussian::GaussianDenoiser;
    use crate::physics::Physics;
    use crate::physics::blur::{Blur, Padding, gaussian_kernel};
    use crate::physics::stack::Stack;
    use std::ops::ControlFlow;

    /// A run resumed from iteration k's iterate ends with the bits of the uninterrupted run.
    #[test]
    fn resumed_run_ends_with_the_uninterrupted_bits() {
        let blur = |s: f32| Blur::new(gaussian_kernel([s, s], 0.0), Padding::Circular).unwrap();
        let stack = Stack::new(vec![Box::new(blur(1.0)), Box::new(blur(2.0))]).unwrap();
        let truth = crate::samples::generate(crate::samples::Sample::SheppLogan, &[24], 3).unwrap();
        let ys = vec![
            stack.ops()[0].forward(&truth).unwrap(),
            stack.ops()[1].forward(&truth).unwrap(),
        ];
        let denoiser = GaussianDenoiser {
            sigma_px: 0.0,
            px_per_sigma: 8.0,
        };
        let cfg = PnpConfig {
            iterations: 7,
            ..PnpConfig::default()
        };
        let monitor = Monitor {
            ground_truth: Some(&truth),
            data_range: 1.0,
            ssim_every: 0,
        };
        let fidelity = FidelityConfig::default();
        let mut at_4 = None;
        let mut keep = |r: &IterationReport, x: &Tensor| {
            if r.iteration == 4 {
                at_4 = Some(x.clone());
            }
            ControlFlow::Continue(())
        };
        let whole = pnp(
            &stack,
            &fidelity,
            &denoiser,
            &ys,
            truth.shape(),
            &cfg,
            &monitor,
            &mut keep,
        )
        .unwrap();
        let x4 = at_4.unwrap();
        let mut count = |_: &IterationReport, _: &Tensor| ControlFlow::Continue(());
        let start = PnpStart {
            iteration: 4,
            x: &x4,
        };
        let resumed = pnp_from(
            &stack,
            &fidelity,
            &denoiser,
            &ys,
            truth.shape(),
            &cfg,
            &monitor,
            &mut count,
            Some(start),
        )
        .unwrap();
        assert_eq!(resumed.history.len(), 3);
        assert_eq!(resumed.history[0].iteration, 5);
        assert_eq!(resumed.x.data(), whole.x.data());
        assert_eq!(
            resumed.history[2].psnr_db.map(f64::to_bits),
            whole.history[6].psnr_db.map(f64::to_bits)
        );
    }
}
