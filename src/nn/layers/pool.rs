//! Pooling layers (PyTorch's `MaxPool{1,2,3}d` and `AvgPool{1,2,3}d`, floor mode) on batches of
//! 1-D, 2-D or 3-D feature maps, with their backward passes.
//!
//! A pooling window reads the same input region a convolution with the same kernel, stride and
//! padding reads, so a pooling node of a [`Network`](super::graph::Network) asks its partition for
//! that region like a convolution does and runs on one block of a decomposed map unchanged. Padding
//! follows PyTorch: max pooling pads with −∞ (a padded cell never wins), average pooling pads with
//! zeros and divides by the whole window (`count_include_pad = True`). Max pooling sends each
//! output's gradient to the first maximum of its window in scan order (D, then H, then W), as
//! PyTorch's CPU kernel does.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::float::Float;
use crate::nn::kernels::conv::{Features, Pads, per_axis};

/// Which reduction a pooling window applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    Max,
    Avg,
}

/// A pooling layer: window `kernel`, `stride` and padding `pad` per axis `[D, H, W]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    pub kind: PoolKind,
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [usize; 3],
}

impl Pool {
    /// A `k`-wide window on each of `rank` spatial axes (1 to 3), one stride and padding for all.
    /// PyTorch requires `pad ≤ k / 2` (so every window holds a cell of the map); so does this.
    pub fn new(rank: usize, kind: PoolKind, k: usize, stride: usize, pad: usize) -> Self {
        assert!((1..=3).contains(&rank), "pool rank {rank}");
        assert!(
            k > 0 && stride > 0,
            "pool kernel and stride must be positive"
        );
        assert!(
            pad <= k / 2,
            "pool padding {pad} exceeds half the kernel {k}"
        );
        let [kernel, stride, pad] = per_axis(rank, k, stride, pad);
        Pool {
            kind,
            kernel,
            stride,
            pad,
        }
    }

    /// The layer's own (symmetric) padding.
    pub fn pads(&self) -> Pads {
        self.pad.map(|p| [p, p])
    }

    /// Output size for an input of `dims` (floor mode); `None` when the window does not fit.
    pub fn out_dims(&self, dims: [usize; 3]) -> Option<[usize; 3]> {
        self.out_dims_padded(dims, self.pads())
    }

    /// Output size for an input of `dims` padded by `pads` instead of the layer's own padding.
    pub fn out_dims_padded(&self, dims: [usize; 3], pads: Pads) -> Option<[usize; 3]> {
        let mut o = [0; 3];
        for a in 0..3 {
            let span = dims[a] + pads[a][0] + pads[a][1];
            if span < self.kernel[a] {
                return None;
            }
            o[a] = (span - self.kernel[a]) / self.stride[a] + 1;
        }
        Some(o)
    }

    /// The pooled input; `pads` are the padding cells before and after each axis of `x` (the
    /// layer's own on a whole map, only where the map ends on a block of it).
    pub fn forward_padded<T: Float>(&self, x: &Features<T>, pads: Pads) -> Features<T> {
        let od = self
            .out_dims_padded(x.dims, pads)
            .expect("pooling window larger than its input");
        let mut out = Features::zeros(x.batch, x.channels, od);
        let (in_len, out_len) = (x.spatial_len(), out.spatial_len());
        let scale = T::from_f64(1.0 / self.kernel.iter().product::<usize>() as f64);
        out.data
            .par_chunks_mut(out_len)
            .zip(x.data.par_chunks(in_len))
            .for_each(|(o, plane)| {
                let mut at = 0;
                self.windows(x.dims, od, pads, |cells| {
                    o[at] = match self.kind {
                        PoolKind::Max => plane[first_max(plane, cells)],
                        PoolKind::Avg => cells.iter().map(|&i| plane[i]).sum::<T>() * scale,
                    };
                    at += 1;
                });
            });
        out
    }

    /// The gradient with respect to the input `x` (padded by `pads` in the forward pass) of a loss
    /// whose gradient with respect to the output is `dy`.
    pub fn backward_input<T: Float>(
        &self,
        x: &Features<T>,
        dy: &Features<T>,
        pads: Pads,
    ) -> Features<T> {
        let od = dy.dims;
        debug_assert_eq!(self.out_dims_padded(x.dims, pads), Some(od));
        let mut dx = Features::zeros(x.batch, x.channels, x.dims);
        let (in_len, out_len) = (x.spatial_len(), dy.spatial_len());
        let scale = T::from_f64(1.0 / self.kernel.iter().product::<usize>() as f64);
        dx.data
            .par_chunks_mut(in_len)
            .zip(x.data.par_chunks(in_len))
            .zip(dy.data.par_chunks(out_len))
            .for_each(|((g, plane), gy)| {
                let mut at = 0;
                self.windows(x.dims, od, pads, |cells| {
                    match self.kind {
                        PoolKind::Max => g[first_max(plane, cells)] += gy[at],
                        PoolKind::Avg => {
                            let share = gy[at] * scale;
                            cells.iter().for_each(|&i| g[i] += share);
                        }
                    }
                    at += 1;
                });
            });
        dx
    }

