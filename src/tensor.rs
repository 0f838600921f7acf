//! `Tensor`: a dense, contiguous, row-major f32 array with a shape — the one array type of the numeric core.
//!
//! Images are `(B, C, H, W)` and volumes `(B, C, D, H, W)`, as in deepinv. The type deliberately has no
//! views or strides: operators read and write contiguous planes (`plane`, `planes_mut`), which keeps the
//! hot loops simple and vectorisable. Reductions accumulate in f64 so results do not depend on how a
//! sum is split (important when ranks later sum partial results).

use crate::error::{Error, Result};

/// A dense f32 array in C order.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor{:?}", self.shape)
    }
}

impl Tensor {
    /// A tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Self {
        Self::full(shape, 0.0)
    }

    /// A tensor filled with `value`.
    pub fn full(shape: &[usize], value: f32) -> Self {
        Tensor {
            shape: shape.to_vec(),
            data: vec![value; shape.iter().product()],
        }
    }

    /// Wraps `data` with `shape`; fails when the lengths disagree.
    pub fn from_vec(shape: &[usize], data: Vec<f32>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::config(
                "tensor",
                format!(
                    "shape {shape:?} holds {n} values but {} were given",
                    data.len()
                ),
            ));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            data,
        })
    }

    /// A tensor whose value at flat index `i` is `f(i)`.
    pub fn from_fn(shape: &[usize], f: impl FnMut(usize) -> f32) -> Self {
        let n: usize = shape.iter().product();
        Tensor {
            shape: shape.to_vec(),
            data: (0..n).map(f).collect(),
        }
    }

    /// The zeros tensor with this tensor's shape.
    pub fn zeros_like(&self) -> Self {
        Self::zeros(&self.shape)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    pub fn into_data(self) -> Vec<f32> {
        self.data
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The spatial dimensions: everything after batch and channel.
    pub fn spatial(&self) -> &[usize] {
        &self.shape[2.min(self.shape.len())..]
    }

    /// Number of elements in one spatial plane (one batch item, one channel).
    pub fn plane_len(&self) -> usize {
        self.spatial().iter().product()
    }

    /// Number of spatial planes (`B·C`).
    pub fn num_planes(&self) -> usize {
        self.shape.iter().take(2).product()
    }

    /// Plane `i` (in `B·C` order) as a slice.
    pub fn plane(&self, i: usize) -> &[f32] {
        let n = self.plane_len();
        &self.data[i * n..(i + 1) * n]
    }

    /// Mutable iterator over the spatial planes.
    pub fn planes_mut(&mut self) -> std::slice::ChunksExactMut<'_, f32> {
        let n = self.plane_len().max(1);
        self.data.chunks_exact_mut(n)
    }

    /// Iterator over the spatial planes.
    pub fn planes(&self) -> std::slice::ChunksExact<'_, f32> {
        let n = self.plane_len().max(1);
        self.data.chunks_exact(n)
    }

    /// Same data, new shape with the same number of elements.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != self.data.len() {
            return Err(Error::shape("reshape", shape, &self.shape));
        }
        self.shape = shape.to_vec();
        Ok(self)
    }

    /// Fails with [`Error::ShapeMismatch`] unless the shape is `expected`.
    pub fn expect_shape(&self, op: &str, expected: &[usize]) -> Result<()> {
        if self.shape != expected {
            return Err(Error::shape(op, expected, &self.shape));
        }
        Ok(())
    }

    /// Fails unless the tensor is 4-D (image batch) or 5-D (volume batch).
    pub fn expect_rank(&self, op: &str, ranks: &[usize]) -> Result<()> {
        if !ranks.contains(&self.ndim()) {
            return Err(Error::config(
                op,
                format!(
                    "expected a {}-D array, got shape {:?}",
                    ranks
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    self.shape
                ),
            ));
        }
        Ok(())
    }

    /// Fails with [`Error::NonFinite`] if any value is NaN or infinite.
    pub fn check_finite(&self, what: &str) -> Result<()> {
        let count = self.data.iter().filter(|v| !v.is_finite()).count();
        if count > 0 {
            return Err(Error::NonFinite {
                what: what.to_string(),
                count,
            });
        }
        Ok(())
    }

    /// ⟨self, other⟩ accumulated in f64.
    pub fn dot(&self, other: &Tensor) -> f64 {
        debug_assert_eq!(self.shape, other.shape);
        dot(&self.data, &other.data)
    }

    /// ‖self‖² accumulated in f64.
    pub fn norm_sq(&self) -> f64 {
        dot(&self.data, &self.data)
    }

    /// ‖self‖₂.
    pub fn norm(&self) -> f64 {
        self.norm_sq().sqrt()
    }

    /// self ← self + a·x.
    pub fn axpy(&mut self, a: f32, x: &Tensor) {
        debug_assert_eq!(self.shape, x.shape);
        for (s, v) in self.data.iter_mut().zip(&x.data) {
            *s += a * v;
        }
    }

    /// self ← self + x.
    pub fn add_assign(&mut self, x: &Tensor) {
        self.axpy(1.0, x)
    }

    /// self ← self − x.
    pub fn sub_assign(&mut self, x: &Tensor) {
        self.axpy(-1.0, x)
    }

    /// self − x as a new tensor.
    pub fn sub(&self, x: &Tensor) -> Tensor {
        let mut out = self.clone();
        out.sub_assign(x);
        out
    }

    /// self + x as a new tensor.
    pub fn add(&self, x: &Tensor) -> Tensor {
        let mut out = self.clone();
        out.add_assign(x);
        out
    }

    /// self ← a·self.
    pub fn scale(&mut self, a: f32) {
        for s in &mut self.data {
            *s *= a;
        }
    }

    /// a·self as a new tensor.
    pub fn scaled(&self, a: f32) -> Tensor {
        let mut out = self.clone();
        out.scale(a);
        out
    }

    /// Applies `f` to every element.
    pub fn map_inplace(&mut self, f: impl Fn(f32) -> f32) {
        for s in &mut self.data {
            *s = f(*s);
        }
    }

    /// Clamps every element into `[lo, hi]`.
    pub fn clamp(&mut self, lo: f32, hi: f32) {
        self.map_inplace(|v| v.clamp(lo, hi));
    }

    /// Largest absolute difference to `other` (same shape).
    pub fn max_abs_diff(&self, other: &Tensor) -> f32 {
        self.data
            .iter()
            .zip(&other.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    }

    /// Minimum and maximum value (NaN-free input assumed).
    pub fn min_max(&self) -> (f32, f32) {
        self.data
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            })
    }

    /// Concatenates tensors along the batch axis (all other dimensions must agree).
    pub fn cat_batch(parts: &[Tensor]) -> Result<Tensor> {
        let first = parts
            .first()
            .ok_or_else(|| Error::config("cat_batch", "no tensors to concatenate"))?;
        let mut shape = first.shape.clone();
        let mut data = Vec::with_capacity(parts.iter().map(|p| p.numel()).sum());
        shape[0] = 0;
        for p in parts {
            if p.shape[1..] != first.shape[1..] {
                return Err(Error::shape("cat_batch", &first.shape, &p.shape));
            }
            shape[0] += p.shape[0];
            data.extend_from_slice(&p.data);
        }
        Ok(Tensor { shape, data })
    }

    /// Batch items `start..end` as a new tensor.
    pub fn batch_range(&self, start: usize, end: usize) -> Tensor {
        let item: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        Tensor {
            shape,
            data: self.data[start * item..end * item].to_vec(),
        }
    }
}

