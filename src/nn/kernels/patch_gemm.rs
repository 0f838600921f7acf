//! The forward convolution's product `out[co, j] (+)= Σ_k W[co, k] · col[k, j]` (then bias and ReLU)
//! for `f32` on AVX-512, reading both operands where they lie.
//!
//! Why not the `gemm` crate: it packs its operands first. With the output row-major it runs the
//! product transposed, so the patch matrix is its left operand, which it packs block by block into
//! a thread-local slab sized to the L2 cache (1 MiB per thread, allocated at the first product and
//! kept for the thread's life) or, where a strip's width is not a multiple of its SIMD width,
//! copies whole. Im2col already lays the patches out as this kernel wants them (each of a strip's
//! `k_len` rows contiguous over the output positions `j`), so the packing buys nothing here and its
//! slab was 2 MiB of every rank's memory whatever the number of ranks (issue 11's memory study:
//! CNN3D's forward on 3 ranks).
//!
//! The register block is [`ROWS`] output channels × [`VECS`] vectors of 16 output positions: per
//! patch row `k`, `VECS` loads of the patch matrix and `ROWS × VECS` fused multiply-adds with the
//! weights broadcast. A tile of positions sweeps every channel block before the next tile, so its
//! patch columns stay in L2 while the weights (`C_out × k_len`) come from L1 and L2. The ragged end of
//! a row runs the same instructions under lane masks, and every output is summed in the order
//! `k = 0, 1, …` from zero (or from the accumulator the caller passes), so a value does not depend on
//! the strip or tile its position falls in: decomposed and undivided networks stay equal bit for bit.
//!
//! Other element types and CPUs without AVX-512 keep the `gemm` crate ([`available`] says which;
//! `TESSERA_PATCH_GEMM=crate` asks for it, here and for [`patch_dot`](super::patch_dot) alike —
//! [`simd`](super::simd) — so a benchmark can time both in one run).

/// Output channels per register block.
pub const ROWS: usize = 8;
/// Vectors of 16 output positions per register block (`ROWS × VECS` = 24 accumulators).
pub const VECS: usize = 3;
/// Output positions per tile.
pub const TILE: usize = 16 * VECS;

/// What the product's operands are, for [`weights_times_patches`].
#[derive(Clone, Copy)]
pub struct Product<'a> {
    /// `C_out × k_len`: element `(co, k)` at `co · weight_strides[0] + k · weight_strides[1]`
    /// (`[k_len, 1]`, row-major, for PyTorch's `(C_out, C_in, k…)` as stored).
    pub weight: &'a [f32],
    pub weight_strides: [usize; 2],
    pub c_out: usize,
    pub k_len: usize,
    /// The patch matrix: `k_len` rows of `ld` values; columns `0..n` are used.
    pub col: &'a [f32],
    pub ld: usize,
    pub n: usize,
    /// Per-channel bias added after the sum.
    pub bias: Option<&'a [f32]>,
    pub relu: bool,
    /// Add the sum to what the output already holds (a skip connection) instead of replacing it.
    pub accumulate: bool,
}

/// Whether [`weights_times_patches`] runs on this CPU for element type `T` (`f32` and AVX-512;
/// `TESSERA_PATCH_GEMM=crate` keeps the `gemm` crate, for benchmarks against it: [`super::simd`]).
pub fn available<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::simd::own_kernels()
}

/// `s` as `f32`s (a view, no copy), for callers of the product, which runs on `f32` only: they
/// have checked [`available`], so another `T` is a bug and panics.
pub fn as_f32<T: bytemuck::Pod>(s: &[T]) -> &[f32] {
    assert_f32::<T>();
    bytemuck::cast_slice(s)
}

/// `s` as `f32`s (a view, no copy); panics unless `T` is `f32`, as [`as_f32`].
pub fn as_f32_mut<T: bytemuck::Pod>(s: &mut [T]) -> &mut [f32] {
    assert_f32::<T>();
    bytemuck::cast_slice_mut(s)
}

fn assert_f32<T: 'static>() {
    assert!(
        std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>(),
        "the native patch product runs on f32"
    );
}

