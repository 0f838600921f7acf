//! Wavelet thresholding on the device: [`crate::denoise::wavelet::WaveletDenoiser`]'s transform
//! (periodic multi-level DWT, odd axes extended by their last sample, the levels the CPU applies),
//! thresholding of the details and inverse, for every plane of a batch at once. Each step sums its
//! taps in the CPU's order with the CPU's rounding, so the result is the CPU's bits.

use super::{expect_len, int_arg, len_arg};
use crate::denoise::wavelet::{
    LevelShape, Threshold, WaveletDenoiser, level_shapes, periodic_taps,
};
use crate::device::backend::{Arg, Backend, DeviceVec, LaunchConfig};
use crate::device::kernels;
use crate::error::Result;

/// A plane grid's extents as kernel `int`s.
fn grid_ints(g: [usize; 3]) -> Result<[i32; 3]> {
    Ok([
        int_arg("wavelet grid", g[0])?,
        int_arg("wavelet grid", g[1])?,
        int_arg("wavelet grid", g[2])?,
    ])
}

/// The taps of one axis on the device: offsets, low-pass and high-pass coefficients.
struct AxisTaps<B: Backend> {
    offsets: DeviceVec<B, i32>,
    lo: DeviceVec<B, f32>,
    hi: DeviceVec<B, f32>,
    count: i32,
}

impl<B: Backend> AxisTaps<B> {
    fn new(backend: &B, denoiser: &WaveletDenoiser, n: usize) -> Result<Self> {
        let taps = periodic_taps(denoiser.wavelet, n);
        let offsets: Vec<i32> = taps.iter().map(|t| t.0 as i32).collect();
        let lo: Vec<f32> = taps.iter().map(|t| t.1).collect();
        let hi: Vec<f32> = taps.iter().map(|t| t.2).collect();
        Ok(AxisTaps {
            offsets: DeviceVec::from_host(backend, &offsets)?,
            lo: DeviceVec::from_host(backend, &lo)?,
            hi: DeviceVec::from_host(backend, &hi)?,
            count: taps.len() as i32,
        })
    }
}

/// Copies the box `[0, box)` of every plane from `src` (planes of `sg`) into `dst` (planes of
/// `dg`), source positions clamped to `src`'s last sample (the CPU's `copy_box`).
fn copy_box<B: Backend>(
    backend: &B,
    src: &DeviceVec<B, f32>,
    sg: [usize; 3],
    dst: &DeviceVec<B, f32>,
    dg: [usize; 3],
    boxed: [usize; 3],
    planes: usize,
) -> Result<()> {
    let [sd, sh, sw] = grid_ints(sg)?.map(Arg::I32);
    let [dd, dh, dw] = grid_ints(dg)?.map(Arg::I32);
    let [bd, bh, bw] = grid_ints(boxed)?.map(Arg::I32);
    let total = planes * boxed.iter().product::<usize>();
    backend.launch(
        &kernels::WAVELET_COPY_BOX,
        LaunchConfig::elementwise(total),
        &[
            src.arg(),
            dst.arg(),
            sd,
            sh,
            sw,
            dd,
            dh,
            dw,
            bd,
            bh,
            bw,
            Arg::I64(len_arg(total)),
        ],
    )
}

/// One analysis (`inverse = false`) or synthesis step along `axis` of planes of `grid`.
fn axis_step<B: Backend>(
    backend: &B,
    src: &DeviceVec<B, f32>,
    grid: [usize; 3],
    axis: usize,
    taps: &AxisTaps<B>,
    inverse: bool,
    planes: usize,
) -> Result<DeviceVec<B, f32>> {
    let total = planes * grid.iter().product::<usize>();
    let dst = DeviceVec::zeros(backend, total)?;
    let [d, h, w] = grid_ints(grid)?.map(Arg::I32);
    let kernel = match inverse {
        false => &kernels::WAVELET_FORWARD,
        true => &kernels::WAVELET_INVERSE,
    };
    backend.launch(
        kernel,
        LaunchConfig::elementwise(total),
        &[
            src.arg(),
            dst.arg(),
            taps.offsets.arg(),
            taps.lo.arg(),
            taps.hi.arg(),
            Arg::I32(taps.count),
            d,
            h,
            w,
            Arg::I32(axis as i32),
            Arg::I64(len_arg(total)),
        ],
    )?;
    Ok(dst)
}

