//! Plug-and-play with a denoiser as the prior's proximal step, in one of two splittings:
//!
//! - proximal gradient descent (deepinv's `PnP` with `optim_algo="PGD"`, the default):
//!   `zₖ = xₖ − τ∇f(xₖ)`, `xₖ₊₁ = (1 − β)xₖ + β·D(zₖ, σ_d)`, optionally clamped, with
//!   `τ = 0.99/L` when not given, `L` the Lipschitz constant of ∇f (‖A‖²/σ² for L2);
//! - half-quadratic splitting (deepinv's `HQS`, the iteration of DPIR):
//!   `zₖ = prox_{γₖf}(xₖ)`, then the same denoising step, with the data term's proximal step solved
//!   by conjugate gradient on its normal equations and `γₖ = (σₖ/σ_d)²/λ` (docs/PNP.md).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::space::{Iterate, Prox, Run};
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

/// How the denoiser's noise level σ_d changes over the iterations (docs/PNP.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SigmaSchedule {
    /// `denoiser_sigma` at every iteration.
    #[default]
    Constant,
    /// deepinv's DPIR schedule: σ_d falls geometrically from `sigma_start` at the first iteration
    /// to `denoiser_sigma` at iteration `sigma_schedule_iterations` (deepinv's
    /// `logspace(log10(s1), log10(σ), K)`), and stays there. A large σ_d early removes the
    /// measurement noise and the blur's ringing the gradient steps bring in while the iterate is
    /// far from a clean image; the small one at the end keeps detail.
    Dpir,
}

/// How a PnP iteration treats the data term (docs/PNP.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Splitting {
    /// A gradient step `x − τ∇f(x)` (proximal gradient descent).
    #[default]
    Pgd,
    /// The data term's proximal step `argmin_z f(z) + ‖z − x‖²/(2γ)` (half-quadratic splitting,
    /// DPIR's), solved by CG on `(γ·w·Σ AᵢᵀAᵢ + I) z = γ·w·Σ Aᵢᵀyᵢ + x`; L2 fidelity only.
    Hqs,
}

/// DPIR's weight λ of the prior against the data term (deepinv's `get_DPIR_params`: its prox step
/// is `γₖ = (σₖ/σ_d)²/λ` with λ = 0.23).
pub const DPIR_LAMBDA: f32 = 0.23;

/// DPIR's first noise level, 49/255 (deepinv's `get_DPIR_params`, `s1`).
pub const DPIR_SIGMA_START: f32 = 49.0 / 255.0;

/// DPIR's number of iterations over which σ_d falls (deepinv's default `max_iter`).
pub const DPIR_SCHEDULE_ITERATIONS: usize = 8;

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

fn is_dpir_start(sigma: &f32) -> bool {
    *sigma == DPIR_SIGMA_START
}

fn is_dpir_iterations(n: &usize) -> bool {
    *n == DPIR_SCHEDULE_ITERATIONS
}

fn dpir_sigma_start() -> f32 {
    DPIR_SIGMA_START
}

fn dpir_schedule_iterations() -> usize {
    DPIR_SCHEDULE_ITERATIONS
}

fn is_dpir_lambda(lambda: &f32) -> bool {
    *lambda == DPIR_LAMBDA
}

fn dpir_lambda() -> f32 {
    DPIR_LAMBDA
}

/// CG iterations of one HQS data step at most (deepinv's `max_iter_prox`-like bound; a blur's
/// well-damped system converges in tens).
pub const HQS_CG_ITERATIONS: usize = 100;

/// CG's relative residual at which an HQS data step stops.
pub const HQS_CG_TOL: f64 = 1e-6;

fn is_hqs_cg_iterations(n: &usize) -> bool {
    *n == HQS_CG_ITERATIONS
}

fn hqs_cg_iterations() -> usize {
    HQS_CG_ITERATIONS
}

