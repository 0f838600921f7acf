//! The iterate's arithmetic on the device: `axpy`, `scale`, `sub`, `clamp` (the same roundings as
//! `Tensor`'s, so the same bits), and `dot`/`norm` summed in f64 in an order fixed by the length
//! alone (the same result on every run and every GPU; equal to the CPU's to f64 rounding).

use super::{expect_len, len_arg};
use crate::device::backend::{Arg, BLOCK_THREADS, Backend, DeviceVec, LaunchConfig};
use crate::device::kernels;
use crate::error::Result;

/// Blocks of the first reduction pass: one per `BLOCK_THREADS` values, at most this many (the
/// second pass sums them with one block).
const MAX_REDUCE_BLOCKS: usize = 1024;

/// `y ← y + a·x`.
pub fn axpy<B: Backend>(
    backend: &B,
    y: &mut DeviceVec<B, f32>,
    a: f32,
    x: &DeviceVec<B, f32>,
) -> Result<()> {
    expect_len("device axpy", x, y.len())?;
    backend.launch(
        &kernels::AXPY,
        LaunchConfig::elementwise(y.len()),
        &[y.arg(), x.arg(), Arg::F32(a), Arg::I64(len_arg(y.len()))],
    )
}

/// `x ← a·x`.
pub fn scale<B: Backend>(backend: &B, x: &mut DeviceVec<B, f32>, a: f32) -> Result<()> {
    backend.launch(
        &kernels::SCALE,
        LaunchConfig::elementwise(x.len()),
        &[x.arg(), Arg::F32(a), Arg::I64(len_arg(x.len()))],
    )
}

/// `a − b` as a new array.
pub fn sub<B: Backend>(
    backend: &B,
    a: &DeviceVec<B, f32>,
    b: &DeviceVec<B, f32>,
) -> Result<DeviceVec<B, f32>> {
    expect_len("device sub", b, a.len())?;
    let out = DeviceVec::zeros(backend, a.len())?;
    backend.launch(
        &kernels::SUB,
        LaunchConfig::elementwise(a.len()),
        &[out.arg(), a.arg(), b.arg(), Arg::I64(len_arg(a.len()))],
    )?;
    Ok(out)
}

/// `x ← clamp(x, lo, hi)` (NaN stays NaN, as `f32::clamp`).
pub fn clamp<B: Backend>(backend: &B, x: &mut DeviceVec<B, f32>, lo: f32, hi: f32) -> Result<()> {
    backend.launch(
        &kernels::CLAMP,
        LaunchConfig::elementwise(x.len()),
        &[
            x.arg(),
            Arg::F32(lo),
            Arg::F32(hi),
            Arg::I64(len_arg(x.len())),
        ],
    )
}

/// `⟨a, b⟩` accumulated in f64 (two passes: per-block partial sums, then one block sums them).
pub fn dot<B: Backend>(backend: &B, a: &DeviceVec<B, f32>, b: &DeviceVec<B, f32>) -> Result<f64> {
    expect_len("device dot", b, a.len())?;
    let blocks = a
        .len()
        .div_ceil(BLOCK_THREADS as usize)
        .clamp(1, MAX_REDUCE_BLOCKS);
    let partials = DeviceVec::<B, f64>::zeros(backend, blocks)?;
    let total = DeviceVec::<B, f64>::zeros(backend, 1)?;
    let block = [BLOCK_THREADS, 1, 1];
    backend.launch(
        &kernels::DOT_PARTIALS,
        LaunchConfig {
            grid: [blocks as u32, 1, 1],
            block,
        },
        &[a.arg(), b.arg(), partials.arg(), Arg::I64(len_arg(a.len()))],
    )?;
    backend.launch(
        &kernels::SUM_PARTIALS,
        LaunchConfig {
            grid: [1, 1, 1],
            block,
        },
        &[partials.arg(), Arg::I32(blocks as i32), total.arg()],
    )?;
    Ok(total.to_host(backend)?[0])
}

/// `‖x‖₂` (from [`dot`]).
pub fn norm<B: Backend>(backend: &B, x: &DeviceVec<B, f32>) -> Result<f64> {
    Ok(dot(backend, x, x)?.sqrt())
}

/// `dst[p] ← src[p]ᵀ` for `planes` matrices of `rows × cols`.
pub fn transpose<B: Backend>(
    backend: &B,
    src: &DeviceVec<B, f32>,
    rows: usize,
    cols: usize,
    planes: usize,
) -> Result<DeviceVec<B, f32>> {
    expect_len("device transpose", src, rows * cols * planes)?;
    let dst = DeviceVec::zeros(backend, src.len())?;
    backend.launch(
        &kernels::TRANSPOSE,
        LaunchConfig::elementwise(src.len()),
        &[
            src.arg(),
            dst.arg(),
            Arg::I32(super::int_arg("rows", rows)?),
            Arg::I32(super::int_arg("columns", cols)?),
            Arg::I64(len_arg(planes)),
        ],
    )?;
    Ok(dst)
}
