//! The blur-stack benchmark (issue 2), shared by `cargo bench --bench blur` and `tessera bench blur`.
//!
//! Eight circular Gaussian blurs of a colour image — σ = (0.01·S, 0.005·S) px with S the longest side,
//! angles linspace(0°, 180°, 8) — stacked in a [`Stack`]. Timed: `A` (all eight forwards), `Aᵀ` (the sum
//! of eight adjoints) and the least-squares gradient `Σ Aᵢᵀ(Aᵢx − yᵢ)`, in the same run for the
//! fused stack ([`Stack::new`], FFTs shared across operators, [`ConvMethod::Auto`]), the same
//! operators one by one ([`Stack::unfused`]) and the [`ConvMethod::Direct`] baseline.

use std::time::Instant;

use super::blur::{Blur, ConvMethod, Padding, gaussian_kernel};
use super::{LinearPhysics, Stack, StackedLinearPhysics};
use crate::error::Result;
use crate::tensor::Tensor;

/// Wall-clock seconds of the three stack operations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlurTimings {
    pub forward_secs: f64,
    pub adjoint_secs: f64,
    pub gradient_secs: f64,
}

/// CPU seconds of this process (all threads), as Python's `time.process_time` (which
/// `scripts/bench_deepinv.py` records): a busy machine inflates it far less than wall time.
fn process_cpu_secs() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return f64::NAN;
        }
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Result of [`bench_blur_stack`].
#[derive(Debug, Clone, PartialEq)]
pub struct BlurBench {
    pub width: usize,
    pub height: usize,
    pub operators: usize,
    /// Side of the (square) Gaussian kernels.
    pub kernel_side: usize,
    /// What `Auto` resolved to for this image.
    pub auto_method: ConvMethod,
    /// Median of `repeats` runs of the fused stack (`Auto`).
    pub auto: BlurTimings,
    /// The fused stack's median process CPU seconds (all threads) per operation.
    pub auto_cpu: BlurTimings,
    /// Median of `repeats` runs of the same operators one by one (`Auto`, no shared FFTs).
    pub per_operator: BlurTimings,
    /// The direct baseline, one run (it is far slower for kernels this size).
    pub direct: BlurTimings,
    /// max |∇_auto − ∇_direct| / max |∇_direct| (one-by-one instead of direct when the direct
    /// baseline is skipped): every path computes the same operator.
    pub gradient_rel_diff: f32,
}

impl BlurBench {
    /// direct / auto time for (A, Aᵀ, gradient).
    pub fn speedups(&self) -> [f64; 3] {
        [
            self.direct.forward_secs / self.auto.forward_secs,
            self.direct.adjoint_secs / self.auto.adjoint_secs,
            self.direct.gradient_secs / self.auto.gradient_secs,
        ]
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

impl std::fmt::Display for BlurBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "blur stack: {} circular Gaussian blurs ({}×{} kernels) of a {}×{} colour image; auto = {:?}",
            self.operators,
            self.kernel_side,
            self.kernel_side,
            self.width,
            self.height,
            self.auto_method
        )?;
        writeln!(
            f,
            "{:<28}{:>12}{:>14}{:>12}{:>10}",
            "operation (median)", "fused (s)", "one by one (s)", "direct (s)", "speedup"
        )?;
        let s = self.speedups();
        let (a, p, d) = (&self.auto, &self.per_operator, &self.direct);
        let rows = [
            (
                "A (8 forwards)",
                [a.forward_secs, p.forward_secs, d.forward_secs],
                s[0],
            ),
            (
                "Aᵀ (sum of 8 adjoints)",
                [a.adjoint_secs, p.adjoint_secs, d.adjoint_secs],
                s[1],
            ),
            (
                "Σ Aᵢᵀ(Aᵢx − yᵢ)",
                [a.gradient_secs, p.gradient_secs, d.gradient_secs],
                s[2],
            ),
        ];
        for (name, [a, p, d], r) in rows {
            writeln!(f, "{name:<28}{a:>12.4}{p:>14.4}{d:>12.4}{r:>9.1}×")?;
        }
        let c = &self.auto_cpu;
        writeln!(
            f,
            "fused, CPU seconds (median, all threads): A {:.4}, Aᵀ {:.4}, gradient {:.4}",
            c.forward_secs, c.adjoint_secs, c.gradient_secs
        )?;
        write!(
            f,
            "auto vs direct gradient: max relative difference {:.2e}",
            self.gradient_rel_diff
        )
    }
}

/// A smooth colour image with some texture, values in [0, 1], deterministic.
pub fn synthetic_image(width: usize, height: usize) -> Tensor {
    let plane = width * height;
    Tensor::from_fn(&[1, 3, height, width], |i| {
        let (c, r, col) = (i / plane, (i % plane) / width, i % width);
        let (u, v) = (col as f32 / width as f32, r as f32 / height as f32);
        let smooth = 0.5 + 0.25 * (6.0 * u + 2.0 * c as f32).sin() * (4.0 * v).cos();
        let mut h = (i as u32).wrapping_mul(0x9E37_79B9);
        h ^= h >> 16;
        let texture = (h % 1000) as f32 / 1000.0 - 0.5;
        (smooth + 0.1 * texture).clamp(0.0, 1.0)
    })
}

