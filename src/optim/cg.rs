//! Least squares by conjugate gradient on the (optionally damped) normal equations of a stack:
//! `(Σ AᵢᵀAᵢ + λI) x = Σ Aᵢᵀyᵢ`, reported per iteration like the other algorithms.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{ComponentTimes, IterationCallback, IterationReport, Monitor, Reconstruction};
use crate::error::{Error, Result};
use crate::linalg;
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
    let mut history = Vec::new();
    let mut stopped = false;
    let mut failure = None;
    let mut prev = b.zeros_like();
    let mut t_iter = Instant::now();
    let apply = |v: &Tensor| {
        let mut out = physics.adjoint_forward(v)?;
        if cfg.damping > 0.0 {
            out.axpy(cfg.damping, v);
        }
        Ok(out)
    };
    // The callback cannot return errors, so metric failures are kept and raised after the solve.
    let on_cg = |k: usize, x: &Tensor, _residual: f64| {
        let last = k == cfg.iterations;
        let (psnr_db, ssim) = match monitor.quality(x, k, last) {
            Ok(q) => q,
            Err(e) => {
                failure = Some(e);
                return false;
            }
        };
        let total = t_iter.elapsed().as_secs_f64();
        let report = IterationReport {
            iteration: k,
            iterations: cfg.iterations,
            psnr_db,
            ssim,
            objective: None,
            relative_change: super::relative_change(x, &prev),
            times: ComponentTimes {
                gradient_secs: total,
                denoiser_secs: 0.0,
                other_secs: 0.0,
                ..Default::default()
            },
        };
        prev = x.clone();
        let flow = on_iter(&report, x);
        history.push(report);
        t_iter = Instant::now();
        if flow.is_break() {
            stopped = true;
            return false;
        }
        true
    };
    let out =
        linalg::conjugate_gradient_with(&b, b.zeros_like(), cfg.iterations, cfg.tol, apply, on_cg)?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Reconstruction {
        x: out.x,
        history,
        stopped,
    })
}
