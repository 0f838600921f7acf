//! Whether the own AVX-512 kernels run: [`patch_gemm`](super::patch_gemm) (the forward's patch
//! product) and [`patch_dot`](super::patch_dot) (the weight gradient's) ask here, once per
//! process, so that one switch turns both off.
//!
//! `TESSERA_PATCH_GEMM=crate` in the environment keeps the portable paths (the `gemm` crate, and
//! transpose + `gemm` for the weight gradient) on any CPU: the benchmarks time both in one run, the
//! kernels' figures in a child process with the switch.

use std::sync::OnceLock;

/// The environment variable that turns the own kernels off, and the value that does.
pub const SWITCH: (&str, &str) = ("TESSERA_PATCH_GEMM", "crate");

/// Whether this process runs the own f32 kernels: the CPU has AVX-512F and [`SWITCH`] is not set
/// (read at the first call and kept).
pub fn own_kernels() -> bool {
    static OWN: OnceLock<bool> = OnceLock::new();
    *OWN.get_or_init(|| !switched_off() && avx512f())
}

/// Whether [`SWITCH`] asks for the portable paths.
pub fn switched_off() -> bool {
    std::env::var(SWITCH.0).as_deref() == Ok(SWITCH.1)
}

/// Runs `f` compiled for AVX-512F where the CPU has it (whatever [`SWITCH`] says: this is the
/// compiler's vectorisation, not an own kernel). The baseline x86-64 target vectorises `f`'s loops
/// four `f32` lanes wide; inlined here they run sixteen wide. The operations on each value are the
/// same (Rust never fuses a multiply and an add on its own), so both paths give the same bits.
#[inline(always)]
pub fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if avx512f() {
        #[target_feature(enable = "avx512f")]
        unsafe fn wide<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        // SAFETY: the CPU has AVX-512F.
        return unsafe { wide(f) };
    }
    f()
}

/// Whether the CPU has AVX-512F.
pub fn avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_and_the_cpu_decide() {
        assert_eq!(own_kernels(), avx512f() && !switched_off());
        // Cached: the same answer again.
        assert_eq!(own_kernels(), own_kernels());
    }
}
