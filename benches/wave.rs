//! Benchmark of the 2-D acoustic wave solver (`physics::wave::bench`): forward and forward+adjoint
//! throughput on a Marmousi-sized grid, memory per gradient strategy, and the triad bandwidth of
//! the machine in the same run. deepwave's side: `scripts/bench_deepwave.py` (interleaved).
//!
//! `cargo bench --bench wave [-- REPEATS [GRADIENT=1]]`.

use tessera::physics::wave::bench::{WaveBenchSpec, bench_wave};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mut spec = WaveBenchSpec::default();
    if let Some(&r) = args.first() {
        spec.repeats = r;
    }
    if let Some(&g) = args.get(1) {
        spec.gradient = g != 0;
    }
    let r = bench_wave(&spec).expect("wave benchmark");
    println!("{r}");
}
