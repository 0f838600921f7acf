//! Layers on batches of vectors (`batch × features`, row-major): fully connected layers
//! ([`Linear`], PyTorch's `nn.Linear`), multi-layer perceptrons with ReLU between layers ([`Mlp`]),
//! softmax cross-entropy and gradient reversal — with their backward passes.
//!
//! These are the heads of the domain separation networks (`crate::dsn`): the code projections of
//! the encoders, the first layer of the decoder, the task classifier and the domain classifier.
//! Every output element is summed in one fixed order by one thread, so results do not depend on
//! the number of threads.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::float::Float;

/// `y = x·Wᵀ + b` with `W` stored `(out_features, in_features)` row-major, as PyTorch stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear<T: Float = f32> {
    pub in_features: usize,
    pub out_features: usize,
    pub weight: Vec<T>,
    pub bias: Vec<T>,
}

impl<T: Float> Linear<T> {
    pub fn new(in_features: usize, out_features: usize, weight: Vec<T>, bias: Vec<T>) -> Self {
        assert_eq!(
            weight.len(),
            in_features * out_features,
            "linear weight size"
        );
        assert_eq!(bias.len(), out_features, "linear bias size");
        Linear {
            in_features,
            out_features,
            weight,
            bias,
        }
    }

    /// He-normal weights (std √(2/in), for a ReLU after the layer) scaled by `gain`, zero bias.
    pub fn he(
        in_features: usize,
        out_features: usize,
        gain: f64,
        rng: &mut rand::rngs::StdRng,
    ) -> Self {
        let weight = crate::nn::weights::source::he(rng, in_features * out_features, in_features)
            .into_iter()
            .map(|w| T::from_f64(w as f64 * gain))
            .collect();
        Linear::new(
            in_features,
            out_features,
            weight,
            vec![T::ZERO; out_features],
        )
    }

    pub fn param_count(&self) -> usize {
        self.weight.len() + self.bias.len()
    }

    /// `y` for `batch` input rows `x`.
    pub fn forward(&self, x: &[T], batch: usize) -> Vec<T> {
        let (n_in, n_out) = (self.in_features, self.out_features);
        assert_eq!(x.len(), batch * n_in, "linear input size");
        let mut y = vec![T::ZERO; batch * n_out];
        y.par_chunks_mut(n_out)
            .zip(x.par_chunks(n_in))
            .for_each(|(yr, xr)| {
                for (o, v) in yr.iter_mut().enumerate() {
                    let w = &self.weight[o * n_in..(o + 1) * n_in];
                    *v = self.bias[o] + w.iter().zip(xr).map(|(a, b)| *a * *b).sum::<T>();
                }
            });
        y
    }

    /// `dx = dy·W` for output gradients `dy` of `batch` rows.
    pub fn backward_input(&self, dy: &[T], batch: usize) -> Vec<T> {
        let (n_in, n_out) = (self.in_features, self.out_features);
        assert_eq!(dy.len(), batch * n_out, "linear output gradient size");
        let mut dx = vec![T::ZERO; batch * n_in];
        dx.par_chunks_mut(n_in)
            .zip(dy.par_chunks(n_out))
            .for_each(|(dxr, dyr)| {
                for (o, &g) in dyr.iter().enumerate() {
                    let w = &self.weight[o * n_in..(o + 1) * n_in];
                    dxr.iter_mut().zip(w).for_each(|(d, w)| *d += g * *w);
                }
            });
        dx
    }

    /// Adds `dW = dyᵀ·x` to `grad_w` and `db = Σ_rows dy` to `grad_b`.
    pub fn backward_params(
        &self,
        x: &[T],
        dy: &[T],
        batch: usize,
        grad_w: &mut [T],
        grad_b: &mut [T],
    ) {
        let (n_in, n_out) = (self.in_features, self.out_features);
        assert_eq!(grad_w.len(), n_in * n_out, "linear weight gradient size");
        grad_w
            .par_chunks_mut(n_in)
            .zip(grad_b.par_iter_mut())
            .enumerate()
            .for_each(|(o, (gw, gb))| {
                for b in 0..batch {
                    let g = dy[b * n_out + o];
                    *gb += g;
                    let xr = &x[b * n_in..(b + 1) * n_in];
                    gw.iter_mut().zip(xr).for_each(|(w, x)| *w += g * *x);
                }
            });
    }
}

/// `v ← max(v, 0)`.
pub fn relu<T: Float>(v: &mut [T]) {
    v.iter_mut().for_each(|x| {
        if *x <= T::ZERO {
            *x = T::ZERO
        }
    });
}

/// The gradient through a ReLU whose output was `y`: zero where `y ≤ 0`.
pub fn relu_backward<T: Float>(y: &[T], g: &mut [T]) {
    g.iter_mut().zip(y).for_each(|(g, &y)| {
        if y <= T::ZERO {
            *g = T::ZERO
        }
    });
}

