//! Noise models (Gaussian, Poisson) and [`Noisy`], which turns a noiseless operator into a measurement model.
//!
//! Draws are seeded: the same seed gives the same noise on every machine and every rank count, because
//! each operator of a stack gets its own seed derived from its index, not from who computes it.

use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Poisson};
use serde::{Deserialize, Serialize};

use super::{LinearPhysics, Physics};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A noise model applied to measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NoiseConfig {
    /// y + σ·n with n ~ N(0, 1).
    Gaussian { sigma: f32 },
    /// gain · Poisson(y / gain), deepinv's `PoissonNoise(gain)` (y must be ≥ 0; negatives are clipped).
    Poisson { gain: f32 },
}

impl NoiseConfig {
    /// Checks the parameters' ranges.
    pub fn validate(&self) -> Result<()> {
        match *self {
            NoiseConfig::Gaussian { sigma } if !(sigma >= 0.0 && sigma.is_finite()) => {
                Err(Error::config(
                    "noise.sigma",
                    format!("must be a finite number ≥ 0, got {sigma}"),
                ))
            }
            NoiseConfig::Poisson { gain } if !(gain > 0.0 && gain.is_finite()) => {
                Err(Error::config(
                    "noise.gain",
                    format!("must be a finite number > 0, got {gain}"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The standard deviation that data fidelity should assume (Poisson: none, 1).
    pub fn sigma(&self) -> f32 {
        match *self {
            NoiseConfig::Gaussian { sigma } => sigma,
            NoiseConfig::Poisson { .. } => 1.0,
        }
    }

    /// Returns a noisy copy of `y`, drawn from `seed`.
    pub fn apply(&self, y: &Tensor, seed: u64) -> Result<Tensor> {
        self.validate()?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = y.clone();
        match *self {
            NoiseConfig::Gaussian { sigma } => {
                let normal = Normal::new(0.0f32, 1.0).expect("unit normal is valid");
                for v in out.data_mut() {
                    *v += sigma * normal.sample(&mut rng);
                }
            }
            NoiseConfig::Poisson { gain } => {
                for v in out.data_mut() {
                    let rate = (*v / gain).max(0.0) as f64;
                    let draw = if rate > 0.0 {
                        Poisson::new(rate)
                            .map_err(|e| Error::config("noise.gain", format!("rate {rate}: {e}")))?
                            .sample(&mut rng)
                    } else {
                        0.0
                    };
                    *v = gain * draw as f32;
                }
            }
        }
        Ok(out)
    }
}

/// An operator whose measurements carry noise; `forward` and `adjoint` stay noiseless.
pub struct Noisy<P> {
    pub inner: P,
    pub noise: NoiseConfig,
}

impl<P: LinearPhysics> Physics for Noisy<P> {
    fn name(&self) -> String {
        format!("{} + {:?}", self.inner.name(), self.noise)
    }
    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        self.inner.output_shape(x_shape)
    }
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.forward(x)
    }
    fn measure(&self, x: &Tensor, seed: u64) -> Result<Tensor> {
        self.noise.apply(&self.inner.forward(x)?, seed)
    }
}

impl<P: LinearPhysics> LinearPhysics for Noisy<P> {
    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        self.inner.adjoint(y)
    }
    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.adjoint_forward(x)
    }
    fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
        self.inner.op_norm_sq(x_shape)
    }
    fn pinv(&self, y: &Tensor) -> Result<Tensor> {
        self.inner.pinv(y)
    }
    fn shared_fft(&self) -> Option<super::SharedFft<'_>> {
        self.inner.shared_fft()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaussian_noise_is_seeded_and_has_the_right_spread() {
        let y = Tensor::zeros(&[1, 1, 200, 200]);
        let n = NoiseConfig::Gaussian { sigma: 0.1 };
        let a = n.apply(&y, 7).unwrap();
        assert_eq!(a, n.apply(&y, 7).unwrap());
        assert_ne!(a, n.apply(&y, 8).unwrap());
        let std = (a.norm_sq() / a.numel() as f64).sqrt();
        assert!((std - 0.1).abs() < 0.005, "{std}");
    }

    #[test]
    fn poisson_noise_has_the_right_mean_and_variance() {
        let y = Tensor::full(&[1, 1, 200, 200], 0.5);
        let gain = 0.01;
        let a = NoiseConfig::Poisson { gain }.apply(&y, 1).unwrap();
        let n = a.numel() as f64;
        let mean = a.data().iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = a
            .data()
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        // Var[gain·Poisson(y/gain)] = gain·y.
        assert!((var - 0.005).abs() < 0.0005, "{var}");
    }

    #[test]
    fn invalid_parameters_are_named() {
        let e = NoiseConfig::Gaussian { sigma: -1.0 }
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("noise.sigma"));
        let e = NoiseConfig::Poisson { gain: 0.0 }.validate().unwrap_err();
        assert!(e.to_string().contains("noise.gain"));
    }
}