fn stack(width: usize, height: usize, method: ConvMethod, fused: bool) -> Result<(Stack, usize)> {
    const OPERATORS: usize = 8;
    let longest = width.max(height) as f32;
    let sigma = [0.01 * longest, 0.005 * longest];
    let mut side = 0;
    let ops = (0..OPERATORS)
        .map(|i| {
            let angle_deg = 180.0 * i as f32 / (OPERATORS - 1) as f32;
            let kernel = gaussian_kernel(sigma, angle_deg);
            side = kernel.shape()[2];
            Ok(
                Box::new(Blur::with_method(kernel, Padding::Circular, method)?)
                    as Box<dyn LinearPhysics>,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let stack = if fused {
        Stack::new(ops)?
    } else {
        Stack::unfused(ops)?
    };
    Ok((stack, side))
}

/// (result, wall seconds, CPU seconds).
fn time<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, [f64; 2])> {
    let (start, cpu) = (Instant::now(), process_cpu_secs());
    let out = f()?;
    Ok((
        out,
        [start.elapsed().as_secs_f64(), process_cpu_secs() - cpu],
    ))
}

/// Times one stack: the median wall and CPU seconds of `repeats` runs of each operation; returns
/// the gradient of the last run.
fn run(stack: &Stack, x: &Tensor, repeats: usize) -> Result<([BlurTimings; 2], Tensor)> {
    let mut samples: [Vec<[f64; 2]>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    // Measurements of a slightly different image, so the gradient is not zero.
    let ys = stack.forward(&x.scaled(0.9))?;
    let weights = vec![1.0f32; stack.len()];
    let mut grad = x.zeros_like();
    for _ in 0..repeats.max(1) {
        let (_, t) = time(|| stack.forward(x))?;
        samples[0].push(t);
        let (_, t) = time(|| stack.adjoint(&ys))?;
        samples[1].push(t);
        let (g, t) = time(|| stack.residual_adjoint(x, &ys, &weights))?;
        samples[2].push(t);
        grad = g;
    }
    let timings = [0, 1].map(|k| {
        let [f, a, g] = samples
            .clone()
            .map(|v| median(v.iter().map(|s| s[k]).collect()));
        BlurTimings {
            forward_secs: f,
            adjoint_secs: a,
            gradient_secs: g,
        }
    });
    Ok((timings, grad))
}

/// Runs the benchmark on a `width × height` colour image; the fused and one-by-one stacks are timed
/// `repeats` times each (median kept, after one warm-up that fills the spectrum caches), the direct
/// baseline once.
pub fn bench_blur_stack(width: usize, height: usize, repeats: usize) -> Result<BlurBench> {
    bench_blur_stack_with(width, height, repeats, true)
}

/// As [`bench_blur_stack`]; without `direct` the direct baseline is skipped (its times are NaN and
/// the gradient is compared with the one-by-one stack instead).
pub fn bench_blur_stack_with(
    width: usize,
    height: usize,
    repeats: usize,
    direct: bool,
) -> Result<BlurBench> {
    let x = synthetic_image(width, height);
    let (auto_stack, kernel_side) = stack(width, height, ConvMethod::Auto, true)?;
    let (plain_stack, _) = stack(width, height, ConvMethod::Auto, false)?;
    let (direct_stack, _) = stack(width, height, ConvMethod::Direct, false)?;
    // All eight kernels have the same size, hence the same method.
    let longest = width.max(height) as f32;
    let auto_method = Blur::new(
        gaussian_kernel([0.01 * longest, 0.005 * longest], 0.0),
        Padding::Circular,
    )?
    .method_for(x.shape())?;
    run(&auto_stack, &x, 1)?;
    let ([auto, auto_cpu], grad_auto) = run(&auto_stack, &x, repeats)?;
    run(&plain_stack, &x, 1)?;
    let ([per_operator, _], grad_plain) = run(&plain_stack, &x, repeats)?;
    let (direct, grad_direct) = if direct {
        let ([direct, _], grad) = run(&direct_stack, &x, 1)?;
        (direct, grad)
    } else {
        let nan = BlurTimings {
            forward_secs: f64::NAN,
            adjoint_secs: f64::NAN,
            gradient_secs: f64::NAN,
        };
        (nan, grad_plain)
    };
    let scale = grad_direct
        .data()
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    Ok(BlurBench {
        width,
        height,
        operators: auto_stack.len(),
        kernel_side,
        auto_method,
        auto,
        auto_cpu,
        per_operator,
        direct,
        gradient_rel_diff: grad_auto.max_abs_diff(&grad_direct) / scale,
    })
}
