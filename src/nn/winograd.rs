//! Winograd convolution F(4×4, 3×3) for the native engine's 2-D 3×3 layers with stride 1 and
//! dilation 1 (any zero padding per side, any channel counts, any batch): the hot path of DRUNet and
//! DnCNN. [`super::conv`]'s `conv_forward` hands such layers (in `f32`) to [`conv3x3`]; everything
//! else stays on im2col + GEMM.
//!
//! Each 4×4 block of outputs is computed from a 6×6 input tile as `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016, with the interpolation
//! points 0, ±1, ±2, ∞): summed over input channels, the element-wise product becomes 36 independent
//! GEMMs `M[ξ] (C_out × tiles) = U[ξ] (C_out × C_in) · V[ξ] (C_in × tiles)`, 36 multiplies per 16
//! outputs and input channel instead of im2col's 144. The transforms are contiguous loops over a
//! row of tiles (layout `[36][C][tiles]`), which LLVM vectorises.
//!
//! The image is cut into strips of tile rows sized so that a strip's `V` and `M` stay near the L2/L3
//! caches; strips of all batch items run in parallel (or, when there are fewer strips than threads,
//! one after the other with each phase parallel inside). Tiles past the image's end read zeros and
//! their outputs past the end are not written. The weight transform `U = G g Gᵀ` is made per call
//! (in f64, then rounded) and keeps no state to go stale when training changes the weights; where
//! its `36·C_out·C_in` values would outweigh the layer's output, [`conv3x3_weights`] takes the
//! output channels in blocks.
//!
//! Accuracy: the transforms have entries up to 8 (Aᵀ) and 5 (Bᵀ), so rounding errors are some tens
//! of times those of a direct sum; the f32 results differ from im2col's by ~1e-6 relative to the
//! output's scale (tests below). The tile grid starts at a block's first output, so a block of a
//! spatially decomposed image rounds differently from the same cells of the whole image.

use std::any::TypeId;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::patch_gemm;
use super::scalar::Scalar;

/// Output tile side.
const M: usize = 4;
/// Input tile side: `M + 3 − 1`.
const A: usize = 6;
/// Points of the transformed tile.
const XI: usize = A * A;

/// `V + M` of one strip, in elements: a strip is made this big, or a quarter of the layer's output
/// where that is smaller ([`STRIP_OUT_FRACTION`]), but holds at least [`MIN_STRIP_TILES`] tiles,
/// which the GEMMs need to run at speed.
const STRIP_TARGET: usize = 1 << 20;
/// Each thread holds one strip's `V + M`; bounded by a fraction of the layer's output as well as
/// by [`STRIP_TARGET`], the scratch shrinks with a rank's block of a spatially decomposed image
/// instead of staying ~4 MiB per thread (issue 11: on 3 ranks of a 256² DRUNet, two threads'
/// strips of the 64-channel layers outweighed the 5.3 MiB maps they computed).
const STRIP_OUT_FRACTION: usize = 4;
const MIN_STRIP_TILES: usize = 32;

/// Geometry of one Winograd convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layer {
    pub c_in: usize,
    pub c_out: usize,
    /// Input `[H, W]`.
    pub in_hw: [usize; 2],
    /// Output `[H, W]`.
    pub out_hw: [usize; 2],
    /// Zero padding before the first row and column.
    pub pad_lo: [usize; 2],
}

/// `U[ξ][co][ci] = (G g Gᵀ)[ξ]` of every 3×3 kernel `g = w[co, ci]` (PyTorch layout
/// `(C_out, C_in, 3, 3)`), computed in f64.
pub(crate) fn transform_weights<T: Scalar>(c_in: usize, c_out: usize, weight: &[T]) -> Vec<T> {
    assert_eq!(weight.len(), c_out * c_in * 9, "3×3 conv weights");
    let plane = c_out * c_in;
    let mut u = vec![T::ZERO; XI * plane];
    // G (6 × 3): rows for the points 0, 1, −1, 2, −2, ∞.
    const G: [[f64; 3]; A] = [
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];
    for k in 0..plane {
        let g: [f64; 9] = std::array::from_fn(|t| weight[k * 9 + t].to_f64());
        // t = G g (6 × 3), then U = t Gᵀ (6 × 6).
        let mut t = [[0.0f64; 3]; A];
        for (i, row) in t.iter_mut().enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = (0..3).map(|r| G[i][r] * g[r * 3 + c]).sum();
            }
        }
        for i in 0..A {
            for j in 0..A {
                let v: f64 = (0..3).map(|c| t[i][c] * G[j][c]).sum();
                u[(i * A + j) * plane + k] = T::from_f64(v);
            }
        }
    }
    u
}

