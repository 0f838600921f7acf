//! The timer the benchmarks share: median and minimum of repeated calls after warm-up calls.

#![allow(dead_code)]

use std::time::Instant;

/// Median and minimum of `reps` timed calls after `warmup` untimed ones, in seconds.
pub fn time_calls(warmup: usize, reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..warmup {
        f();
    }
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[0])
}
