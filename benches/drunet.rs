//! `cargo bench --bench drunet [-- SIZE… | --2048]`: DRUNet forward (default nc/nb, 3 colour channels
//! and the noise channel, random weights, σ = 0.1, batch 1) on the native engine at 256², 512²,
//! 1024², each size followed by deepinv's DRUNet on PyTorch CPU in the same run
//! (scripts/bench_torch_drunet.py in ~/.cache/tessera/deepinv-venv, 2 threads) and the ratio
//! native / torch. Then tiled (256² patches, 32 px overlap) against untiled at 1024².
//! `--2048` runs one untiled 2048² forward only (for `/usr/bin/time -v` peak memory).
//! First, the baseline of the Winograd path (src/nn/kernels/winograd.rs) in the same run: one 64→64 3×3
//! convolution at 256² and 512² and the DRUNet forward at each size, with Winograd and with it
//! turned off (im2col + GEMM), and their ratio.
//! Environment: TESSERA_BENCH_REPS (default 3), TESSERA_TORCH_PYTHON (the venv's python).

use std::path::PathBuf;
use std::time::Instant;

use tessera::denoise::Denoiser;
use tessera::nn::kernels::winograd;
use tessera::nn::{Conv, Drunet, DrunetArch, Features};
use tessera::tensor::Tensor;
use tessera::tiling::{OverlapTiling, TiledDenoiser};

fn image(size: usize) -> Tensor {
    Tensor::from_fn(&[1, 3, size, size], |i| {
        ((i.wrapping_mul(2654435761) >> 7) % 1000) as f32 / 1000.0
    })
}

#[path = "support/timing.rs"]
mod timing;

/// Median and minimum of `reps` timed calls after 1 warm-up call.
fn time(reps: usize, f: impl FnMut()) -> (f64, f64) {
    timing::time_calls(1, reps, f)
}

#[path = "support/torch.rs"]
mod torch;

/// deepinv's time at `size` (median, min), or why there is none.
fn torch_time(python: &PathBuf, size: usize, reps: usize) -> Result<(f64, f64), String> {
    let args = [
        "--threads",
        "2",
        "--reps",
        &reps.to_string(),
        &size.to_string(),
    ];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let lines = torch::torch_times(python, "bench_torch_drunet.py", &args)?;
    Ok((lines[0].1, lines[0].2))
}

/// Median times of `f` with the Winograd path on and off (im2col + GEMM), in that order.
fn both_ways(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    winograd::set_enabled(true);
    let (wino, _) = time(reps, &mut f);
    winograd::set_enabled(false);
    let (im2col, _) = time(reps, &mut f);
    winograd::set_enabled(true);
    (wino, im2col)
}

/// One `c`→`c` 3×3 convolution (padding 1, bias, ReLU) at `size`², both ways.
fn conv_baseline(c: usize, size: usize, reps: usize) {
    let weight: Vec<f32> = (0..c * c * 9)
        .map(|i: usize| ((i.wrapping_mul(2654435761) >> 9) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let conv = Conv::new(2, c, c, 3, 1, 1, weight, Some(vec![0.01; c]), true);
    let mut x = Features::<f32>::zeros(1, c, [1, size, size]);
    x.data
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = ((i.wrapping_mul(40503) >> 5) % 1000) as f32 / 1000.0);
    let (wino, im2col) = both_ways(reps, || {
        std::hint::black_box(conv.forward(&x, None));
    });
    let gflop = 2.0 * (c * c * 9 * size * size) as f64 / 1e9;
    println!(
        "conv {c:>3}→{c:<3} 3×3 {size:>4}²: winograd {wino:.4} s, im2col+GEMM {im2col:.4} s: im2col/winograd {:.2} ({:.0} vs {:.0} direct-GFLOP/s)",
        im2col / wino,
        gflop / wino,
        gflop / im2col
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = std::env::var("TESSERA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let net = Drunet::random(DrunetArch::default(), 0).expect("default DRUNet");
    if args.iter().any(|a| a == "--2048") {
        let x = image(2048);
        let t0 = Instant::now();
        let y = net.denoise(&x, 0.1).expect("forward");
        println!(
            "native 2048² forward: {:.2} s (output {:?})",
            t0.elapsed().as_secs_f64(),
            y.shape()
        );
        return;
    }
    let sizes: Vec<usize> = {
        let s: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
        if s.is_empty() {
            vec![256, 512, 1024]
        } else {
            s
        }
    };
    let python = torch::torch_python();
    println!(
        "DRUNet forward, nc [64,128,256,512], nb 4, 3+1 channels, batch 1; {} rayon threads; median (min) of {reps}",
        rayon::current_num_threads()
    );
    if python.is_none() {
        println!(
            "(no PyTorch comparison: ~/.cache/tessera/deepinv-venv/bin/python not found; set TESSERA_TORCH_PYTHON)"
        );
    }
    for size in [256, 512] {
        conv_baseline(64, size, reps);
    }
    // `--levels`: the 3×3 layers of DRUNet's four levels for each size asked for (64 channels at
    // the full size down to 512 at an eighth), where Winograd's gain depends on the map's size.
    if args.iter().any(|a| a == "--levels") {
        for &size in &sizes {
            for level in 0..4 {
                conv_baseline(64 << level, size >> level, reps);
            }
        }
    }
    for &size in &sizes {
        let x = image(size);
        let (wino, im2col) = both_ways(reps, || {
            net.denoise(&x, 0.1).expect("forward");
        });
        println!(
            "{size:>5}²  DRUNet winograd {wino:7.3} s, im2col+GEMM {im2col:7.3} s: im2col/winograd {:.2}",
            im2col / wino
        );
        let (med, min) = time(reps, || {
            net.denoise(&x, 0.1).expect("forward");
        });
        print!("{size:>5}²  native {med:7.3} s ({min:.3})");
        match python.as_ref().map(|p| torch_time(p, size, reps)) {
            Some(Ok((tmed, tmin))) => println!(
                "   torch {tmed:7.3} s ({tmin:.3})   native/torch {:.2} (min/min {:.2})",
                med / tmed,
                min / tmin
            ),
            Some(Err(e)) => println!("   torch failed: {}", e.trim()),
            None => println!(),
        }
    }
    if sizes.contains(&1024) {
        let x = image(1024);
        let (untiled, _) = time(reps, || {
            net.denoise(&x, 0.1).expect("forward");
        });
        let inner = Drunet::random(DrunetArch::default(), 0).expect("default DRUNet");
        let tiled =
            TiledDenoiser::new(Box::new(inner), Box::new(OverlapTiling::new(256, 32)), None);
        let (t, _) = time(reps, || {
            tiled.denoise(&x, 0.1).expect("tiled forward");
        });
        println!(
            "1024² tiled (256² patches + 32 px overlap, one batch) {t:.3} s vs untiled {untiled:.3} s: overhead {:+.0}%",
            (t / untiled - 1.0) * 100.0
        );
    }
}