/// `Bᵀ d` for one 6-vector given as six equal-length slices, written to six slices: the input
/// transform of Lavin & Gray for F(4, 3).
#[inline(always)]
fn input_1d<T: Scalar>(d: [&[T]; A], o: [&mut [T]; A]) {
    let two = T::from_f64(2.0);
    let four = T::from_f64(4.0);
    let five = T::from_f64(5.0);
    let n = d[0].len();
    let [o0, o1, o2, o3, o4, o5] = o;
    let (o0, o1, o2, o3, o4, o5) = (
        &mut o0[..n],
        &mut o1[..n],
        &mut o2[..n],
        &mut o3[..n],
        &mut o4[..n],
        &mut o5[..n],
    );
    let (d0, d1, d2, d3, d4, d5) = (
        &d[0][..n],
        &d[1][..n],
        &d[2][..n],
        &d[3][..n],
        &d[4][..n],
        &d[5][..n],
    );
    for k in 0..n {
        let (a0, a1, a2, a3, a4, a5) = (d0[k], d1[k], d2[k], d3[k], d4[k], d5[k]);
        o0[k] = four * a0 - five * a2 + a4;
        o1[k] = (a3 + a4) - four * (a1 + a2);
        o2[k] = four * (a1 - a2) + (a4 - a3);
        o3[k] = two * (a3 - a1) + (a4 - a2);
        o4[k] = two * (a1 - a3) + (a4 - a2);
        o5[k] = four * a1 - five * a3 + a5;
    }
}

/// `Aᵀ m` for one 6-vector given as six slices, written to four: the output transform.
#[inline(always)]
fn output_1d<T: Scalar>(m: [&[T]; A], o: [&mut [T]; M]) {
    let two = T::from_f64(2.0);
    let four = T::from_f64(4.0);
    let eight = T::from_f64(8.0);
    let n = m[0].len();
    let [o0, o1, o2, o3] = o;
    let (o0, o1, o2, o3) = (&mut o0[..n], &mut o1[..n], &mut o2[..n], &mut o3[..n]);
    let (m0, m1, m2, m3, m4, m5) = (
        &m[0][..n],
        &m[1][..n],
        &m[2][..n],
        &m[3][..n],
        &m[4][..n],
        &m[5][..n],
    );
    for k in 0..n {
        let (p12, d12) = (m1[k] + m2[k], m1[k] - m2[k]);
        let (p34, d34) = (m3[k] + m4[k], m3[k] - m4[k]);
        o0[k] = m0[k] + p12 + p34;
        o1[k] = d12 + two * d34;
        o2[k] = p12 + four * p34;
        o3[k] = d12 + eight * d34 + m5[k];
    }
}

/// Six mutable rows of `len` from `buf` (laid out row after row).
fn rows_mut<T>(buf: &mut [T], len: usize) -> [&mut [T]; A] {
    let (r0, rest) = buf.split_at_mut(len);
    let (r1, rest) = rest.split_at_mut(len);
    let (r2, rest) = rest.split_at_mut(len);
    let (r3, rest) = rest.split_at_mut(len);
    let (r4, rest) = rest.split_at_mut(len);
    [r0, r1, r2, r3, r4, &mut rest[..len]]
}

/// Four mutable rows of `len` from `buf`.
fn four_rows_mut<T>(buf: &mut [T], len: usize) -> [&mut [T]; M] {
    let (r0, rest) = buf.split_at_mut(len);
    let (r1, rest) = rest.split_at_mut(len);
    let (r2, rest) = rest.split_at_mut(len);
    [r0, r1, r2, &mut rest[..len]]
}

fn rows<T>(buf: &[T], len: usize) -> [&[T]; A] {
    std::array::from_fn(|r| &buf[r * len..(r + 1) * len])
}

/// A raw pointer shared by parallel tasks that write disjoint parts.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// Scratch of one input-channel (or output-channel) transform.
struct Scratch<T> {
    rows: Vec<T>,
    tmp: Vec<T>,
    cols: Vec<T>,
    outs: Vec<T>,
}

impl<T: Scalar> Scratch<T> {
    fn new(tiles_w: usize) -> Self {
        let width = M * tiles_w + 2;
        Scratch {
            rows: vec![T::ZERO; A * width],
            tmp: vec![T::ZERO; A * width],
            cols: vec![T::ZERO; A * tiles_w],
            outs: vec![T::ZERO; A * tiles_w],
        }
    }
}

/// A parallel loop over `0..n` that runs on one thread when `serial`.
fn for_each_index<T: Scalar>(
    n: usize,
    serial: bool,
    tiles_w: usize,
    f: impl Fn(&mut Scratch<T>, usize) + Sync + Send,
) {
    if serial {
        let mut s = Scratch::new(tiles_w);
        (0..n).for_each(|i| f(&mut s, i));
    } else {
        (0..n)
            .into_par_iter()
            .for_each_init(|| Scratch::new(tiles_w), |s, i| f(s, i));
    }
}