/// `WaveletDenoiser::denoise(y, ths)` of `planes` planes of `dims` (`[H, W]` or `[D, H, W]`).
pub fn wavelet_denoise<B: Backend>(
    backend: &B,
    denoiser: &WaveletDenoiser,
    y: &DeviceVec<B, f32>,
    planes: usize,
    dims: &[usize],
    ths: f32,
) -> Result<DeviceVec<B, f32>> {
    let n: usize = dims.iter().product();
    expect_len("device wavelet", y, planes * n)?;
    let levels = level_shapes(dims, denoiser.levels)?;
    let out = y.duplicate(backend)?;
    if planes * n == 0 || levels.is_empty() {
        return Ok(out);
    }
    let axes = dims.len();
    // The taps of every transformed axis of every level, uploaded once.
    let taps = levels
        .iter()
        .map(|l| {
            (3 - axes..3)
                .map(|a| AxisTaps::new(backend, denoiser, l.padded[a]))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    // Analysis: each level's coefficients, the next approximation in their low corner.
    let mut approx = out;
    let mut coeffs: Vec<DeviceVec<B, f32>> = Vec::with_capacity(levels.len());
    for (level, level_taps) in levels.iter().zip(&taps) {
        let LevelShape { grid, padded, half } = *level;
        let mut buf = DeviceVec::zeros(backend, planes * padded.iter().product::<usize>())?;
        copy_box(backend, &approx, grid, &buf, padded, padded, planes)?;
        for (a, t) in (3 - axes..3).zip(level_taps) {
            buf = axis_step(backend, &buf, padded, a, t, false, planes)?;
        }
        approx = DeviceVec::zeros(backend, planes * half.iter().product::<usize>())?;
        copy_box(backend, &buf, padded, &approx, half, half, planes)?;
        coeffs.push(buf);
    }
    // Thresholding of the details: everything outside each level's low corner.
    let hard = matches!(denoiser.threshold, Threshold::Hard);
    for (level, buf) in levels.iter().zip(&coeffs) {
        let [d, h, w] = grid_ints(level.padded)?.map(Arg::I32);
        let [hd, hh, hw] = grid_ints(level.half)?.map(Arg::I32);
        backend.launch(
            &kernels::WAVELET_THRESHOLD,
            LaunchConfig::elementwise(buf.len()),
            &[
                buf.arg(),
                d,
                h,
                w,
                hd,
                hh,
                hw,
                Arg::I32(hard.into()),
                Arg::F32(ths),
                Arg::I64(len_arg(buf.len())),
            ],
        )?;
    }
    // Synthesis, coarsest level first: the approximation back into its corner, the inverse steps
    // in reverse axis order, the level's input grid cut out of the padded one.
    for ((level, level_taps), mut buf) in levels.iter().zip(&taps).zip(coeffs).rev() {
        let LevelShape { grid, padded, half } = *level;
        copy_box(backend, &approx, half, &buf, padded, half, planes)?;
        for (a, t) in (3 - axes..3).zip(level_taps).rev() {
            buf = axis_step(backend, &buf, padded, a, t, true, planes)?;
        }
        approx = DeviceVec::zeros(backend, planes * grid.iter().product::<usize>())?;
        copy_box(backend, &buf, padded, &approx, grid, grid, planes)?;
    }
    Ok(approx)
}

/// The floats [`wavelet_denoise`] holds at its peak beside its input, for `planes` planes of
/// `dims`: every level's coefficients, one step's output, the largest approximation twice (the one
/// being read and the one being written), and the taps (at most 16 per axis: db8's).
pub fn work_floats(dims: &[usize], levels: usize, planes: usize) -> Result<u64> {
    let shapes = level_shapes(dims, levels)?;
    let len = |g: [usize; 3]| g.iter().product::<usize>() as u64;
    let coeffs: u64 = shapes.iter().map(|l| len(l.padded)).sum();
    let step = shapes.iter().map(|l| len(l.padded)).max().unwrap_or(0);
    let approx = dims.iter().product::<usize>() as u64;
    let taps = (shapes.len() * dims.len() * 3 * 16) as u64;
    Ok(planes as u64 * (coeffs + step + 2 * approx) + taps)
}
