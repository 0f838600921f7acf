//! Adam exactly as `torch.optim.Adam` (single-tensor CPU path, no weight decay, no AMSGrad) computes
//! it, operation for operation in the parameter's float type, so a velocity model follows the
//! seed's trajectory bit for bit (`tests/fwi.rs` replays torch's steps).

use crate::physics::wave::Real;

/// Adam's state for one parameter vector.
#[derive(Debug, Clone)]
pub struct Adam<T> {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    step: u32,
    exp_avg: Vec<T>,
    exp_avg_sq: Vec<T>,
}

impl<T: Real> Adam<T> {
    pub fn new(n: usize, lr: f64, betas: (f64, f64), eps: f64) -> Self {
        Adam {
            lr,
            betas,
            eps,
            step: 0,
            exp_avg: vec![T::ZERO; n],
            exp_avg_sq: vec![T::ZERO; n],
        }
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
