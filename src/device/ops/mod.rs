//! Device operations, each the twin of a CPU operation it is checked against (`super::selftest`):
//! [`vector`] (the iterate's arithmetic and deterministic reductions, as `Tensor`'s), [`tomography`]
//! (`physics::tomography`'s forward and exact adjoint), [`conv`] (the blur's FFT path, every
//! padding, as `physics::blur_engine`). Written once against [`super::backend::Backend`].

pub mod blur_engine;
pub mod tomography;
pub mod tv;
pub mod vector;

use super::backend::{Backend, DeviceVec};
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