/// `out = relu?(conv(x) + bias (+ out when accumulate))` for a 3×3, stride-1, dilation-1 convolution
/// of `batch` items of 2-D maps `x` (`(batch, l.c_in, l.in_hw)` row-major), `u` the weights
/// transformed by [`transform_weights`]; `out` is `(batch, l.c_out, l.out_hw)` row-major. (Plain
/// slices, not `conv::Features`: `conv` calls this module, never the other way.)
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv3x3<T: Scalar>(
    l: &Layer,
    u: &[T],
    bias: Option<&[T]>,
    relu: bool,
    batch: usize,
    x: &[T],
    out: &mut [T],
    accumulate: bool,
) {
    let [ho, wo] = l.out_hw;
    let [hi, wi] = l.in_hw;
    assert_eq!(x.len(), batch * l.c_in * hi * wi, "winograd input size");
    assert_eq!(out.len(), batch * l.c_out * ho * wo, "winograd output size");
    assert_eq!(u.len(), XI * l.c_in * l.c_out, "winograd weights");
    if ho == 0 || wo == 0 || batch == 0 || l.c_out == 0 {
        return;
    }
    let tiles_w = wo.div_ceil(M);
    let tiles_h = ho.div_ceil(M);
    let threads = rayon::current_num_threads();
    let strip_rows = strip_tile_rows(l, batch, threads);
    let n_strips = tiles_h.div_ceil(strip_rows);
    let tasks = batch * n_strips;
    let outer_parallel = tasks >= threads;
    let out_ptr = SendPtr(out.as_mut_ptr());
    let run = |task: usize, v: &mut Vec<T>, m: &mut Vec<T>| {
        let (b, s) = (task / n_strips, task % n_strips);
        let ty0 = s * strip_rows;
        let ty1 = (ty0 + strip_rows).min(tiles_h);
        let n = (ty1 - ty0) * tiles_w;
        v.resize(XI * l.c_in * n, T::ZERO);
        m.resize(XI * l.c_out * n, T::ZERO);
        let xb = &x[b * l.c_in * hi * wi..(b + 1) * l.c_in * hi * wi];
        let strip = Strip {
            l,
            tiles_w,
            ty0,
            ty1,
            n,
        };
        strip.input(xb, v, !outer_parallel);
        strip.products(u, v, m, !outer_parallel);
        // SAFETY: task (b, s) writes only the output rows of tile rows ty0..ty1 of item b.
        let dst = SendPtr(unsafe { out_ptr.get().add(b * l.c_out * ho * wo) });
        strip.output(m, bias, relu, accumulate, dst, !outer_parallel);
    };
    if outer_parallel {
        (0..tasks)
            .into_par_iter()
            .for_each_init(|| (Vec::new(), Vec::new()), |(v, m), t| run(t, v, m));
    } else {
        let (mut v, mut m) = (Vec::new(), Vec::new());
        (0..tasks).for_each(|t| run(t, &mut v, &mut m));
    }
}

/// Tile rows per strip for `batch` items on `threads` threads: `V + M` near [`STRIP_TARGET`] and
/// a quarter of the layer's output, at least [`MIN_STRIP_TILES`] tiles.
fn strip_tile_rows(l: &Layer, batch: usize, threads: usize) -> usize {
    let [ho, wo] = l.out_hw;
    let tiles_w = wo.div_ceil(M).max(1);
    let tiles_h = ho.div_ceil(M).max(1);
    let per_tile = XI * (l.c_in + l.c_out);
    let target = STRIP_TARGET.min(l.c_out * ho * wo / STRIP_OUT_FRACTION);
    let want_tiles = (target / per_tile.max(1)).max(MIN_STRIP_TILES);
    let mut strip_rows = want_tiles.div_ceil(tiles_w).clamp(1, tiles_h);
    let strips = |r: usize| tiles_h.div_ceil(r);
    // Enough tasks to keep every thread busy when the image allows it without shrinking a strip
    // below half the target.
    while batch * strips(strip_rows) < threads && strip_rows > 1 {
        let smaller = strip_rows.div_ceil(2);
        if smaller * tiles_w * 2 < want_tiles.min(tiles_h * tiles_w) {
            break;
        }
        strip_rows = smaller;
    }
    strip_rows
}

/// Values of transformed weights a call may hold at once, at least: see [`conv3x3_weights`].
const U_FLOOR: usize = 1 << 20;

/// [`conv3x3`] from the layer's raw `(C_out, C_in, 3, 3)` weights. The transformed weights are
/// `36·C_in·C_out` values, four times the layer's weights: on a small map with many channels (a
/// U-Net's bottom level, 512 channels at 32×32) that is many times the layer's output, and, the
/// same on every rank of a spatial decomposition, it would dominate a rank's memory. So the output
/// channels are taken in blocks whose transformed weights fit in the larger of the output's size
/// and [`U_FLOOR`] values; each block re-runs the input transform, a small cost beside its GEMMs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv3x3_weights<T: Scalar>(
    l: &Layer,
    weight: &[T],
    bias: Option<&[T]>,
    relu: bool,
    batch: usize,
    x: &[T],
    out: &mut [T],
    accumulate: bool,
) {
    let budget = out.len().max(U_FLOOR);
    conv3x3_blocked(l, weight, bias, relu, batch, x, out, accumulate, budget)
}

