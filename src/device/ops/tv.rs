//! The TV prox on the device: [`crate::denoise::tv::TvDenoiser`]'s algorithm (Condat's over-relaxed
//! Chambolle–Pock iteration, cold start, the same steps, iteration cap and per-plane stopping rule)
//! for every plane of a batch at once. Each element-wise step rounds as the CPU's does; the stopping
//! test reads each plane's `‖Δx₂‖` and `‖x₂‖` (f64 sums in an order of the device's) once per
//! iteration, so a plane stops after the CPU's number of iterations unless its relative change
//! lands within f64 rounding of the criterion.

use super::{expect_len, int_arg, len_arg};
use crate::denoise::tv::TvDenoiser;
use crate::device::backend::{Arg, BLOCK_THREADS, Backend, DeviceVec, LaunchConfig};
use crate::device::kernels;
use crate::error::{Error, Result};

/// Blocks per plane of the stopping test's sums (the host adds each plane's partials in order).
const MAX_SUM_BLOCKS_PER_PLANE: usize = 256;

/// The most planes one launch of the sums takes (CUDA's limit on `gridDim.y`).
const MAX_PLANES: usize = 65_535;

/// `prox_{ths·TV}(y)` of `planes` planes of `dims` (`[H, W]` or `[D, H, W]`), as
/// `TvDenoiser::denoise` on the same planes. Returns the result and each plane's iteration count.
pub fn tv_prox<B: Backend>(
    backend: &B,
    tv: &TvDenoiser,
    y: &DeviceVec<B, f32>,
    planes: usize,
    dims: &[usize],
    ths: f32,
) -> Result<(DeviceVec<B, f32>, Vec<usize>)> {
    let [d, h, w] = match *dims {
        [h, w] => [1, h, w],
        [d, h, w] => [d, h, w],
        _ => {
            return Err(Error::Internal(format!(
                "device tv: planes of 2 or 3 axes, got {dims:?}"
            )));
        }
    };
    let axes = dims.len();
    let n = d * h * w;
    let total = planes * n;
    expect_len("device tv", y, total)?;
    if planes > MAX_PLANES {
        return Err(Error::Unsupported(format!(
            "device tv takes at most {MAX_PLANES} planes at once, got {planes}"
        )));
    }
    let x2 = y.duplicate(backend)?;
    if total == 0 {
        return Ok((x2, vec![0; planes]));
    }
    let xbar = DeviceVec::<B, f32>::zeros(backend, total)?;
    let delta = DeviceVec::<B, f32>::zeros(backend, total)?;
    let u2 = DeviceVec::<B, f32>::zeros(backend, total * axes)?;
    let mut active = vec![1i32; planes];
    let mut active_dev = DeviceVec::from_host(backend, &active)?;
    let sum_blocks = n
        .div_ceil(BLOCK_THREADS as usize)
        .clamp(1, MAX_SUM_BLOCKS_PER_PLANE);
    let partials = DeviceVec::<B, f64>::zeros(backend, planes * sum_blocks * 2)?;
    let (di, hi, wi) = (
        int_arg("tv depth", d)?,
        int_arg("tv height", h)?,
        int_arg("tv width", w)?,
    );
    let tau = tv.tau;
    let sigma_dual = 1.0 / (tau * (1u32 << (axes + 1)) as f32);
    let rho = tv.rho;
    let mut iterations = vec![0usize; planes];
    for it in 0..tv.n_it_max {
        for (count, &on) in iterations.iter_mut().zip(&active) {
            if on != 0 {
                *count = it + 1;
            }
        }
        backend.launch(
            &kernels::TV_PRIMAL,
            LaunchConfig::elementwise(total),
            &[
                x2.arg(),
                xbar.arg(),
                delta.arg(),
                u2.arg(),
                y.arg(),
                active_dev.arg(),
                Arg::I32(di),
                Arg::I32(hi),
                Arg::I32(wi),
                Arg::I32(axes as i32),
                Arg::F32(tau),
                Arg::F32(rho),
                Arg::I64(len_arg(total)),
            ],
        )?;
        backend.launch(
            &kernels::TV_DUAL,
            LaunchConfig::elementwise(total),
            &[
                u2.arg(),
                xbar.arg(),
                active_dev.arg(),
                Arg::I32(di),
                Arg::I32(hi),
                Arg::I32(wi),
                Arg::I32(axes as i32),
                Arg::F32(sigma_dual),
                Arg::F32(rho),
                Arg::F32(ths),
                Arg::I64(len_arg(total)),
            ],
        )?;
        // The CPU tests the criterion from the third iteration on.
        if it <= 1 {
            continue;
        }
        backend.launch(
            &kernels::TV_PLANE_SUMS,
            LaunchConfig {
                grid: [sum_blocks as u32, planes as u32, 1],
                block: [BLOCK_THREADS, 1, 1],
            },
            &[delta.arg(), x2.arg(), partials.arg(), Arg::I64(len_arg(n))],
        )?;
        let sums = partials.to_host(backend)?;
        let mut changed = false;
        for (plane, on) in active.iter_mut().enumerate() {
            if *on == 0 {
                continue;
            }
            let mine = &sums[plane * sum_blocks * 2..(plane + 1) * sum_blocks * 2];
            let diff_sq: f64 = mine.iter().step_by(2).sum();
            let norm_sq: f64 = mine.iter().skip(1).step_by(2).sum();
            let rel = diff_sq.sqrt() / (norm_sq.sqrt() + 1e-12);
            if rel < tv.crit as f64 {
                *on = 0;
                changed = true;
            }
        }
        if active.iter().all(|&on| on == 0) {
            break;
        }
        if changed {
            active_dev = DeviceVec::from_host(backend, &active)?;
        }
    }
    Ok((x2, iterations))
}
