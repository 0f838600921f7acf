//! Matrix-free linear algebra shared by operators and algorithms: power method and conjugate gradient.
//!
//! Both take closures so they serve single operators, stacks and (later) distributed stacks alike.
//! Inner products are f64 and summed in a fixed order, so results are reproducible.

use rand::{RngExt, SeedableRng};

use crate::error::Result;
use crate::tensor::Tensor;

/// Seed of the power method's start vector: fixed so every run (and every rank) starts alike.
pub const POWER_METHOD_SEED: u64 = 0x7e55_e4a0;

/// A deterministic pseudo-random start vector in [-1, 1) with the given shape.
pub fn deterministic_start(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Tensor::from_fn(shape, |_| rng.random::<f32>() * 2.0 - 1.0)
}

/// Largest eigenvalue of the symmetric positive semi-definite operator `apply` (e.g. x ↦ AᵀAx),
/// i.e. ‖A‖², by the power method from a deterministic start. Stops when the relative change of the
/// Rayleigh quotient falls below `tol` or after `max_iter` iterations.
pub fn power_method(
    shape: &[usize],
    max_iter: usize,
    tol: f64,
    mut apply: impl FnMut(&Tensor) -> Result<Tensor>,
) -> Result<f64> {
    let mut x = deterministic_start(shape, POWER_METHOD_SEED);
    let n = x.norm();
    if n == 0.0 {
        return Ok(0.0);
    }
    x.scale((1.0 / n) as f32);
    let mut lambda = 0.0f64;
    for _ in 0..max_iter {
        let y = apply(&x)?;
        let next = x.dot(&y);
        let ny = y.norm();
        if ny == 0.0 {
            return Ok(0.0);
        }
        x = y;
        x.scale((1.0 / ny) as f32);
        let converged = (next - lambda).abs() <= tol * next.abs().max(f64::MIN_POSITIVE);
        lambda = next;
        if converged {
            break;
        }
    }
    Ok(lambda)
}

/// Outcome of [`conjugate_gradient`].
#[derive(Debug, Clone)]
pub struct CgOutcome {
    pub x: Tensor,
    pub iterations: usize,
    /// ‖b − Ax‖ / ‖b‖ at exit.
    pub relative_residual: f64,
}

/// Solves `apply(x) = b` for symmetric positive semi-definite `apply` by conjugate gradient, from `x0`,
/// until ‖r‖ ≤ tol·‖b‖ or `max_iter` iterations.
pub fn conjugate_gradient(
    b: &Tensor,
    x0: Tensor,
    max_iter: usize,
    tol: f64,
    apply: impl FnMut(&Tensor) -> Result<Tensor>,
) -> Result<CgOutcome> {
    conjugate_gradient_with(b, x0, max_iter, tol, apply, |_, _, _| true)
}

/// [`conjugate_gradient`] with a callback after every iteration, given the iteration number (from 1),
/// the current iterate and the relative residual; returning `false` stops early.
pub fn conjugate_gradient_with(
    b: &Tensor,
    x0: Tensor,
    max_iter: usize,
    tol: f64,
    mut apply: impl FnMut(&Tensor) -> Result<Tensor>,
    mut on_iter: impl FnMut(usize, &Tensor, f64) -> bool,
) -> Result<CgOutcome> {
    let b_norm = b.norm();
    let mut x = x0;
    if b_norm == 0.0 {
        return Ok(CgOutcome {
            x: b.zeros_like(),
            iterations: 0,
            relative_residual: 0.0,
        });
    }
    let mut r = b.sub(&apply(&x)?);
    let mut p = r.clone();
    let mut rs = r.norm_sq();
    let mut iterations = 0;
    while iterations < max_iter && rs.sqrt() > tol * b_norm {
        let ap = apply(&p)?;
        let pap = p.dot(&ap);
        if pap <= 0.0 {
            break; // p is in the null space: the current x is a least-squares solution
        }
        let alpha = rs / pap;
        x.axpy(alpha as f32, &p);
        r.axpy(-alpha as f32, &ap);
        let rs_next = r.norm_sq();
        let beta = rs_next / rs;
        rs = rs_next;
        p.scale(beta as f32);
        p.add_assign(&r);
        iterations += 1;
        if !on_iter(iterations, &x, rs.sqrt() / b_norm) {
            break;
        }
    }
    Ok(CgOutcome {
        x,
        iterations,
        relative_residual: rs.sqrt() / b_norm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Diagonal operator diag(1..=n).
    fn diag(x: &Tensor) -> Result<Tensor> {
        let mut y = x.clone();
        for (i, v) in y.data_mut().iter_mut().enumerate() {
            *v *= (i + 1) as f32;
        }
        Ok(y)
    }

    #[test]
    fn power_method_finds_largest_eigenvalue() {
        let l = power_method(&[1, 1, 1, 10], 1000, 1e-9, diag).unwrap();
        assert!((l - 10.0).abs() < 1e-2, "{l}");
    }

    #[test]
    fn cg_solves_diagonal_system() {
        let b = Tensor::full(&[1, 1, 1, 10], 1.0);
        let out = conjugate_gradient(&b, b.zeros_like(), 50, 1e-8, diag).unwrap();
        for (i, v) in out.x.data().iter().enumerate() {
            assert!((v - 1.0 / (i + 1) as f32).abs() < 1e-5);
        }
        assert!(out.relative_residual < 1e-6);
    }
}