/// [`conv3x3_weights`] with the transformed-weight budget given (tests force blocks with it).
#[allow(clippy::too_many_arguments)]
fn conv3x3_blocked<T: Scalar>(
    l: &Layer,
    weight: &[T],
    bias: Option<&[T]>,
    relu: bool,
    batch: usize,
    x: &[T],
    out: &mut [T],
    accumulate: bool,
    budget: usize,
) {
    let per_channel = XI * l.c_in;
    let block = (budget / per_channel.max(1)).clamp(1, l.c_out.max(1));
    if block >= l.c_out {
        let u = transform_weights(l.c_in, l.c_out, weight);
        return conv3x3(l, &u, bias, relu, batch, x, out, accumulate);
    }
    let hw = l.out_hw[0] * l.out_hw[1];
    assert_eq!(out.len(), batch * l.c_out * hw, "winograd output size");
    let mut part = Vec::new();
    for co0 in (0..l.c_out).step_by(block) {
        let n = block.min(l.c_out - co0);
        let u = transform_weights(l.c_in, n, &weight[co0 * l.c_in * 9..(co0 + n) * l.c_in * 9]);
        part.clear();
        part.resize(batch * n * hw, T::ZERO);
        let span = |b: usize| (b * l.c_out + co0) * hw..(b * l.c_out + co0 + n) * hw;
        if accumulate {
            for (b, dst) in part.chunks_mut(n * hw).enumerate() {
                dst.copy_from_slice(&out[span(b)]);
            }
        }
        let lb = Layer { c_out: n, ..*l };
        let bias_b = bias.map(|b| &b[co0..co0 + n]);
        conv3x3(&lb, &u, bias_b, relu, batch, x, &mut part, accumulate);
        for (b, src) in part.chunks(n * hw).enumerate() {
            out[span(b)].copy_from_slice(src);
        }
    }
}

/// Tile rows `ty0..ty1` of one batch item: `n` tiles.
struct Strip<'a> {
    l: &'a Layer,
    tiles_w: usize,
    ty0: usize,
    ty1: usize,
    n: usize,
}

