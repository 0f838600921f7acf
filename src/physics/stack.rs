//! Stacks of operators: `A = [A₁; …; Aₙ]`, one measurement per operator, `Aᵀ(y₁…yₙ) = Σ Aᵢᵀyᵢ`.
//!
//! [`StackedLinearPhysics`] is the interface that data fidelity and the algorithms use; [`Stack`] is its
//! single-process implementation (operators evaluated in parallel with rayon), and the distributed
//! stack of the process group implements the same trait. Sums run in operator order so the result does
//! not depend on how many threads or ranks computed the terms.
//!
//! A stack whose operators are all circular 2-D blurs with the same kernel size (and method) is
//! evaluated with shared FFTs ([`BlurFusion`]), on one process or across ranks:
//! * `A`: one transform of each input plane, then per operator a spectrum product and an inverse
//!   transform — the same arithmetic as the operator alone, so the same bits;
//! * `Σ wᵢAᵢᵀyᵢ`: per operator the transform of `yᵢ` times `wᵢ·conj(K̂ᵢ)`; the spectra are summed in
//!   operator order and transformed back once (the per-operator terms are spectra, not images);
//! * `Σ wᵢAᵢᵀAᵢ`: with circular padding `AᵢᵀAᵢ` is the circular convolution with the kernel's
//!   autocorrelation `gᵢ` (size `2K−1`), so the whole sum is one convolution with `Σ wᵢgᵢ` (summed in
//!   f64, in operator order): one forward and one inverse transform per plane, whatever the number of
//!   operators. The L2 gradient is `(Σ wᵢgᵢ) ∗ x − Σ wᵢAᵢᵀyᵢ`;
//! * `(a·Σ AᵢᵀAᵢ + I)⁻¹` (HQS's data step, deepinv's closed-form prox of circular blurs): that
//!   convolution is diagonal in Fourier, so its shifted inverse is a division of spectra, exact
//!   where CG would stop at a tolerance.
//!
//! These equal the per-operator sums to float rounding (tests/blur.rs checks 1e-5), not bit for bit;
//! what is exact is that the distributed stack forms the same terms and sums them in the same order,
//! so 1, 2 or 3 ranks and a [`Stack`] give identical numbers.

use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use super::blur_engine::{Conv, FusionKey, MAX_GRAM_LEN};
use super::{LinearPhysics, PINV_ITERS, PINV_TOL, POWER_ITERS, POWER_TOL, SharedFft};
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

    /// Shape of each operator's measurement for an input of shape `x_shape`, in order.
    fn output_shapes(&self, x_shape: &[usize]) -> Result<Vec<Vec<usize>>>;

    /// `[A₁x, …, Aₙx]`.
    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>>;

    /// Noisy measurements; operator `i` draws its noise from `seed + i`.
    fn measure(&self, x: &Tensor, seed: u64) -> Result<Vec<Tensor>>;

    /// `Σ Aᵢᵀyᵢ`.
    fn adjoint(&self, ys: &[Tensor]) -> Result<Tensor>;

    /// `Σ AᵢᵀAᵢx`.
    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor>;

    /// `(a·Σ AᵢᵀAᵢ + I)⁻¹ r` in closed form where the stack has one (circular blurs sharing FFTs:
    /// [`BlurFusion::shifted_normal_inverse`]); `None` where it must be solved iteratively.
    fn shifted_normal_inverse(&self, r: &Tensor, a: f32) -> Result<Option<Tensor>>;

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

/// Shared FFTs across a stack of circular 2-D blurs with one [`FusionKey`] (see the module docs).
///
/// It holds what is global to the stack — the key and every operator's Gram kernel `gᵢ`, in operator
/// order — and evaluates the operators it is handed (all of them in a [`Stack`], a rank's share in
/// the distributed stack). A rank that owns no operator can still finish sums and apply the Gram
/// kernel.
pub struct BlurFusion {
    key: FusionKey,
    /// Zero kernels with the key's geometry: places and finishes spectra.
    template: Conv,
    /// `gᵢ` of every operator of the stack as `(channels, 2kd−1, 2kh−1, 2kw−1)`; `None` when larger
    /// than [`MAX_GRAM_LEN`] (then `AᵀA` is evaluated operator by operator).
    grams: Option<Vec<Tensor>>,
    /// `Σ wᵢgᵢ` as a convolution, for the last weights asked for (fidelity always asks the same).
    gram_conv: Mutex<Option<(Vec<u32>, Arc<Conv>)>>,
}

impl BlurFusion {
    /// The fusion key of `op`: `Some` for a circular 2-D blur.
    pub fn key_of(op: &dyn LinearPhysics) -> Option<FusionKey> {
        op.shared_fft()?.conv().fusion_key()
    }

