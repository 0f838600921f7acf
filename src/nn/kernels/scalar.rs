//! The element type of the native engine: `f32` for inference and training, `f64` for the
//! finite-difference and adjoint tests that need more digits than single precision holds.
//!
//! Every kernel is generic over [`Scalar`]; the `gemm` crate dispatches on the type at run time, and
//! the own AVX-512 kernels (`patch_gemm`, `patch_dot`) and Winograd take `f32` only, so `f64` runs
//! the portable paths.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Mul, Neg, Sub};

/// `f32` or `f64`.
pub trait Scalar:
    Copy
    + Default
    + Debug
    + PartialOrd
    + Send
    + Sync
    + 'static
    + bytemuck::Pod
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + Sum
{
    const ZERO: Self;
    const ONE: Self;
    /// `"f32"` or `"f64"`, for messages.
    const NAME: &'static str;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
    fn max(self, other: Self) -> Self;
}

impl Scalar for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NAME: &'static str = "f32";
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn max(self, other: Self) -> Self {
        f32::max(self, other)
    }
}

impl Scalar for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NAME: &'static str = "f64";
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn max(self, other: Self) -> Self {
        f64::max(self, other)
    }
}
