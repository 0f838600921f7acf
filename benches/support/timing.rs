//! What the benchmarks share: the timer (median and minimum of repeated calls after warm-up calls)
//! and the table of our medians against a baseline's.

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

/// Prints under `header` each pass's median beside the baseline's (`baseline(name)`, the median
/// seconds of the pass of that name, if the baseline has it) and their ratio; `columns` names the
/// three numeric columns. `native`: (label, name, (median, min) seconds).
pub fn print_ratio_table(
    header: &str,
    columns: [&str; 3],
    native: &[(&str, &str, (f64, f64))],
    baseline: impl Fn(&str) -> Option<f64>,
) {
    let w = native
        .iter()
        .map(|(label, _, _)| label.chars().count())
        .chain([header.chars().count()])
        .max()
        .unwrap_or(0);
    let [ours, theirs, ratio] = columns;
    let rw = ratio.chars().count().max(10);
    println!("\n{header:<w$} {ours:>10} {theirs:>10} {ratio:>rw$}");
    for (label, name, t) in native {
        match baseline(name) {
            Some(b) => println!("{label:<w$} {:>10.4} {b:>10.4} {:>rw$.2}", t.0, t.0 / b),
            None => println!("{label:<w$} {:>10.4} {:>10} (no line {name})", t.0, "—"),
        }
    }
}
