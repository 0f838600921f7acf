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