    /// The common key of a whole stack, if every operator has the same one.
    pub fn common_key(ops: &[&dyn LinearPhysics]) -> Option<FusionKey> {
        let first = Self::key_of(*ops.first()?)?;
        ops.iter()
            .all(|op| Self::key_of(*op) == Some(first))
            .then_some(first)
    }

    /// Whether the Gram kernels of `key` are small enough to precompute.
    pub fn gram_fits(key: FusionKey) -> bool {
        key.kdims.iter().map(|k| 2 * k - 1).product::<usize>() <= MAX_GRAM_LEN
    }

    /// `gᵢ` of one operator as `(channels, 2kd−1, 2kh−1, 2kw−1)` (computed in f64, stored in f32).
    pub fn gram_of(op: &dyn LinearPhysics) -> Option<Tensor> {
        let (grams, g) = op.shared_fft()?.conv().gram_kernels()?;
        let shape = [grams.len(), g[0], g[1], g[2]];
        let data = grams.iter().flatten().map(|&v| v as f32).collect();
        Tensor::from_vec(&shape, data).ok()
    }

    /// A fusion for a stack of operators sharing `key`, with every operator's [`Self::gram_of`] in
    /// order (`None` when they do not fit).
    pub fn new(key: FusionKey, grams: Option<Vec<Tensor>>) -> BlurFusion {
        BlurFusion {
            key,
            template: Conv::template(key),
            grams,
            gram_conv: Mutex::new(None),
        }
    }

    /// For the operators of a single-process stack: `Some` when they all share a key.
    pub fn for_ops(ops: &[&dyn LinearPhysics]) -> Option<BlurFusion> {
        let key = Self::common_key(ops)?;
        let grams = Self::gram_fits(key)
            .then(|| ops.par_iter().map(|op| Self::gram_of(*op)).collect())
            .flatten();
        Some(Self::new(key, grams))
    }

    /// (planes, channels, dims) of an image `(B, C, H, W)`, with the checks of [`super::blur::Blur`].
    fn geometry(&self, shape: &[usize], op: &str) -> Result<(usize, usize, [usize; 3])> {
        if shape.len() != 4 || shape.contains(&0) {
            return Err(Error::config(
                op,
                format!("expected a non-empty 4-D array (B, C, H, W), got shape {shape:?}"),
            ));
        }
        let kc = self.key.channels;
        if kc != 1 && kc != shape[1] {
            return Err(Error::config(
                op,
                format!(
                    "the kernel has {kc} channels but the input {shape:?} has {}",
                    shape[1]
                ),
            ));
        }
        Ok((shape[0] * shape[1], shape[1], [1, shape[2], shape[3]]))
    }

    /// Whether inputs of `shape` take the FFT path (where terms are spectra).
    fn uses_fft(&self, shape: &[usize]) -> Result<bool> {
        let (_, _, dims) = self.geometry(shape, "blur stack")?;
        Ok(self.template.uses_fft(dims))
    }

