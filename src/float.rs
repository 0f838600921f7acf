//! The one float trait of the numeric core: `f32` for production runs (inference, training, wave
//! propagation at half the memory traffic), `f64` for the finite-difference, adjoint and deepwave
//! parity tests that need more digits than single precision holds.
//!
//! The native networks (`nn`), the wave solver (`physics::wave`), FWI and Adam are generic over
//! [`Float`]; `gemm` dispatches on the type at run time, and the AVX-512 kernels and Winograd take
//! `f32` only, so `f64` runs their portable paths.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// `f32` or `f64`, with the few operations the generic code needs.
pub trait Float:
    Copy
    + Default
    + Debug
    + PartialOrd
    + Send
    + Sync
    + 'static
    + bytemuck::Pod
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Sum
{
    const ZERO: Self;
    const ONE: Self;
    const TWO: Self;
    /// Bytes per value (for memory reports).
    const BYTES: usize;
    /// `"f32"` or `"f64"`, for messages.
    const NAME: &'static str;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
    fn max(self, other: Self) -> Self;
    fn is_finite(self) -> bool;
    fn sqrt(self) -> Self;
    /// `self·a + b` with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Appends the little-endian bytes (hashes that check ranks hold the same values).
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! float {
    ($t:ident) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const TWO: Self = 2.0;
            const BYTES: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            fn to_f32(self) -> f32 {
                self as f32
            }
            fn max(self, other: Self) -> Self {
                $t::max(self, other)
            }
            fn is_finite(self) -> bool {
                $t::is_finite(self)
            }
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            fn mul_add(self, a: Self, b: Self) -> Self {
                $t::mul_add(self, a, b)
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

float!(f32);
float!(f64);

/// Converts a slice of values.
pub fn convert<A: Float, B: Float>(x: &[A]) -> Vec<B> {
    x.iter().map(|v| B::from_f64(v.to_f64())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sizes_and_one_rounding() {
        assert_eq!((f32::NAME, f32::BYTES), ("f32", 4));
        assert_eq!((f64::NAME, f64::BYTES), ("f64", 8));
        // (1 + 2⁻¹²)² = 1 + 2⁻¹¹ + 2⁻²⁴: the 2⁻²⁴ is lost when the square is rounded first.
        let a = 1.0f32 + 2f32.powi(-12);
        let fused = Float::mul_add(a, a, -1.0f32);
        assert_ne!(fused, a * a - 1.0, "mul_add must round once");
        let mut bytes = Vec::new();
        1.5f64.put_le(&mut bytes);
        assert_eq!(bytes, 1.5f64.to_le_bytes());
        assert_eq!(convert::<f64, f32>(&[0.1, 2.0]), vec![0.1f32, 2.0]);
    }
}