/// Parameters of PnP proximal gradient.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PnpConfig {
    pub iterations: usize,
    /// Gradient step τ; `None` means 0.99/L.
    pub step: Option<f32>,
    /// Noise level σ_d handed to the denoiser (the last one, with a `sigma_schedule`).
    pub denoiser_sigma: f32,
    /// How σ_d changes over the iterations; left out of a written preset when constant, so that
    /// presets without a schedule keep their bytes.
    #[serde(skip_serializing_if = "is_default")]
    pub sigma_schedule: SigmaSchedule,
    /// With `sigma_schedule = "dpir"`: σ_d at the first iteration.
    #[serde(default = "dpir_sigma_start", skip_serializing_if = "is_dpir_start")]
    pub sigma_start: f32,
    /// With `sigma_schedule = "dpir"`: the iteration at which σ_d reaches `denoiser_sigma`.
    #[serde(
        default = "dpir_schedule_iterations",
        skip_serializing_if = "is_dpir_iterations"
    )]
    pub sigma_schedule_iterations: usize,
    /// The data step: a gradient step (`pgd`, the default) or its proximal step (`hqs`); left out
    /// of a written preset when `pgd`.
    #[serde(skip_serializing_if = "is_default")]
    pub splitting: Splitting,
    /// With `splitting = "hqs"`: the prior's weight λ; the data step at iteration k is
    /// `γₖ = (σₖ/σ_d)²/λ` with σₖ the scheduled noise level (DPIR's 0.23 by default).
    #[serde(default = "dpir_lambda", skip_serializing_if = "is_dpir_lambda")]
    pub hqs_lambda: f32,
    /// With `splitting = "hqs"`: CG iterations of one data step at most (it stops earlier at a
    /// relative residual of 10⁻⁶), where the step has no closed form (circular blur stacks do).
    #[serde(
        default = "hqs_cg_iterations",
        skip_serializing_if = "is_hqs_cg_iterations"
    )]
    pub hqs_cg_iterations: usize,
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
            sigma_schedule: SigmaSchedule::Constant,
            sigma_start: DPIR_SIGMA_START,
            sigma_schedule_iterations: DPIR_SCHEDULE_ITERATIONS,
            splitting: Splitting::Pgd,
            hqs_lambda: DPIR_LAMBDA,
            hqs_cg_iterations: HQS_CG_ITERATIONS,
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
        if self.sigma_schedule == SigmaSchedule::Dpir {
            if !(self.sigma_start > 0.0 && self.sigma_start.is_finite()) {
                return Err(Error::config(
                    "algorithm.sigma_start",
                    format!("must be a finite number > 0, got {}", self.sigma_start),
                ));
            }
            if self.denoiser_sigma <= 0.0 {
                return Err(Error::config(
                    "algorithm.denoiser_sigma",
                    "must be > 0 with sigma_schedule = \"dpir\" (σ_d falls geometrically to it)",
                ));
            }
            if self.sigma_schedule_iterations == 0 {
                return Err(Error::config(
                    "algorithm.sigma_schedule_iterations",
                    "must be at least 1",
                ));
            }
        }
        if self.splitting == Splitting::Hqs {
            if !(self.hqs_lambda > 0.0 && self.hqs_lambda.is_finite()) {
                return Err(Error::config(
                    "algorithm.hqs_lambda",
                    format!("must be a finite number > 0, got {}", self.hqs_lambda),
                ));
            }
            if self.denoiser_sigma <= 0.0 {
                return Err(Error::config(
                    "algorithm.denoiser_sigma",
                    "must be > 0 with splitting = \"hqs\" (the data step γₖ = (σₖ/σ_d)²/λ divides by it)",
                ));
            }
            if self.hqs_cg_iterations == 0 || self.hqs_cg_iterations > 100_000 {
                return Err(Error::config(
                    "algorithm.hqs_cg_iterations",
                    format!(
                        "must be between 1 and 100000, got {}",
                        self.hqs_cg_iterations
                    ),
                ));
            }
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

    /// σ_d at iteration `k` (1-based): `denoiser_sigma`, or with the DPIR schedule
    /// `σ_start·(σ_d/σ_start)^((k−1)/(K−1))` for `k ≤ K`, then `denoiser_sigma`.
    pub fn denoiser_sigma_at(&self, k: usize) -> f32 {
        match self.sigma_schedule {
            SigmaSchedule::Constant => self.denoiser_sigma,
            SigmaSchedule::Dpir => {
                let last = self.sigma_schedule_iterations;
                if k >= last || last <= 1 {
                    return self.denoiser_sigma;
                }
                let t = (k.max(1) - 1) as f64 / (last - 1) as f64;
                let (start, end) = (f64::from(self.sigma_start), f64::from(self.denoiser_sigma));
                (start * (end / start).powf(t)) as f32
            }
        }
    }
}

