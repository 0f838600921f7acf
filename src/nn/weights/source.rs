//! Where a network's layers get their weights: a [`StateDict`] (as stored, or 2-D weights inflated
//! into a 3-D network), or seeded random numbers for timing runs; the He and PyTorch-default
//! initialisations that networks trained from scratch start from.

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::StateDict;
use crate::error::Result;

/// What kind of layer a weight tensor belongs to (decides how 2-D weights inflate to 3-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LayerKind {
    /// `Conv{2,3}d`, weight `(C_out, C_in, k…)`.
    Conv,
    /// `ConvTranspose{2,3}d`, weight `(C_in, C_out, k…)`.
    Transposed,
}

pub(crate) enum WeightSource {
    /// Tensors taken by name; with `inflate`, 2-D tensors are expanded for a 3-D network.
    Dict { dict: StateDict, inflate: bool },
    /// Seeded uniform weights with standard deviation `0.2/√fan_in` (deepinv initialises DRUNet
    /// orthogonally with gain 0.2); the network's output means nothing.
    Random(Box<rand::rngs::StdRng>),
}

impl WeightSource {
    pub(crate) fn random(seed: u64) -> Self {
        WeightSource::Random(Box::new(rand::rngs::StdRng::seed_from_u64(seed)))
    }

    /// The weight `key` of a layer with 2-D shape `(a, b, k, k)`, for a network of `rank` spatial
    /// axes, flattened in PyTorch's order (`(a, b, k, k)` or `(a, b, k, k, k)`).
    pub(crate) fn weight(
        &mut self,
        key: &str,
        kind: LayerKind,
        [a, b, k]: [usize; 3],
        rank: usize,
    ) -> Result<Vec<f32>> {
        match self {
            WeightSource::Dict { dict, inflate } => {
                if *inflate && rank == 3 {
                    let w2 = dict.take(key, &[a, b, k, k])?.into_data();
                    Ok(inflate_2d_to_3d(&w2, kind, a * b, k))
                } else {
                    let shape: Vec<usize> = if rank == 3 {
                        vec![a, b, k, k, k]
                    } else {
                        vec![a, b, k, k]
                    };
                    Ok(dict.take(key, &shape)?.into_data())
                }
            }
            WeightSource::Random(rng) => {
                let taps = k.pow(rank as u32);
                let fan_in = match kind {
                    LayerKind::Conv => b * taps,
                    LayerKind::Transposed => a * taps / 4,
                };
                let half_width = 0.2 * 3f32.sqrt() / (fan_in.max(1) as f32).sqrt();
                Ok((0..a * b * taps)
                    .map(|_| rng.random_range(-half_width..half_width))
                    .collect())
            }
        }
    }

    /// A bias vector of length `n`.
    pub(crate) fn bias(&mut self, key: &str, n: usize) -> Result<Vec<f32>> {
        match self {
            WeightSource::Dict { dict, .. } => Ok(dict.take(key, &[n])?.into_data()),
            WeightSource::Random(_) => Ok(vec![0.0; n]),
        }
    }

    /// Fails when the dictionary holds keys no layer took.
    pub(crate) fn finish(self) -> Result<()> {
        match self {
            WeightSource::Dict { dict, .. } => dict.finish(),
            WeightSource::Random(_) => Ok(()),
        }
    }
}

/// Expands `(pairs, k, k)` 2-D kernels to `(pairs, k, k, k)` so that a 3-D network applied to a
/// volume whose slices are all equal gives the 2-D network's output in every slice:
/// - odd `k` (3×3 convs): the 2-D kernel in the central depth slice, zeros elsewhere;
/// - even `k`, convolution (2×2 stride 2 down): `w / k` in each of the `k` slices (their sum is `w`);
/// - even `k`, transposed (2×2 stride 2 up): `w` in each slice (each output slice gets one tap).
///
/// deepinv's `initialize_3d_from_2d` differs: it writes odd kernels to slice `k/2 + 1` (the last
/// slice for k = 3, not the centre) and divides transposed kernels by `k` too, so its inflated
/// network does not reproduce the 2-D one on stacked slices.
pub(crate) fn inflate_2d_to_3d(w2: &[f32], kind: LayerKind, pairs: usize, k: usize) -> Vec<f32> {
    let plane = k * k;
    let mut w3 = vec![0.0; pairs * k * plane];
    for p in 0..pairs {
        let src = &w2[p * plane..(p + 1) * plane];
        let dst = &mut w3[p * k * plane..(p + 1) * k * plane];
        if k % 2 == 1 {
            dst[(k / 2) * plane..(k / 2 + 1) * plane].copy_from_slice(src);
        } else {
            let scale = match kind {
                LayerKind::Conv => 1.0 / k as f32,
                LayerKind::Transposed => 1.0,
            };
            for z in 0..k {
                for (d, s) in dst[z * plane..(z + 1) * plane].iter_mut().zip(src) {
                    *d = s * scale;
                }
            }
        }
    }
    w3
}

/// PyTorch's default bias initialisation, U(−1/√fan_in, 1/√fan_in).
pub(crate) fn torch_default_bias(
    rng: &mut rand::rngs::StdRng,
    n: usize,
    fan_in: usize,
) -> Vec<f32> {
    let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
    (0..n).map(|_| rng.random_range(-bound..bound)).collect()
}

/// `n` weights drawn from N(0, 2/fan_in) (He et al. 2015, for ReLU networks).
pub(crate) fn he(rng: &mut rand::rngs::StdRng, n: usize, fan_in: usize) -> Vec<f32> {
    let normal = Normal::new(0.0, (2.0 / fan_in.max(1) as f64).sqrt()).expect("finite std");
    (0..n).map(|_| normal.sample(rng) as f32).collect()
}