/// Gradient reversal (Ganin & Lempitsky 2015): the identity forward, `−λ·g` backward, so the layers
/// before it ascend the loss the layers after it descend.
pub fn reverse_gradient<T: Float>(g: &mut [T], lambda: f64) {
    let s = T::from_f64(-lambda);
    g.iter_mut().for_each(|v| *v *= s);
}

/// Mean softmax cross-entropy of `batch` rows of `classes` logits against integer labels, and its
/// gradient with respect to the logits (`(softmax − onehot) / batch`); PyTorch's `cross_entropy`.
/// Computed in f64 with the max subtracted (no overflow for any finite logits).
pub fn softmax_cross_entropy<T: Float>(
    logits: &[T],
    labels: &[usize],
    classes: usize,
) -> Result<(f64, Vec<T>)> {
    let batch = labels.len();
    if logits.len() != batch * classes {
        return Err(Error::shape(
            "cross-entropy logits",
            &[batch, classes],
            &[logits.len()],
        ));
    }
    if let Some(&l) = labels.iter().find(|&&l| l >= classes) {
        return Err(Error::config(
            "labels",
            format!("label {l} is not below the number of classes {classes}"),
        ));
    }
    let mut loss = 0.0;
    let mut grad = vec![T::ZERO; logits.len()];
    for (b, &label) in labels.iter().enumerate() {
        let row = &logits[b * classes..(b + 1) * classes];
        let max = row
            .iter()
            .map(|v| v.to_f64())
            .fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|v| (v.to_f64() - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        loss += sum.ln() + max - row[label].to_f64();
        for (c, e) in exps.iter().enumerate() {
            let onehot = if c == label { 1.0 } else { 0.0 };
            grad[b * classes + c] = T::from_f64((e / sum - onehot) / batch as f64);
        }
    }
    Ok((loss / batch.max(1) as f64, grad))
}

/// The index of the largest logit of each row (the first on ties).
pub fn argmax<T: Float>(logits: &[T], classes: usize) -> Vec<usize> {
    logits
        .chunks(classes)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold(0, |best, (c, v)| if *v > row[best] { c } else { best })
        })
        .collect()
}

/// Linear layers with a ReLU after every layer but the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp<T: Float = f32> {
    pub layers: Vec<Linear<T>>,
}

/// The activations of [`Mlp::forward_train`]: each layer's input, and the output.
pub struct MlpTape<T: Float> {
    inputs: Vec<Vec<T>>,
    pub output: Vec<T>,
    pub batch: usize,
}

impl<T: Float> Mlp<T> {
    /// Layers of widths `widths[0] → widths[1] → …`, He-initialised from `rng`; the last layer's
    /// weights are scaled by `last_gain`.
    pub fn he(widths: &[usize], last_gain: f64, rng: &mut rand::rngs::StdRng) -> Self {
        assert!(
            widths.len() >= 2,
            "an MLP needs an input and an output width"
        );
        let n = widths.len() - 1;
        Mlp {
            layers: (0..n)
                .map(|i| {
                    let gain = if i + 1 == n { last_gain } else { 1.0 };
                    Linear::he(widths[i], widths[i + 1], gain, rng)
                })
                .collect(),
        }
    }

    pub fn in_features(&self) -> usize {
        self.layers[0].in_features
    }

    pub fn out_features(&self) -> usize {
        self.layers.last().expect("an MLP has layers").out_features
    }

    pub fn param_count(&self) -> usize {
        self.layers.iter().map(Linear::param_count).sum()
    }

    pub fn forward(&self, x: &[T], batch: usize) -> Vec<T> {
        self.forward_train(x.to_vec(), batch).output
    }