impl Strip<'_> {
    /// `V[ξ][ci][t] = (Bᵀ d B)[ξ]` of every tile `t` of the strip and input channel `ci`.
    fn input<T: Scalar>(&self, xb: &[T], v: &mut [T], serial: bool) {
        let l = self.l;
        let [hi, wi] = l.in_hw;
        let [ph, pw] = l.pad_lo;
        let tw = self.tiles_w;
        let width = M * tw + 2;
        let n = self.n;
        let v_ptr = SendPtr(v.as_mut_ptr());
        for_each_index(l.c_in, serial, tw, |s: &mut Scratch<T>, ci| {
            let xc = &xb[ci * hi * wi..(ci + 1) * hi * wi];
            // Input columns of buffer cells lo..hi (cell k holds column k − pw).
            let lo = pw.min(width);
            let hi_k = (wi + pw).min(width);
            for ty in self.ty0..self.ty1 {
                // The tile row's six input rows, zero outside the image.
                for r in 0..A {
                    let row = &mut s.rows[r * width..(r + 1) * width];
                    let y = (M * ty + r) as isize - ph as isize;
                    if y < 0 || y >= hi as isize || hi_k <= lo {
                        row.fill(T::ZERO);
                        continue;
                    }
                    let src = &xc[y as usize * wi..(y as usize + 1) * wi];
                    row[..lo].fill(T::ZERO);
                    row[lo..hi_k].copy_from_slice(&src[lo - pw..hi_k - pw]);
                    row[hi_k..].fill(T::ZERO);
                }
                // Bᵀ d along the columns, for the whole row of tiles at once.
                input_1d(rows(&s.rows, width), rows_mut(&mut s.tmp, width));
                // d B along the rows: gather each tile's six columns, then transform.
                let base = (ty - self.ty0) * tw;
                for i in 0..A {
                    let t_row = &s.tmp[i * width..(i + 1) * width];
                    for c in 0..A {
                        let col = &mut s.cols[c * tw..(c + 1) * tw];
                        for (t, v) in col.iter_mut().enumerate() {
                            *v = t_row[M * t + c];
                        }
                    }
                    input_1d(rows(&s.cols, tw), rows_mut(&mut s.outs, tw));
                    for j in 0..A {
                        let xi = i * A + j;
                        // SAFETY: channel ci's rows of V are written by this call only.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                v_ptr.get().add((xi * l.c_in + ci) * n + base),
                                tw,
                            )
                        };
                        dst.copy_from_slice(&s.outs[j * tw..(j + 1) * tw]);
                    }
                }
            }
        });
    }

    /// `M[ξ] = U[ξ] · V[ξ]` for the 36 points ξ.
    fn products<T: Scalar>(&self, u: &[T], v: &[T], m: &mut [T], serial: bool) {
        let (c_in, c_out, n) = (self.l.c_in, self.l.c_out, self.n);
        let native = patch_gemm::available::<T>();
        let gemm_one = |xi: usize, m_xi: &mut [T]| {
            let (u_xi, v_xi) = (
                &u[xi * c_out * c_in..][..c_out * c_in],
                &v[xi * c_in * n..][..c_in * n],
            );
            if native {
                let on_f32 = "the native patch product runs on f32";
                let (u_xi, v_xi) = (patch_gemm::as_f32(u_xi), patch_gemm::as_f32(v_xi));
                let p = patch_gemm::Product {
                    weight: u_xi.expect(on_f32),
                    weight_strides: [c_in, 1],
                    c_out,
                    k_len: c_in,
                    col: v_xi.expect(on_f32),
                    ld: n,
                    n,
                    bias: None,
                    relu: false,
                    accumulate: false,
                };
                let m_xi = patch_gemm::as_f32_mut(m_xi).expect(on_f32);
                assert!(m_xi.len() >= c_out * n, "Winograd product size");
                // SAFETY: m_xi holds c_out rows of n values, borrowed mutably here.
                unsafe { patch_gemm::weights_times_patches(&p, m_xi.as_mut_ptr(), n) };
                return;
            }
            // SAFETY: the pointers and strides describe in-bounds row-major matrices:
            // U[ξ] c_out × c_in, V[ξ] c_in × n, M[ξ] c_out × n.
            unsafe {
                gemm::gemm(
                    c_out,
                    n,
                    c_in,
                    m_xi.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    u.as_ptr().add(xi * c_out * c_in),
                    1,
                    c_in as isize,
                    v.as_ptr().add(xi * c_in * n),
                    1,
                    n as isize,
                    T::ZERO,
                    T::ONE,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        };
        let chunks = m.chunks_mut(c_out * n).enumerate();
        if serial {
            chunks.for_each(|(xi, m_xi)| gemm_one(xi, m_xi));
        } else {
            m.par_chunks_mut(c_out * n)
                .enumerate()
                .for_each(|(xi, m_xi)| gemm_one(xi, m_xi));
        }
    }

    /// `out[co] = relu?(Aᵀ M A + bias (+ out))` on the strip's output rows.
    fn output<T: Scalar>(
        &self,
        m: &[T],
        bias: Option<&[T]>,
        relu: bool,
        accumulate: bool,
        dst: SendPtr<T>,
        serial: bool,
    ) {
        let l = self.l;
        let [ho, wo] = l.out_hw;
        let tw = self.tiles_w;
        let n = self.n;
        let width = M * tw + 2;
        for_each_index(l.c_out, serial, tw, |s: &mut Scratch<T>, co| {
            let bias = bias.map_or(T::ZERO, |b| b[co]);
            for ty in self.ty0..self.ty1 {
                let base = (ty - self.ty0) * tw;
                // Aᵀ m along the columns: s.rows holds, for output row r, column j of Aᵀ M at
                // (r·6 + j)·tw.
                for j in 0..A {
                    let col: [&[T]; A] = std::array::from_fn(|i| {
                        let xi = i * A + j;
                        &m[(xi * l.c_out + co) * n + base..][..tw]
                    });
                    let [o0, o1, o2, o3] = four_rows_mut(&mut s.rows, A * tw);
                    output_1d(
                        col,
                        [
                            &mut o0[j * tw..(j + 1) * tw],
                            &mut o1[j * tw..(j + 1) * tw],
                            &mut o2[j * tw..(j + 1) * tw],
                            &mut o3[j * tw..(j + 1) * tw],
                        ],
                    );
                }
                for r in 0..M {
                    let y = M * ty + r;
                    if y >= ho {
                        break;
                    }
                    let sr = &s.rows[r * A * tw..(r + 1) * A * tw];
                    output_1d(rows(sr, tw), four_rows_mut(&mut s.outs, tw));
                    // Interleave the four columns of every tile into one output row.
                    let line = &mut s.tmp[..width];
                    for c in 0..M {
                        let oc = &s.outs[c * tw..(c + 1) * tw];
                        for (t, v) in oc.iter().enumerate() {
                            line[M * t + c] = *v;
                        }
                    }
                    // SAFETY: row y of channel co lies in this strip, written by this call only.
                    let out_row = unsafe {
                        std::slice::from_raw_parts_mut(dst.get().add((co * ho + y) * wo), wo)
                    };
                    let line = &line[..wo];
                    match (accumulate, relu) {
                        (false, false) => out_row
                            .iter_mut()
                            .zip(line)
                            .for_each(|(o, v)| *o = *v + bias),
                        (false, true) => out_row
                            .iter_mut()
                            .zip(line)
                            .for_each(|(o, v)| *o = (*v + bias).max(T::ZERO)),
                        (true, false) => out_row
                            .iter_mut()
                            .zip(line)
                            .for_each(|(o, v)| *o = *o + *v + bias),
                        (true, true) => out_row
                            .iter_mut()
                            .zip(line)
                            .for_each(|(o, v)| *o = (*o + *v + bias).max(T::ZERO)),
                    }
                }
            }
        });
    }
}

/// Whether [`conv3x3`] runs the `f32` convolutions it can (`true` unless a benchmark turned it off).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the Winograd path on or off for the whole process (on by default). For benchmarks that time
/// it against im2col + GEMM in one run; results differ only by rounding.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// The Winograd geometry of a convolution of `[c_in, c_out]` channels and `[kernel, stride,
/// dilation]` (each `[D, H, W]`) on maps of `in_dims` with low padding `pad_lo` and output `od`, when
/// it qualifies: `f32`, kernel 3×3, stride 1, dilation 1, `D = 1`. (`f64`, the
/// precision of the gradient and decomposition tests, stays on im2col, exact across block layouts.)
pub(crate) fn layer<T: Scalar>(
    [c_in, c_out]: [usize; 2],
    [kernel, stride, dilation]: [[usize; 3]; 3],
    in_dims: [usize; 3],
    pad_lo: [usize; 3],
    od: [usize; 3],
) -> Option<Layer> {
    let qualifies = TypeId::of::<T>() == TypeId::of::<f32>()
        && ENABLED.load(Ordering::Relaxed)
        && kernel == [1, 3, 3]
        && stride == [1; 3]
        && dilation == [1; 3]
        && in_dims[0] == 1
        && od[0] == 1
        && pad_lo[0] == 0;
    qualifies.then_some(Layer {
        c_in,
        c_out,
        in_hw: [in_dims[1], in_dims[2]],
        out_hw: [od[1], od[2]],
        pad_lo: [pad_lo[1], pad_lo[2]],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::conv::tests::{random, random_features};
    use crate::nn::conv::{Conv, Features, Geom, Pads};

    /// A strip's `V + M` (values) for `rows` tile rows of `l`.
    fn strip_values(l: &Layer, rows: usize) -> usize {
        rows * l.out_hw[1].div_ceil(M) * XI * (l.c_in + l.c_out)
    }

    /// On a rank's block of a 256² DRUNet split over 3 ranks (64 channels, 256 × 85) a strip
    /// holds a quarter of the layer's output, to a whole tile row (it held 242 tiles, 4.5 MiB,
    /// against a 5.3 MiB map);
    /// one process's full map keeps the ~4 MiB target, and a small map keeps whole tile rows of
    /// at least `MIN_STRIP_TILES` tiles.
    #[test]
    fn strips_are_bounded_by_a_quarter_of_the_output_above_the_floor() {
        let layer = |c: usize, hw: [usize; 2]| Layer {
            c_in: c,
            c_out: c,
            in_hw: hw,
            out_hw: hw,
            pad_lo: [1, 1],
        };
        let block = layer(64, [256, 85]);
        let rows = strip_tile_rows(&block, 1, 2);
        let out = 64 * 256 * 85;
        let block_row = strip_values(&block, 1);
        assert!(strip_values(&block, rows) <= out / STRIP_OUT_FRACTION + block_row);
        assert!(
            strip_values(&block, rows) < 4 * 242 * XI * 128 / 5,
            "{rows} tile rows"
        );
        assert!(rows * 85usize.div_ceil(M) >= MIN_STRIP_TILES);
        let whole = layer(64, [256, 256]);
        let rows = strip_tile_rows(&whole, 1, 2);
        let target = STRIP_TARGET.min(64 * 256 * 256 / STRIP_OUT_FRACTION);
        let one_row = strip_values(&whole, 1);
        assert!(strip_values(&whole, rows) <= target + one_row);
        assert!(strip_values(&whole, rows) + one_row > target);
        let small = layer(512, [32, 11]);
        let rows = strip_tile_rows(&small, 1, 1);
        assert!(rows * 11usize.div_ceil(M) >= MIN_STRIP_TILES.min(8 * 3));
    }

    fn layer_of<T: Scalar>(
        g: &Geom,
        in_dims: [usize; 3],
        pad_lo: [usize; 3],
        od: [usize; 3],
    ) -> Option<Layer> {
        layer::<T>(
            [g.c_in, g.c_out],
            [g.kernel, g.stride, g.dilation],
            in_dims,
            pad_lo,
            od,
        )
    }
    use rand::{RngExt, SeedableRng};

    /// `(batch, c_in, c_out, h, w, [[top, bottom], [left, right]])`.
    type Case = (usize, usize, usize, usize, usize, [[usize; 2]; 2]);

    /// Odd sizes, sizes that are not
    /// multiples of 4, asymmetric and zero padding, padding wider than the kernel's reach, C_in ≠
    /// C_out, batch 2, images smaller than one tile, and a strip count above the thread count.
    fn cases() -> Vec<Case> {
        vec![
            (1, 1, 1, 3, 3, [[0, 0], [0, 0]]),
            (1, 3, 5, 7, 9, [[1, 1], [1, 1]]),
            (2, 4, 3, 13, 6, [[1, 0], [0, 2]]),
            (2, 5, 8, 5, 17, [[2, 1], [1, 0]]),
            (1, 7, 2, 4, 4, [[3, 3], [0, 1]]),
            (1, 16, 24, 33, 31, [[1, 1], [1, 1]]),
            (2, 2, 3, 130, 9, [[1, 1], [0, 0]]),
        ]
    }

    fn conv_of<T: Scalar>(c_in: usize, c_out: usize, rng: &mut rand::rngs::StdRng) -> Conv<T> {
        let w = random::<T>(c_out * c_in * 9, rng);
        let b = random::<T>(c_out, rng);
        Conv::new(2, c_in, c_out, 3, 1, 1, w, Some(b), false)
    }

    fn pads_of(p: [[usize; 2]; 2]) -> Pads {
        [[0, 0], p[0], p[1]]
    }

    /// `Σ_ci Σ_taps |w|·|x| + |bias| + |acc|` of every output: the scale of its rounding errors.
    fn magnitudes(
        c: &Conv<f64>,
        x: &Features<f64>,
        acc: Option<&Features<f64>>,
        pads: Pads,
    ) -> Vec<f64> {
        let abs = |f: &Features<f64>| Features {
            data: f.data.iter().map(|v| v.abs()).collect(),
            ..f.clone()
        };
        let mut ca = c.clone();
        ca.weight.iter_mut().for_each(|v| *v = v.abs());
        if let Some(b) = ca.bias.as_mut() {
            b.iter_mut().for_each(|v| *v = v.abs());
        }
        ca.relu = false;
        ca.forward_padded(&abs(x), acc.map(abs), pads).data
    }

    /// The f32 Winograd path (through `Conv::forward_padded`'s dispatch) against the f64 im2col path
    /// on the same values, with bias, ReLU and the accumulator. Rounding of F(4, 3) in f32: each
    /// output is a sum over `C_in` of transformed products whose transforms have row sums up to 10
    /// (Bᵀ) and 19 (Aᵀ), so its error is bounded by a few hundred ε times the output's magnitude
    /// `Σ|w||x| + |b| + |acc|` (the largest over the output's plane: a tile mixes its outputs)
    /// in the worst case; the cases here reach ~25 ε. The test allows 64 ε = 3.8e-6 of it, inside
    /// issue 11's 1e-5 relative for f32 (im2col + GEMM stays below ~4 ε).
    #[test]
    fn f32_winograd_equals_im2col_to_rounding() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let eps = f32::EPSILON as f64 / 2.0;
        let mut worst = 0.0f64;
        for (batch, c_in, c_out, h, w, p) in cases() {
            let pads = pads_of(p);
            for (relu, with_acc, with_bias) in [
                (false, false, true),
                (true, true, true),
                (true, false, false),
            ] {
                let mut c64 = conv_of::<f64>(c_in, c_out, &mut rng);
                c64.relu = relu;
                if !with_bias {
                    c64.bias = None;
                }
                let c32 = Conv::<f32>::with_geometry(
                    c_in,
                    c_out,
                    c64.kernel,
                    c64.stride,
                    c64.pad,
                    c64.dilation,
                    c64.weight.iter().map(|v| *v as f32).collect(),
                    c64.bias
                        .as_ref()
                        .map(|b| b.iter().map(|v| *v as f32).collect()),
                    relu,
                );
                let x64: Features<f64> = random_features::<f64>(batch, c_in, [1, h, w], &mut rng)
                    .cast::<f32>()
                    .cast();
                let od = c64.out_dims_padded(x64.dims, pads).unwrap();
                assert!(
                    layer_of::<f32>(&c32.geom(), x64.dims, pads.map(|p| p[0]), od).is_some(),
                    "case ({batch}, {c_in}, {c_out}, {h}, {w}, {p:?}) should run on Winograd"
                );
                let acc64: Option<Features<f64>> = with_acc.then(|| {
                    random_features::<f64>(batch, c_out, od, &mut rng)
                        .cast::<f32>()
                        .cast()
                });
                let want = c64.forward_padded(&x64, acc64.clone(), pads);
                let got = c32.forward_padded(&x64.cast(), acc64.as_ref().map(|a| a.cast()), pads);
                assert_eq!(got.dims, want.dims);
                // Winograd's rounding is bounded by the magnitudes a tile mixes, not by each
                // output's own (an output that only sees padding carries its tile's error): the
                // scale is the largest magnitude of the output's plane.
                let mut scale = magnitudes(&c64, &x64, acc64.as_ref(), pads);
                for plane in scale.chunks_mut(od[1] * od[2]) {
                    let top = plane.iter().copied().fold(0.0, f64::max);
                    plane.fill(top);
                }
                for ((g, w), s) in got.data.iter().zip(&want.data).zip(&scale) {
                    let err = (*g as f64 - w).abs();
                    worst = worst.max(err / (s * eps));
                    assert!(
                        err <= 64.0 * eps * s,
                        "case ({batch}, {c_in}, {c_out}, {h}, {w}, {p:?}) relu {relu} acc {with_acc}: \
                         {g} vs {w} (scale {s})"
                    );
                }
            }
        }
        eprintln!("f32 Winograd: worst error {worst:.1} ε of the output's magnitude");
    }

    /// Output channels taken in blocks (to bound the transformed weights) give the unblocked
    /// results: in f64 to 1e-12 of the output's magnitude, every block size down to one channel,
    /// with and without accumulator and bias.
    #[test]
    fn output_channel_blocks_equal_one_block() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for (batch, c_in, c_out, h, w, p) in cases() {
            let pads = pads_of(p);
            let c = conv_of::<f64>(c_in, c_out, &mut rng);
            let x: Features<f64> = random_features(batch, c_in, [1, h, w], &mut rng);
            let od = c.out_dims_padded(x.dims, pads).unwrap();
            let acc: Features<f64> = random_features(batch, c_out, od, &mut rng);
            let l = Layer {
                c_in,
                c_out,
                in_hw: [h, w],
                out_hw: [od[1], od[2]],
                pad_lo: [p[0][0], p[1][0]],
            };
            for accumulate in [false, true] {
                let mut want = acc.clone();
                let u = transform_weights(c_in, c_out, &c.weight);
                let bias = c.bias.as_deref().filter(|_| accumulate);
                conv3x3(
                    &l,
                    &u,
                    bias,
                    true,
                    batch,
                    &x.data,
                    &mut want.data,
                    accumulate,
                );
                let scale = want.data.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
                for block in 1..=c_out {
                    let mut got = acc.clone();
                    let budget = XI * c_in * block;
                    conv3x3_blocked(
                        &l,
                        &c.weight,
                        bias,
                        true,
                        batch,
                        &x.data,
                        &mut got.data,
                        accumulate,
                        budget,
                    );
                    for (g, w) in got.data.iter().zip(&want.data) {
                        assert!(
                            (g - w).abs() <= 1e-12 * scale,
                            "case ({batch}, {c_in}, {c_out}, {h}, {w}, {p:?}) block {block}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// In f64 the same algorithm agrees with im2col to 1e-12 of the output's magnitude.
    #[test]
    fn f64_winograd_equals_im2col_to_1e12() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for (batch, c_in, c_out, h, w, p) in cases() {
            let pads = pads_of(p);
            let mut c = conv_of::<f64>(c_in, c_out, &mut rng);
            c.relu = rng.random_range(0..2) == 1;
            let x: Features<f64> = random_features(batch, c_in, [1, h, w], &mut rng);
            let od = c.out_dims_padded(x.dims, pads).unwrap();
            let acc: Features<f64> = random_features(batch, c_out, od, &mut rng);
            let want = c.forward_padded(&x, Some(acc.clone()), pads);
            let l = Layer {
                c_in,
                c_out,
                in_hw: [h, w],
                out_hw: [od[1], od[2]],
                pad_lo: [p[0][0], p[1][0]],
            };
            let u = transform_weights(c_in, c_out, &c.weight);
            let mut got = acc.clone();
            conv3x3(
                &l,
                &u,
                c.bias.as_deref(),
                c.relu,
                batch,
                &x.data,
                &mut got.data,
                true,
            );
            let scale = magnitudes(&c, &x, Some(&acc), pads);
            for ((g, w), s) in got.data.iter().zip(&want.data).zip(&scale) {
                assert!(
                    (g - w).abs() <= 1e-12 * s,
                    "case ({batch}, {c_in}, {c_out}, {h}, {w}, {p:?}): {g} vs {w}"
                );
            }
        }
    }

    /// Layers that are not 3×3 / stride 1 / dilation 1 on 2-D maps in f32 stay on im2col.
    #[test]
    fn only_qualifying_layers_take_the_winograd_path() {
        let g = |kernel, stride, dilation| Geom {
            c_in: 2,
            c_out: 2,
            kernel,
            stride,
            dilation,
        };
        let dims = [1, 8, 8];
        assert!(
            layer_of::<f32>(&g([1, 3, 3], [1; 3], [1; 3]), dims, [0, 1, 1], [1, 8, 8]).is_some()
        );
        assert!(
            layer_of::<f64>(&g([1, 3, 3], [1; 3], [1; 3]), dims, [0, 1, 1], [1, 8, 8]).is_none()
        );
        assert!(
            layer_of::<f32>(&g([1, 3, 3], [1, 2, 2], [1; 3]), dims, [0, 1, 1], [1, 4, 4]).is_none()
        );
        assert!(
            layer_of::<f32>(&g([1, 3, 3], [1; 3], [1, 2, 2]), dims, [0, 2, 2], [1, 8, 8]).is_none()
        );
        assert!(
            layer_of::<f32>(&g([1, 5, 5], [1; 3], [1; 3]), dims, [0, 2, 2], [1, 8, 8]).is_none()
        );
        assert!(
            layer_of::<f32>(
                &g([3, 3, 3], [1; 3], [1; 3]),
                [3, 8, 8],
                [1, 1, 1],
                [3, 8, 8]
            )
            .is_none()
        );
        assert!(
            layer_of::<f32>(
                &g([1, 3, 3], [1; 3], [1; 3]),
                [3, 8, 8],
                [0, 1, 1],
                [3, 8, 8]
            )
            .is_none()
        );
    }
}
