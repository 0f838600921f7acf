//! Benchmark of 2-D tomography: `A` and `Aᵀ` on a 512×512 image with 180 angles (no circle), the
//! optimised operator (rayon pool, and one thread) against a straightforward single-threaded
//! reference of the same discretisation (tests/support/tomo_reference.rs), measured in the same run.
//!
//! `cargo bench --bench tomography [-- SIZE ANGLES REPEATS]` (defaults 512 180 5).

#[path = "../tests/support/tomo_reference.rs"]
mod reference;

use std::time::Instant;

use tessera::linalg::deterministic_start;
use tessera::physics::tomography::{Angles, Tomography, bench_tomography};
use tessera::physics::{LinearPhysics, Physics};

/// CPU time of the whole process (all threads), in seconds, from /proc/self/task/*/schedstat
/// (nanoseconds); 0 where unavailable. The build machine is shared, so CPU time is the steadier
/// measure for single-threaded runs.
fn process_cpu_secs() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        * 1e-9
}

/// Median wall-clock and median CPU seconds of `repeats` runs.
fn median_secs(repeats: usize, mut f: impl FnMut()) -> (f64, f64) {
    let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = (0..repeats.max(1))
        .map(|_| {
            let (start, cpu0) = (Instant::now(), process_cpu_secs());
            f();
            (start.elapsed().as_secs_f64(), process_cpu_secs() - cpu0)
        })
        .unzip();
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[wall.len() / 2], cpu[cpu.len() / 2])
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let size = args.first().copied().unwrap_or(512);
    let n_angles = args.get(1).copied().unwrap_or(180);
    let repeats = args.get(2).copied().unwrap_or(5);

    let op = Tomography::new(size, &Angles::Count(n_angles), false, false).expect("operator");
    let angles = op.angles_deg().to_vec();
    let x = deterministic_start(&[1, 1, size, size], 1);
    let y = op.forward(&x).expect("forward");
    println!(
        "tomography {size}×{size}, {n_angles} angles, {} detector cells, {} rayon threads, median of {repeats}",
        op.n_det(),
        rayon::current_num_threads()
    );

    let mut y_ref = Vec::new();
    let ref_a = median_secs(1, || {
        y_ref = reference::radon(x.data(), size, &angles, false)
    });
    let mut xt_ref = Vec::new();
    let ref_at = median_secs(1, || {
        xt_ref = reference::radon_adjoint(y.data(), size, &angles, false)
    });
    let xt = op.adjoint(&y).expect("adjoint");
    println!(
        "agreement with the reference: A {:.1e}, Aᵀ {:.1e} (relative L2)",
        rel_err(y.data(), &y_ref),
        rel_err(xt.data(), &xt_ref)
    );

    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    let a_1 = one.install(|| median_secs(repeats, || drop(op.forward(&x))));
    let at_1 = one.install(|| median_secs(repeats, || drop(op.adjoint(&y))));
    let a_n = median_secs(repeats, || drop(op.forward(&x)));
    let at_n = median_secs(repeats, || drop(op.adjoint(&y)));
    let lib = bench_tomography(size, n_angles, repeats).expect("bench");

    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9}   speed-up vs reference (wall)",
        "", "A wall", "A cpu", "Aᵀ wall", "Aᵀ cpu"
    );
    let row = |name: &str, a: (f64, f64), at: (f64, f64)| {
        println!(
            "{name:<26} {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>7.1}ms   A ×{:.1}, Aᵀ ×{:.1}",
            a.0 * 1e3,
            a.1 * 1e3,
            at.0 * 1e3,
            at.1 * 1e3,
            ref_a.0 / a.0,
            ref_at.0 / at.0
        )
    };
    row("reference, 1 thread", ref_a, ref_at);
    row("optimised, 1 thread", a_1, at_1);
    row(&format!("optimised, {} threads", lib.threads), a_n, at_n);
    println!(
        "library bench_tomography ({} threads): A {:.1} ms, Aᵀ {:.1} ms, FBP {:.1} ms (wall)",
        lib.threads,
        lib.forward_secs * 1e3,
        lib.adjoint_secs * 1e3,
        lib.fbp_secs * 1e3
    );
}
