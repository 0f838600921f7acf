//! `cargo bench --bench backward`: the native engine's backward passes against its forward pass,
//! measured in the same run (the baseline): a 64→64 3×3 convolution on 1×64×256×256 (input
//! gradient, weight + bias gradient), a 2×2 stride-2 transposed convolution 64→32, DRUNet's 2×2
//! stride-2 down-sampling 64→128 (forward and its strided input gradient, native only), and one
//! training step (forward keeping activations + backward) of the train-dncnn network (depth 8, 32
//! features) on 8×64² crops against its inference forward pass. Prints median and minimum seconds
//! and the ratios; then the same passes with the `gemm` crate in place of the own AVX-512 kernels
//! (this binary again, as a child process with `TESSERA_PATCH_GEMM=crate`: the forward's patch
//! product, the strided input gradient's and the weight gradient's patch dot all off) and own /
//! gemm; then PyTorch's CPU time for each of the same passes on the same shapes
//! (scripts/bench_torch_backward.py in ~/.cache/tessera/deepinv-venv, 2 threads, run after the
//! native timings) and native / PyTorch. Environment: TESSERA_BENCH_REPS (default 5),
//! TESSERA_TORCH_PYTHON (the venv's python), TESSERA_PATCH_GEMM=crate (time the `gemm` crate only,
//! printing `gemm NAME MEDIAN MIN` lines).

use tessera::nn::{Conv, ConvTranspose, Features, Network, Whole};

fn features(batch: usize, c: usize, dims: [usize; 3]) -> Features {
    let n = batch * c * dims.iter().product::<usize>();
    Features {
        batch,
        channels: c,
        dims,
        data: (0..n)
            .map(|i| ((i.wrapping_mul(2654435761) >> 7) % 1000) as f32 / 1000.0 - 0.5)
            .collect(),
    }
}

fn weights(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919) % 2001) as f32 / 1000.0 - 1.0) * scale)
        .collect()
}

#[path = "support/timing.rs"]
mod timing;

#[path = "support/torch.rs"]
mod torch;

#[path = "support/gemm_crate.rs"]
mod gemm_crate;

/// Median and minimum of `reps` timed calls after 1 warm-up call.
fn time(reps: usize, f: impl FnMut()) -> (f64, f64) {
    timing::time_calls(1, reps, f)
}

fn report(what: &str, t: (f64, f64), base: (f64, f64)) {
    if gemm_crate::is_child() {
        return;
    }
    println!(
        "{what:<44} median {:>8.4} s  min {:>8.4} s  ratio to forward {:>5.2}",
        t.0,
        t.1,
        t.0 / base.0
    );
}

