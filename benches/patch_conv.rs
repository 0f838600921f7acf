//! `cargo bench --bench patch_conv`: the native forward convolutions that run as im2col + the
//! patch product (`nn::kernels::patch_gemm`), i.e. every layer but the 2-D 3×3 stride-1 ones (Winograd):
//! a 3-D 3×3×3 32→32 convolution on 1×32×48³ (3-D DRUNet, CNN3D), DRUNet's 2×2 stride-2
//! down-sampling 64→128 on 1×64×256², a 5×5 32→32 on 1×32×256², and a 1-D k = 9 16→16 on
//! 1×16×2¹⁸ (a single strip, split over the threads by columns). Prints median and minimum seconds
//! and GFLOP/s, then PyTorch's CPU time on the same shapes (scripts/bench_torch_patch_conv.py, 2
//! threads, run after the native timings) and native / PyTorch; and the same convolutions with the
//! `gemm` crate in place of the patch product (this binary again, as a child process with
//! `TESSERA_PATCH_GEMM=crate`, the switch that turns off both own AVX-512 kernels, `nn::kernels::patch_gemm`
//! and the weight gradient's `nn::kernels::patch_dot`; benches/support/gemm_crate.rs): the two baselines of
//! this run. Environment: TESSERA_BENCH_REPS (default 5), TESSERA_TORCH_PYTHON (the venv's python),
//! TESSERA_PATCH_GEMM=crate (time the `gemm` crate only, printing `gemm NAME MEDIAN MIN` lines).

use tessera::nn::{Conv, Features};

#[path = "support/timing.rs"]
mod timing;

#[path = "support/torch.rs"]
mod torch;

#[path = "support/gemm_crate.rs"]
mod gemm_crate;

fn features(c: usize, dims: [usize; 3]) -> Features {
    let n = c * dims.iter().product::<usize>();
    Features {
        batch: 1,
        channels: c,
        dims,
        data: (0..n)
            .map(|i| ((i.wrapping_mul(2654435761) >> 7) % 1000) as f32 / 1000.0 - 0.5)
            .collect(),
    }
}

struct Case {
    name: &'static str,
    label: &'static str,
    rank: usize,
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dims: [usize; 3],
}

const CASES: [Case; 4] = [
    Case {
        name: "conv3d_3x3x3",
        label: "3×3×3 32→32 48³",
        rank: 3,
        c_in: 32,
        c_out: 32,
        k: 3,
        stride: 1,
        pad: 1,
        dims: [48, 48, 48],
    },
    Case {
        name: "down_2x2_s2",
        label: "2×2 s2 64→128 256²",
        rank: 2,
        c_in: 64,
        c_out: 128,
        k: 2,
        stride: 2,
        pad: 0,
        dims: [1, 256, 256],
    },
    Case {
        name: "conv2d_5x5",
        label: "5×5 32→32 256²",
        rank: 2,
        c_in: 32,
        c_out: 32,
        k: 5,
        stride: 1,
        pad: 2,
        dims: [1, 256, 256],
    },
    Case {
        name: "conv1d_9",
        label: "1-D k9 16→16 2¹⁸",
        rank: 1,
        c_in: 16,
        c_out: 16,
        k: 9,
        stride: 1,
        pad: 4,
        dims: [1, 1, 1 << 18],
    },
];

fn main() {
    let reps: usize = std::env::var("TESSERA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let baseline_child = gemm_crate::is_child();
    let mut native = Vec::new();
    for c in &CASES {
        let taps = c.k.pow(c.rank as u32);
        let w: Vec<f32> = (0..c.c_out * c.c_in * taps)
            .map(|i| (((i * 7919) % 2001) as f32 / 1000.0 - 1.0) * 0.05)
            .collect();
        let conv = Conv::new(
            c.rank,
            c.c_in,
            c.c_out,
            c.k,
            c.stride,
            c.pad,
            w,
            Some(vec![0.01; c.c_out]),
            true,
        );
        let x = features(c.c_in, c.dims);
        let od = conv.out_dims(c.dims).expect("bench shapes are valid");
        let flops = 2.0 * (c.c_out * c.c_in * taps) as f64 * od.iter().product::<usize>() as f64;
        let t = timing::time_calls(1, reps, || {
            std::hint::black_box(conv.forward(&x, None));
        });
        if baseline_child {
            gemm_crate::print_child_line(c.name, t);
            continue;
        }
        println!(
            "{:<24} median {:>8.4} s  min {:>8.4} s  {:>6.1} GFLOP/s",
            c.label,
            t.0,
            t.1,
            flops / t.0 / 1e9
        );
        native.push((c.label, c.name, t));
    }
    if baseline_child {
        return;
    }
    gemm_crate::compare("gemm crate (same run)", &native);
    torch::print_comparison(
        "bench_torch_patch_conv.py",
        reps,
        "PyTorch CPU (2 threads)",
        &native,
    );
}
