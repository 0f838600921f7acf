//! Random data for the tests of the kernels and of everything built on them.

use rand::RngExt;

use super::Features;
use crate::float::Float;

pub(crate) fn random<T: Float>(n: usize, rng: &mut rand::rngs::StdRng) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f64(rng.random_range(-1.0f64..1.0)))
        .collect()
}

pub(crate) fn random_features<T: Float>(
    batch: usize,
    channels: usize,
    dims: [usize; 3],
    rng: &mut rand::rngs::StdRng,
) -> Features<T> {
    Features {
        batch,
        channels,
        dims,
        data: random(batch * channels * dims.iter().product::<usize>(), rng),
    }
}

pub(crate) fn dot<T: Float>(a: &[T], b: &[T]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(a, b)| a.to_f64() * b.to_f64()).sum()
}

/// A random geometry with `rank` spatial axes: kernel 1..4, stride 1..3, dilation 1..2,
/// padding 0..3, and input sizes that fit the dilated kernel.
#[allow(clippy::type_complexity)]
pub(crate) fn random_geometry(
    rank: usize,
    rng: &mut rand::rngs::StdRng,
) -> ([usize; 3], [usize; 3], [usize; 3], [usize; 3], [usize; 3]) {
    let (mut k, mut s, mut p, mut d, mut n) = ([1; 3], [1; 3], [0; 3], [1; 3], [1; 3]);
    for a in 3 - rank..3 {
        k[a] = rng.random_range(1..4);
        s[a] = rng.random_range(1..3);
        d[a] = rng.random_range(1..3);
        p[a] = rng.random_range(0..3);
        let reach = d[a] * (k[a] - 1) + 1;
        n[a] = rng.random_range(reach.max(2)..reach + 9);
    }
    (k, s, p, d, n)
}
