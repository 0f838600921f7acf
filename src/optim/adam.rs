//! Adam (Kingma & Ba 2015) in two precisions:
//! - [`Adam`] (β = 0.9, 0.999, ε = 1e-8) over flat parameter vectors, with moments kept in f64: the
//!   optimiser of `tessera train` (denoisers) and of Multi-DSN training (`crate::dsn`). Parameters
//!   are handed over as a sequence of slices (a network's tensors in order) matched element for
//!   element by one flat gradient, so one state serves any set of layers.
//! - [`TorchAdam`] (any β, ε) as `torch.optim.Adam` computes it in the parameter's own float type:
//!   full-waveform inversion (`crate::fwi`) replays the reference PyTorch loop bit for bit.

use crate::float::Float;

/// Adam's moments for `n` parameters.
#[derive(Debug, Clone)]
pub struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl Adam {
    pub fn new(n: usize) -> Self {
        Adam {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    /// Adam resumed from a checkpoint: its step count and moments, as [`Adam::state`] gave them.
    pub fn from_state(t: i32, m: Vec<f64>, v: Vec<f64>) -> Self {
        Adam { m, v, t }
    }

    /// The step count and the first and second moments (for checkpoints).
    pub fn state(&self) -> (i32, &[f64], &[f64]) {
        (self.t, &self.m, &self.v)
    }

    /// One step of size `lr` on `params` (in the order of `grads`).
    pub fn step<'a>(
        &mut self,
        params: impl IntoIterator<Item = &'a mut [f32]>,
        grads: &[f32],
        lr: f64,
    ) {
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        const EPS: f64 = 1e-8;
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t), 1.0 - B2.powi(self.t));
        let mut i = 0;
        for p in params {
            for w in p.iter_mut() {
                let g = grads[i] as f64;
                self.m[i] = B1 * self.m[i] + (1.0 - B1) * g;
                self.v[i] = B2 * self.v[i] + (1.0 - B2) * g * g;
                let update = lr * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + EPS);
                *w = (*w as f64 - update) as f32;
                i += 1;
            }
        }
        assert_eq!(
            i,
            grads.len(),
            "Adam: parameters and gradients differ in length"
        );
    }
}

/// Adam exactly as `torch.optim.Adam` computes it (single-tensor CPU path, no weight decay, no
/// AMSGrad), operation for operation in the parameter's float type `T`, so a parameter follows
/// torch's trajectory bit for bit (`tests/fwi.rs` replays torch's steps): the FWI optimiser, where
/// the reference PyTorch loop's velocity model must be reproduced exactly.
#[derive(Debug, Clone)]
pub struct TorchAdam<T> {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    step: u32,
    exp_avg: Vec<T>,
    exp_avg_sq: Vec<T>,
}

impl<T: Float> TorchAdam<T> {
    pub fn new(n: usize, lr: f64, betas: (f64, f64), eps: f64) -> Self {
        TorchAdam {
            lr,
            betas,
            eps,
            step: 0,
            exp_avg: vec![T::ZERO; n],
            exp_avg_sq: vec![T::ZERO; n],
        }
    }

    /// The step count and the first and second moments (`exp_avg`, `exp_avg_sq`), for checkpoints.
    pub fn state(&self) -> (u32, &[T], &[T]) {
        (self.step, &self.exp_avg, &self.exp_avg_sq)
    }

    /// The optimiser resumed from a checkpoint: its step count and moments as [`TorchAdam::state`]
    /// gave them (`None` when the moments differ in length).
    pub fn from_state(
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        (step, exp_avg, exp_avg_sq): (u32, Vec<T>, Vec<T>),
    ) -> Option<Self> {
        (exp_avg.len() == exp_avg_sq.len()).then_some(TorchAdam {
            lr,
            betas,
            eps,
            step,
            exp_avg,
            exp_avg_sq,
        })
    }

    /// One step: `param ← param − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)`.
    pub fn step(&mut self, param: &mut [T], grad: &[T]) {
        self.step += 1;
        let (b1, b2) = self.betas;
        // Python's float `**` (C pow), as torch computes the bias corrections.
        let t = self.step as f64;
        // torch: exp_avg.lerp_(grad, 1 − β₁) — weight < 0.5, so m + w·(g − m) as a fused
        // multiply-add (ATen's vectorised lerp).
        let w = T::from_f64(1.0 - b1);
        let b2t = T::from_f64(b2);
        let one_minus_b2 = T::from_f64(1.0 - b2);
        let bias1 = 1.0 - b1.powf(t);
        let bias2 = 1.0 - b2.powf(t);
        let step_size = T::from_f64(-(self.lr / bias1));
        let bias2_sqrt = T::from_f64(bias2.powf(0.5));
        let eps = T::from_f64(self.eps);
        for i in 0..param.len() {
            let g = grad[i];
            let m = T::mul_add(w, g - self.exp_avg[i], self.exp_avg[i]);
            self.exp_avg[i] = m;
            // exp_avg_sq.mul_(β₂).addcmul_(grad, grad, value = 1 − β₂): ATen fuses
            // v·β₂ + (g·g)·(1 − β₂) into one multiply-add.
            let v = T::mul_add(g * g, one_minus_b2, self.exp_avg_sq[i] * b2t);
            self.exp_avg_sq[i] = v;
            // denom = (exp_avg_sq.sqrt() / √bias2).add_(eps); param.addcdiv_(exp_avg, denom, −step)
            let denom = T::sqrt(v) / bias2_sqrt + eps;
            param[i] += step_size * (m / denom);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_adam_resumed_from_its_state_takes_the_same_steps() {
        let grads = |k: usize| -> Vec<f32> {
            (0..5)
                .map(|i| ((i * 7 + k * 3) % 11) as f32 - 5.0)
                .collect()
        };
        let mut whole = TorchAdam::<f32>::new(5, 0.05, (0.9, 0.99), 1e-8);
        let mut x = vec![1.0f32; 5];
        for k in 0..4 {
            whole.step(&mut x, &grads(k));
        }
        let mut first = TorchAdam::<f32>::new(5, 0.05, (0.9, 0.99), 1e-8);
        let mut y = vec![1.0f32; 5];
        for k in 0..2 {
            first.step(&mut y, &grads(k));
        }
        let (step, m, v) = first.state();
        let mut resumed =
            TorchAdam::from_state(0.05, (0.9, 0.99), 1e-8, (step, m.to_vec(), v.to_vec())).unwrap();
        for k in 2..4 {
            resumed.step(&mut y, &grads(k));
        }
        assert_eq!(x, y);
        assert_eq!(whole.state(), resumed.state());
        assert!(
            TorchAdam::<f32>::from_state(0.1, (0.9, 0.9), 1e-8, (1, vec![0.0], vec![])).is_none()
        );
    }

    #[test]
    fn first_steps_move_each_parameter_by_the_learning_rate_against_its_gradient_sign() {
        // With bias correction, step 1 is lr·g/(|g| + ε): −lr for any positive gradient.
        let mut a = vec![1.0f32, 2.0];
        let mut b = vec![3.0f32];
        let mut adam = Adam::new(3);
        adam.step([a.as_mut_slice(), b.as_mut_slice()], &[0.5, -4.0, 0.0], 0.1);
        assert!(
            (a[0] - 0.9).abs() < 1e-6 && (a[1] - 2.1).abs() < 1e-6,
            "{a:?}"
        );
        assert_eq!(b, [3.0]);
    }
}
