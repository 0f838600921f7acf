//! The float type of the wave solver: `f64` where parity with deepwave is checked to 1e-8, `f32` in
//! production runs (half the memory traffic of the stencil).

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// `f32` or `f64`, with the few operations the solver needs.
pub trait Real:
    Copy
    + Send
    + Sync
    + Default
    + PartialOrd
    + Debug
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Sum
    + serde::Serialize
    + serde::de::DeserializeOwned
{
    const ZERO: Self;
    const ONE: Self;
    const TWO: Self;
    /// Bytes per value (for memory reports).
    const BYTES: usize;
    /// `"f32"` or `"f64"`.
    const NAME: &'static str;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn is_finite(self) -> bool;
    fn sqrt(self) -> Self;
    /// `self·a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Appends the little-endian bytes (the model hash that checks the ranks agree).
    fn put_le(self, out: &mut Vec<u8>);
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const TWO: Self = 2.0;
    const BYTES: usize = 4;
    const NAME: &'static str = "f32";
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const TWO: Self = 2.0;
    const BYTES: usize = 8;
    const NAME: &'static str = "f64";
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// Converts a slice of values.
pub fn convert<A: Real, B: Real>(x: &[A]) -> Vec<B> {
    x.iter().map(|v| B::from_f64(v.to_f64())).collect()
}
