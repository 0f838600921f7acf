//! Benchmark of the per-tile clock: a tiled denoise timed per batch into the rank's `TileClock`
//! (what every job now does) against the same plan, extraction, denoiser and assembly without any
//! timing, measured in the same run. The worst case for the clock is many tiny batches around a
//! denoiser that costs nothing (`Identity`); a real denoiser (TV, 5 iterations) shows its share.
//!
//! `cargo bench --bench tile_clock [-- SIZE PATCH REPEATS]` (defaults 512 16 7).

use std::sync::Arc;
use std::time::Instant;

use tessera::Tensor;
use tessera::denoise::{Denoiser, DenoiserConfig, Identity};
use tessera::dist::SingleProcess;
use tessera::dist::denoise::{DistributedTiledDenoiser, TileAssignment};
use tessera::tiling::{Assembler, TiledDenoiser, TilingConfig};

fn median_secs(repeats: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The tiled denoise as it was before tiles were timed: plan, batches, extract, denoise, assemble.
fn untimed(tiled: &TiledDenoiser, x: &Tensor, sigma: f32) -> Tensor {
    let plan = tiled.plan(x.shape()).expect("plan");
    let all: Vec<usize> = (0..plan.num_tiles()).collect();
    let mut asm = Assembler::new(&plan, x.shape()).expect("assembler");
    for group in plan.batches(&all, tiled.max_batch_size) {
        let patches = plan.extract(x, &group).expect("extract");
        let denoised = tiled.inner.denoise(&patches, sigma).expect("denoise");
        asm.add_batch(&group, &denoised).expect("assemble");
    }
    asm.finish().expect("finish")
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let size = args.first().copied().unwrap_or(512);
    let patch = args.get(1).copied().unwrap_or(16);
    let repeats = args.get(2).copied().unwrap_or(7);
    let x = Tensor::from_fn(&[1, 3, size, size], |i| ((i * 7919) % 251) as f32 / 251.0);
    let tiling: TilingConfig = toml::from_str(&format!(
        "kind = \"overlap\"\npatch_size = {patch}\noverlap = 4\nmax_batch_size = 1"
    ))
    .expect("tiling");
    let tv = toml::from_str::<DenoiserConfig>("kind = \"tv\"\nn_it_max = 5")
        .expect("tv")
        .build()
        .expect("tv");
    for (name, inner) in [
        ("identity", Box::new(Identity) as Box<dyn Denoiser>),
        ("tv", tv),
    ] {
        let tiled = TiledDenoiser::from_config(inner, &tiling).expect("tiled");
        let tiles = tiled.plan(x.shape()).expect("plan").num_tiles();
        let want = untimed(&tiled, &x, 0.05);
        let base = median_secs(repeats, || {
            untimed(&tiled, &x, 0.05);
        });
        let timed = DistributedTiledDenoiser::new(
            Arc::new(SingleProcess),
            tiled,
            TileAssignment::RoundRobin,
        );
        let clocked = median_secs(repeats, || {
            timed.denoise(&x, 0.05).expect("denoise");
        });
        assert_eq!(timed.denoise(&x, 0.05).expect("denoise"), want);
        let clock = timed.clock().times();
        assert_eq!(clock.len(), tiles, "every tile timed");
        println!(
            "{name}: {size}² colour, patch {patch}, {tiles} tiles one per batch: untimed {:.2} ms, \
             timed per tile {:.2} ms, ratio timed/untimed {:.3}",
            base * 1e3,
            clocked * 1e3,
            clocked / base
        );
    }
}
