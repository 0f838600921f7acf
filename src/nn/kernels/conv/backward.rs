//! The backward passes: input gradients (a forward convolution with turned kernels at stride 1,
//! `col2im(Wᵀ · dz)` otherwise), weight gradients summed over strips in a fixed order, bias
//! gradients; each strip product on the own AVX-512 kernels or the `gemm` crate.

use rayon::prelude::*;

use super::forward::conv_forward;
use super::im2col::{col2im_add, im2col, im2col_span};
use super::strips::{SendPtr, gemm_parallelism, grad_strip_rows};
use super::{Features, Geom};
use crate::float::Float;
use crate::nn::kernels::{patch_dot, patch_gemm};

/// The adjoint of the convolution's linear part, for an input of `in_dims`.
///
/// With stride 1 it is itself a convolution: `dx[ci] = Σ_co flip(W[co, ci]) ⋆ dz[co]`, padded low by
/// `d·(k − 1) − pad_lo`, so it runs through [`conv_forward`] (one parallel GEMM per strip, no
/// scatter). Otherwise `dx = col2im(Wᵀ · dz)`: strips run one after the other (each strip's product
/// on all threads), the scatter of each strip in parallel over input channels, so no two threads add
/// into the same voxel.
pub(super) fn conv_backward_input<T: Float>(
    g: &Geom,
    weight: &[T],
    dz: &Features<T>,
    in_dims: [usize; 3],
    pad_lo: [usize; 3],
) -> Features<T> {
    assert_eq!(dz.channels, g.c_out, "conv output gradient channels");
    if let Some((flipped_g, flipped_pad)) = flipped_geometry(g, pad_lo) {
        let flipped_w = flip_kernels(g, weight);
        return conv_forward(
            &flipped_g,
            &flipped_w,
            None,
            false,
            dz,
            None,
            flipped_pad,
            in_dims,
        );
    }
    conv_backward_input_scatter(g, weight, dz, in_dims, pad_lo)
}

/// `dx = col2im(Wᵀ · dz)`, for any stride (see [`conv_backward_input`]).
fn conv_backward_input_scatter<T: Float>(
    g: &Geom,
    weight: &[T],
    dz: &Features<T>,
    in_dims: [usize; 3],
    pad_lo: [usize; 3],
) -> Features<T> {
    conv_backward_input_scatter_with(
        StripProduct::for_scalar::<T>(),
        g,
        weight,
        dz,
        in_dims,
        pad_lo,
    )
}

/// Which product a strip of a backward pass runs; tests compare the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StripProduct {
    /// An own AVX-512 kernel on the operands as they lie (f32 where [`patch_gemm::available`] says so;
    /// other cases take `Gemm`), with no thread-local packing slab (in a training rank the `gemm`
    /// crate's was 1 MiB per thread whatever the rank's block: issue 11's memory study). The
    /// strided input gradient's `col = Wᵀ · dz` runs [`patch_gemm::weights_times_patches`], the
    /// strip's columns split among the threads; the weight gradient's `dz · colᵀ` runs
    /// [`patch_dot::add_products`].
    Own,
    /// The `gemm` crate on all threads (any scalar, any CPU); the weight gradient transposes the
    /// patch matrix for it first.
    Gemm,
}

impl StripProduct {
    /// `Own` where the own kernels run for `T` on this machine (`patch_gemm` and `patch_dot` share one
    /// check), else `Gemm`.
    fn for_scalar<T: 'static>() -> Self {
        if patch_gemm::available::<T>() {
            StripProduct::Own
        } else {
            StripProduct::Gemm
        }
    }
}