fn main() {
    let reps: usize = std::env::var("TESSERA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dims = [1, 256, 256];
    let conv = Conv::new(
        2,
        64,
        64,
        3,
        1,
        1,
        weights(64 * 64 * 9, 0.05),
        Some(vec![0.0; 64]),
        false,
    );
    let x = features(1, 64, dims);
    let dz = features(1, 64, dims);
    let fwd = time(reps, || {
        std::hint::black_box(conv.forward(&x, None));
    });
    report("conv 3×3 64→64 256² forward", fwd, fwd);
    let bi = time(reps, || {
        std::hint::black_box(conv.backward_input(&dz, dims, conv.pads()));
    });
    report("  backward (input)", bi, fwd);
    let mut gw = vec![0.0; conv.weight.len()];
    let mut gb = vec![0.0; 64];
    let bw = time(reps, || {
        conv.backward_params(&x, &dz, conv.pads(), &mut gw, Some(&mut gb));
    });
    report("  backward (weights, bias)", bw, fwd);

    let t = ConvTranspose::new_2x(2, 64, 32, weights(64 * 32 * 4, 0.1));
    let xt = features(1, 64, [1, 128, 128]);
    let dy = features(1, 32, dims);
    let tf = time(reps, || {
        std::hint::black_box(t.forward(&xt));
    });
    report("transposed 2×2 s2 64→32 128²→256² forward", tf, tf);
    let tb = time(reps, || {
        std::hint::black_box(t.backward_input(&dy, [1, 128, 128], [0; 3]));
    });
    report("  backward (input)", tb, tf);
    let mut gw = vec![0.0; t.weight.len()];
    let tw = time(reps, || t.backward_params(&xt, &dy, [0; 3], &mut gw, None));
    report("  backward (weights)", tw, tf);

    // DRUNet's first down-sampling: its input gradient is the strided scatter `col2im(Wᵀ · dz)`
    // (native only; `TESSERA_PATCH_GEMM=crate` times its product on the gemm crate).
    let down = Conv::new(2, 64, 128, 2, 2, 0, weights(128 * 64 * 4, 0.1), None, false);
    let dz_down = features(1, 128, [1, 128, 128]);
    let df = time(reps, || {
        std::hint::black_box(down.forward(&x, None));
    });
    report("conv 2×2 s2 64→128 256²→128² forward", df, df);
    let db = time(reps, || {
        std::hint::black_box(down.backward_input(&dz_down, dims, down.pads()));
    });
    report("  backward (input)", db, df);

    // The bundled train-dncnn network.
    let mut net = Network::new(2, 1);
    let widths = [
        (1, 32),
        (32, 32),
        (32, 32),
        (32, 32),
        (32, 32),
        (32, 32),
        (32, 32),
        (32, 1),
    ];
    for (i, &(ci, co)) in widths.iter().enumerate() {
        let last = i + 1 == widths.len();
        let prev = net.last();
        net.conv(
            &format!("layer{i}"),
            prev,
            last.then_some(0),
            Conv::new(
                2,
                ci,
                co,
                3,
                1,
                1,
                weights(co * ci * 9, 0.1),
                Some(vec![0.01; co]),
                !last,
            ),
        );
    }
    let crops = [1, 64, 64];
    let batch = features(8, 1, crops);
    let inf = time(reps, || {
        std::hint::black_box(net.forward(batch.clone(), crops, &Whole).unwrap());
    });
    report("dncnn depth 8 nf 32, 8×64² inference", inf, inf);
    let step = time(reps, || {
        let mut tape = net.forward_train(batch.clone(), crops, &Whole).unwrap();
        let dy = tape.output().clone();
        let mut g = net.zero_grads();
        net.backward(&mut tape, dy, &Whole, &mut g, false).unwrap();
        std::hint::black_box(g);
    });
    report("  training step (forward + backward)", step, inf);

    let passes = [
        ("conv 3×3 64→64 256² forward", "conv_forward", fwd),
        ("  backward (input)", "conv_backward_input", bi),
        ("  backward (weights, bias)", "conv_backward_params", bw),
        ("transposed 2×2 s2 64→32 forward", "transposed_forward", tf),
        ("  backward (input)", "transposed_backward_input", tb),
        ("  backward (weights)", "transposed_backward_weights", tw),
        ("dncnn 8×64² inference", "dncnn_inference", inf),
        ("  training step", "dncnn_training_step", step),
    ];
    // Native only (bench_torch_backward.py has no such pass), so only against the gemm crate.
    let native_only = [
        ("conv 2×2 s2 64→128 forward", "down_forward", df),
        ("  backward (input)", "down_backward_input", db),
    ];
    let with_gemm: Vec<_> = passes.iter().chain(&native_only).copied().collect();
    if gemm_crate::is_child() {
        for (_, name, t) in with_gemm {
            gemm_crate::print_child_line(name, t);
        }
        return;
    }
    gemm_crate::compare("gemm crate (same run, child)", &with_gemm);
    torch::print_comparison(
        "bench_torch_backward.py",
        reps,
        "same pass, PyTorch CPU (2 threads)",
        &passes,
    );
}
