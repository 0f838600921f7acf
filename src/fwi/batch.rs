//! Which shots an epoch models and which rank models them: rank 0 draws the global batch (seeded),
//! and each rank takes its part in `torch.tensor_split` order, so uneven counts work.

use std::ops::Range;

/// SplitMix64 (a fixed stream for the seeded batch draw).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `batch` distinct shot indices out of `shots`, in draw order (a partial Fisher–Yates shuffle seeded
/// by `seed` and `epoch`); all shots when `batch >= shots`.
pub fn draw(shots: usize, batch: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..shots).collect();
    let mut state = seed ^ (epoch as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let k = batch.min(shots);
    for i in 0..k {
        let j = i + (splitmix(&mut state) % (shots - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(k);
    idx
}

/// The positions `torch.tensor_split(x, parts)[part]` takes from `n` items: the first `n % parts`
/// parts hold `⌈n/parts⌉` items, the others `⌊n/parts⌋`.
pub fn tensor_split(n: usize, parts: usize, part: usize) -> Range<usize> {
    let (q, r) = (n / parts, n % parts);
    let start = part * q + part.min(r);
    start..start + q + usize::from(part < r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_distinct_seeded_and_cover_everything() {
        let a = draw(20, 6, 7, 3);
        assert_eq!(a.len(), 6);
        let mut s = a.clone();
        s.sort();
        s.dedup();
        assert_eq!(s.len(), 6);
        assert!(a.iter().all(|&i| i < 20));
        assert_eq!(a, draw(20, 6, 7, 3));
        assert_ne!(a, draw(20, 6, 7, 4));
        let mut all = draw(5, 9, 1, 0);
        all.sort();
        assert_eq!(all, vec![0, 1, 2, 3, 4]);
    }
}
