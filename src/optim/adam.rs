//! Adam (Kingma & Ba 2015; β = 0.9, 0.999, ε = 1e-8) over flat parameter vectors, with moments kept
//! in f64: the optimiser of `tessera train` (denoisers) and of Multi-DSN training (`crate::dsn`).
//! Parameters are handed over as a sequence of slices (a network's tensors in order) matched
//! element for element by one flat gradient, so one state serves any set of layers.

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

#[cfg(test)]
mod tests {
    use super::*;

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