/// ⟨a, b⟩ in f64, summed in fixed-size blocks so the result is independent of threading.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    // Blocked f32 partial sums keep the loop vectorisable; f64 across blocks keeps precision.
    const BLOCK: usize = 256;
    a.chunks(BLOCK)
        .zip(b.chunks(BLOCK))
        .map(|(x, y)| {
            let mut acc = [0.0f32; 8];
            let mut xs = x.chunks_exact(8);
            let mut ys = y.chunks_exact(8);
            for (xc, yc) in (&mut xs).zip(&mut ys) {
                for k in 0..8 {
                    acc[k] += xc[k] * yc[k];
                }
            }
            let tail: f32 = xs
                .remainder()
                .iter()
                .zip(ys.remainder())
                .map(|(p, q)| p * q)
                .sum();
            acc.iter().map(|&v| v as f64).sum::<f64>() + tail as f64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_sum() {
        let a = Tensor::from_fn(&[1, 1, 37, 41], |i| (i as f32 * 0.37).sin());
        let b = Tensor::from_fn(&[1, 1, 37, 41], |i| (i as f32 * 0.11).cos());
        let naive: f64 = a
            .data()
            .iter()
            .zip(b.data())
            .map(|(x, y)| *x as f64 * *y as f64)
            .sum();
        assert!((a.dot(&b) - naive).abs() < 1e-3);
    }

    #[test]
    fn from_vec_rejects_wrong_length() {
        assert!(Tensor::from_vec(&[2, 3], vec![0.0; 5]).is_err());
    }

    #[test]
    fn cat_and_range_round_trip() {
        let a = Tensor::from_fn(&[2, 1, 3, 3], |i| i as f32);
        let b = Tensor::from_fn(&[1, 1, 3, 3], |i| -(i as f32));
        let c = Tensor::cat_batch(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(c.shape(), &[3, 1, 3, 3]);
        assert_eq!(c.batch_range(0, 2), a);
        assert_eq!(c.batch_range(2, 3), b);
    }
}