impl PnpConfig {
    /// deepinv's DPIR for measurements with Gaussian noise of level `noise_sigma`
    /// (`deepinv.optim.DPIR`, `get_DPIR_params`): 8 iterations of half-quadratic splitting with σ_d
    /// falling geometrically from 49/255 to `max(noise_sigma, 0.01)`, the data step
    /// `γₖ = (σₖ/σ_d)²/0.23`, starting from `Σ Aᵢᵀyᵢ`. The documented rule of tessera's presets
    /// with a σ-conditional denoiser (docs/PNP.md).
    pub fn dpir(noise_sigma: f32) -> PnpConfig {
        PnpConfig {
            iterations: DPIR_SCHEDULE_ITERATIONS,
            denoiser_sigma: noise_sigma.max(0.01),
            sigma_schedule: SigmaSchedule::Dpir,
            sigma_start: DPIR_SIGMA_START,
            sigma_schedule_iterations: DPIR_SCHEDULE_ITERATIONS,
            splitting: Splitting::Hqs,
            hqs_lambda: DPIR_LAMBDA,
            init: Init::Adjoint,
            ..PnpConfig::default()
        }
    }

    /// The HQS data step at iteration `k`: `γₖ = (σₖ/σ_d)²/λ`, σₖ = [`Self::denoiser_sigma_at`].
    pub fn hqs_gamma_at(&self, k: usize) -> f32 {
        let ratio = f64::from(self.denoiser_sigma_at(k)) / f64::from(self.denoiser_sigma);
        (ratio * ratio / f64::from(self.hqs_lambda)) as f32
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

    /// `w·Σ AᵢᵀAᵢ v`, the normal operator of the L2 term `f = w/2·Σ‖Aᵢx − yᵢ‖²` (HQS's data
    /// step); an error naming the fidelity for a data term without one (L1).
    fn weighted_normal(&self, v: &V) -> Result<V>;

    /// `w·Σ Aᵢᵀyᵢ` of the L2 term, for an image of shape `x_shape`.
    fn weighted_adjoint_of_measurements(&self, x_shape: &[usize]) -> Result<V>;

    /// `(γ·w·Σ AᵢᵀAᵢ + I)⁻¹ r` in closed form where the operators have one (a stack of circular
    /// blurs: a division of spectra), `None` where HQS's data step solves it by CG.
    fn shifted_normal_inverse(&self, r: &V, gamma: f32) -> Result<Option<V>>;
}

/// The L2 weight `w` of a fidelity for HQS's data step: the other fidelities have no normal
/// equations, and are refused by name.
pub fn hqs_weight(fidelity: &FidelityConfig, n_ops: usize) -> Result<f32> {
    match fidelity {
        FidelityConfig::L2 { .. } => Ok(fidelity.gradient_weight(n_ops) as f32),
        FidelityConfig::L1 { .. } => Err(Error::config(
            "algorithm.splitting",
            "\"hqs\" needs the l2 fidelity (its data step solves normal equations); use \"pgd\" with l1",
        )),
    }
}

/// HQS's data step `argmin_z f(z) + ‖z − x‖²/(2γ)` for `f = w/2·Σ‖Aᵢz − yᵢ‖²`, the solution of
/// `(γ·w·Σ AᵢᵀAᵢ + I) z = γ·(w·Σ Aᵢᵀyᵢ) + x` (`rhs_data` = `w·Σ Aᵢᵀyᵢ`, computed once per run):
/// in closed form where the objective has one (circular blur stacks, as deepinv's prox), else by
/// CG from zero in `conjugate_gradient`'s order (at most `max_iter` iterations). Either way every
/// rank computes it on the replicated iterate, so the same bits on any number of ranks.
pub fn hqs_data_step<V: Iterate>(
    objective: &dyn Objective<V>,
    rhs_data: &V,
    x: &V,
    gamma: f32,
    max_iter: usize,
) -> Result<V> {
    let mut rhs = rhs_data.scaled(gamma)?;
    rhs.axpy(1.0, x)?;
    if let Some(z) = objective.shifted_normal_inverse(&rhs, gamma)? {
        return Ok(z);
    }
    super::cg::conjugate_gradient(
        &rhs,
        max_iter,
        HQS_CG_TOL,
        |v| {
            let mut out = objective.weighted_normal(v)?.scaled(gamma)?;
            out.axpy(1.0, v)?;
            Ok(out)
        },
        |_, _, _| Ok(true),
    )
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

    fn weighted_normal(&self, v: &Tensor) -> Result<Tensor> {
        let w = hqs_weight(self.fidelity, self.ys.len())?;
        Ok(self.physics.adjoint_forward(v)?.scaled(w))
    }

    fn weighted_adjoint_of_measurements(&self, x_shape: &[usize]) -> Result<Tensor> {
        let w = hqs_weight(self.fidelity, self.ys.len())?;
        let b = self.physics.adjoint(self.ys)?;
        if b.shape() != x_shape {
            return Err(Error::shape(
                "adjoint of the measurements",
                x_shape,
                b.shape(),
            ));
        }
        Ok(b.scaled(w))
    }

    fn shifted_normal_inverse(&self, r: &Tensor, gamma: f32) -> Result<Option<Tensor>> {
        let w = hqs_weight(self.fidelity, self.ys.len())?;
        self.physics.shifted_normal_inverse(r, gamma * w)
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
    let rhs_data = match cfg.splitting {
        Splitting::Pgd => None,
        Splitting::Hqs => Some(objective.weighted_adjoint_of_measurements(x_shape)?),
    };
    let mut history = Vec::with_capacity(cfg.iterations);
    let mut stopped = false;
    for k in first..=cfg.iterations {
        let t_grad = Instant::now();
        let z = match &rhs_data {
            None => {
                let grad = objective.gradient(&x)?;
                let mut z = x.duplicate()?;
                z.axpy(-step, &grad)?;
                z
            }
            Some(rhs_data) => hqs_data_step(
                objective,
                rhs_data,
                &x,
                cfg.hqs_gamma_at(k),
                cfg.hqs_cg_iterations,
            )?,
        };
        let gradient_secs = super::secs(t_grad);

        let t_den = Instant::now();
        let d = denoiser.denoise(&z, cfg.denoiser_sigma_at(k))?;
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

    /// Records the σ_d of every call and returns its input.
    struct SigmaRecorder(std::sync::Mutex<Vec<f32>>);

    impl Denoiser for SigmaRecorder {
        fn name(&self) -> String {
            "sigma recorder".into()
        }

        fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
            self.0.lock().unwrap().push(sigma);
            Ok(x.clone())
        }
    }

    fn dpir(start: f32, end: f32, iterations: usize) -> PnpConfig {
        PnpConfig {
            denoiser_sigma: end,
            sigma_schedule: SigmaSchedule::Dpir,
            sigma_start: start,
            sigma_schedule_iterations: iterations,
            ..PnpConfig::default()
        }
    }

    /// The DPIR schedule is deepinv's `logspace(log10(σ_start), log10(σ_d), K)`, then σ_d held;
    /// without a schedule every iteration gets `denoiser_sigma`.
    #[test]
    fn dpir_schedule_falls_geometrically_to_denoiser_sigma_then_holds() {
        let cfg = dpir(0.16, 0.01, 5);
        // logspace(log10 0.16, log10 0.01, 5): ratio (1/16)^(1/4) = 1/2 per iteration.
        let expected = [0.16, 0.08, 0.04, 0.02, 0.01, 0.01, 0.01];
        for (k, want) in (1..).zip(expected) {
            let got = cfg.denoiser_sigma_at(k);
            assert!((got - want).abs() < 1e-7, "iteration {k}: {got} != {want}");
        }
        assert_eq!(
            cfg.denoiser_sigma_at(5),
            0.01,
            "ends exactly on denoiser_sigma"
        );
        assert_eq!(dpir(0.2, 0.03, 1).denoiser_sigma_at(1), 0.03);
        let constant = PnpConfig {
            denoiser_sigma: 0.02,
            ..PnpConfig::default()
        };
        assert!((1..50).all(|k| constant.denoiser_sigma_at(k) == 0.02));
        let defaults: PnpConfig = toml::from_str("sigma_schedule = \"dpir\"").unwrap();
        assert_eq!(defaults.sigma_start, 49.0 / 255.0);
        assert_eq!(defaults.sigma_schedule_iterations, 8);
    }

    /// The loop hands the denoiser the scheduled σ_d of each iteration, and a resumed run goes on
    /// with the σ_d of the iterations it runs.
    #[test]
    fn pnp_hands_the_denoiser_the_scheduled_sigma() {
        let blur = Blur::new(gaussian_kernel([1.0, 1.0], 0.0), Padding::Circular).unwrap();
        let stack = Stack::new(vec![Box::new(blur)]).unwrap();
        let truth = crate::samples::generate(crate::samples::Sample::SheppLogan, &[16], 3).unwrap();
        let ys = vec![stack.ops()[0].forward(&truth).unwrap()];
        let cfg = PnpConfig {
            iterations: 6,
            ..dpir(0.16, 0.01, 5)
        };
        let monitor = Monitor {
            ground_truth: None,
            data_range: 1.0,
            ssim_every: 0,
        };
        let fidelity = FidelityConfig::default();
        let mut go_on = |_: &IterationReport, _: &Tensor| ControlFlow::Continue(());
        let want: Vec<f32> = (1..=6).map(|k| cfg.denoiser_sigma_at(k)).collect();
        assert!(want[0] > 0.15 && want[5] == 0.01, "{want:?}");
        for resumed_after in [None, Some(2)] {
            let recorder = SigmaRecorder(Default::default());
            let start = resumed_after.map(|iteration| PnpStart {
                iteration,
                x: &truth,
            });
            pnp_from(
                &stack,
                &fidelity,
                &recorder,
                &ys,
                truth.shape(),
                &cfg,
                &monitor,
                &mut go_on,
                start,
            )
            .unwrap();
            let first = resumed_after.unwrap_or(0);
            assert_eq!(
                *recorder.0.lock().unwrap(),
                want[first..],
                "{resumed_after:?}"
            );
        }
    }

    /// A schedule that cannot end on `denoiser_sigma` is refused by name; a preset without a
    /// schedule writes none of its fields.
    #[test]
    fn dpir_schedule_is_validated_and_absent_from_presets_without_it() {
        let err = dpir(0.2, 0.0, 8).validate().unwrap_err().to_string();
        assert!(err.contains("algorithm.denoiser_sigma"), "{err}");
        let err = dpir(-1.0, 0.02, 8).validate().unwrap_err().to_string();
        assert!(err.contains("algorithm.sigma_start"), "{err}");
        let err = dpir(0.2, 0.02, 0).validate().unwrap_err().to_string();
        assert!(err.contains("algorithm.sigma_schedule_iterations"), "{err}");
        assert!(dpir(0.2, 0.02, 8).validate().is_ok());
        let written = toml::to_string(&PnpConfig::default()).unwrap();
        assert!(!written.contains("sigma_s"), "{written}");
        let written = toml::to_string(&dpir(0.2, 0.02, 6)).unwrap();
        let back: PnpConfig = toml::from_str(&written).unwrap();
        assert_eq!(back, dpir(0.2, 0.02, 6));
    }

    /// A run resumed from iteration k's iterate ends with the bits of the uninterrupted run, with
    /// either splitting.
    #[test]
    fn resumed_run_ends_with_the_uninterrupted_bits() {
        let (stack, ys, truth) = two_blurs(24);
        let denoiser = GaussianDenoiser {
            sigma_px: 0.0,
            px_per_sigma: 8.0,
        };
        for splitting in [Splitting::Pgd, Splitting::Hqs] {
            let cfg = PnpConfig {
                iterations: 7,
                splitting,
                ..dpir(0.2, 0.02, 5)
            };
            resumed_run_matches(&stack, &ys, &truth, &denoiser, &cfg);
        }
    }

    fn resumed_run_matches(
        stack: &Stack,
        ys: &[Tensor],
        truth: &Tensor,
        denoiser: &dyn Denoiser,
        cfg: &PnpConfig,
    ) {
        let monitor = Monitor {
            ground_truth: Some(truth),
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
            stack,
            &fidelity,
            denoiser,
            ys,
            truth.shape(),
            cfg,
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
            stack,
            &fidelity,
            denoiser,
            ys,
            truth.shape(),
            cfg,
            &monitor,
            &mut count,
            Some(start),
        )
        .unwrap();
        assert_eq!(resumed.history.len(), 3);
        assert_eq!(resumed.history[0].iteration, 5);
        assert_eq!(resumed.x.data(), whole.x.data(), "{:?}", cfg.splitting);
        assert_eq!(
            resumed.history[2].psnr_db.map(f64::to_bits),
            whole.history[6].psnr_db.map(f64::to_bits)
        );
    }

    /// Two circular blurs (sharing FFTs) and a Shepp–Logan image with its noiseless measurements.
    fn two_blurs(n: usize) -> (Stack, Vec<Tensor>, Tensor) {
        two_blurs_in(n, Stack::new)
    }

    /// [`two_blurs`] evaluated operator by operator: HQS's data step by CG.
    fn two_blurs_unfused(n: usize) -> (Stack, Vec<Tensor>, Tensor) {
        two_blurs_in(n, Stack::unfused)
    }

    fn two_blurs_in(
        n: usize,
        stack: fn(Vec<Box<dyn crate::physics::LinearPhysics>>) -> Result<Stack>,
    ) -> (Stack, Vec<Tensor>, Tensor) {
        let blur = |s: f32| Blur::new(gaussian_kernel([s, s], 0.0), Padding::Circular).unwrap();
        let stack = stack(vec![Box::new(blur(1.0)), Box::new(blur(2.0))]).unwrap();
        let truth = crate::samples::generate(crate::samples::Sample::SheppLogan, &[n], 3).unwrap();
        let ys = stack.forward(&truth).unwrap();
        (stack, ys, truth)
    }

    /// HQS's data step solves its normal equations: `γ·w·Σ AᵢᵀAᵢ z + z = γ·w·Σ Aᵢᵀyᵢ + x` holds
    /// for a fidelity whose weight is not 1 (σ 0.5, mean over 2 operators: w = 2) — to rounding in
    /// closed form (the fused circular stack), to CG's tolerance operator by operator, and the two
    /// agree — and the loop's first iterate with an identity denoiser is that step from the initial
    /// point.
    #[test]
    fn hqs_data_step_is_the_proximal_step_of_the_l2_term() {
        let (stack, ys, truth) = two_blurs(20);
        let fidelity = FidelityConfig::L2 {
            sigma: 0.5,
            reduction: crate::fidelity::Reduction::Mean,
        };
        let objective = HostObjective {
            physics: &stack,
            fidelity: &fidelity,
            ys: &ys,
        };
        let (unfused, _, _) = two_blurs_unfused(20);
        let by_cg = HostObjective {
            physics: &unfused,
            fidelity: &fidelity,
            ys: &ys,
        };
        let w = hqs_weight(&fidelity, 2).unwrap();
        assert_eq!(w, 2.0);
        let x = Tensor::from_fn(truth.shape(), |i| ((i * 7919) % 101) as f32 / 100.0);
        let rhs_data = objective
            .weighted_adjoint_of_measurements(truth.shape())
            .unwrap();
        let residual = |z: &Tensor, gamma: f32| {
            let normal = stack.adjoint_forward(z).unwrap();
            let aty = stack.adjoint(&ys).unwrap();
            let (mut res, mut scale) = (0.0f64, 0.0f64);
            for i in 0..z.data().len() {
                let lhs =
                    f64::from(gamma * w) * f64::from(normal.data()[i]) + f64::from(z.data()[i]);
                let rhs = f64::from(gamma * w) * f64::from(aty.data()[i]) + f64::from(x.data()[i]);
                res += (lhs - rhs).powi(2);
                scale += rhs.powi(2);
            }
            (res / scale).sqrt()
        };
        for gamma in [0.05f32, 1.0, 40.0] {
            let z = hqs_data_step(&objective, &rhs_data, &x, gamma, 500).unwrap();
            let rel = residual(&z, gamma);
            assert!(
                rel < 1e-6,
                "γ {gamma}: closed form: relative residual {rel:e}"
            );
            let z_cg = hqs_data_step(&by_cg, &rhs_data, &x, gamma, 500).unwrap();
            let rel = residual(&z_cg, gamma);
            assert!(rel < 1e-5, "γ {gamma}: CG: relative residual {rel:e}");
            let diff = z.max_abs_diff(&z_cg) / z.data().iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(diff < 1e-5, "γ {gamma}: closed form − CG: {diff:e}");
        }

        let cfg = PnpConfig {
            iterations: 1,
            splitting: Splitting::Hqs,
            ..dpir(0.2, 0.02, 4)
        };
        let monitor = Monitor {
            ground_truth: None,
            data_range: 1.0,
            ssim_every: 0,
        };
        let recorder = SigmaRecorder(Default::default());
        let mut go_on = |_: &IterationReport, _: &Tensor| ControlFlow::Continue(());
        let run = pnp(
            &stack,
            &fidelity,
            &recorder,
            &ys,
            truth.shape(),
            &cfg,
            &monitor,
            &mut go_on,
        )
        .unwrap();
        let x0 = stack.adjoint(&ys).unwrap();
        let want = hqs_data_step(&objective, &rhs_data, &x0, cfg.hqs_gamma_at(1), 100).unwrap();
        assert_eq!(run.x.data(), want.data());
        assert_eq!(*recorder.0.lock().unwrap(), vec![cfg.denoiser_sigma_at(1)]);
    }

    /// γₖ follows deepinv's DPIR: `λ·γₖ = (σₖ/σ_d)²`, so `1/λ` once σ_d is reached, and the same
    /// `1/λ` at every iteration without a schedule.
    #[test]
    fn hqs_step_follows_the_sigma_schedule() {
        let cfg = PnpConfig {
            splitting: Splitting::Hqs,
            ..dpir(0.16, 0.01, 5)
        };
        for (k, ratio) in (1..).zip([16.0f32, 8.0, 4.0, 2.0, 1.0, 1.0]) {
            let want = ratio * ratio / DPIR_LAMBDA;
            let got = cfg.hqs_gamma_at(k);
            assert!(
                (got - want).abs() <= 1e-5 * want,
                "iteration {k}: {got} != {want}"
            );
        }
        let constant = PnpConfig {
            splitting: Splitting::Hqs,
            hqs_lambda: 0.5,
            ..PnpConfig::default()
        };
        assert!((1..10).all(|k| constant.hqs_gamma_at(k) == 2.0));
    }

    /// HQS's parameters are validated by name, L1 is refused by name, and a PGD preset writes
    /// none of HQS's fields (its bytes do not change).
    #[test]
    fn hqs_is_validated_and_absent_from_presets_without_it() {
        let hqs = |lambda: f32, sigma: f32, cg: usize| PnpConfig {
            splitting: Splitting::Hqs,
            hqs_lambda: lambda,
            denoiser_sigma: sigma,
            hqs_cg_iterations: cg,
            ..PnpConfig::default()
        };
        for (cfg, field) in [
            (hqs(0.0, 0.02, 100), "algorithm.hqs_lambda"),
            (hqs(f32::NAN, 0.02, 100), "algorithm.hqs_lambda"),
            (hqs(0.23, 0.0, 100), "algorithm.denoiser_sigma"),
            (hqs(0.23, 0.02, 0), "algorithm.hqs_cg_iterations"),
        ] {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(hqs(0.23, 0.02, 100).validate().is_ok());
        let (stack, ys, truth) = two_blurs(12);
        let l1 = FidelityConfig::L1 {
            reduction: Default::default(),
        };
        let monitor = Monitor {
            ground_truth: None,
            data_range: 1.0,
            ssim_every: 0,
        };
        let mut go_on = |_: &IterationReport, _: &Tensor| ControlFlow::Continue(());
        let err = pnp(
            &stack,
            &l1,
            &SigmaRecorder(Default::default()),
            &ys,
            truth.shape(),
            &hqs(0.23, 0.02, 100),
            &monitor,
            &mut go_on,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("algorithm.splitting") && err.contains("l1"),
            "{err}"
        );
        let written = toml::to_string(&PnpConfig::default()).unwrap();
        assert!(
            !written.contains("hqs") && !written.contains("splitting"),
            "{written}"
        );
        let written = toml::to_string(&hqs(0.3, 0.02, 50)).unwrap();
        let back: PnpConfig = toml::from_str(&written).unwrap();
        assert_eq!(back, hqs(0.3, 0.02, 50));
        let defaults: PnpConfig = toml::from_str("splitting = \"hqs\"").unwrap();
        assert_eq!(
            (defaults.hqs_lambda, defaults.hqs_cg_iterations),
            (0.23, 100)
        );
    }
}