/// [`conv_backward_input_scatter`] with the strip product chosen by the caller (tests compare the
/// two). Every `col` entry is `Σ_co W[co, k] · dz[co, j]` summed in `co` order from zero on either
/// thread count: the column split moves no term between sums.
fn conv_backward_input_scatter_with<T: Float>(
    kernel: StripProduct,
    g: &Geom,
    weight: &[T],
    dz: &Features<T>,
    in_dims: [usize; 3],
    pad_lo: [usize; 3],
) -> Features<T> {
    let mut dx = Features::zeros(dz.batch, g.c_in, in_dims);
    let k_len = g.k_len();
    let od = dz.dims;
    let (rows_total, wo) = (od[0] * od[1], od[2]);
    let out_s = dz.spatial_len();
    let in_s = dx.spatial_len();
    if out_s == 0 || in_s == 0 || g.c_out == 0 {
        return dx;
    }
    let native = kernel == StripProduct::Own && patch_gemm::available::<T>();
    let rows = grad_strip_rows(k_len, wo, rows_total, g.c_out * out_s);
    let mut col = vec![T::ZERO; k_len * rows * wo];
    let par = gemm::Parallelism::Rayon(rayon::current_num_threads());
    for b in 0..dz.batch {
        let dx_b = &mut dx.data[b * g.c_in * in_s..(b + 1) * g.c_in * in_s];
        for r0 in (0..rows_total).step_by(rows) {
            let r1 = (r0 + rows).min(rows_total);
            let n = (r1 - r0) * wo;
            let dz_strip = &dz.data[b * g.c_out * out_s + r0 * wo..];
            if native {
                weights_transposed_times_strip(
                    g,
                    weight,
                    dz_strip,
                    out_s,
                    n,
                    &mut col[..k_len * n],
                );
            } else {
                // col (k_len × n) = Wᵀ (k_len × C_out) · dz[b, :, strip] (C_out × n).
                // SAFETY: the pointers and strides describe in-bounds matrices of the sizes given.
                unsafe {
                    gemm::gemm(
                        k_len,
                        n,
                        g.c_out,
                        col.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        weight.as_ptr(),
                        k_len as isize,
                        1,
                        dz_strip.as_ptr(),
                        1,
                        out_s as isize,
                        T::ONE,
                        T::ONE,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            }
            col2im_add(g, pad_lo, &col[..k_len * n], in_dims, od, r0, r1, dx_b);
        }
    }
    dx
}

/// `col (k_len × n) = Wᵀ · dz_strip` by the patch product, `dz_strip` holding `C_out` rows `ld`
/// apart. The columns are split among the threads in whole 16-lane vectors (a part of every `col`
/// row each), so both cores work on the strip and every column is the same sum as on one thread.
fn weights_transposed_times_strip<T: Float>(
    g: &Geom,
    weight: &[T],
    dz_strip: &[T],
    ld: usize,
    n: usize,
    col: &mut [T],
) {
    const LANES: usize = 16;
    let k_len = g.k_len();
    let weight = patch_gemm::as_f32(weight);
    let dz_strip = patch_gemm::as_f32(dz_strip);
    let col = patch_gemm::as_f32_mut(col);
    assert_eq!(col.len(), k_len * n, "input gradient patch matrix");
    let part = n
        .div_ceil(rayon::current_num_threads())
        .next_multiple_of(LANES)
        .max(LANES);
    let col_ptr = SendPtr(col.as_mut_ptr());
    (0..n.div_ceil(part)).into_par_iter().for_each(|t| {
        let (j0, j1) = (t * part, ((t + 1) * part).min(n));
        // Row i of the product is column i of W (C_out × k_len, row-major): Wᵀ in place. The sum
        // runs over the C_out rows of dz.
        let p = patch_gemm::Product {
            weight,
            weight_strides: [1, k_len],
            c_out: k_len,
            k_len: g.c_out,
            col: &dz_strip[j0..],
            ld,
            n: j1 - j0,
            bias: None,
            relu: false,
            accumulate: false,
        };
        let col_ptr = &col_ptr;
        // SAFETY: `col` holds k_len rows of n values; this task alone writes columns j0..j1 of
        // every row.
        unsafe { patch_gemm::weights_times_patches(&p, col_ptr.0.add(j0), n) };
    });
}

/// The convolution whose forward pass is the input gradient of the stride-1 convolution `g` padded
/// low by `pad_lo`: channels swapped, low padding `d·(k − 1) − pad_lo` (`None` for strided layers, or
/// where that padding would be negative, i.e. a crop).
fn flipped_geometry(g: &Geom, pad_lo: [usize; 3]) -> Option<(Geom, [usize; 3])> {
    if g.stride != [1; 3] {
        return None;
    }
    let mut pad = [0; 3];
    for a in 0..3 {
        pad[a] = (g.dilation[a] * (g.kernel[a] - 1)).checked_sub(pad_lo[a])?;
    }
    let flipped = Geom {
        c_in: g.c_out,
        c_out: g.c_in,
        ..*g
    };
    Some((flipped, pad))
}

/// `W'[ci, co, t] = W[co, ci, taps − 1 − t]`: the kernels of `g`'s weights turned half a turn (in
/// every spatial axis at once, which reverses the flattened taps) with input and output channels
/// swapped.
fn flip_kernels<T: Float>(g: &Geom, weight: &[T]) -> Vec<T> {
    let taps: usize = g.kernel.iter().product();
    let mut out = vec![T::ZERO; weight.len()];
    for co in 0..g.c_out {
        for ci in 0..g.c_in {
            let src = &weight[(co * g.c_in + ci) * taps..][..taps];
            let dst = &mut out[(ci * g.c_out + co) * taps..][..taps];
            dst.iter_mut()
                .zip(src.iter().rev())
                .for_each(|(d, s)| *d = *s);
        }
    }
    out
}

/// `grad_w += Σ_{items, strips} dz[:, strip] · im2col(x)[:, strip]ᵀ`. Strips are summed in fixed
/// groups (at most 8, in task order), then the groups in order: the result does not depend on the
/// number of threads. f32 on AVX-512 takes each strip's product as a block of dot products
/// ([`patch_dot`]); elsewhere the patch matrix is transposed for `gemm`.
pub(super) fn conv_backward_weight<T: Float>(
    g: &Geom,
    x: &Features<T>,
    dz: &Features<T>,
    pad_lo: [usize; 3],
    grad_w: &mut [T],
) {
    conv_backward_weight_with(StripProduct::for_scalar::<T>(), g, x, dz, pad_lo, grad_w)
}

/// [`conv_backward_weight`] with the strip product chosen by the caller (tests compare the two).
fn conv_backward_weight_with<T: Float>(
    kernel: StripProduct,
    g: &Geom,
    x: &Features<T>,
    dz: &Features<T>,
    pad_lo: [usize; 3],
    grad_w: &mut [T],
) {
    assert_eq!(x.channels, g.c_in, "conv input channels");
    assert_eq!(dz.channels, g.c_out, "conv output gradient channels");
    let k_len = g.k_len();
    assert_eq!(grad_w.len(), g.c_out * k_len, "conv weight gradient size");
    let od = dz.dims;
    let (rows_total, wo) = (od[0] * od[1], od[2]);
    let (in_s, out_s) = (x.spatial_len(), dz.spatial_len());
    if out_s == 0 || x.batch == 0 {
        return;
    }
    let rows = grad_strip_rows(k_len, wo, rows_total, g.c_out * out_s);
    let strips = rows_total.div_ceil(rows);
    let tasks = x.batch * strips;
    const GROUPS: usize = 8;
    let groups = tasks.min(GROUPS);
    let inner_par = gemm_parallelism(groups);
    let partials: Vec<Vec<T>> = (0..groups)
        .into_par_iter()
        .map(|gi| {
            let mut acc = vec![T::ZERO; g.c_out * k_len];
            let (mut col, mut col_t, mut dz_packed) = (Vec::new(), Vec::new(), Vec::new());
            for task in gi * tasks / groups..(gi + 1) * tasks / groups {
                let (b, s) = (task / strips, task % strips);
                let r0 = s * rows;
                let r1 = (r0 + rows).min(rows_total);
                let n = (r1 - r0) * wo;
                let xb = &x.data[b * g.c_in * in_s..(b + 1) * g.c_in * in_s];
                let dz_strip = &dz.data[b * g.c_out * out_s + r0 * wo..(b + 1) * g.c_out * out_s];
                if kernel == StripProduct::Own && patch_dot::available::<T>() {
                    // Sub-strips of at most PATCH_DOT_COLS columns keep a register block's patch
                    // rows in L1 (6 × 768 f32 = 18 KiB); a fixed function of the shape, so the
                    // sums' order still does not depend on threads.
                    let sub_rows = (PATCH_DOT_COLS / wo).max(1);
                    for s0 in (r0..r1).step_by(sub_rows) {
                        let s1 = (s0 + sub_rows).min(r1);
                        let n = (s1 - s0) * wo;
                        // The strip's output-gradient rows lie a whole map apart (256 KiB on a
                        // 256² map), so they all fall in the same cache sets and evict one another
                        // from L2 while the kernel rereads them for every block of patch rows; a
                        // contiguous copy (C_out × n, read once) stays in L2.
                        dz_packed.clear();
                        let dz_sub = &dz_strip[(s0 - r0) * wo..];
                        for c in 0..g.c_out {
                            dz_packed.extend_from_slice(&dz_sub[c * out_s..][..n]);
                        }
                        patch_dot_strip(
                            groups,
                            |ks, col| {
                                im2col_span(g, pad_lo, xb, x.dims, od, s0 * wo..s1 * wo, ks, col)
                            },
                            &dz_packed,
                            k_len,
                            n,
                            &mut col,
                            &mut acc,
                        );
                    }
                    continue;
                }
                col.resize(k_len * n, T::ZERO);
                im2col(g, pad_lo, xb, x.dims, od, r0, r1, &mut col);
                col_t.resize(k_len * n, T::ZERO);
                // GEMM packs its right operand a row of `n` at a time: pixel-major patches read
                // contiguously there, where the k_len × n patch matrix would be read with stride n.
                transpose(&col, k_len, n, &mut col_t);
                // acc (C_out × k_len) += dz[b, :, strip] (C_out × n) · col_t (n × k_len).
                // SAFETY: the pointers and strides describe in-bounds matrices of the sizes given.
                unsafe {
                    gemm::gemm(
                        g.c_out,
                        k_len,
                        n,
                        acc.as_mut_ptr(),
                        1,
                        k_len as isize,
                        true,
                        dz_strip.as_ptr(),
                        1,
                        out_s as isize,
                        col_t.as_ptr(),
                        1,
                        k_len as isize,
                        T::ONE,
                        T::ONE,
                        false,
                        false,
                        false,
                        inner_par,
                    );
                }
            }
            acc
        })
        .collect();
    for p in &partials {
        grad_w.iter_mut().zip(p).for_each(|(g, v)| *g += *v);
    }
}

/// Columns per call of [`patch_dot`] in the weight gradient (whole output rows, at least one).
const PATCH_DOT_COLS: usize = 768;

/// One strip's `acc (C_out × k_len) += dz · colᵀ` by [`patch_dot`] (`dz` contiguous, `C_out × n`),
/// with `fill(ks, dst)` writing patch rows `ks` into `dst`; returns whether it ran. Several groups:
/// the patch matrix is built one register block of rows at a time (18 KiB for a 768-column strip),
/// used by every output channel while it is in L1 and overwritten by the next block, instead of
/// a matrix of several MiB written to and read back from L3. A single group: the whole matrix, its
/// output channels split among the threads. Each entry is one sum in the kernel's fixed order
/// either way, so neither choice changes a bit.
fn patch_dot_strip<T: Float>(
    groups: usize,
    fill: impl Fn(std::ops::Range<usize>, &mut [T]) + Sync,
    dz: &[T],
    k_len: usize,
    n: usize,
    col: &mut Vec<T>,
    acc: &mut [T],
) -> bool {
    if !patch_dot::available::<T>() {
        return false;
    }
    let threads = rayon::current_num_threads();
    let c_out = acc.len() / k_len.max(1);
    if groups > 1 || threads == 1 || c_out < 2 * patch_dot::BLOCK_CO {
        const KB: usize = patch_dot::BLOCK_K;
        col.resize(KB * n, T::ZERO);
        for k0 in (0..k_len).step_by(KB) {
            let k1 = (k0 + KB).min(k_len);
            fill(k0..k1, col);
            let ran = patch_dot::add_products_strided(
                c_out,
                dz,
                n,
                col,
                k1 - k0,
                n,
                &mut acc[k0..],
                k_len,
            );
            debug_assert!(ran, "patch_dot available but did not run");
        }
        return true;
    }
    col.resize(k_len * n, T::ZERO);
    fill(0..k_len, col);
    let per = c_out
        .div_ceil(threads)
        .next_multiple_of(patch_dot::BLOCK_CO);
    let col = &col[..];
    acc.par_chunks_mut(per * k_len)
        .enumerate()
        .map(|(i, a)| patch_dot::add_products(&dz[i * per * n..], n, col, k_len, n, a))
        .collect::<Vec<bool>>()
        .into_iter()
        .all(|ran| ran)
}

/// `dst (cols × rows) = srcᵀ` for a row-major `src` of `rows × cols`, in square tiles so that both
/// sides stay in cache.
fn transpose<T: Float>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    // Whole 8×8 tiles go through a fixed-size array (no bounds checks, contiguous 8-wide reads and
    // writes, which LLVM turns into register shuffles); the element-wise loop was ~18 % of the
    // native backward bench. The ragged edges run element by element.
    const T8: usize = 8;
    let (src, dst) = (&src[..rows * cols], &mut dst[..rows * cols]);
    let (r_whole, c_whole) = (rows - rows % T8, cols - cols % T8);
    for r0 in (0..r_whole).step_by(T8) {
        for c0 in (0..c_whole).step_by(T8) {
            let mut tile = [[T::ZERO; T8]; T8];
            for (i, t) in tile.iter_mut().enumerate() {
                t.copy_from_slice(&src[(r0 + i) * cols + c0..][..T8]);
            }
            for j in 0..T8 {
                let d: &mut [T; T8] = (&mut dst[(c0 + j) * rows + r0..][..T8])
                    .try_into()
                    .expect("an 8-element slice");
                for i in 0..T8 {
                    d[i] = tile[i][j];
                }
            }
        }
    }
    let mut one = |r: usize, c: usize| dst[c * rows + r] = src[r * cols + c];
    for r in 0..r_whole {
        (c_whole..cols).for_each(|c| one(r, c));
    }
    for r in r_whole..rows {
        (0..cols).for_each(|c| one(r, c));
    }
}

/// `grad[c] += Σ_{items, voxels} f[b, c, …]`, accumulated in f64.
pub(super) fn channel_sums_into<T: Float>(f: &Features<T>, grad: &mut [T]) {
    let s = f.spatial_len();
    let sums: Vec<f64> = (0..f.channels)
        .into_par_iter()
        .map(|c| {
            (0..f.batch)
                .map(|b| {
                    let start = (b * f.channels + c) * s;
                    f.data[start..start + s]
                        .iter()
                        .map(|v| v.to_f64())
                        .sum::<f64>()
                })
                .sum()
        })
        .collect();
    for (g, v) in grad.iter_mut().zip(sums) {
        *g += T::from_f64(v);
    }
}

#[cfg(test)]
// Finite differences perturb one weight at a time through the layer that reads them all.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{dot, random, random_features, random_geometry};
    use crate::nn::kernels::conv::{Conv, ConvTranspose, Pads};
    use rand::{RngExt, SeedableRng};

    /// The f32 weight gradient of `kernel` and its f64 reference with the bound every entry's
    /// rounding error obeys: `(L + 16)·ε_f32·Σ|terms|`, L the entry's number of terms (batch × output
    /// positions, each f32 product and addition one rounding; 16 covers the group sums), Σ|terms|
    /// taken exactly as the f64 gradient of |x| and |dz| (the gradient is bilinear).
    fn weight_gradient_and_bound(
        kernel: StripProduct,
        g: &Geom,
        x: &Features<f64>,
        dz: &Features<f64>,
        pad_lo: [usize; 3],
    ) -> (Vec<f32>, Vec<f64>, Vec<f64>) {
        let len = g.c_out * g.k_len();
        let mut got = vec![0.0f32; len];
        conv_backward_weight_with(kernel, g, &x.cast(), &dz.cast(), pad_lo, &mut got);
        let (xr, dzr) = (
            x.cast::<f32>().cast::<f64>(),
            dz.cast::<f32>().cast::<f64>(),
        );
        let mut exact = vec![0.0f64; len];
        conv_backward_weight_with(StripProduct::Gemm, g, &xr, &dzr, pad_lo, &mut exact);
        let abs = |f: &Features<f64>| Features {
            data: f.data.iter().map(|v| v.abs()).collect(),
            ..f.clone()
        };
        let mut magnitude = vec![0.0f64; len];
        conv_backward_weight_with(
            StripProduct::Gemm,
            g,
            &abs(&xr),
            &abs(&dzr),
            pad_lo,
            &mut magnitude,
        );
        let terms = (x.batch * dz.spatial_len()) as f64;
        let bound = magnitude
            .iter()
            .map(|m| (terms + 16.0) * f32::EPSILON as f64 * m)
            .collect();
        (got, exact, bound)
    }

    fn assert_within(what: &str, got: &[f32], exact: &[f64], bound: &[f64]) {
        for (i, ((g, e), b)) in got.iter().zip(exact).zip(bound).enumerate() {
            let err = (*g as f64 - e).abs();
            assert!(err <= *b, "{what}: entry {i} off by {err:e}, bound {b:e}");
        }
    }

    #[test]
    fn f32_weight_gradients_match_f64_on_both_kernels() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(29);
        let mut cases = 0;
        for rank in 1..=3 {
            for _ in 0..12 {
                let (k, s, p, d, n) = random_geometry(rank, &mut rng);
                // c_out and k_len off the 4 × 6 register block, and one output channel past two
                // blocks so that a single strip's channels are split among the threads.
                let c_in = rng.random_range(1..5);
                let c_out = [1, 3, 5, 9, 13][rng.random_range(0..5usize)];
                let batch = rng.random_range(1..3);
                let conv = Conv::<f64>::with_geometry(
                    c_in,
                    c_out,
                    k,
                    s,
                    p,
                    d,
                    vec![0.0; c_out * c_in * k.iter().product::<usize>()],
                    None,
                    false,
                );
                let Some(od) = conv.out_dims(n) else { continue };
                let x = random_features::<f64>(batch, c_in, n, &mut rng);
                let dz = random_features::<f64>(batch, c_out, od, &mut rng);
                let g = conv.geom();
                for kernel in [StripProduct::Own, StripProduct::Gemm] {
                    let (got, exact, bound) = weight_gradient_and_bound(kernel, &g, &x, &dz, p);
                    assert_within(
                        &format!("{kernel:?} rank {rank} {g:?}"),
                        &got,
                        &exact,
                        &bound,
                    );
                }
                cases += 1;
            }
        }
        assert!(cases > 20, "only {cases} geometries fitted");
        // A layer large enough for several strips and groups: 3×3, 64 → 32 on 2 × 40² maps.
        let conv = Conv::<f64>::with_geometry(
            64,
            32,
            [1, 3, 3],
            [1; 3],
            [0, 1, 1],
            [1; 3],
            vec![0.0; 32 * 64 * 9],
            None,
            false,
        );
        let x = random_features::<f64>(2, 64, [1, 40, 40], &mut rng);
        let dz = random_features::<f64>(2, 32, [1, 40, 40], &mut rng);
        let (got, exact, bound) =
            weight_gradient_and_bound(StripProduct::Own, &conv.geom(), &x, &dz, [0, 1, 1]);
        assert_within("3×3 64 → 32", &got, &exact, &bound);
    }

    #[test]
    fn transposed_f32_weight_gradients_match_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        // DRUNet's 2×2 stride-2 up-sampling, channels off the register block.
        let t = ConvTranspose::<f64>::new_2x(2, 7, 5, vec![0.0; 7 * 5 * 4]);
        let x = random_features::<f64>(2, 7, [1, 9, 11], &mut rng);
        let od = t.out_dims(x.dims).unwrap();
        let dy = random_features::<f64>(2, 5, od, &mut rng);
        let mut exact = vec![0.0f64; 7 * 5 * 4];
        t.backward_params(&x, &dy, [0; 3], &mut exact, None);
        let t32 = ConvTranspose::<f32>::new_2x(2, 7, 5, vec![0.0; 7 * 5 * 4]);
        let mut got = vec![0.0f32; 7 * 5 * 4];
        t32.backward_params(&x.cast(), &dy.cast(), [0; 3], &mut got, None);
        // Each entry sums batch × input positions products of values in [-1, 1].
        let terms = (2 * 9 * 11) as f64;
        let bound = vec![(terms + 16.0) * terms * f32::EPSILON as f64; got.len()];
        assert_within("transposed 2×2", &got, &exact, &bound);
    }

    #[test]
    fn f64_weight_gradients_fall_back_to_gemm_bitwise() {
        // The dispatch leaves f64 (and CPUs without AVX-512) on transpose + gemm: asking for the
        // patch-dot kernel gives the portable path's bits, so no caller can tell it was asked.
        let mut rng = rand::rngs::StdRng::seed_from_u64(37);
        let conv = Conv::<f64>::with_geometry(
            3,
            6,
            [1, 3, 3],
            [1, 2, 1],
            [0, 1, 0],
            [1; 3],
            vec![0.0; 6 * 3 * 9],
            None,
            false,
        );
        let x = random_features::<f64>(2, 3, [1, 13, 10], &mut rng);
        let dz = random_features::<f64>(2, 6, conv.out_dims(x.dims).unwrap(), &mut rng);
        let mut via_patch_dot = vec![0.0f64; 6 * 27];
        let mut via_gemm = vec![0.0f64; 6 * 27];
        conv_backward_weight_with(
            StripProduct::Own,
            &conv.geom(),
            &x,
            &dz,
            [0, 1, 0],
            &mut via_patch_dot,
        );
        conv_backward_weight_with(
            StripProduct::Gemm,
            &conv.geom(),
            &x,
            &dz,
            [0, 1, 0],
            &mut via_gemm,
        );
        assert_eq!(via_patch_dot, via_gemm);
        let mut dispatched = vec![0.0f64; 6 * 27];
        conv.backward_params(&x, &dz, conv.pads(), &mut dispatched, None);
        assert_eq!(dispatched, via_gemm);
    }

    #[test]
    fn the_tiled_transpose_moves_every_element_once() {
        for (rows, cols) in [
            (1, 1),
            (8, 8),
            (7, 9),
            (16, 24),
            (17, 33),
            (576, 40),
            (3, 64),
        ] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let mut dst = vec![-1.0; rows * cols];
            transpose(&src, rows, cols, &mut dst);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        dst[c * rows + r],
                        src[r * cols + c],
                        "{rows}×{cols} at ({r}, {c})"
                    );
                }
            }
        }
    }

    /// ⟨A x, y⟩ = ⟨x, Aᵀ y⟩ for the linear part of convolutions and transposed convolutions, and
    /// ⟨∂/∂W ⟨A_W x, y⟩, V⟩ = ⟨A_V x, y⟩ for the weight gradient, in f64 on random geometries
    /// (several strips and items, so the fixed-group sums are exercised).
    #[test]
    fn backward_passes_are_adjoints_of_the_forward_passes_in_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for case in 0..60 {
            let rank = 1 + case % 3;
            let (kernel, stride, pad, dilation, dims) = random_geometry(rank, &mut rng);
            let (c_in, c_out) = (rng.random_range(1..5), rng.random_range(1..5));
            let taps: usize = kernel.iter().product();
            let w: Vec<f64> = random(c_out * c_in * taps, &mut rng);
            let v: Vec<f64> = random(c_out * c_in * taps, &mut rng);
            let conv = |w: &[f64]| {
                Conv::with_geometry(
                    c_in,
                    c_out,
                    kernel,
                    stride,
                    pad,
                    dilation,
                    w.to_vec(),
                    None,
                    false,
                )
            };
            let (cw, cv) = (conv(&w), conv(&v));
            let pads: Pads = std::array::from_fn(|a| [pad[a], (pad[a] + case) % 3]);
            let Some(od) = cw.out_dims_padded(dims, pads) else {
                continue;
            };
            let x: Features<f64> = random_features(2, c_in, dims, &mut rng);
            let y: Features<f64> = random_features(2, c_out, od, &mut rng);
            let ax = cw.forward_padded(&x, None, pads);
            let aty = cw.backward_input(&y, dims, pads);
            let (l, r) = (dot(&ax.data, &y.data), dot(&x.data, &aty.data));
            assert!(
                (l - r).abs() <= 1e-12 * l.abs().max(1.0),
                "conv case {case}: {l} vs {r}"
            );
            let mut gw = vec![0.0; w.len()];
            cw.backward_params(&x, &y, pads, &mut gw, None);
            let (l, r) = (
                dot(&gw, &v),
                dot(&cv.forward_padded(&x, None, pads).data, &y.data),
            );
            assert!(
                (l - r).abs() <= 1e-12 * l.abs().max(1.0),
                "conv weights case {case}: {l} vs {r}"
            );

            let t = |w: &[f64]| {
                ConvTranspose::with_geometry(
                    c_out,
                    c_in,
                    kernel,
                    stride,
                    pad,
                    dilation,
                    [0; 3],
                    w.to_vec(),
                    None,
                )
            };
            let (tw, tv) = (t(&w), t(&v));
            let Some(td) = tw.out_dims(dims) else {
                continue;
            };
            let x: Features<f64> = random_features(2, c_out, dims, &mut rng);
            let y: Features<f64> = random_features(2, c_in, td, &mut rng);
            let (l, r) = (
                dot(&tw.forward(&x).data, &y.data),
                dot(&x.data, &tw.backward_input(&y, dims, pad).data),
            );
            assert!(
                (l - r).abs() <= 1e-12 * l.abs().max(1.0),
                "transposed case {case}: {l} vs {r}"
            );
            let mut gw = vec![0.0; w.len()];
            tw.backward_params(&x, &y, pad, &mut gw, None);
            let (l, r) = (dot(&gw, &v), dot(&tv.forward(&x).data, &y.data));
            assert!(
                (l - r).abs() <= 1e-12 * l.abs().max(1.0),
                "transposed weights case {case}: {l} vs {r}"
            );
        }
    }

    /// The strided input gradient in f32 on both strip products against f64: every entry within
    /// `(C_out + taps + 16)·ε_f32·Σ|terms|` (a `col` entry sums `C_out` products, col2im adds at most
    /// `taps` of them; Σ|terms| exactly, as the f64 gradient of |W| and |dz|). The patch product is
    /// also the same bit for bit on one thread and on three (its column split moves no term).
    #[test]
    fn strided_f32_input_gradients_match_f64_on_both_products() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        let abs = |v: &[f64]| v.iter().map(|v| v.abs()).collect::<Vec<_>>();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let mut cases = Vec::new();
        for case in 0..36 {
            let rank = 1 + case % 3;
            let (kernel, mut stride, pad, dilation, dims) = random_geometry(rank, &mut rng);
            stride[2] = stride[2].max(2);
            // C_out off and across the 8-row register block; the product's rows are C_in·taps.
            let g = Geom {
                c_in: rng.random_range(1..6),
                c_out: [1, 3, 8, 9, 13, 20][rng.random_range(0..6usize)],
                kernel,
                stride,
                dilation,
            };
            cases.push((g, pad, dims, rng.random_range(1..3)));
        }
        // DRUNet's 2×2 stride-2 down-sampling, 64 → 128 on 2 × 40² maps: k_len 256, several
        // column parts, columns off the 16-lane vector.
        let down = Geom {
            c_in: 64,
            c_out: 128,
            kernel: [1, 2, 2],
            stride: [1, 2, 2],
            dilation: [1; 3],
        };
        cases.push((down, [0; 3], [1, 42, 42], 2));
        let mut fitted = 0;
        for (i, &(g, pad_lo, dims, batch)) in cases.iter().enumerate() {
            let Some(od) = g.out_dims(dims, pad_lo.map(|p| [p, p])) else {
                continue;
            };
            let w: Vec<f64> = random(g.c_out * g.k_len(), &mut rng);
            let dz: Features<f64> = random_features(batch, g.c_out, od, &mut rng);
            let exact =
                conv_backward_input_scatter_with(StripProduct::Gemm, &g, &w, &dz, dims, pad_lo);
            let dz_abs = Features {
                data: abs(&dz.data),
                ..dz.clone()
            };
            let magnitude = conv_backward_input_scatter_with(
                StripProduct::Gemm,
                &g,
                &abs(&w),
                &dz_abs,
                dims,
                pad_lo,
            );
            let terms = (g.c_out + g.kernel.iter().product::<usize>() + 16) as f64;
            let (w32, dz32): (Vec<f32>, Features<f32>) =
                (w.iter().map(|&v| v as f32).collect(), dz.cast());
            for kernel in [StripProduct::Own, StripProduct::Gemm] {
                let got = conv_backward_input_scatter_with(kernel, &g, &w32, &dz32, dims, pad_lo);
                assert_eq!(got.dims, exact.dims);
                for (j, ((a, e), m)) in got
                    .data
                    .iter()
                    .zip(&exact.data)
                    .zip(&magnitude.data)
                    .enumerate()
                {
                    let bound = terms * f32::EPSILON as f64 * m;
                    assert!(
                        (*a as f64 - e).abs() <= bound,
                        "{kernel:?} case {i} {g:?}: entry {j} {a} vs {e}, bound {bound:e}"
                    );
                }
            }
            let on = |pool: &rayon::ThreadPool| {
                pool.install(|| {
                    conv_backward_input_scatter_with(
                        StripProduct::Own,
                        &g,
                        &w32,
                        &dz32,
                        dims,
                        pad_lo,
                    )
                })
            };
            assert_eq!(on(&one).data, on(&three).data, "case {i} {g:?}: threads");
            fitted += 1;
        }
        assert!(fitted > 20, "only {fitted} geometries fitted");
    }

    /// The stride-1 input gradient computed as a forward convolution with turned kernels equals the
    /// scatter (col2im) form, in f64, over random kernels, dilations and asymmetric paddings, those
    /// that pad more than the kernel reaches (which take the scatter) included.
    #[test]
    fn stride_one_input_gradients_as_a_convolution_equal_the_scatter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut flipped_cases = 0;
        for case in 0..80 {
            let rank = 1 + case % 3;
            let (kernel, _, _, dilation, dims) = random_geometry(rank, &mut rng);
            let g = Geom {
                c_in: rng.random_range(1..6),
                c_out: rng.random_range(1..6),
                kernel,
                stride: [1; 3],
                dilation,
            };
            let mut pads: Pads = [[0; 2]; 3];
            for a in 3 - rank..3 {
                let reach = dilation[a] * (kernel[a] - 1);
                pads[a] = [
                    rng.random_range(0..reach + 2),
                    rng.random_range(0..reach + 2),
                ];
            }
            let Some(od) = g.out_dims(dims, pads) else {
                continue;
            };
            let pad_lo = pads.map(|p| p[0]);
            flipped_cases += usize::from(flipped_geometry(&g, pad_lo).is_some());
            let w: Vec<f64> = random(g.c_out * g.k_len(), &mut rng);
            let dz: Features<f64> = random_features(2, g.c_out, od, &mut rng);
            let fast = conv_backward_input(&g, &w, &dz, dims, pad_lo);
            let scatter = conv_backward_input_scatter(&g, &w, &dz, dims, pad_lo);
            assert_eq!(fast.dims, scatter.dims);
            let scale = scatter.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (a, b) in fast.data.iter().zip(&scatter.data) {
                assert!((a - b).abs() <= 1e-12 * scale, "case {case}: {a} vs {b}");
            }
        }
        assert!(
            flipped_cases >= 30,
            "only {flipped_cases} cases took the convolution"
        );
    }

    /// Central differences of `L = ⟨r, relu(conv(x) + b + acc)⟩` against the backward pass, in f64,
    /// for every input, weight, bias and accumulator entry of small layers.
    #[test]
    fn conv_gradients_match_finite_differences_in_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for case in 0..12 {
            let rank = 1 + case % 3;
            let (kernel, stride, pad, dilation, dims) = random_geometry(rank, &mut rng);
            let (c_in, c_out) = (rng.random_range(1..3), rng.random_range(1..3));
            let taps: usize = kernel.iter().product();
            let mut conv: Conv<f64> = Conv::with_geometry(
                c_in,
                c_out,
                kernel,
                stride,
                pad,
                dilation,
                random(c_out * c_in * taps, &mut rng),
                Some(random(c_out, &mut rng)),
                true,
            );
            let Some(od) = conv.out_dims(dims) else {
                continue;
            };
            let x: Features<f64> = random_features(1, c_in, dims, &mut rng);
            let acc: Features<f64> = random_features(1, c_out, od, &mut rng);
            let r: Features<f64> = random_features(1, c_out, od, &mut rng);
            let loss = |conv: &Conv<f64>, x: &Features<f64>, acc: &Features<f64>| {
                dot(&conv.forward(x, Some(acc.clone())).data, &r.data)
            };
            // Backward: dz = r ⊙ [y > 0].
            let y = conv.forward(&x, Some(acc.clone()));
            let mut dz = r.clone();
            dz.data
                .iter_mut()
                .zip(&y.data)
                .for_each(|(g, &y)| *g = if y > 0.0 { *g } else { 0.0 });
            let gx = conv.backward_input(&dz, dims, conv.pads());
            let mut gw = vec![0.0; conv.weight.len()];
            let mut gb = vec![0.0; c_out];
            conv.backward_params(&x, &dz, conv.pads(), &mut gw, Some(&mut gb));
            let eps = 1e-6;
            let check = |what: &str, i: usize, fd: f64, an: f64| {
                assert!(
                    (fd - an).abs() <= 1e-6 * an.abs().max(1.0),
                    "case {case} {what}[{i}]: finite difference {fd} vs backward {an}"
                );
            };
            for i in 0..x.data.len() {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp.data[i] += eps;
                xm.data[i] -= eps;
                let fd = (loss(&conv, &xp, &acc) - loss(&conv, &xm, &acc)) / (2.0 * eps);
                check("x", i, fd, gx.data[i]);
            }
            for i in 0..acc.data.len() {
                let (mut ap, mut am) = (acc.clone(), acc.clone());
                ap.data[i] += eps;
                am.data[i] -= eps;
                let fd = (loss(&conv, &x, &ap) - loss(&conv, &x, &am)) / (2.0 * eps);
                check("acc", i, fd, dz.data[i]);
            }
            for i in 0..conv.weight.len() {
                conv.weight[i] += eps;
                let lp = loss(&conv, &x, &acc);
                conv.weight[i] -= 2.0 * eps;
                let lm = loss(&conv, &x, &acc);
                conv.weight[i] += eps;
                check("w", i, (lp - lm) / (2.0 * eps), gw[i]);
            }
            for i in 0..c_out {
                let b = conv.bias.as_mut().unwrap();
                b[i] += eps;
                let lp = loss(&conv, &x, &acc);
                conv.bias.as_mut().unwrap()[i] -= 2.0 * eps;
                let lm = loss(&conv, &x, &acc);
                conv.bias.as_mut().unwrap()[i] += eps;
                check("b", i, (lp - lm) / (2.0 * eps), gb[i]);
            }
        }
    }

    /// Central differences of `L = ⟨r, convT(x)⟩` against the backward pass of transposed
    /// convolutions (DRUNet's 2×2 up-sampling and general ones), in f64.
    #[test]
    fn transposed_conv_gradients_match_finite_differences_in_f64() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for case in 0..12 {
            let rank = 1 + case % 3;
            let (c_in, c_out) = (rng.random_range(1..3), rng.random_range(1..3));
            let mut t: ConvTranspose<f64> = if case < 3 {
                let taps = 2usize.pow(rank as u32);
                ConvTranspose::new_2x(rank, c_in, c_out, random(c_in * c_out * taps, &mut rng))
            } else {
                let (kernel, stride, pad, dilation, _) = random_geometry(rank, &mut rng);
                let taps: usize = kernel.iter().product();
                ConvTranspose::with_geometry(
                    c_in,
                    c_out,
                    kernel,
                    stride,
                    pad,
                    dilation,
                    [0; 3],
                    random(c_in * c_out * taps, &mut rng),
                    Some(random(c_out, &mut rng)),
                )
            };
            let mut dims = [1; 3];
            for d in dims.iter_mut().skip(3 - rank) {
                *d = rng.random_range(2..6);
            }
            let Some(od) = t.out_dims(dims) else {
                continue;
            };
            let x: Features<f64> = random_features(1, c_in, dims, &mut rng);
            let r: Features<f64> = random_features(1, c_out, od, &mut rng);
            let loss = |t: &ConvTranspose<f64>, x: &Features<f64>| dot(&t.forward(x).data, &r.data);
            let gx = t.backward_input(&r, dims, t.pad);
            let mut gw = vec![0.0; t.weight.len()];
            let mut gb = vec![0.0; c_out];
            t.backward_params(&x, &r, t.pad, &mut gw, Some(&mut gb));
            let eps = 1e-6;
            for i in 0..x.data.len() {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp.data[i] += eps;
                xm.data[i] -= eps;
                let fd = (loss(&t, &xp) - loss(&t, &xm)) / (2.0 * eps);
                assert!((fd - gx.data[i]).abs() <= 1e-6, "case {case} x[{i}]");
            }
            for i in 0..t.weight.len() {
                t.weight[i] += eps;
                let lp = loss(&t, &x);
                t.weight[i] -= 2.0 * eps;
                let lm = loss(&t, &x);
                t.weight[i] += eps;
                assert!(
                    ((lp - lm) / (2.0 * eps) - gw[i]).abs() <= 1e-6,
                    "case {case} w[{i}]"
                );
            }
            if t.bias.is_some() {
                let sums: Vec<f64> = (0..c_out)
                    .map(|c| {
                        r.data[c * r.spatial_len()..(c + 1) * r.spatial_len()]
                            .iter()
                            .sum()
                    })
                    .collect();
                for (a, b) in gb.iter().zip(&sums) {
                    assert!((a - b).abs() <= 1e-12, "case {case} bias");
                }
            }
        }
    }
}