/// `out[co, j] = relu?(acc?[co, j] + Σ_k weight[co, k] · col[k, j] + bias[co])` for `co < c_out`,
/// `j < n`, where row `co` of the output starts at `dst + co · dst_stride`.
///
/// Panics if the operands are shorter than their shapes say or [`available`] is false.
///
/// # Safety
/// `dst + co · dst_stride + j` must be valid for reads and writes for every `co < c_out`, `j < n`,
/// and no other thread may access those elements during the call.
pub unsafe fn weights_times_patches(p: &Product, dst: *mut f32, dst_stride: usize) {
    assert!(super::simd::avx512f(), "the patch product needs AVX-512");
    if p.n == 0 || p.c_out == 0 {
        return;
    }
    let [w_row, w_k] = p.weight_strides;
    assert!(
        p.k_len == 0 || p.weight.len() > (p.c_out - 1) * w_row + (p.k_len - 1) * w_k,
        "patch product weights"
    );
    assert!(
        p.ld >= p.n && (p.k_len == 0 || p.col.len() >= (p.k_len - 1) * p.ld + p.n),
        "patch product patch matrix"
    );
    assert!(
        p.bias.is_none_or(|b| b.len() >= p.c_out),
        "patch product bias"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512F is present (asserted above); the operand bounds were checked above and the
    // caller vouches for `dst`.
    unsafe {
        avx512::product(p, dst, dst_stride)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Product, ROWS, TILE, VECS};

    /// Lane masks for a tile of `width ≤ TILE` positions.
    fn masks(width: usize) -> [__mmask16; VECS] {
        std::array::from_fn(|v| {
            let lanes = width.saturating_sub(16 * v).min(16);
            ((1u32 << lanes) - 1) as __mmask16
        })
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn product(p: &Product, dst: *mut f32, dst_stride: usize) {
        for j0 in (0..p.n).step_by(TILE) {
            let m = masks((p.n - j0).min(TILE));
            let mut co = 0;
            while co < p.c_out {
                let rows = (p.c_out - co).min(ROWS);
                // SAFETY: rows co..co + rows and columns j0..j0 + TILE (masked to n) are in bounds
                // of every operand (checked by the caller) and of `dst` (the caller's contract).
                unsafe {
                    let args = (p, co, j0, m, dst, dst_stride);
                    match rows {
                        8 => block::<8>(args),
                        7 => block::<7>(args),
                        6 => block::<6>(args),
                        5 => block::<5>(args),
                        4 => block::<4>(args),
                        3 => block::<3>(args),
                        2 => block::<2>(args),
                        _ => block::<1>(args),
                    }
                }
                co += rows;
            }
        }
    }

    type BlockArgs<'a> = (
        &'a Product<'a>,
        usize,
        usize,
        [__mmask16; VECS],
        *mut f32,
        usize,
    );

    /// Output channels `co..co + R`, positions `j0..j0 + TILE` under the masks.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block<const R: usize>((p, co, j0, m, dst, dst_stride): BlockArgs) {
        // SAFETY (whole body): the caller bounds rows co..co + R ≤ c_out and masks the columns
        // to j0..n; masked-off lanes are neither read nor written.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); VECS]; R];
            let out = |r: usize, v: usize| dst.add((co + r) * dst_stride + j0 + 16 * v);
            if p.accumulate {
                for (r, a) in acc.iter_mut().enumerate() {
                    for (v, a) in a.iter_mut().enumerate() {
                        *a = _mm512_maskz_loadu_ps(m[v], out(r, v));
                    }
                }
            }
            let [w_row, w_k] = p.weight_strides;
            let w = p.weight.as_ptr().add(co * w_row);
            let mut c = p.col.as_ptr().add(j0);
            for k in 0..p.k_len {
                let x: [__m512; VECS] = [
                    _mm512_maskz_loadu_ps(m[0], c),
                    _mm512_maskz_loadu_ps(m[1], c.add(16)),
                    _mm512_maskz_loadu_ps(m[2], c.add(32)),
                ];
                for (r, a) in acc.iter_mut().enumerate() {
                    let wr = _mm512_set1_ps(*w.add(r * w_row + k * w_k));
                    for v in 0..VECS {
                        a[v] = _mm512_fmadd_ps(wr, x[v], a[v]);
                    }
                }
                c = c.add(p.ld);
            }
            let zero = _mm512_setzero_ps();
            for (r, a) in acc.iter().enumerate() {
                let b = _mm512_set1_ps(p.bias.map_or(0.0, |b| b[co + r]));
                for v in 0..VECS {
                    let mut y = _mm512_add_ps(a[v], b);
                    if p.relu {
                        y = _mm512_max_ps(y, zero);
                    }
                    _mm512_mask_storeu_ps(out(r, v), m[v], y);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition in f64, for comparison.
    fn reference(p: &Product, dst0: &[f32], dst_stride: usize) -> Vec<f64> {
        let mut out: Vec<f64> = dst0.iter().map(|&v| v as f64).collect();
        for co in 0..p.c_out {
            for j in 0..p.n {
                let mut s = if p.accumulate {
                    dst0[co * dst_stride + j] as f64
                } else {
                    0.0
                };
                for k in 0..p.k_len {
                    let [w_row, w_k] = p.weight_strides;
                    s += p.weight[co * w_row + k * w_k] as f64 * p.col[k * p.ld + j] as f64;
                }
                s += p.bias.map_or(0.0, |b| b[co] as f64);
                out[co * dst_stride + j] = if p.relu { s.max(0.0) } else { s };
            }
        }
        out
    }

    fn values(len: usize, seed: u64) -> Vec<f32> {
        // A small LCG: deterministic, no dependency on the rand crate's stream.
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn every_ragged_block_and_epilogue_matches_the_definition() {
        if !super::super::simd::avx512f() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut cases = 0;
        for &c_out in &[1, 3, 7, 8, 9, 16, 21] {
            for &k_len in &[0, 1, 5, 27, 216] {
                for &n in &[0, 1, 15, 16, 17, 47, 48, 49, 100, 145] {
                    for mode in 0..4 {
                        let (relu, accumulate, with_bias) =
                            (mode & 1 == 1, mode & 2 == 2, mode != 0);
                        let ld = n + (mode % 3) * 5;
                        let dst_stride = n + 7;
                        let seed = (c_out * 1000 + k_len * 10 + n) as u64 + mode as u64;
                        let weight = values(c_out * k_len, seed);
                        let col = values(k_len * ld, seed + 1);
                        let bias = values(c_out, seed + 2);
                        let dst0 = values(c_out * dst_stride, seed + 3);
                        // Odd modes read the weights transposed (column-major).
                        let weight_strides = match mode % 2 {
                            0 => [k_len, 1],
                            _ => [1, c_out],
                        };
                        let p = Product {
                            weight: &weight,
                            weight_strides,
                            c_out,
                            k_len,
                            col: &col,
                            ld,
                            n,
                            bias: with_bias.then_some(&bias[..]),
                            relu,
                            accumulate,
                        };
                        let want = reference(&p, &dst0, dst_stride);
                        let mut got = dst0.clone();
                        // SAFETY: `got` holds c_out rows of dst_stride ≥ n values.
                        unsafe { weights_times_patches(&p, got.as_mut_ptr(), dst_stride) };
                        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                            let (co, j) = (i / dst_stride, i % dst_stride);
                            // Past column n the output must be left exactly as it was.
                            let tol = if j < n {
                                1e-6 * (k_len as f64 + 2.0)
                            } else {
                                0.0
                            };
                            assert!(
                                (g as f64 - w).abs() <= tol,
                                "c_out {c_out} k_len {k_len} n {n} mode {mode}: ({co}, {j}) {g} vs {w}"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 7 * 5 * 10 * 4);
    }

    #[test]
    fn only_f32_takes_the_kernel() {
        assert!(!available::<f64>());
        assert_eq!(available::<f32>(), super::super::simd::own_kernels());
    }
}
