//! Data fidelity `f(x) = Σᵢ d(Aᵢx, yᵢ)` over a stack of operators: value and gradient.
//!
//! Following deepinv's `optim/data_fidelity.py`: L2 is `1/(2σ²)‖Ax − y‖²` with gradient
//! `Aᵀ(Ax − y)/σ²`; L1 is `‖Ax − y‖₁` with the subgradient `Aᵀ sign(Ax − y)`. Over a stack the terms
//! are summed (deepinv's default) or averaged. A single operator is a stack of one.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::physics::StackedLinearPhysics;
use crate::tensor::Tensor;

/// Which distance compares `Ax` with `y`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FidelityConfig {
    /// `1/(2σ²)‖Ax − y‖²`.
    L2 {
        #[serde(default = "one")]
        sigma: f32,
        #[serde(default)]
        reduction: Reduction,
    },
    /// `‖Ax − y‖₁`.
    L1 {
        #[serde(default)]
        reduction: Reduction,
    },
}

fn one() -> f32 {
    1.0
}

impl Default for FidelityConfig {
    fn default() -> Self {
        FidelityConfig::L2 {
            sigma: 1.0,
            reduction: Reduction::Sum,
        }
    }
}

/// How the per-operator terms combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    #[default]
    Sum,
    Mean,
}

impl FidelityConfig {
    /// Checks parameter ranges.
    pub fn validate(&self) -> Result<()> {
        if let FidelityConfig::L2 { sigma, .. } = *self
            && !(sigma > 0.0 && sigma.is_finite())
        {
            return Err(Error::config(
                "fidelity.sigma",
                format!("must be a finite number > 0, got {sigma}"),
            ));
        }
        Ok(())
    }

    fn reduction(&self) -> Reduction {
        match *self {
            FidelityConfig::L2 { reduction, .. } | FidelityConfig::L1 { reduction } => reduction,
        }
    }

    fn reduction_scale(&self, n: usize) -> f64 {
        match self.reduction() {
            Reduction::Sum => 1.0,
            Reduction::Mean => 1.0 / n.max(1) as f64,
        }
    }

    /// The weight `w` with `∇f = w·Σ Aᵢᵀ(Aᵢx − yᵢ)` for L2 (so its Lipschitz constant is `w·‖A‖²`);
    /// for L1, whose gradient is not Lipschitz, the reduction scale (a step heuristic).
    pub fn gradient_weight(&self, n_ops: usize) -> f64 {
        let scale = self.reduction_scale(n_ops);
        match *self {
            FidelityConfig::L2 { sigma, .. } => scale / (sigma as f64).powi(2),
            FidelityConfig::L1 { .. } => scale,
        }
    }

    /// `f(x)`.
    pub fn value(
        &self,
        physics: &dyn StackedLinearPhysics,
        x: &Tensor,
        ys: &[Tensor],
    ) -> Result<f64> {
        let axs = physics.forward(x)?;
        check_measurements(&axs, ys)?;
        let total: f64 = match *self {
            FidelityConfig::L2 { sigma, .. } => {
                let ss: f64 = axs.iter().zip(ys).map(|(ax, y)| ax.sub(y).norm_sq()).sum();
                ss / (2.0 * (sigma as f64).powi(2))
            }
            FidelityConfig::L1 { .. } => axs
                .iter()
                .zip(ys)
                .map(|(ax, y)| {
                    ax.data()
                        .iter()
                        .zip(y.data())
                        .map(|(a, b)| (a - b).abs() as f64)
                        .sum::<f64>()
                })
                .sum(),
        };
        Ok(total * self.reduction_scale(ys.len()))
    }

