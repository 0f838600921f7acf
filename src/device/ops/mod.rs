//! Device operations, each the twin of a CPU operation it is checked against (`super::selftest`):
//! [`vector`] (the iterate's arithmetic and deterministic reductions, as `Tensor`'s), [`tomography`]
//! (`physics::tomography`'s forward and exact adjoint), [`blur_engine`] (the 2-D and 3-D blurs'
//! FFT path, every padding, as `physics::blur_engine`), [`tv`] and [`wavelet`] (the denoisers
//! `denoise::tv` and `denoise::wavelet`). Written once against [`super::backend::Backend`].

pub mod blur_engine;
pub mod tomography;
pub mod tv;
pub mod vector;
pub mod wavelet;

use super::backend::{Arg, Backend, DeviceVec, LaunchConfig};
use super::kernels;
use crate::error::{Error, Result};

/// Fails unless `v` holds `expected` values; `op` names the operation.
pub(crate) fn expect_len<B: Backend, T: bytemuck::Pod>(
    op: &str,
    v: &DeviceVec<B, T>,
    expected: usize,
) -> Result<()> {
    if v.len() != expected {
        return Err(Error::shape(op, &[expected], &[v.len()]));
    }
    Ok(())
}

/// `n` as the `long long` of a kernel's length parameter.
pub(crate) fn len_arg(n: usize) -> i64 {
    // Device arrays are allocated, so their lengths fit in i64.
    n as i64
}

/// `n` as a kernel's `int` parameter, or an error naming what is too large.
pub(crate) fn int_arg(what: &str, n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| {
        Error::Unsupported(format!(
            "{what} = {n} is larger than the device kernels take (2³¹ − 1)"
        ))
    })
}

/// The `out` window at `offset` of each of `planes` grids of `grid` cells (D, H, W): the crop after
/// an inverse FFT, shared by the blur's `A` and FBP's filtered sinogram.
pub(crate) fn crop_grids<B: Backend>(
    backend: &B,
    full: &DeviceVec<B, f32>,
    grid: [usize; 3],
    out: [usize; 3],
    offset: [usize; 3],
    planes: usize,
) -> Result<DeviceVec<B, f32>> {
    expect_len("device crop", full, planes * grid.iter().product::<usize>())?;
    let out_len = out.iter().product::<usize>();
    let y = DeviceVec::zeros(backend, planes * out_len)?;
    // Every extent is that of an allocated grid, which `int_arg` has checked where it was planned.
    let ints = |v: [usize; 3]| v.map(|n| Arg::I32(n as i32));
    let ([od, oh, ow], [gd, gh, gw], [cd, ch, cw]) = (ints(out), ints(grid), ints(offset));
    backend.launch(
        &kernels::CONV_CROP,
        LaunchConfig::elementwise(planes * out_len),
        &[
            full.arg(),
            y.arg(),
            od,
            oh,
            ow,
            gd,
            gh,
            gw,
            cd,
            ch,
            cw,
            Arg::I64(len_arg(planes)),
        ],
    )?;
    Ok(y)
}
