//! Least squares by conjugate gradient on the (optionally damped) normal equations of a stack:
//! `(Σ AᵢᵀAᵢ + λI) x = Σ Aᵢᵀyᵢ`, reported per iteration like the other algorithms. The loop
//! ([`cg_loop`]) is written once for every storage of the iterate (`optim::space::Iterate`): host
//! runs give it the host stack and `Tensor`s, device runs `device::solve::DeviceObjective` and
//! `device::Array`s whose values stay on the GPU (issue 28).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::space::{Iterate, Run};
use super::{
    ComponentTimes, IterationCallback, IterationReport, Monitor, Reconstruction, ViewCallback,
};
use crate::error::{Error, Result};
use crate::physics::StackedLinearPhysics;
use crate::tensor::Tensor;

/// Parameters of CG least squares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgConfig {
    pub iterations: usize,
    /// Stop when ‖r‖ ≤ tol·‖Aᵀy‖.
    pub tol: f64,
    /// Tikhonov damping λ ≥ 0.
    pub damping: f32,
}

impl Default for CgConfig {
    fn default() -> Self {
        CgConfig {
            iterations: 100,
            tol: 1e-6,
            damping: 0.0,
        }
    }
}

impl CgConfig {
    pub fn validate(&self) -> Result<()> {
        if self.iterations == 0 || self.iterations > 100_000 {
            return Err(Error::config(
                "algorithm.iterations",
                format!("must be between 1 and 100000, got {}", self.iterations),
            ));
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(Error::config(
                "algorithm.tol",
                format!("must be a finite number ≥ 0, got {}", self.tol),
            ));
        }
        if !(self.damping >= 0.0 && self.damping.is_finite()) {
            return Err(Error::config(
                "algorithm.damping",
                format!("must be a finite number ≥ 0, got {}", self.damping),
            ));
        }
        Ok(())
    }
}

/// The normal operator `v ↦ Σ AᵢᵀAᵢ v` of a stack, on iterates `V`.
pub trait NormalOperator<V> {
    fn normal(&self, v: &V) -> Result<V>;
}

impl NormalOperator<Tensor> for dyn StackedLinearPhysics + '_ {
    fn normal(&self, v: &Tensor) -> Result<Tensor> {
        self.adjoint_forward(v)
    }
}

/// Conjugate gradient on `M x = b` from zero, for any storage: `linalg::conjugate_gradient_with`'s
/// steps in its order (a host run gives its bits; a device keeps `x`, `r`, `p` and `Mp` in its
/// memory and downloads only the scalars of the reductions). `on_iter` gets the iteration number
/// (from 1), the iterate and the relative residual; `Ok(false)` stops.
pub fn conjugate_gradient<V: Iterate>(
    b: &V,
    max_iter: usize,
    tol: f64,
    mut apply: impl FnMut(&V) -> Result<V>,
    mut on_iter: impl FnMut(usize, &V, f64) -> Result<bool>,
) -> Result<V> {
    let b_norm = b.dot(b)?.sqrt();
    let mut x = b.zeros_like()?;
    if b_norm == 0.0 {
        return Ok(x);
    }
    // `b − Mx` as `b + (−1)·Mx`: the same bits as a subtraction.
    let mut r = b.duplicate()?;
    r.axpy(-1.0, &apply(&x)?)?;
    let mut p = r.duplicate()?;
    let mut rs = r.dot(&r)?;
    let mut iterations = 0;
    while iterations < max_iter && rs.sqrt() > tol * b_norm {
        let ap = apply(&p)?;
        let pap = p.dot(&ap)?;
        if pap <= 0.0 {
            break; // p is in the null space: the current x is a least-squares solution
        }
        let alpha = rs / pap;
        x.axpy(alpha as f32, &p)?;
        r.axpy(-alpha as f32, &ap)?;
        let rs_next = r.dot(&r)?;
        let beta = rs_next / rs;
        rs = rs_next;
        p = p.scaled(beta as f32)?;
        p.axpy(1.0, &r)?;
        iterations += 1;
        if !on_iter(iterations, &x, rs.sqrt() / b_norm)? {
            break;
        }
    }
    Ok(x)
}

/// Solves the stacked least-squares problem from zero.
pub fn least_squares(
    physics: &dyn StackedLinearPhysics,
    ys: &[Tensor],
    cfg: &CgConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut IterationCallback<'_>,
) -> Result<Reconstruction> {
    cfg.validate()?;
    let b = physics.adjoint(ys)?;
    let run = super::with_host_iterates(on_iter, |on_iter| {
        cg_loop(physics, b, cfg, monitor, on_iter)
    })?;
    run.into_reconstruction()
}

/// CG least squares `(Σ AᵢᵀAᵢ + λI) x = b` (`b = Σ Aᵢᵀyᵢ`) for any storage of the iterate (the one
/// loop of host and device runs): the iterate stays in its storage; PSNR is computed there and the
/// iterate reaches host memory only for an SSIM that is due and when the callback asks for it
/// (`HostView::to_host`).
pub fn cg_loop<V: Iterate>(
    normal: &(impl NormalOperator<V> + ?Sized),
    b: V,
    cfg: &CgConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut ViewCallback<'_>,
) -> Result<Run<V>> {
    cfg.validate()?;
    let truth = match monitor.ground_truth {
        Some(t) => Some(b.truth_beside(t)?),
        None => None,
    };
    let mut history = Vec::new();
    let mut stopped = false;
    let mut prev = b.zeros_like()?;
    let mut t_iter = Instant::now();
    let apply = |v: &V| {
        let mut out = normal.normal(v)?;
        if cfg.damping > 0.0 {
            out.axpy(cfg.damping, v)?;
        }
        Ok(out)
    };
    let report_iteration = |k: usize, x: &V, _residual: f64| -> Result<bool> {
        let last = k == cfg.iterations;
        let (psnr_db, ssim) = super::space::quality(x, truth.as_ref(), monitor, k, last)?;
        let total = t_iter.elapsed().as_secs_f64();
        let report = IterationReport {
            iteration: k,
            iterations: cfg.iterations,
            psnr_db,
            ssim,
            objective: None,
            relative_change: x.relative_change(&prev)?,
            times: ComponentTimes {
                gradient_secs: total,
                denoiser_secs: 0.0,
                other_secs: 0.0,
                ..Default::default()
            },
        };
        prev = x.duplicate()?;
        let flow = on_iter(&report, x);
        history.push(report);
        t_iter = Instant::now();
        if flow.is_break() {
            stopped = true;
            return Ok(false);
        }
        Ok(true)
    };
    let x = conjugate_gradient(&b, cfg.iterations, cfg.tol, apply, report_iteration)?;
    Ok(Run {
        x,
        history,
        stopped,
    })
}
