//! The weight gradient's product for one strip, `acc[co][k] += Σ_j dz[co][j] · col[k][j]`, as a
//! block of dot products: [`conv`](super::conv)'s `conv_backward_weight` hands it each strip's
//! output gradient and patch matrix (f32, AVX-512); f64 and other machines keep transpose + `gemm`.
//!
//! Both operands already have the summed index `j` (the strip's output positions) contiguous, so
//! nothing is transposed or packed: a register block of [`BLOCK_CO`] output channels × [`BLOCK_K`]
//! patch rows holds 24 vectors of 16 partial sums over `j`, fed by loads straight from the rows
//! (masked for the ragged tail of `j`), then summed horizontally — the full block's 24 sums
//! together, as one shuffle tree — and added into `acc`. Patch rows
//! are the outer loop, so a block's six rows (18 KiB for a 768-column strip) stay in L1 while every
//! output channel's row streams from L2; `conv` builds those six rows just before the call
//! ([`add_products_strided`] into the block's columns of the gradient) and hands the output
//! gradient as a contiguous copy. The order of every sum is fixed by the shapes alone, not by
//! threads, so gradients stay reproducible; the tree adds in `_mm512_reduce_add_ps`'s order, so an
//! entry's bits do not depend on whether it fell in a full block or an edge block either.
//! `TESSERA_PATCH_GEMM=crate` turns the kernel off with the forward's ([`super::simd`]).

use std::any::TypeId;

use crate::float::Float;

/// Output channels per register block.
pub(crate) const BLOCK_CO: usize = 4;
/// Patch rows per register block (4 × 6 = 24 accumulators, 4 output-gradient vectors and a patch
/// one: 29 of the 32 vector registers).
pub(crate) const BLOCK_K: usize = 6;

/// Whether [`add_products`] runs for `T` in this process: `f32` on a CPU with AVX-512F, unless
/// `TESSERA_PATCH_GEMM=crate` asks for the portable path ([`super::simd`]).
pub(crate) fn available<T: Float>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>() && super::simd::own_kernels()
}

/// `acc (rows × k_len) += dz (rows × n, rows dz_stride apart) · colᵀ` with `col` the `k_len × n`
/// patch matrix (rows `n` apart) and `rows = acc.len() / k_len`, where [`available`] says so; returns
/// whether it ran (`false`: nothing was touched, the caller takes its portable path).
///
/// Panics if the slices are shorter than the shapes say (a caller's bug, not user input).
pub(crate) fn add_products<T: Float>(
    dz: &[T],
    dz_stride: usize,
    col: &[T],
    k_len: usize,
    n: usize,
    acc: &mut [T],
) -> bool {
    let rows = acc.len().checked_div(k_len).unwrap_or(0);
    assert_eq!(
        rows * k_len,
        acc.len(),
        "patch_dot: acc is not rows × k_len"
    );
    add_products_strided(rows, dz, dz_stride, col, k_len, n, acc, k_len)
}