    /// `[Aᵢx]` for `ops` with one transform of `x`; `None` on the direct path.
    pub fn forward(&self, ops: &[&dyn LinearPhysics], x: &Tensor) -> Result<Option<Vec<Tensor>>> {
        let (planes, channels, dims) = self.geometry(x.shape(), "blur stack forward")?;
        let Some(spectra) = self.template.input_spectra(x.data(), planes, dims) else {
            return Ok(None);
        };
        ops.par_iter()
            .map(|op| {
                let conv = op
                    .shared_fft()
                    .map(SharedFft::conv)
                    .ok_or_else(|| Error::Internal("a fused stack holds only blurs".into()))?;
                Tensor::from_vec(
                    x.shape(),
                    conv.forward_from_spectra(&spectra, channels, dims),
                )
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Operator `op`'s term of `Σ wᵢAᵢᵀyᵢ`: the weighted spectrum product on the FFT path, else the
    /// weighted image `w·Aᵀy`. Terms are summed in operator order, then [`Self::adjoint_finish`]ed.
    pub fn adjoint_term(&self, op: &dyn LinearPhysics, y: &Tensor, weight: f32) -> Result<Tensor> {
        let (planes, channels, dims) = self.geometry(y.shape(), "blur stack adjoint")?;
        let conv = op
            .shared_fft()
            .map(SharedFft::conv)
            .ok_or_else(|| Error::Internal("a fused stack holds only blurs".into()))?;
        if !conv.uses_fft(dims) {
            let mut t = op.adjoint(y)?;
            if weight != 1.0 {
                t.scale(weight);
            }
            return Ok(t);
        }
        let data = conv.adjoint_term(y.data(), planes, channels, dims, weight);
        let len = data.len() / planes;
        Tensor::from_vec(&[planes, len], data)
    }

    /// `Σ wᵢAᵢᵀyᵢ` over `ops` on one process: the terms of [`Self::adjoint_term`] accumulated in
    /// operator order as they are formed (no term is stored), then finished — the same bits as
    /// summing the terms.
    pub fn adjoint_all(
        &self,
        ops: &[&dyn LinearPhysics],
        ys: &[Tensor],
        weights: &[f32],
    ) -> Result<Tensor> {
        check_same_shape(ys)?;
        let shape = ys
            .first()
            .ok_or_else(|| Error::Internal("a stack with nothing to sum".into()))?
            .shape();
        let (_, channels, dims) = self.geometry(shape, "blur stack adjoint")?;
        if !self.template.uses_fft(dims) {
            let terms = ops
                .par_iter()
                .zip(ys)
                .zip(weights)
                .map(|((op, y), &w)| self.adjoint_term(*op, y, w))
                .collect::<Result<Vec<_>>>()?;
            return sum_in_order(terms);
        }
        let mut acc = Vec::new();
        for ((op, y), &w) in ops.iter().zip(ys).zip(weights) {
            let conv = op
                .shared_fft()
                .map(SharedFft::conv)
                .ok_or_else(|| Error::Internal("a fused stack holds only blurs".into()))?;
            conv.adjoint_accumulate(y.data(), channels, dims, w, &mut acc);
        }
        Tensor::from_vec(shape, self.template.adjoint_finish_spectra(acc, dims))
    }

    /// The image `Σ wᵢAᵢᵀyᵢ` of a sum of terms, for measurements of shape `y_shape`.
    pub fn adjoint_finish(&self, sum: Tensor, y_shape: &[usize]) -> Result<Tensor> {
        if !self.uses_fft(y_shape)? {
            return Ok(sum);
        }
        let (planes, _, dims) = self.geometry(y_shape, "blur stack adjoint")?;
        Tensor::from_vec(
            y_shape,
            self.template.adjoint_finish(sum.data(), planes, dims),
        )
    }

    /// `Σ wᵢAᵢᵀAᵢx` over the whole stack, by the Gram kernel; `None` when the kernels are too large.
    pub fn gram_apply(&self, x: &Tensor, weights: &[f32]) -> Result<Option<Tensor>> {
        let Some(grams) = &self.grams else {
            return Ok(None);
        };
        if weights.len() != grams.len() {
            // The weights come from `fidelity`, one per operator: a mismatch is a bug.
            return Err(Error::Internal(format!(
                "data fidelity gradient: {} weights for a stack of {} operators",
                weights.len(),
                grams.len()
            )));
        }
        let (planes, channels, dims) = self.geometry(x.shape(), "blur stack AᵀA")?;
        let conv = self.gram_conv(grams, weights);
        Ok(Some(Tensor::from_vec(
            x.shape(),
            conv.forward(x.data(), planes, channels, dims),
        )?))
    }

    /// `(a·Σ AᵢᵀAᵢ + I)⁻¹ r` over the whole stack, by one division of spectra
    /// ([`Conv::shifted_inverse`] of the Gram kernel [`Self::gram_apply`] applies, so it inverts the
    /// operator the rest of the stack uses); `None` when the kernels are too large. Every rank
    /// holds every `gᵢ`, so every rank computes the same bits with no communication.
    pub fn shifted_normal_inverse(&self, r: &Tensor, a: f32) -> Result<Option<Tensor>> {
        let Some(grams) = &self.grams else {
            return Ok(None);
        };
        let (planes, channels, dims) = self.geometry(r.shape(), "blur stack (a·AᵀA + I)⁻¹")?;
        let conv = self.gram_conv(grams, &vec![1.0; grams.len()]);
        conv.shifted_inverse(r.data(), planes, channels, dims, a)
            .map(|z| Tensor::from_vec(r.shape(), z))
            .transpose()
    }

    /// The convolution by `Σ wᵢgᵢ` (one weight per operator of the stack), as [`Self::gram_apply`]
    /// applies it; `None` when the kernels are too large or the weights do not match.
    pub(crate) fn weighted_gram(&self, weights: &[f32]) -> Option<Arc<Conv>> {
        let grams = self.grams.as_ref()?;
        (weights.len() == grams.len()).then(|| self.gram_conv(grams, weights))
    }

    fn gram_conv(&self, grams: &[Tensor], weights: &[f32]) -> Arc<Conv> {
        let bits: Vec<u32> = weights.iter().map(|w| w.to_bits()).collect();
        let mut cache = self.gram_conv.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((b, conv)) = cache.as_ref()
            && *b == bits
        {
            return conv.clone();
        }
        let shape = grams[0].shape();
        let gdims = [shape[1], shape[2], shape[3]];
        let n = gdims.iter().product::<usize>();
        // Σ wᵢgᵢ in f64, in operator order: every rank builds the same kernel.
        let mut sum = vec![0.0f64; shape[0] * n];
        for (g, &w) in grams.iter().zip(weights) {
            for (s, &v) in sum.iter_mut().zip(g.data()) {
                *s += w as f64 * v as f64;
            }
        }
        let kernels = sum
            .chunks_exact(n)
            .map(|c| c.iter().map(|&v| v as f32).collect())
            .collect();
        let conv = Arc::new(Conv::new(
            kernels,
            gdims,
            super::blur::Padding::Circular,
            self.key.method,
        ));
        *cache = Some((bits, conv.clone()));
        conv
    }
}

/// Single-process stack of boxed operators.
pub struct Stack {
    ops: Vec<Box<dyn LinearPhysics>>,
    /// Shared FFTs when every operator is a circular blur of one kernel size.
    fusion: Option<BlurFusion>,
}

impl Stack {
    /// Stacks `ops`, sharing FFTs between them where [`BlurFusion`] applies; an empty stack is an
    /// error.
    pub fn new(ops: Vec<Box<dyn LinearPhysics>>) -> Result<Self> {
        let mut stack = Self::unfused(ops)?;
        stack.fusion = BlurFusion::for_ops(&stack.refs());
        Ok(stack)
    }

    /// Stacks `ops` evaluated one by one (the reference the fused stack is tested against).
    pub fn unfused(ops: Vec<Box<dyn LinearPhysics>>) -> Result<Self> {
        if ops.is_empty() {
            return Err(Error::config(
                "physics",
                "a stack needs at least one operator",
            ));
        }
        Ok(Stack { ops, fusion: None })
    }

    /// Whether the operators share FFTs.
    pub fn is_fused(&self) -> bool {
        self.fusion.is_some()
    }

    fn refs(&self) -> Vec<&dyn LinearPhysics> {
        self.ops
            .iter()
            .map(|o| o.as_ref() as &dyn LinearPhysics)
            .collect()
    }

    /// `Σ wᵢAᵢᵀyᵢ` with shared inverse transforms.
    fn fused_adjoint(&self, f: &BlurFusion, ys: &[Tensor], weights: &[f32]) -> Result<Tensor> {
        f.adjoint_all(&self.refs(), ys, weights)
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
        .ok_or_else(|| Error::Internal("a stack with nothing to sum".into()))?;
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

    fn output_shapes(&self, x_shape: &[usize]) -> Result<Vec<Vec<usize>>> {
        self.ops.iter().map(|o| o.output_shape(x_shape)).collect()
    }

    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        if let Some(f) = &self.fusion
            && let Some(ys) = f.forward(&self.refs(), x)?
        {
            return Ok(ys);
        }
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
        if let Some(f) = &self.fusion {
            return self.fused_adjoint(f, ys, &vec![1.0; ys.len()]);
        }
        let parts = self
            .ops
            .par_iter()
            .zip(ys)
            .map(|(op, y)| op.adjoint(y))
            .collect::<Result<Vec<_>>>()?;
        sum_in_order(parts)
    }

    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(f) = &self.fusion
            && let Some(g) = f.gram_apply(x, &vec![1.0; self.ops.len()])?
        {
            return Ok(g);
        }
        let parts = self
            .ops
            .par_iter()
            .map(|op| op.adjoint_forward(x))
            .collect::<Result<Vec<_>>>()?;
        sum_in_order(parts)
    }

    fn shifted_normal_inverse(&self, r: &Tensor, a: f32) -> Result<Option<Tensor>> {
        match &self.fusion {
            Some(f) => f.shifted_normal_inverse(r, a),
            None => Ok(None),
        }
    }

    fn residual_adjoint(&self, x: &Tensor, ys: &[Tensor], weights: &[f32]) -> Result<Tensor> {
        self.check_len(ys, "data fidelity gradient")?;
        if let Some(f) = &self.fusion {
            check_circular_measurements(x, ys)?;
            if let Some(mut g) = f.gram_apply(x, weights)? {
                g.sub_assign(&self.fused_adjoint(f, ys, weights)?);
                return Ok(g);
            }
        }
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

/// Measurements of a circular blur stack all have one shape (their spectra are summed).
pub(crate) fn check_same_shape(ys: &[Tensor]) -> Result<()> {
    let Some(first) = ys.first() else {
        return Ok(());
    };
    match ys.iter().find(|y| y.shape() != first.shape()) {
        Some(y) => Err(Error::shape("stack adjoint", first.shape(), y.shape())),
        None => Ok(()),
    }
}

/// Measurements of a circular blur stack have the image's shape.
pub(crate) fn check_circular_measurements(x: &Tensor, ys: &[Tensor]) -> Result<()> {
    match ys.iter().find(|y| y.shape() != x.shape()) {
        Some(y) => Err(Error::shape("data fidelity gradient", x.shape(), y.shape())),
        None => Ok(()),
    }
}