    /// Calls `f` with the flat indices (into one plane of `dims`) of the cells inside each window,
    /// windows in output order; padded cells are left out.
    fn windows(&self, dims: [usize; 3], od: [usize; 3], pads: Pads, mut f: impl FnMut(&[usize])) {
        let mut cells = Vec::with_capacity(self.kernel.iter().product());
        // The window of output `o` on axis `a` covers inputs `o·s − pad_lo + k`, `k < K`.
        let span = |a: usize, o: usize| {
            let start = (o * self.stride[a]) as isize - pads[a][0] as isize;
            let lo = start.max(0) as usize;
            let hi = ((start + self.kernel[a] as isize) as usize).min(dims[a]);
            lo..hi
        };
        for oz in 0..od[0] {
            for oy in 0..od[1] {
                for ox in 0..od[2] {
                    cells.clear();
                    for z in span(0, oz) {
                        for y in span(1, oy) {
                            for x in span(2, ox) {
                                cells.push((z * dims[1] + y) * dims[2] + x);
                            }
                        }
                    }
                    f(&cells);
                }
            }
        }
    }
}

/// The index (among `cells`) of the first largest value; NaN wins, as in PyTorch.
fn first_max<T: Float>(plane: &[T], cells: &[usize]) -> usize {
    let mut best = cells[0];
    for &i in &cells[1..] {
        let (v, b) = (plane[i], plane[best]);
        if v > b || (v.to_f64().is_nan() && !b.to_f64().is_nan()) {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{dot, random_features};
    use rand::SeedableRng;

    /// Central differences of `⟨r, pool(x)⟩` against the backward pass, every input entry, f64.
    fn check(pool: Pool, dims: [usize; 3], pads: Pads, seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let x: Features<f64> = random_features(2, 3, dims, &mut rng);
        let od = pool.out_dims_padded(dims, pads).unwrap();
        let r: Features<f64> = random_features(2, 3, od, &mut rng);
        let loss = |x: &Features<f64>| dot(&pool.forward_padded(x, pads).data, &r.data);
        let gx = pool.backward_input(&x, &r, pads);
        let eps = 1e-6;
        for i in 0..x.data.len() {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp.data[i] += eps;
            xm.data[i] -= eps;
            let fd = (loss(&xp) - loss(&xm)) / (2.0 * eps);
            assert!(
                (fd - gx.data[i]).abs() <= 1e-7,
                "{pool:?} {dims:?} input[{i}]: finite difference {fd} vs backward {}",
                gx.data[i]
            );
        }
    }

    #[test]
    fn pooling_gradients_match_finite_differences() {
        for kind in [PoolKind::Max, PoolKind::Avg] {
            check(Pool::new(2, kind, 2, 2, 0), [1, 8, 7], [[0; 2]; 3], 1);
            check(
                Pool::new(2, kind, 3, 2, 1),
                [1, 7, 9],
                [[0, 0], [1, 1], [1, 1]],
                2,
            );
            check(
                Pool::new(1, kind, 3, 1, 1),
                [1, 1, 11],
                [[0, 0], [0, 0], [1, 1]],
                3,
            );
            check(Pool::new(3, kind, 2, 1, 0), [4, 3, 5], [[0; 2]; 3], 4);
            // A block of a larger map: padding on one side only.
            check(
                Pool::new(2, kind, 3, 2, 1),
                [1, 6, 6],
                [[0, 0], [1, 0], [0, 1]],
                5,
            );
        }
    }

    #[test]
    fn pooling_follows_pytorch_on_a_small_example() {
        // torch.nn.functional.max_pool2d / avg_pool2d(x, 3, 2, 1) on x = arange(16).reshape(4, 4):
        // max [[5, 7], [13, 15]]; avg (zeros counted) [[10, 24], [51, 90]] / 9.
        let x = Features::<f64> {
            batch: 1,
            channels: 1,
            dims: [1, 4, 4],
            data: (0..16).map(f64::from).collect(),
        };
        let max = Pool::new(2, PoolKind::Max, 3, 2, 1);
        let avg = Pool::new(2, PoolKind::Avg, 3, 2, 1);
        assert_eq!(
            max.forward_padded(&x, max.pads()).data,
            [5.0, 7.0, 13.0, 15.0]
        );
        let a = avg.forward_padded(&x, avg.pads()).data;
        for (got, want) in a.iter().zip([10.0, 24.0, 51.0, 90.0]) {
            assert!((got - want / 9.0).abs() < 1e-12, "{a:?}");
        }
        // Ties go to the first maximum in scan order.
        let ones = Features::<f64> {
            batch: 1,
            channels: 1,
            dims: [1, 2, 2],
            data: vec![1.0; 4],
        };
        let p = Pool::new(2, PoolKind::Max, 2, 2, 0);
        let dy = Features {
            batch: 1,
            channels: 1,
            dims: [1, 1, 1],
            data: vec![1.0],
        };
        assert_eq!(
            p.backward_input(&ones, &dy, p.pads()).data,
            [1.0, 0.0, 0.0, 0.0]
        );
    }
}