/// [`add_products`] into `k_len` columns of an accumulator whose `rows` rows lie `acc_stride`
/// apart: the weight gradient's columns of one block of patch rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_products_strided<T: Float>(
    rows: usize,
    dz: &[T],
    dz_stride: usize,
    col: &[T],
    k_len: usize,
    n: usize,
    acc: &mut [T],
    acc_stride: usize,
) -> bool {
    if !available::<T>() {
        return false;
    }
    // `available` checked that T is f32; the casts cannot fail then.
    let (Ok(dz), Ok(col), Ok(acc)) = (
        bytemuck::try_cast_slice::<T, f32>(dz),
        bytemuck::try_cast_slice::<T, f32>(col),
        bytemuck::try_cast_slice_mut::<T, f32>(acc),
    ) else {
        return false;
    };
    if rows == 0 || k_len == 0 {
        return true;
    }
    assert!(
        col.len() >= k_len * n,
        "patch_dot: col shorter than k_len × n"
    );
    assert!(acc_stride >= k_len, "patch_dot: acc rows overlap");
    assert!(
        acc.len() >= (rows - 1) * acc_stride + k_len,
        "patch_dot: acc shorter than its rows"
    );
    if n > 0 {
        assert!(dz_stride >= n, "patch_dot: dz rows overlap");
        assert!(
            dz.len() >= (rows - 1) * dz_stride + n,
            "patch_dot: dz shorter than its rows"
        );
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available` found AVX-512F; the asserts above bound every row the kernel touches.
        unsafe { avx512::add_products(rows, dz, dz_stride, col, k_len, n, acc, acc_stride) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("available() is false off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{BLOCK_CO, BLOCK_K};

    const LANES: usize = 16;

    /// See [`super::add_products_strided`]; shapes already checked.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn add_products(
        rows: usize,
        dz: &[f32],
        dz_stride: usize,
        col: &[f32],
        k_len: usize,
        n: usize,
        acc: &mut [f32],
        acc_stride: usize,
    ) {
        if n == 0 || k_len == 0 {
            return;
        }
        let mut k0 = 0;
        while k0 < k_len {
            let mk = (k_len - k0).min(BLOCK_K);
            let mut c0 = 0;
            while c0 < rows {
                let mc = (rows - c0).min(BLOCK_CO);
                // SAFETY: rows c0..c0 + mc of dz and k0..k0 + mk of col hold n values each, and
                // acc's block lies inside its rows × k_len (checked by the caller).
                unsafe {
                    block_any(
                        mc,
                        mk,
                        dz.as_ptr().add(c0 * dz_stride),
                        dz_stride,
                        col.as_ptr().add(k0 * n),
                        n,
                        acc.as_mut_ptr().add(c0 * acc_stride + k0),
                        acc_stride,
                    )
                };
                c0 += mc;
            }
            k0 += mk;
        }
    }

    /// [`block`] for an `mc × mk` edge block (`mc ≤ 4`, `mk ≤ 6`), each shape compiled on its own so
    /// that edges keep their accumulators in registers too.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn block_any(
        mc: usize,
        mk: usize,
        dz: *const f32,
        dz_stride: usize,
        col: *const f32,
        n: usize,
        acc: *mut f32,
        acc_stride: usize,
    ) {
        macro_rules! shapes {
            ($(($c:literal, $k:literal)),*) => {
                match (mc, mk) {
                    // SAFETY: as for this function.
                    $(($c, $k) => unsafe { block::<$c, $k>(dz, dz_stride, col, n, acc, acc_stride) },)*
                    _ => unreachable!("register block {mc} × {mk}"),
                }
            };
        }
        shapes!(
            (4, 6),
            (4, 5),
            (4, 4),
            (4, 3),
            (4, 2),
            (4, 1),
            (3, 6),
            (3, 5),
            (3, 4),
            (3, 3),
            (3, 2),
            (3, 1),
            (2, 6),
            (2, 5),
            (2, 4),
            (2, 3),
            (2, 2),
            (2, 1),
            (1, 6),
            (1, 5),
            (1, 4),
            (1, 3),
            (1, 2),
            (1, 1)
        )
    }

    /// `acc[c][k] += Σ_j dz[c][j] · col[k][j]` for `c < MC`, `k < MK`, `j < n`.
    ///
    /// Safety: AVX-512F present; `MC` rows of `dz` (`dz_stride` apart) and `MK` rows of `col` (`n`
    /// apart) hold `n` values each; `acc`'s `MC` rows (`acc_stride` apart) hold `MK` values each.
    ///
    /// Never inlined: one function per shape lets the register allocator keep all `MC × MK`
    /// accumulators in registers (inlined into one body with the other shapes, they spilled).
    /// The `MC` output-gradient vectors are loaded first and each patch vector as it is used
    /// (`MC + 1` live operands): with all `MK` patch vectors loaded first (`MK + 1`, 31 registers
    /// with the accumulators) the 4 × 6 block spilled six accumulators to the stack in its loop.
    // Index loops over the register block: each (c, k) names one accumulator register.
    #[allow(clippy::needless_range_loop)]
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const MC: usize, const MK: usize>(
        dz: *const f32,
        dz_stride: usize,
        col: *const f32,
        n: usize,
        acc: *mut f32,
        acc_stride: usize,
    ) {
        // SAFETY: every load stays inside the rows described above (the tail masked), every store
        // inside acc's block.
        unsafe {
            let mut s = [[_mm512_setzero_ps(); MK]; MC];
            let whole = n - n % LANES;
            let mut j = 0;
            while j < whole {
                let mut d = [_mm512_setzero_ps(); MC];
                for c in 0..MC {
                    d[c] = _mm512_loadu_ps(dz.add(c * dz_stride + j));
                }
                for k in 0..MK {
                    let p = _mm512_loadu_ps(col.add(k * n + j));
                    for c in 0..MC {
                        s[c][k] = _mm512_fmadd_ps(d[c], p, s[c][k]);
                    }
                }
                j += LANES;
            }
            if j < n {
                let mask: __mmask16 = (1u16 << (n - j)) - 1;
                let mut d = [_mm512_setzero_ps(); MC];
                for c in 0..MC {
                    d[c] = _mm512_maskz_loadu_ps(mask, dz.add(c * dz_stride + j));
                }
                for k in 0..MK {
                    let p = _mm512_maskz_loadu_ps(mask, col.add(k * n + j));
                    for c in 0..MC {
                        s[c][k] = _mm512_fmadd_ps(d[c], p, s[c][k]);
                    }
                }
            }
            if MC == BLOCK_CO && MK == BLOCK_K {
                // The whole block's 24 sums in two vectors, then each row's six into acc at once.
                let v = |i: usize| s[i / MK][i % MK];
                let first = sums16(std::array::from_fn(v));
                let rest = sums8(std::array::from_fn(|i| v(16 + i)));
                for c in 0..BLOCK_CO {
                    let idx = _mm512_loadu_si512(ROW_LANES[c].as_ptr().cast());
                    let row = _mm512_permutex2var_ps(first, idx, rest);
                    let at = acc.add(c * acc_stride);
                    let old = _mm512_maskz_loadu_ps(ROW_MASK, at);
                    _mm512_mask_storeu_ps(at, ROW_MASK, _mm512_add_ps(old, row));
                }
            } else {
                for c in 0..MC {
                    for k in 0..MK {
                        *acc.add(c * acc_stride + k) += _mm512_reduce_add_ps(s[c][k]);
                    }
                }
            }
        }
    }

    // The full block's horizontal sums. One `_mm512_reduce_add_ps` per accumulator (4 shuffles, 4
    // adds and a scalar add each) took a quarter of the kernel's time on 768-column strips;
    // reducing the 24 together costs 23 vector adds and 46 shuffles. Each sum is added in exactly
    // `_mm512_reduce_add_ps`'s order (lane i + i+8, then i + i+4, i + i+2, i + i+1), so the full
    // block and the edge blocks round alike: an entry's bits do not depend on its block.

    const ROW_MASK: __mmask16 = (1 << BLOCK_K) - 1;

    /// For row `c` of the 4 × 6 block, the lanes of [`sums16`] (0..16) and [`sums8`] (16..32)
    /// that hold its six sums (accumulator `f = c · 6 + k` lands in lane `4 (f % 4) + f / 4` of
    /// its vector, counting `f` from 16 in the second).
    static ROW_LANES: [[i32; LANES]; BLOCK_CO] = {
        let mut t = [[0i32; LANES]; BLOCK_CO];
        let mut c = 0;
        while c < BLOCK_CO {
            let mut k = 0;
            while k < BLOCK_K {
                let f = c * BLOCK_K + k;
                t[c][k] = if f < 16 {
                    4 * (f % 4) + f / 4
                } else {
                    16 + 4 * ((f - 16) % 4) + (f - 16) / 4
                } as i32;
                k += 1;
            }
            c += 1;
        }
        t
    };

    /// Lane `i + 8` added to lane `i` of `a` (into lanes 0..8) and of `b` (8..16).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn halve(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
        )
    }

    /// Two [`halve`]s (four vectors' 8 partial sums) to four vectors' 4 partial sums, vector `q`
    /// in 128-bit lane `q`: lane `i + 4` added to lane `i`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn quarter(p: __m512, q: __m512) -> __m512 {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(p, q),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(p, q),
        )
    }

    /// Eight vectors to, in 128-bit lane `q`, `[x0 + x2, y0 + y2, x1 + x3, y1 + y3]` with `x` the 4
    /// partial sums of `v[q]` and `y` those of `v[q + 4]`: lane `i + 2` added to lane `i`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn eighth(v: [__m512; 8]) -> __m512 {
        let x = quarter(halve(v[0], v[1]), halve(v[2], v[3]));
        let y = quarter(halve(v[4], v[5]), halve(v[6], v[7]));
        _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y))
    }

    /// The last step for two [`eighth`]s, `(x0 + x2) + (x1 + x3)`: lane `4q + r` holds the sum of
    /// `a`'s `v[q]`, `v[q + 4]` (r = 0, 1) and `b`'s (r = 2, 3).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn last(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(a, b),
            _mm512_shuffle_ps::<0b11_10_11_10>(a, b),
        )
    }

    /// The 16 horizontal sums of `v`, `v[f]`'s in lane `4 (f % 4) + f / 4`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sums16(v: [__m512; 16]) -> __m512 {
        let a = eighth([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]);
        let b = eighth([v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]]);
        last(a, b)
    }

    /// The 8 horizontal sums of `v`, `v[f]`'s in lane `4 (f % 4) + f / 4` (lanes `4q + 2` and
    /// `4q + 3` repeat them).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sums8(v: [__m512; 8]) -> __m512 {
        let a = eighth(v);
        last(a, a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// `acc += dz · colᵀ` in f64, the reference.
    fn reference(
        dz: &[f32],
        dz_stride: usize,
        col: &[f32],
        k_len: usize,
        n: usize,
        acc: &[f32],
    ) -> (Vec<f64>, Vec<f64>) {
        let rows = acc.len() / k_len.max(1);
        let mut exact = vec![0.0; acc.len()];
        // Σ |terms|, which bounds the rounding error of any order of the f32 sum.
        let mut magnitude = vec![0.0; acc.len()];
        for c in 0..rows {
            for k in 0..k_len {
                let (mut s, mut m) = (acc[c * k_len + k] as f64, acc[c * k_len + k].abs() as f64);
                for j in 0..n {
                    let t = dz[c * dz_stride + j] as f64 * col[k * n + j] as f64;
                    s += t;
                    m += t.abs();
                }
                exact[c * k_len + k] = s;
                magnitude[c * k_len + k] = m;
            }
        }
        (exact, magnitude)
    }

    fn random(len: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    #[test]
    fn the_kernel_matches_an_f64_reference_on_every_ragged_edge() {
        if !available::<f32>() {
            eprintln!("no AVX-512F here: the kernel is not used, nothing to test");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        // Every c_out and k_len remainder of the 4 × 6 block, n below, at and above the 16 lanes.
        let mut shapes = vec![];
        for rows in [1, 2, 3, 4, 5, 7, 8, 13] {
            for k_len in [1, 2, 3, 5, 6, 7, 11, 12, 19] {
                for n in [0, 1, 7, 15, 16, 17, 33, 100] {
                    shapes.push((rows, k_len, n));
                }
            }
        }
        shapes.push((64, 576, 768)); // the 3×3 64-channel layer's strip
        shapes.push((9, 29, 1031));
        for (rows, k_len, n) in shapes {
            let pad = rng.random_range(0..5usize);
            let dz_stride = n + pad;
            let dz = random(rows * dz_stride, &mut rng);
            let col = random(k_len * n, &mut rng);
            let start = random(rows * k_len, &mut rng);
            let (exact, magnitude) = reference(&dz, dz_stride, &col, k_len, n, &start);
            let mut acc = start.clone();
            assert!(add_products(&dz, dz_stride, &col, k_len, n, &mut acc));
            // Any order of n + 1 f32 additions (plus the f32 products) errs by at most
            // (n + 2)·ε·Σ|terms| (Higham, ch. 3); the blocked sum's depth is far less.
            let eps = f32::EPSILON as f64;
            for i in 0..acc.len() {
                let bound = (n as f64 + 2.0) * eps * magnitude[i];
                let err = (acc[i] as f64 - exact[i]).abs();
                assert!(
                    err <= bound,
                    "{rows}×{k_len}, n {n}: entry {i} off by {err:e}, bound {bound:e}"
                );
            }
            // n = 0 adds nothing: the accumulator is returned bit for bit.
            if n == 0 {
                assert_eq!(acc, start);
            }
        }
    }

    #[test]
    fn the_sum_is_bitwise_reproducible_and_blocks_do_not_interact() {
        if !available::<f32>() {
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let (rows, k_len, n) = (11, 17, 45);
        let dz = random(rows * n, &mut rng);
        let col = random(k_len * n, &mut rng);
        let mut whole = vec![0.0f32; rows * k_len];
        assert!(add_products(&dz, n, &col, k_len, n, &mut whole));
        let mut again = vec![0.0f32; rows * k_len];
        assert!(add_products(&dz, n, &col, k_len, n, &mut again));
        assert_eq!(whole, again);
        // One output channel at a time gives the same bits: an entry's sum depends on its own row
        // and column only, not on which block it fell in.
        for c in 0..rows {
            let mut one = vec![0.0f32; k_len];
            assert!(add_products(&dz[c * n..], n, &col, k_len, n, &mut one));
            assert_eq!(one, whole[c * k_len..(c + 1) * k_len]);
        }
    }

    #[test]
    fn a_full_block_rounds_each_entry_as_an_edge_block_and_leaves_the_gaps_alone() {
        if !available::<f32>() {
            return;
        }
        // The 4 × 6 block reduces its 24 sums together (a shuffle tree); edge blocks reduce each
        // accumulator alone. Both must add in the same order: every entry of two full blocks in
        // each direction against the same entry as a 1 × 1 block, bit for bit, from a nonzero
        // accumulator, for n below, at and past the lanes and with a ragged tail.
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let (rows, k_len, acc_stride) = (8, 12, 15);
        for n in [1, 15, 16, 17, 48, 100, 768, 1031] {
            let dz = random(rows * n, &mut rng);
            let col = random(k_len * n, &mut rng);
            let start = random(rows * acc_stride, &mut rng);
            let mut acc = start.clone();
            assert!(add_products_strided(
                rows, &dz, n, &col, k_len, n, &mut acc, acc_stride
            ));
            for c in 0..rows {
                let row = c * acc_stride;
                for k in 0..k_len {
                    let mut one = [start[row + k]];
                    assert!(add_products(&dz[c * n..], n, &col[k * n..], 1, n, &mut one));
                    assert_eq!(
                        acc[row + k].to_bits(),
                        one[0].to_bits(),
                        "n {n}: entry ({c}, {k}) {} alone, {} in its block",
                        one[0],
                        acc[row + k]
                    );
                }
                // The masked stores wrote six columns per row, nothing past the block's columns.
                assert_eq!(
                    acc[row + k_len..row + acc_stride],
                    start[row + k_len..row + acc_stride]
                );
            }
        }
    }

    #[test]
    fn f64_is_left_to_the_portable_path() {
        let mut acc = vec![1.0f64; 4];
        let ran = add_products(&[1.0f64; 4], 2, &[1.0f64; 4], 2, 2, &mut acc);
        assert!(!ran);
        assert_eq!(acc, vec![1.0; 4]);
        assert!(!available::<f64>());
    }
}