    /// `∇f(x)` (a subgradient for L1).
    pub fn grad(
        &self,
        physics: &dyn StackedLinearPhysics,
        x: &Tensor,
        ys: &[Tensor],
    ) -> Result<Tensor> {
        let scale = self.reduction_scale(ys.len()) as f32;
        match *self {
            FidelityConfig::L2 { sigma, .. } => {
                let w = scale / (sigma * sigma);
                physics.residual_adjoint(x, ys, &vec![w; ys.len()])
            }
            FidelityConfig::L1 { .. } => {
                let mut rs = physics.forward(x)?;
                check_measurements(&rs, ys)?;
                for (r, y) in rs.iter_mut().zip(ys) {
                    for (a, b) in r.data_mut().iter_mut().zip(y.data()) {
                        let d = *a - b;
                        *a = if d > 0.0 {
                            scale
                        } else if d < 0.0 {
                            -scale
                        } else {
                            0.0
                        };
                    }
                }
                physics.adjoint(&rs)
            }
        }
    }
}

fn check_measurements(axs: &[Tensor], ys: &[Tensor]) -> Result<()> {
    if axs.len() != ys.len() {
        return Err(Error::config(
            "measurements",
            format!("{} operators but {} measurements", axs.len(), ys.len()),
        ));
    }
    for (ax, y) in axs.iter().zip(ys) {
        if ax.shape() != y.shape() {
            return Err(Error::shape("data fidelity", ax.shape(), y.shape()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::{LinearPhysics, Physics, Stack};

    /// A diagonal operator for testing: (Ax)ᵢ = dᵢ xᵢ.
    struct Diag(Vec<f32>);
    impl Physics for Diag {
        fn name(&self) -> String {
            "diag".into()
        }
        fn output_shape(&self, x: &[usize]) -> Result<Vec<usize>> {
            Ok(x.to_vec())
        }
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            let mut y = x.clone();
            for (v, d) in y.data_mut().iter_mut().zip(&self.0) {
                *v *= d;
            }
            Ok(y)
        }
    }
    impl LinearPhysics for Diag {
        fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
            self.forward(y)
        }
    }

    fn stack() -> Stack {
        Stack::new(vec![
            Box::new(Diag(vec![1.0, 2.0, 3.0, 4.0])),
            Box::new(Diag(vec![0.5, -1.0, 0.0, 2.0])),
        ])
        .unwrap()
    }

    /// The gradient matches central finite differences of the value.
    fn check_gradient(f: &FidelityConfig) {
        let s = stack();
        let x = Tensor::from_vec(&[1, 1, 1, 4], vec![0.3, -0.2, 0.9, 0.1]).unwrap();
        let ys = vec![
            Tensor::from_vec(&[1, 1, 1, 4], vec![0.1, 0.2, 0.3, 0.4]).unwrap(),
            Tensor::from_vec(&[1, 1, 1, 4], vec![-0.1, 0.5, 0.2, 0.0]).unwrap(),
        ];
        let g = f.grad(&s, &x, &ys).unwrap();
        for i in 0..4 {
            let h = 1e-3f32;
            let mut xp = x.clone();
            xp.data_mut()[i] += h;
            let mut xm = x.clone();
            xm.data_mut()[i] -= h;
            let fd = (f.value(&s, &xp, &ys).unwrap() - f.value(&s, &xm, &ys).unwrap())
                / (2.0 * h as f64);
            assert!(
                (fd - g.data()[i] as f64).abs() < 1e-2,
                "{i}: fd {fd} vs {}",
                g.data()[i]
            );
        }
    }

    #[test]
    fn l2_gradient_matches_finite_differences() {
        check_gradient(&FidelityConfig::L2 {
            sigma: 0.5,
            reduction: Reduction::Sum,
        });
        check_gradient(&FidelityConfig::L2 {
            sigma: 1.0,
            reduction: Reduction::Mean,
        });
    }

    #[test]
    fn l1_gradient_matches_finite_differences() {
        check_gradient(&FidelityConfig::L1 {
            reduction: Reduction::Sum,
        });
    }

    #[test]
    fn bad_sigma_is_named() {
        let e = FidelityConfig::L2 {
            sigma: 0.0,
            reduction: Reduction::Sum,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("fidelity.sigma"));
    }
}