    /// The forward pass keeping each layer's input.
    pub fn forward_train(&self, x: Vec<T>, batch: usize) -> MlpTape<T> {
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            let mut y = layer.forward(&h, batch);
            if i + 1 < self.layers.len() {
                relu(&mut y);
            }
            inputs.push(h);
            h = y;
        }
        MlpTape {
            inputs,
            output: h,
            batch,
        }
    }

    /// Adds the parameter gradients (flat, in [`Mlp::params`] order) to `grads` and returns the
    /// input gradient, for output gradient `dy`.
    pub fn backward(&self, tape: &MlpTape<T>, dy: Vec<T>, grads: &mut [T]) -> Vec<T> {
        assert_eq!(grads.len(), self.param_count(), "gradients of another MLP");
        let mut offsets = Vec::with_capacity(self.layers.len());
        let mut at = 0;
        for l in &self.layers {
            offsets.push(at);
            at += l.param_count();
        }
        let mut g = dy;
        for (i, layer) in self.layers.iter().enumerate().rev() {
            if i + 1 < self.layers.len() {
                // The ReLU after layer i: its output is layer i+1's input.
                relu_backward(&tape.inputs[i + 1], &mut g);
            }
            let x = &tape.inputs[i];
            let (gw, gb) = grads[offsets[i]..offsets[i] + layer.param_count()]
                .split_at_mut(layer.weight.len());
            layer.backward_params(x, &g, tape.batch, gw, gb);
            g = layer.backward_input(&g, tape.batch);
        }
        g
    }

    /// Every parameter: `(name, PyTorch shape, values)` — `{i}.weight`, `{i}.bias` per layer.
    pub fn params(&self) -> Vec<(String, Vec<usize>, &[T])> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            out.push((
                format!("{i}.weight"),
                vec![l.out_features, l.in_features],
                l.weight.as_slice(),
            ));
            out.push((format!("{i}.bias"), vec![l.out_features], l.bias.as_slice()));
        }
        out
    }

    pub fn params_mut(&mut self) -> Vec<&mut [T]> {
        self.layers
            .iter_mut()
            .flat_map(|l| [l.weight.as_mut_slice(), l.bias.as_mut_slice()])
            .collect()
    }

    pub fn cast<U: Float>(&self) -> Mlp<U> {
        let c = |v: &[T]| v.iter().map(|x| U::from_f64(x.to_f64())).collect();
        Mlp {
            layers: self
                .layers
                .iter()
                .map(|l| Linear::new(l.in_features, l.out_features, c(&l.weight), c(&l.bias)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{dot, random};
    use rand::{RngExt, SeedableRng};

    fn close(fd: f64, an: f64, what: &str) {
        assert!(
            (fd - an).abs() <= 1e-7 * an.abs().max(1.0),
            "{what}: finite difference {fd} vs backward {an}"
        );
    }

    #[test]
    fn mlp_gradients_match_finite_differences() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mlp: Mlp<f64> = Mlp::he(&[7, 5, 4, 3], 1.0, &mut rng);
        let mut mlp = mlp;
        // Non-zero biases, so that the bias paths are exercised with ReLUs in varied states.
        for l in &mut mlp.layers {
            l.bias = random(l.out_features, &mut rng);
        }
        let batch = 4;
        let x: Vec<f64> = random(batch * 7, &mut rng);
        let r: Vec<f64> = random(batch * 3, &mut rng);
        let loss = |m: &Mlp<f64>, x: &[f64]| dot(&m.forward(x, batch), &r);
        let tape = mlp.forward_train(x.clone(), batch);
        let mut grads = vec![0.0; mlp.param_count()];
        let gx = mlp.backward(&tape, r.clone(), &mut grads);
        let eps = 1e-6;
        for i in 0..x.len() {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += eps;
            xm[i] -= eps;
            close(
                (loss(&mlp, &xp) - loss(&mlp, &xm)) / (2.0 * eps),
                gx[i],
                "input",
            );
        }
        let mut offset = 0;
        let lens: Vec<usize> = mlp.params().iter().map(|p| p.2.len()).collect();
        for (p, len) in lens.into_iter().enumerate() {
            for i in 0..len {
                let (mut plus, mut minus) = (mlp.clone(), mlp.clone());
                plus.params_mut()[p][i] += eps;
                minus.params_mut()[p][i] -= eps;
                let fd = (loss(&plus, &x) - loss(&minus, &x)) / (2.0 * eps);
                close(fd, grads[offset + i], &format!("parameter {p}[{i}]"));
            }
            offset += len;
        }
    }

    #[test]
    fn cross_entropy_gradient_matches_finite_differences_and_pytorch() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let classes = 5;
        let labels: Vec<usize> = (0..6).map(|_| rng.random_range(0..classes)).collect();
        let z: Vec<f64> = random(6 * classes, &mut rng)
            .into_iter()
            .map(|v: f64| 4.0 * v)
            .collect();
        let (_, g) = softmax_cross_entropy(&z, &labels, classes).unwrap();
        let eps = 1e-6;
        for i in 0..z.len() {
            let (mut zp, mut zm) = (z.clone(), z.clone());
            zp[i] += eps;
            zm[i] -= eps;
            let fd = (softmax_cross_entropy(&zp, &labels, classes).unwrap().0
                - softmax_cross_entropy(&zm, &labels, classes).unwrap().0)
                / (2.0 * eps);
            close(fd, g[i], &format!("logit {i}"));
        }
        // torch.nn.functional.cross_entropy(torch.tensor([[1., 2., 3.], [1000., 0., -1000.]]),
        // torch.tensor([0, 1])) = 501.2038 (mean of 2.4076059644 and 1000).
        let (l, _) =
            softmax_cross_entropy(&[1.0f32, 2.0, 3.0, 1000.0, 0.0, -1000.0], &[0, 1], 3).unwrap();
        assert!((l - (2.407_605_964_4 + 1000.0) / 2.0).abs() < 1e-6, "{l}");
        assert_eq!(argmax(&[1.0f32, 3.0, 3.0, 0.0, -1.0, -2.0], 3), [1, 0]);
        let e = softmax_cross_entropy(&[0.0f32; 6], &[0, 3], 3).unwrap_err();
        assert!(e.to_string().contains("label 3"), "{e}");
    }

    #[test]
    fn gradient_reversal_is_the_identity_forward_and_minus_lambda_backward() {
        // The layer is y = x; its backward pass must return −λ times the true derivative (1).
        let mut g = vec![1.0f64, -2.0, 0.5];
        reverse_gradient(&mut g, 0.3);
        assert_eq!(g, [-0.3, 0.6, -0.15]);
    }
}
