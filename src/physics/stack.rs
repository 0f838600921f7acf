//! Stacks of operators: `A = [A₁; …; Aₙ]`, one measurement per operator, `Aᵀ(y₁…yₙ) = Σ Aᵢᵀyᵢ`.
//!
//! [`StackedLinearPhysics`] is the interface that data fidelity and the algorithms use; [`Stack`] is its
//! single-process implementation (operators evaluated in parallel with rayon), and the distributed
//! stack of the process group implements the same trait. Sums run in operator order so the result does
//! not depend on how many threads or ranks computed the terms.

use rayon::prelude::*;

use super::{LinearPhysics, PINV_ITERS, PINV_TOL, POWER_ITERS, POWER_TOL};
use crate::error::{Error, Result};
use crate::linalg;
use crate::tensor::Tensor;

/// A stack of linear operators sharing one input.
pub trait StackedLinearPhysics: Send + Sync {
    /// Number of operators (and measurements).
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Names of the operators, in order.
    fn names(&self) -> Vec<String>;

    /// `[A₁x, …, Aₙx]`.
    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>>;

    /// Noisy measurements; operator `i` draws its noise from `seed + i`.
    fn measure(&self, x: &Tensor, seed: u64) -> Result<Vec<Tensor>>;

    /// `Σ Aᵢᵀyᵢ`.
    fn adjoint(&self, ys: &[Tensor]) -> Result<Tensor>;

    /// `Σ AᵢᵀAᵢx`.
    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor>;

    /// `Σ Aᵢᵀ(Aᵢx − yᵢ)·wᵢ` — the gradient of `Σ wᵢ/2‖Aᵢx − yᵢ‖²`, fused so each operator is visited once.
    fn residual_adjoint(&self, x: &Tensor, ys: &[Tensor], weights: &[f32]) -> Result<Tensor>;

    /// ‖A‖² of the stacked operator (largest eigenvalue of Σ AᵢᵀAᵢ), by the power method.
    fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
        linalg::power_method(x_shape, POWER_ITERS, POWER_TOL, |v| self.adjoint_forward(v))
    }

    /// Least-squares solution of the stacked system by CG on `Σ AᵢᵀAᵢ x = Σ Aᵢᵀyᵢ`.
    fn pinv(&self, ys: &[Tensor]) -> Result<Tensor> {
        let b = self.adjoint(ys)?;
        let x0 = b.zeros_like();
        Ok(
            linalg::conjugate_gradient(&b, x0, PINV_ITERS, PINV_TOL, |v| self.adjoint_forward(v))?
                .x,
        )
    }
}

/// Single-process stack of boxed operators.
pub struct Stack {
    ops: Vec<Box<dyn LinearPhysics>>,
}

impl Stack {
    /// Stacks `ops`; an empty stack is an error.
    pub fn new(ops: Vec<Box<dyn LinearPhysics>>) -> Result<Self> {
        if ops.is_empty() {
            return Err(Error::config(
                "physics",
                "a stack needs at least one operator",
            ));
        }
        Ok(Stack { ops })
    }

    pub fn ops(&self) -> &[Box<dyn LinearPhysics>] {
        &self.ops
    }

    fn check_len(&self, ys: &[Tensor], op: &str) -> Result<()> {
        if ys.len() != self.ops.len() {
            return Err(Error::config(
                op,
                format!(
                    "the stack has {} operators but {} measurements were given",
                    self.ops.len(),
                    ys.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Sums tensors in order (deterministic).
pub fn sum_in_order(parts: Vec<Tensor>) -> Result<Tensor> {
    let mut iter = parts.into_iter();
    let mut acc = iter
        .next()
        .ok_or_else(|| Error::config("physics", "nothing to sum"))?;
    for p in iter {
        if p.shape() != acc.shape() {
            return Err(Error::shape("stack adjoint", acc.shape(), p.shape()));
        }
        acc.add_assign(&p);
    }
    Ok(acc)
}

impl StackedLinearPhysics for Stack {
    fn len(&self) -> usize {
        self.ops.len()
    }

    fn names(&self) -> Vec<String> {
        self.ops.iter().map(|o| o.name()).collect()
    }

    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        self.ops.par_iter().map(|op| op.forward(x)).collect()
    }

    fn measure(&self, x: &Tensor, seed: u64) -> Result<Vec<Tensor>> {
        self.ops
            .par_iter()
            .enumerate()
            .map(|(i, op)| op.measure(x, seed.wrapping_add(i as u64)))
            .collect()
    }

    fn adjoint(&self, ys: &[Tensor]) -> Result<Tensor> {
        self.check_len(ys, "stack adjoint")?;
        let parts = self
            .ops
            .par_iter()
            .zip(ys)
            .map(|(op, y)| op.adjoint(y))
            .collect::<Result<Vec<_>>>()?;
        sum_in_order(parts)
    }

    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        let parts = self
            .ops
            .par_iter()
            .map(|op| op.adjoint_forward(x))
            .collect::<Result<Vec<_>>>()?;
        sum_in_order(parts)
    }

    fn residual_adjoint(&self, x: &Tensor, ys: &[Tensor], weights: &[f32]) -> Result<Tensor> {
        self.check_len(ys, "data fidelity gradient")?;
        let parts = self
            .ops
            .par_iter()
            .zip(ys)
            .zip(weights)
            .map(|((op, y), &w)| {
                let mut r = op.forward(x)?;
                if r.shape() != y.shape() {
                    return Err(Error::shape("data fidelity gradient", r.shape(), y.shape()));
                }
                r.sub_assign(y);
                r.scale(w);
                op.adjoint(&r)
            })
            .collect::<Result<Vec<_>>>()?;
        sum_in_order(parts)
    }
}
