//! The native engine's kernels: convolutions (any kernel, stride, dilation and zero padding, per
//! side if need be), transposed convolutions, and their backward passes, on batches of 1-D, 2-D or
//! 3-D feature maps in `f32` (inference, training) or `f64` (gradient tests).
//!
//! A convolution is an im2col + GEMM on a strip of whole output rows at a time: the strip's patch
//! matrix `col` (`C_in·kᵈ × n`, at most a few MiB) is built, then `out[:, strip] (+)= W · col` by the
//! `gemm` crate, then bias and ReLU are applied while the strip is still in cache. PyTorch's weight
//! layout `(C_out, C_in, k…)` is already the row-major `C_out × C_in·kᵈ` matrix, so weights are used as
//! stored. Strips of all batch items run in parallel (rayon), each with its own `col` buffer, so the
//! extra memory is bounded by threads × strip size, whatever the image size; a strip's `col` is also
//! at most a quarter of the layer's output (≥ 512 columns), so on a rank's small block of a
//! decomposed image the scratch shrinks with the block.
//!
//! The backward passes are the same two matrices read the other way: the input gradient is
//! `col2im(Wᵀ · dz)` (col2im is the adjoint of im2col, a scatter-add), the weight gradient
//! `Σ_strips dz · colᵀ`. A transposed convolution is the adjoint of a convolution with the same
//! weights (PyTorch stores `ConvTranspose` weights `(C_in, C_out, k…)`, which is the `(C_out, C_in, k…)`
//! of the convolution it is the adjoint of), so its forward pass is that convolution's input
//! gradient and its backward pass that convolution's forward pass. The common case kernel = stride
//! without padding (DRUNet's 2×2 up-sampling) keeps a direct kernel: one GEMM per strip of input rows,
//! `tmp (C_out·taps × n) = Wᵀ · x[:, strip]`, then each tap written to its sub-grid of the output.
//!
//! Sums over strips (weight gradients) are grouped in a fixed way that does not depend on the number
//! of threads, so gradients are the same on every machine.

use rayon::prelude::*;

use super::patch_dot;
use super::patch_gemm;
use super::scalar::Scalar;
use super::winograd;

/// Zero padding before and after each spatial axis `[D, H, W]`: `[[low, high]; 3]`.
pub type Pads = [[usize; 2]; 3];

/// A batch of feature maps `(B, C, D, H, W)` in C order; 2-D maps have `D = 1`, 1-D maps
/// `D = H = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Features<T: Scalar = f32> {
    pub batch: usize,
    pub channels: usize,
    /// `[D, H, W]`.
    pub dims: [usize; 3],
    pub data: Vec<T>,
}

impl<T: Scalar> Features<T> {
    pub fn zeros(batch: usize, channels: usize, dims: [usize; 3]) -> Self {
        Features {
            batch,
            channels,
            dims,
            data: vec![T::ZERO; batch * channels * dims.iter().product::<usize>()],
        }
    }

    /// Voxels per channel.
    pub fn spatial_len(&self) -> usize {
        self.dims.iter().product()
    }

    /// `self += other` (same shape), in parallel.
    pub fn add_assign(&mut self, other: &Features<T>) {
        debug_assert_eq!(self.data.len(), other.data.len());
        self.data
            .par_chunks_mut(1 << 16)
            .zip(other.data.par_chunks(1 << 16))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += *b));
    }

    /// The same values in another precision.
    pub fn cast<U: Scalar>(&self) -> Features<U> {
        Features {
            batch: self.batch,
            channels: self.channels,
            dims: self.dims,
            data: self.data.iter().map(|v| U::from_f64(v.to_f64())).collect(),
        }
    }
}

/// What the kernels need to know of a convolution besides its weights and padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geom {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub dilation: [usize; 3],
}

impl Geom {
    /// Rows of the patch matrix: `C_in · kd · kh · kw`.
    fn k_len(&self) -> usize {
        self.c_in * self.kernel.iter().product::<usize>()
    }

    /// Output size along each axis of an input of `dims` padded by `pads` (`None` when the dilated
    /// kernel does not fit).
    fn out_dims(&self, dims: [usize; 3], pads: Pads) -> Option<[usize; 3]> {
        let mut o = [0; 3];
        for a in 0..3 {
            let span = dims[a] + pads[a][0] + pads[a][1];
            let reach = self.dilation[a] * (self.kernel[a] - 1) + 1;
            if span < reach {
                return None;
            }
            o[a] = (span - reach) / self.stride[a] + 1;
        }
        Some(o)
    }
}

/// `[D, H, W]` kernel, stride, padding and dilation of a convolution with `rank` spatial axes (1, 2
/// or 3) and the same value on each: unused leading axes get 1, 1, 0, 1.
pub fn per_axis(rank: usize, k: usize, stride: usize, pad: usize) -> [[usize; 3]; 3] {
    let mut kernel = [1; 3];
    let mut strides = [1; 3];
    let mut pads = [0; 3];
    for a in 3 - rank..3 {
        kernel[a] = k;
        strides[a] = stride;
        pads[a] = pad;
    }
    [kernel, strides, pads]
}

/// Weights of a convolution: `(C_out, C_in, kd, kh, kw)` row-major (2-D: `kd = 1`; 1-D:
/// `kd = kh = 1`), optional bias.
#[derive(Clone, Debug)]
pub struct Conv<T: Scalar = f32> {
    pub c_in: usize,
    pub c_out: usize,
    /// `[kd, kh, kw]`.
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    /// Zero padding on both sides of each axis.
    pub pad: [usize; 3],
    pub dilation: [usize; 3],
    pub weight: Vec<T>,
    pub bias: Option<Vec<T>>,
    /// Apply ReLU to the output (after the bias, after the residual accumulation).
    pub relu: bool,
}

impl<T: Scalar> Conv<T> {
    /// A `k` (1-D, `rank = 1`), `k×k` (2-D) or `k×k×k` (3-D) convolution with one stride and
    /// padding for every spatial axis and no dilation; `weight` must hold `c_out·c_in·kʳᵃⁿᵏ` values.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rank: usize,
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        weight: Vec<T>,
        bias: Option<Vec<T>>,
        relu: bool,
    ) -> Self {
        assert!((1..=3).contains(&rank), "conv rank {rank}");
        let [kernel, stride, pad] = per_axis(rank, k, stride, pad);
        Self::with_geometry(c_in, c_out, kernel, stride, pad, [1; 3], weight, bias, relu)
    }

    /// A convolution with its own kernel, stride, padding and dilation per axis `[D, H, W]`.
    #[allow(clippy::too_many_arguments)]
    pub fn with_geometry(
        c_in: usize,
        c_out: usize,
        kernel: [usize; 3],
        stride: [usize; 3],
        pad: [usize; 3],
        dilation: [usize; 3],
        weight: Vec<T>,
        bias: Option<Vec<T>>,
        relu: bool,
    ) -> Self {
        assert!(
            kernel
                .iter()
                .chain(&stride)
                .chain(&dilation)
                .all(|&v| v > 0),
            "conv kernel, stride and dilation must be positive"
        );
        assert_eq!(
            weight.len(),
            c_out * c_in * kernel.iter().product::<usize>(),
            "conv weight size"
        );
        if let Some(b) = &bias {
            assert_eq!(b.len(), c_out, "conv bias size");
        }
        Conv {
            c_in,
            c_out,
            kernel,
            stride,
            pad,
            dilation,
            weight,
            bias,
            relu,
        }
    }

    pub(crate) fn geom(&self) -> Geom {
        Geom {
            c_in: self.c_in,
            c_out: self.c_out,
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
        }
    }

    /// The layer's own (symmetric) zero padding.
    pub fn pads(&self) -> Pads {
        self.pad.map(|p| [p, p])
    }

    /// Output spatial size for input `dims` (`None` when the kernel does not fit).
    pub fn out_dims(&self, dims: [usize; 3]) -> Option<[usize; 3]> {
        self.geom().out_dims(dims, self.pads())
    }

    /// Output spatial size for input `dims` padded by `pads` instead of the layer's own padding.
    pub fn out_dims_padded(&self, dims: [usize; 3], pads: Pads) -> Option<[usize; 3]> {
        self.geom().out_dims(dims, pads)
    }

    /// `conv(x)`, or `acc + conv(x)` when `acc` is given (its buffer is reused for the output).
    pub fn forward(&self, x: &Features<T>, acc: Option<Features<T>>) -> Features<T> {
        self.forward_padded(x, acc, self.pads())
    }

    /// [`Conv::forward`] with `pads` in place of the layer's own padding (a block of a larger image
    /// is padded only on the sides where the image ends).
    pub fn forward_padded(
        &self,
        x: &Features<T>,
        acc: Option<Features<T>>,
        pads: Pads,
    ) -> Features<T> {
        assert_eq!(x.channels, self.c_in, "conv input channels");
        let g = self.geom();
        let od = g
            .out_dims(x.dims, pads)
            .expect("conv kernel larger than its input");
        conv_forward(
            &g,
            &self.weight,
            self.bias.as_deref(),
            self.relu,
            x,
            acc,
            pads.map(|p| p[0]),
            od,
        )
    }

    /// The gradient with respect to the input (of spatial size `in_dims`, padded by `pads`) of a
    /// loss whose gradient with respect to the pre-activation output `conv(x) + b (+ acc)` is `dz`.
    pub fn backward_input(&self, dz: &Features<T>, in_dims: [usize; 3], pads: Pads) -> Features<T> {
        assert_eq!(dz.channels, self.c_out, "conv output gradient channels");
        conv_backward_input(&self.geom(), &self.weight, dz, in_dims, pads.map(|p| p[0]))
    }

    /// Adds the gradients with respect to the weights (`grad_w`, same layout as `weight`) and the
    /// bias (`grad_b`) for input `x` padded by `pads` and pre-activation output gradient `dz`.
    pub fn backward_params(
        &self,
        x: &Features<T>,
        dz: &Features<T>,
        pads: Pads,
        grad_w: &mut [T],
        grad_b: Option<&mut [T]>,
    ) {
        conv_backward_weight(&self.geom(), x, dz, pads.map(|p| p[0]), grad_w);
        if let Some(gb) = grad_b {
            channel_sums_into(dz, gb);
        }
    }
}

/// A transposed convolution (PyTorch's `ConvTranspose{1,2,3}d`): weights `(C_in, C_out, k…)`
/// row-major, optional bias. Output size `(i − 1)·s − 2p + d·(k − 1) + 1 + output_padding`.
#[derive(Clone, Debug)]
pub struct ConvTranspose<T: Scalar = f32> {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [usize; 3],
    pub dilation: [usize; 3],
    pub output_padding: [usize; 3],
    pub weight: Vec<T>,
    pub bias: Option<Vec<T>>,
}

impl<T: Scalar> ConvTranspose<T> {
    /// Kernel = stride = 2, no padding, no bias (DRUNet's up-sampling), with `rank` spatial axes.
    pub fn new_2x(rank: usize, c_in: usize, c_out: usize, weight: Vec<T>) -> Self {
        let [kernel, stride, pad] = per_axis(rank, 2, 2, 0);
        Self::with_geometry(
            c_in, c_out, kernel, stride, pad, [1; 3], [0; 3], weight, None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub fn with_geometry(
        c_in: usize,
        c_out: usize,
        kernel: [usize; 3],
        stride: [usize; 3],
        pad: [usize; 3],
        dilation: [usize; 3],
        output_padding: [usize; 3],
        weight: Vec<T>,
        bias: Option<Vec<T>>,
    ) -> Self {
        assert!(
            kernel
                .iter()
                .chain(&stride)
                .chain(&dilation)
                .all(|&v| v > 0),
            "transposed conv kernel, stride and dilation must be positive"
        );
        assert!(
            (0..3).all(|a| output_padding[a] < stride[a].max(dilation[a])),
            "output_padding must be smaller than the stride or the dilation"
        );
        assert_eq!(
            weight.len(),
            c_in * c_out * kernel.iter().product::<usize>(),
            "transposed conv weight size"
        );
        if let Some(b) = &bias {
            assert_eq!(b.len(), c_out, "transposed conv bias size");
        }
        ConvTranspose {
            c_in,
            c_out,
            kernel,
            stride,
            pad,
            dilation,
            output_padding,
            weight,
            bias,
        }
    }

    /// The convolution this layer is the adjoint of: `c_out` → `c_in`, the same weight matrix.
    pub(crate) fn adjoint_geom(&self) -> Geom {
        Geom {
            c_in: self.c_out,
            c_out: self.c_in,
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
        }
    }

    /// Output spatial size for input `dims` (`None` when padding removes everything).
    pub fn out_dims(&self, dims: [usize; 3]) -> Option<[usize; 3]> {
        let mut o = [0; 3];
        for a in 0..3 {
            let full = (dims[a].max(1) - 1) * self.stride[a]
                + self.dilation[a] * (self.kernel[a] - 1)
                + 1
                + self.output_padding[a];
            if dims[a] == 0 || full <= 2 * self.pad[a] {
                return None;
            }
            o[a] = full - 2 * self.pad[a];
        }
        Some(o)
    }

    /// The whole output.
    pub fn forward(&self, x: &Features<T>) -> Features<T> {
        let od = self
            .out_dims(x.dims)
            .expect("transposed conv output would be empty");
        self.forward_window(x, self.pad, od)
    }

    /// A window of `out_dims` of the output, where input index `i` and tap `k` reach window index
    /// `i·s + k·d − crop_lo` (`crop_lo = pad` is the whole output; a block of a larger output on
    /// another input block has its own).
    pub fn forward_window(
        &self,
        x: &Features<T>,
        crop_lo: [usize; 3],
        out_dims: [usize; 3],
    ) -> Features<T> {
        assert_eq!(x.channels, self.c_in, "transposed conv input channels");
        let direct = (0..3).all(|a| {
            self.kernel[a] == self.stride[a]
                && crop_lo[a] == 0
                && self.dilation[a] == 1
                && out_dims[a] == x.dims[a] * self.stride[a]
        });
        let mut out = if direct {
            self.forward_direct(x, out_dims)
        } else {
            conv_backward_input(&self.adjoint_geom(), &self.weight, x, out_dims, crop_lo)
        };
        if let Some(b) = &self.bias {
            add_channel_bias(&mut out, b);
        }
        out
    }

    /// Gradient with respect to the input (of spatial size `in_dims`) of the output window at
    /// `crop_lo` (see [`Self::forward_window`]) with gradient `dy`.
    pub fn backward_input(
        &self,
        dy: &Features<T>,
        in_dims: [usize; 3],
        crop_lo: [usize; 3],
    ) -> Features<T> {
        conv_forward(
            &self.adjoint_geom(),
            &self.weight,
            None,
            false,
            dy,
            None,
            crop_lo,
            in_dims,
        )
    }

    /// Adds the weight and bias gradients for input `x` and output-window gradient `dy`.
    pub fn backward_params(
        &self,
        x: &Features<T>,
        dy: &Features<T>,
        crop_lo: [usize; 3],
        grad_w: &mut [T],
        grad_b: Option<&mut [T]>,
    ) {
        // The adjoint convolution maps dy to x: its weight gradient is Σ x · im2col(dy)ᵀ.
        conv_backward_weight(&self.adjoint_geom(), dy, x, crop_lo, grad_w);
        if let Some(gb) = grad_b {
            channel_sums_into(dy, gb);
        }
    }

    /// kernel = stride, no padding: every output voxel gets exactly one tap of one input voxel.
    fn forward_direct(&self, x: &Features<T>, od: [usize; 3]) -> Features<T> {
        let [d, h, w] = x.dims;
        let [kd, kh, kw] = self.kernel;
        let taps = kd * kh * kw;
        let m = self.c_out * taps;
        let mut out: Features<T> = Features::zeros(x.batch, self.c_out, od);
        let rows_total = d * h;
        let rows = strip_rows(
            m,
            w,
            rows_total,
            self.c_out * od.iter().product::<usize>(),
            x.batch,
        );
        let strips = rows_total.div_ceil(rows);
        let (in_s, out_s) = (x.spatial_len(), out.spatial_len());
        let out_ptr = SendPtr(out.data.as_mut_ptr());
        let tasks = x.batch * strips;
        let inner_par = gemm_parallelism(tasks);
        let native = patch_gemm::available::<T>();
        (0..tasks)
            .into_par_iter()
            .for_each_init(Vec::new, |tmp, task| {
                let (b, s) = (task / strips, task % strips);
                let r0 = s * rows;
                let r1 = (r0 + rows).min(rows_total);
                let n = (r1 - r0) * w;
                tmp.resize(m * n, T::ZERO);
                let xs = &x.data[b * self.c_in * in_s + r0 * w..];
                // lhs[(co, t), ci] = weight[ci, co, t]: a column-major view of the stored weights.
                if native {
                    let tmp = patch_gemm::as_f32_mut(tmp);
                    let p = patch_gemm::Product {
                        weight: patch_gemm::as_f32(&self.weight),
                        weight_strides: [1, m],
                        c_out: m,
                        k_len: self.c_in,
                        col: patch_gemm::as_f32(xs),
                        ld: in_s,
                        n,
                        bias: None,
                        relu: false,
                        accumulate: false,
                    };
                    // SAFETY: tmp holds m rows of n values, borrowed mutably here.
                    unsafe { patch_gemm::weights_times_patches(&p, tmp.as_mut_ptr(), n) };
                } else {
                    // SAFETY: the pointers and strides describe in-bounds matrices of the sizes
                    // given.
                    unsafe {
                        gemm::gemm(
                            m,
                            n,
                            self.c_in,
                            tmp.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            self.weight.as_ptr(),
                            m as isize,
                            1,
                            xs.as_ptr(),
                            1,
                            in_s as isize,
                            T::ONE,
                            T::ONE,
                            false,
                            false,
                            false,
                            inner_par,
                        );
                    }
                }
                let out_ptr = &out_ptr;
                for co in 0..self.c_out {
                    for kz in 0..kd {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let t = (kz * kh + ky) * kw + kx;
                                let src = &tmp[(co * taps + t) * n..(co * taps + t + 1) * n];
                                for r in r0..r1 {
                                    let (z, y) = (r / h, r % h);
                                    let orow = ((z * kd + kz) * od[1] + y * kh + ky) * od[2];
                                    let srow = &src[(r - r0) * w..(r - r0 + 1) * w];
                                    // SAFETY: output row (z·kd+kz, y·kh+ky) belongs to input row r
                                    // of this task only; columns x·kw+kx < kw·w.
                                    unsafe {
                                        let dst =
                                            out_ptr.0.add((b * self.c_out + co) * out_s + orow);
                                        for (xi, v) in srow.iter().enumerate() {
                                            *dst.add(kw * xi + kx) = *v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            });
        out
    }
}

/// A raw output pointer shared by parallel tasks that write disjoint parts.
struct SendPtr<T>(*mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Output rows per task: enough columns (≥ 512) that packing the weights is a small part of each
/// GEMM, few enough that the patch matrix stays near the L2 cache (~2 MiB) and within a quarter of
/// the layer's output (`out_len` values per item), and at least a few tasks per thread when the
/// image allows.
fn strip_rows(
    k_len: usize,
    row_len: usize,
    rows_total: usize,
    out_len: usize,
    batch: usize,
) -> usize {
    let mut rows = grad_strip_rows(k_len, row_len, rows_total, out_len);
    let want_tasks = 4 * rayon::current_num_threads();
    let per_item = want_tasks.div_ceil(batch.max(1));
    if rows_total.div_ceil(rows) < per_item {
        rows = rows_total.div_ceil(per_item).max(1);
    }
    whole_gemm_lanes(rows, row_len)
}

/// `rows` rounded down so that a strip's `rows · row_len` patch columns are a whole number of
/// [`GEMM_LANES`] (where at least one such multiple fits). The forward GEMM runs transposed
/// (`outᵀ = colᵀ · Wᵀ`, its output row-major), and `gemm` reads the patch matrix in place only
/// when that count is a multiple of its SIMD width; otherwise it first copies the whole patch
/// matrix into a packed buffer of the same size, doubling each thread's scratch (issue 11: on a
/// 3-rank slab of a 64³ cube, 22 columns wide, every strip was copied). The strip size does not
/// change any output value: each output column is one GEMM column, summed over the kernel alone.
fn whole_gemm_lanes(rows: usize, row_len: usize) -> usize {
    let step = GEMM_LANES / gcd(row_len.max(1), GEMM_LANES);
    if rows >= step {
        rows - rows % step
    } else {
        rows
    }
}

/// The SIMD width (in elements) whose multiples `gemm` takes unpacked: 16 f32 lanes with AVX-512,
/// a multiple of the 8 lanes of f64 and of narrower vector units.
const GEMM_LANES: usize = 16;

fn gcd(a: usize, b: usize) -> usize {
    match b {
        0 => a,
        _ => gcd(b, a % b),
    }
}

/// Output rows per strip where the strips' results are summed (weight gradients): a size that does
/// not depend on the number of threads, so the order of the sums does not either. Each thread's
/// patch matrix is bounded by a fraction of the layer's output (`out_len` values per item) as well
/// as by the cache, so on a rank's small block of a decomposed image the scratch shrinks with the
/// block instead of staying a fixed ~2 MiB per thread (issue 11's memory goal; CNN3D's 3-rank
/// slabs of a 64³ cube have outputs of 2.7 MiB).
fn grad_strip_rows(k_len: usize, row_len: usize, rows_total: usize, out_len: usize) -> usize {
    (strip_cols_bound(k_len, out_len) / row_len.max(1)).clamp(1, rows_total.max(1))
}

/// Patch columns per strip: ~2 MiB of patches (f32), at most a quarter of the layer's output
/// (`out_len` values per item), at least 512.
fn strip_cols_bound(k_len: usize, out_len: usize) -> usize {
    const COL_TARGET: usize = 1 << 19; // elements (2 MiB in f32)
    const OUT_FRACTION: usize = 4;
    // 512, not 1024: on a 3-rank slab of a 64³ cube the floor, not the quarter, set the strip
    // (1024 patch columns of 216 against a 2.7 MiB output); the GEMM's weights are tiny there.
    const MIN_COLS: usize = 512;
    let target = COL_TARGET.min(out_len / OUT_FRACTION);
    (target / k_len.max(1)).max(MIN_COLS)
}

/// Output positions per task of the forward convolution (of `positions` per item): the bounds of
/// [`strip_cols_bound`], at least a few tasks per thread when the image allows, in whole vectors
/// of [`GEMM_LANES`] (see [`whole_gemm_lanes`]). A strip may begin and end inside a row: a 1-D
/// signal is one long row, which whole-row strips could not split (a 2¹⁸-sample signal through a
/// 16-channel k = 9 layer made one 151 MB patch matrix, built on one thread). Strip boundaries
/// change no output value: each output position is one GEMM column, summed over the kernel alone.
fn strip_positions(k_len: usize, positions: usize, out_len: usize, batch: usize) -> usize {
    let mut cols = strip_cols_bound(k_len, out_len).min(positions.max(1));
    let want_tasks = 4 * rayon::current_num_threads();
    let per_item = want_tasks.div_ceil(batch.max(1));
    if positions.div_ceil(cols) < per_item {
        cols = positions.div_ceil(per_item).max(1);
    }
    if cols >= GEMM_LANES {
        cols - cols % GEMM_LANES
    } else {
        cols
    }
}

/// `out = relu?(W · im2col(x) + bias (+ acc))` with output size `od` and low-side padding `pad_lo`.
#[allow(clippy::too_many_arguments)]
fn conv_forward<T: Scalar>(
    g: &Geom,
    weight: &[T],
    bias: Option<&[T]>,
    relu: bool,
    x: &Features<T>,
    acc: Option<Features<T>>,
    pad_lo: [usize; 3],
    od: [usize; 3],
) -> Features<T> {
    assert_eq!(x.channels, g.c_in, "conv input channels");
    let accumulate = acc.is_some();
    let mut out = match acc {
        Some(a) => {
            assert!(
                a.batch == x.batch && a.channels == g.c_out && a.dims == od,
                "conv accumulator shape"
            );
            a
        }
        // Every element is written by the GEMM (read_dst = false), so no zeroing is needed; zeros
        // keep it safe Rust at a small cost.
        None => Features::zeros(x.batch, g.c_out, od),
    };
    let window = [g.kernel, g.stride, g.dilation];
    if let Some(l) = winograd::layer::<T>([g.c_in, g.c_out], window, x.dims, pad_lo, od) {
        let (x_data, out_data) = (&x.data, &mut out.data);
        winograd::conv3x3_weights(
            &l, weight, bias, relu, x.batch, x_data, out_data, accumulate,
        );
        return out;
    }
    let k_len = g.k_len();
    let out_s = od.iter().product::<usize>();
    if out_s == 0 || x.batch == 0 {
        return out;
    }
    let per_strip = strip_positions(k_len, out_s, g.c_out * out_s, x.batch);
    let strips = out_s.div_ceil(per_strip);
    let in_s = x.spatial_len();
    let out_ptr = SendPtr(out.data.as_mut_ptr());
    let tasks = x.batch * strips;
    let inner_par = gemm_parallelism(tasks);
    let native = patch_gemm::available::<T>();
    (0..tasks)
        .into_par_iter()
        .for_each_init(Vec::new, |col, task| {
            let (b, s) = (task / strips, task % strips);
            let p0 = s * per_strip;
            let n = per_strip.min(out_s - p0);
            col.resize(k_len * n, T::ZERO);
            let xb = &x.data[b * g.c_in * in_s..(b + 1) * g.c_in * in_s];
            im2col_span(g, pad_lo, xb, x.dims, od, p0..p0 + n, 0..k_len, col);
            let out_ptr = &out_ptr;
            // SAFETY: task (b, s) writes only positions p0..p0 + n of every channel of item b;
            // tasks are disjoint, and `out` outlives the parallel loop.
            unsafe {
                let dst = out_ptr.0.add(b * g.c_out * out_s + p0);
                if native {
                    let f32s = patch_gemm::as_f32::<T>;
                    let (weight, col, bias) = (f32s(weight), f32s(col), bias.map(f32s));
                    let p = patch_gemm::Product {
                        weight,
                        weight_strides: [k_len, 1],
                        c_out: g.c_out,
                        k_len,
                        col,
                        ld: n,
                        n,
                        bias,
                        relu,
                        accumulate,
                    };
                    patch_gemm::weights_times_patches(&p, dst.cast::<f32>(), out_s);
                    return;
                }
                gemm::gemm(
                    g.c_out,
                    n,
                    k_len,
                    dst,
                    1,
                    out_s as isize,
                    accumulate,
                    weight.as_ptr(),
                    1,
                    k_len as isize,
                    col.as_ptr(),
                    1,
                    n as isize,
                    T::ONE,
                    T::ONE,
                    false,
                    false,
                    false,
                    inner_par,
                );
                if bias.is_some() || relu {
                    for co in 0..g.c_out {
                        let row = std::slice::from_raw_parts_mut(dst.add(co * out_s), n);
                        let bias = bias.map_or(T::ZERO, |b| b[co]);
                        if relu {
                            row.iter_mut().for_each(|v| *v = (*v + bias).max(T::ZERO));
                        } else {
                            row.iter_mut().for_each(|v| *v += bias);
                        }
                    }
                }
            }
        });
    out
}

/// The adjoint of the convolution's linear part, for an input of `in_dims`.
///
/// With stride 1 it is itself a convolution: `dx[ci] = Σ_co flip(W[co, ci]) ⋆ dz[co]`, padded low by
/// `d·(k − 1) − pad_lo`, so it runs through [`conv_forward`] (one parallel GEMM per strip, no
/// scatter). Otherwise `dx = col2im(Wᵀ · dz)`: strips run one after the other (each strip's product
/// on all threads), the scatter of each strip in parallel over input channels, so no two threads add
/// into the same voxel.
fn conv_backward_input<T: Scalar>(
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
fn conv_backward_input_scatter<T: Scalar>(
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
fn conv_backward_input_scatter_with<T: Scalar>(
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
fn weights_transposed_times_strip<T: Scalar>(
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
fn flip_kernels<T: Scalar>(g: &Geom, weight: &[T]) -> Vec<T> {
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
fn conv_backward_weight<T: Scalar>(
    g: &Geom,
    x: &Features<T>,
    dz: &Features<T>,
    pad_lo: [usize; 3],
    grad_w: &mut [T],
) {
    conv_backward_weight_with(StripProduct::for_scalar::<T>(), g, x, dz, pad_lo, grad_w)
}

/// [`conv_backward_weight`] with the strip product chosen by the caller (tests compare the two).
fn conv_backward_weight_with<T: Scalar>(
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
fn patch_dot_strip<T: Scalar>(
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
fn transpose<T: Scalar>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
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
fn channel_sums_into<T: Scalar>(f: &Features<T>, grad: &mut [T]) {
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

/// `f[b, c, …] += bias[c]`.
fn add_channel_bias<T: Scalar>(f: &mut Features<T>, bias: &[T]) {
    let (s, c) = (f.spatial_len(), f.channels);
    if s == 0 {
        return;
    }
    f.data
        .par_chunks_mut(s)
        .enumerate()
        .for_each(|(p, plane)| plane.iter_mut().for_each(|v| *v += bias[p % c]));
}

/// For kernel tap `k` along one axis: the output positions `lo..hi` (of `n_out`) whose input
/// position `o·s + k·d − pad` lies inside `0..n_in`.
fn valid_outputs(
    k: usize,
    s: usize,
    d: usize,
    pad: usize,
    n_in: usize,
    n_out: usize,
) -> (usize, usize) {
    let kd = k * d;
    let lo = pad.saturating_sub(kd).div_ceil(s).min(n_out);
    let hi = if n_in + pad > kd {
        ((n_in + pad - kd - 1) / s + 1).min(n_out)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Fills `col[(ci, kz, ky, kx), j]` for the output positions `j` of output rows `r0..r1` (row `r` is
/// `(oz, oy) = (r / H_out, r % H_out)`), zero where the kernel reaches into the padding.
#[allow(clippy::too_many_arguments)]
fn im2col<T: Scalar>(
    g: &Geom,
    pad_lo: [usize; 3],
    x: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    r0: usize,
    r1: usize,
    col: &mut [T],
) {
    let wo = out_dims[2];
    im2col_span(
        g,
        pad_lo,
        x,
        in_dims,
        out_dims,
        r0 * wo..r1 * wo,
        0..g.k_len(),
        col,
    );
}

/// Patch rows `ks` of [`im2col`]'s matrix (row `ks.start` at `col[0..n]`) for the flattened output
/// positions `span` (`(oz · H_out + oy) · W_out + ox`), which may begin and end inside a row:
/// `col[(k − ks.start) · n + j − span.start]`. The forward cuts 1-D signals inside their one row;
/// the weight gradient builds one register block's rows at a time, in L1.
#[allow(clippy::too_many_arguments)]
fn im2col_span<T: Scalar>(
    g: &Geom,
    pad_lo: [usize; 3],
    x: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    span: std::ops::Range<usize>,
    ks: std::ops::Range<usize>,
    col: &mut [T],
) {
    let [di, hi, wi] = in_dims;
    let [_, ho, wo] = out_dims;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.stride;
    let [dd, dh, dw] = g.dilation;
    let [pd, ph, pw] = pad_lo;
    let n = span.len();
    if n == 0 || wo == 0 {
        return;
    }
    let in_s = di * hi * wi;
    let rows = span.start / wo..(span.end - 1) / wo + 1;
    for (row_idx, dst_row) in ks.zip(col.chunks_exact_mut(n)) {
        let (ci, tap) = (row_idx / (kd * kh * kw), row_idx % (kd * kh * kw));
        let (kz, ky, kx) = (tap / (kh * kw), tap / kw % kh, tap % kw);
        let xc = &x[ci * in_s..(ci + 1) * in_s];
        let (lo, hi_x) = valid_outputs(kx, sw, dw, pw, wi, wo);
        for r in rows.clone() {
            // This row's part of the span: output columns xa..xb.
            let xa = span.start.saturating_sub(r * wo);
            let xb = (span.end - r * wo).min(wo);
            let at = r * wo + xa - span.start;
            let dst = &mut dst_row[at..at + (xb - xa)];
            let (oz, oy) = (r / ho, r % ho);
            let iz = (oz * sd + kz * dd) as isize - pd as isize;
            let iy = (oy * sh + ky * dh) as isize - ph as isize;
            if iz < 0 || iz >= di as isize || iy < 0 || iy >= hi as isize {
                dst.fill(T::ZERO);
                continue;
            }
            let src = &xc[(iz as usize * hi + iy as usize) * wi..][..wi];
            // Columns a..b read the input; the rest of xa..xb is padding.
            let a = lo.clamp(xa, xb);
            let b = hi_x.clamp(a, xb);
            dst[..a - xa].fill(T::ZERO);
            dst[b - xa..].fill(T::ZERO);
            if b == a {
                continue;
            }
            let valid = &mut dst[a - xa..b - xa];
            if sw == 1 {
                let start = a + kx * dw - pw;
                valid.copy_from_slice(&src[start..start + (b - a)]);
            } else {
                let start = a * sw + kx * dw - pw;
                valid
                    .iter_mut()
                    .zip(src[start..].iter().step_by(sw))
                    .for_each(|(d, s)| *d = *s);
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds `col[(ci, kz, ky, kx), j]` into the input voxel each entry was
/// read from (entries in the padding are dropped). Parallel over input channels.
#[allow(clippy::too_many_arguments)]
fn col2im_add<T: Scalar>(
    g: &Geom,
    pad_lo: [usize; 3],
    col: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    r0: usize,
    r1: usize,
    dx: &mut [T],
) {
    let [di, hi, wi] = in_dims;
    let [_, ho, wo] = out_dims;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.stride;
    let [dd, dh, dw] = g.dilation;
    let [pd, ph, pw] = pad_lo;
    let n = (r1 - r0) * wo;
    let in_s = di * hi * wi;
    let taps = kd * kh * kw;
    dx.par_chunks_mut(in_s).enumerate().for_each(|(ci, dxc)| {
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let row_idx = ci * taps + (kz * kh + ky) * kw + kx;
                    let src_row = &col[row_idx * n..(row_idx + 1) * n];
                    let (lo, hi_x) = valid_outputs(kx, sw, dw, pw, wi, wo);
                    for r in r0..r1 {
                        let (oz, oy) = (r / ho, r % ho);
                        let iz = (oz * sd + kz * dd) as isize - pd as isize;
                        let iy = (oy * sh + ky * dh) as isize - ph as isize;
                        if iz < 0 || iz >= di as isize || iy < 0 || iy >= hi as isize {
                            continue;
                        }
                        let src = &src_row[(r - r0) * wo..(r - r0 + 1) * wo];
                        let dst = &mut dxc[(iz as usize * hi + iy as usize) * wi..][..wi];
                        if sw == 1 {
                            let start = lo + kx * dw - pw;
                            dst[start..start + (hi_x - lo)]
                                .iter_mut()
                                .zip(&src[lo..hi_x])
                                .for_each(|(d, v)| *d += *v);
                        } else if hi_x > lo {
                            let start = lo * sw + kx * dw - pw;
                            dst[start..]
                                .iter_mut()
                                .step_by(sw)
                                .zip(&src[lo..hi_x])
                                .for_each(|(d, v)| *d += *v);
                        }
                    }
                }
            }
        }
    });
}

/// gemm's own threads when there is a single (item, strip) task, so both cores work on it; none
/// when rayon already spreads several tasks.
fn gemm_parallelism(tasks: usize) -> gemm::Parallelism {
    if tasks == 1 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop, clippy::type_complexity)]
pub(crate) mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    pub(crate) fn random<T: Scalar>(n: usize, rng: &mut rand::rngs::StdRng) -> Vec<T> {
        (0..n)
            .map(|_| T::from_f64(rng.random_range(-1.0f64..1.0)))
            .collect()
    }

    pub(crate) fn random_features<T: Scalar>(
        batch: usize,
        channels: usize,
        dims: [usize; 3],
        rng: &mut rand::rngs::StdRng,
    ) -> Features<T> {
        Features {
            batch,
            channels,
            dims,
            data: random(batch * channels * dims.iter().product::<usize>(), rng),
        }
    }

    pub(crate) fn dot<T: Scalar>(a: &[T], b: &[T]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(a, b)| a.to_f64() * b.to_f64()).sum()
    }

    /// Direct (nested loops) convolution with per-side padding, the definition.
    fn naive_conv(c: &Conv, x: &Features, acc: Option<&Features>, pads: Pads) -> Features {
        let od = c.out_dims_padded(x.dims, pads).unwrap();
        let mut out = Features::zeros(x.batch, c.c_out, od);
        let [di, hi, wi] = x.dims;
        let k: usize = c.kernel.iter().product();
        for b in 0..x.batch {
            for co in 0..c.c_out {
                for oz in 0..od[0] {
                    for oy in 0..od[1] {
                        for ox in 0..od[2] {
                            let mut s = c.bias.as_ref().map_or(0.0, |b| b[co]) as f64;
                            for ci in 0..c.c_in {
                                for kz in 0..c.kernel[0] {
                                    for ky in 0..c.kernel[1] {
                                        for kx in 0..c.kernel[2] {
                                            let at = |o: usize, k: usize, a: usize| {
                                                (o * c.stride[a] + k * c.dilation[a]) as isize
                                                    - pads[a][0] as isize
                                            };
                                            let (iz, iy, ix) =
                                                (at(oz, kz, 0), at(oy, ky, 1), at(ox, kx, 2));
                                            if iz < 0
                                                || iy < 0
                                                || ix < 0
                                                || iz >= di as isize
                                                || iy >= hi as isize
                                                || ix >= wi as isize
                                            {
                                                continue;
                                            }
                                            let xv = x.data[(((b * c.c_in + ci) * di
                                                + iz as usize)
                                                * hi
                                                + iy as usize)
                                                * wi
                                                + ix as usize];
                                            let wv = c.weight[(co * c.c_in + ci) * k
                                                + (kz * c.kernel[1] + ky) * c.kernel[2]
                                                + kx];
                                            s += xv as f64 * wv as f64;
                                        }
                                    }
                                }
                            }
                            let i = (((b * c.c_out + co) * od[0] + oz) * od[1] + oy) * od[2] + ox;
                            if let Some(a) = acc {
                                s += a.data[i] as f64;
                            }
                            out.data[i] = if c.relu { s.max(0.0) } else { s } as f32;
                        }
                    }
                }
            }
        }
        out
    }

    /// The definition of a transposed convolution: every input voxel scatters its taps.
    fn naive_transposed(t: &ConvTranspose, x: &Features) -> Features {
        let od = t.out_dims(x.dims).unwrap();
        let mut out = Features::zeros(x.batch, t.c_out, od);
        let [d, h, w] = x.dims;
        let [kd, kh, kw] = t.kernel;
        let taps = kd * kh * kw;
        for b in 0..x.batch {
            for ci in 0..t.c_in {
                for co in 0..t.c_out {
                    for z in 0..d {
                        for y in 0..h {
                            for xx in 0..w {
                                let v = x.data[(((b * t.c_in + ci) * d + z) * h + y) * w + xx];
                                for kz in 0..kd {
                                    for ky in 0..kh {
                                        for kx in 0..kw {
                                            let at = |i: usize, k: usize, a: usize| {
                                                (i * t.stride[a] + k * t.dilation[a]) as isize
                                                    - t.pad[a] as isize
                                            };
                                            let (oz, oy, ox) =
                                                (at(z, kz, 0), at(y, ky, 1), at(xx, kx, 2));
                                            if oz < 0
                                                || oy < 0
                                                || ox < 0
                                                || oz >= od[0] as isize
                                                || oy >= od[1] as isize
                                                || ox >= od[2] as isize
                                            {
                                                continue;
                                            }
                                            let wv = t.weight[(ci * t.c_out + co) * taps
                                                + (kz * kh + ky) * kw
                                                + kx];
                                            let i = (((b * t.c_out + co) * od[0] + oz as usize)
                                                * od[1]
                                                + oy as usize)
                                                * od[2]
                                                + ox as usize;
                                            out.data[i] += v * wv;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(bias) = &t.bias {
            add_channel_bias(&mut out, bias);
        }
        out
    }

    fn max_err(a: &Features, b: &Features) -> f32 {
        assert_eq!((a.batch, a.channels, a.dims), (b.batch, b.channels, b.dims));
        a.data
            .iter()
            .zip(&b.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    }

    /// A random geometry with `rank` spatial axes: kernel 1..4, stride 1..3, dilation 1..2,
    /// padding 0..3, and input sizes that fit the dilated kernel.
    fn random_geometry(
        rank: usize,
        rng: &mut rand::rngs::StdRng,
    ) -> ([usize; 3], [usize; 3], [usize; 3], [usize; 3], [usize; 3]) {
        let (mut k, mut s, mut p, mut d, mut n) = ([1; 3], [1; 3], [0; 3], [1; 3], [1; 3]);
        for a in 3 - rank..3 {
            k[a] = rng.random_range(1..4);
            s[a] = rng.random_range(1..3);
            d[a] = rng.random_range(1..3);
            p[a] = rng.random_range(0..3);
            let reach = d[a] * (k[a] - 1) + 1;
            n[a] = rng.random_range(reach.max(2)..reach + 9);
        }
        (k, s, p, d, n)
    }

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

    #[test]
    fn convolutions_match_the_definition_on_odd_sizes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..24 {
            let rank = if case % 3 == 2 { 3 } else { 2 };
            let (k, stride, pad) = match case % 4 {
                0 | 1 => (3, 1, 1),
                2 => (2, 2, 0),
                _ => (3, 2, 1),
            };
            let batch = rng.random_range(1..3);
            let c_in = rng.random_range(1..6);
            let c_out = rng.random_range(1..7);
            let dims = [
                if rank == 3 { rng.random_range(2..7) } else { 1 },
                rng.random_range(2..12),
                rng.random_range(2..13),
            ];
            let kd = if rank == 3 { k } else { 1 };
            let weight = random(c_out * c_in * kd * k * k, &mut rng);
            let bias = (case % 2 == 1).then(|| random(c_out, &mut rng));
            let conv = Conv::new(
                rank,
                c_in,
                c_out,
                k,
                stride,
                pad,
                weight,
                bias,
                case % 5 == 0,
            );
            let x = random_features(batch, c_in, dims, &mut rng);
            let acc = (case % 3 == 1)
                .then(|| random_features(batch, c_out, conv.out_dims(dims).unwrap(), &mut rng));
            let want = naive_conv(&conv, &x, acc.as_ref(), conv.pads());
            let got = conv.forward(&x, acc);
            let e = max_err(&got, &want);
            assert!(e < 1e-4, "case {case} rank {rank} k{k} s{stride}: err {e}");

            let t = ConvTranspose::new_2x(
                rank,
                c_in,
                c_out,
                random(c_in * c_out * if rank == 3 { 8 } else { 4 }, &mut rng),
            );
            let e = max_err(&t.forward(&x), &naive_transposed(&t, &x));
            assert!(e < 1e-4, "transposed case {case} rank {rank}: err {e}");
        }
    }

    #[test]
    fn dilated_strided_and_one_sided_padded_layers_match_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for case in 0..60 {
            let rank = 1 + case % 3;
            let (kernel, stride, pad, dilation, dims) = random_geometry(rank, &mut rng);
            let (c_in, c_out) = (rng.random_range(1..4), rng.random_range(1..4));
            let taps: usize = kernel.iter().product();
            let conv = Conv::with_geometry(
                c_in,
                c_out,
                kernel,
                stride,
                pad,
                dilation,
                random(c_out * c_in * taps, &mut rng),
                (case % 2 == 0).then(|| random(c_out, &mut rng)),
                case % 4 == 1,
            );
            let x = random_features(2, c_in, dims, &mut rng);
            // One-sided padding, as a block at the edge of a decomposed image gets.
            let pads: Pads = std::array::from_fn(|a| [pad[a], pad[a] / 2]);
            if conv.out_dims_padded(dims, pads).is_some() {
                let e = max_err(
                    &conv.forward_padded(&x, None, pads),
                    &naive_conv(&conv, &x, None, pads),
                );
                assert!(e < 1e-4, "conv case {case}: err {e}");
            }
            let mut output_padding = [0; 3];
            for a in 3 - rank..3 {
                output_padding[a] = rng.random_range(0..stride[a].max(dilation[a]));
            }
            let t = ConvTranspose::with_geometry(
                c_in,
                c_out,
                kernel,
                stride,
                pad,
                dilation,
                output_padding,
                random(c_in * c_out * taps, &mut rng),
                (case % 3 == 0).then(|| random(c_out, &mut rng)),
            );
            if t.out_dims(dims).is_some() {
                let e = max_err(&t.forward(&x), &naive_transposed(&t, &x));
                assert!(e < 1e-4, "transposed case {case}: err {e}");
            }
        }
    }

    /// A forward strip's patch columns are a whole number of `gemm`'s SIMD widths wherever one
    /// fits (22-wide rows, a 3-rank slab of a 64³ cube, take strips of 8 rows), within the
    /// quarter-of-the-output bound, and the strips still cover every row.
    #[test]
    fn forward_strips_hold_whole_simd_widths_of_patch_columns() {
        for (k_len, positions, out_len) in [
            (216, 64 * 64 * 22, 8 * 64 * 64 * 22),
            (216, 64 * 64 * 21, 8 * 64 * 64 * 21),
            (27, 64 * 64 * 22, 8 * 64 * 64 * 22),
            (216, 64 * 64 * 64, 8 * 64 * 64 * 64),
            (9, 1024 * 342, 16 * 1024 * 342),
            (144, 1 << 18, 16 << 18),
        ] {
            let cols = strip_positions(k_len, positions, out_len, 1);
            let bound = strip_cols_bound(k_len, out_len);
            assert!(
                cols >= GEMM_LANES && cols <= bound,
                "{cols} columns against the bound {bound}"
            );
            assert_eq!(cols % GEMM_LANES, 0, "{cols} columns");
        }
        // A 1-D signal (one row) is split too.
        assert!(strip_positions(144, 1 << 18, 16 << 18, 1) < 1 << 17);
        // Fewer positions than a vector: one strip of them all.
        assert_eq!(strip_positions(27, 5, 40, 1), 1.max(5usize.div_ceil(8)));
        // No multiple fits: the rows stay as they were.
        assert_eq!(whole_gemm_lanes(3, 1), 3);
        assert_eq!(whole_gemm_lanes(1, 22), 1);
        assert_eq!(whole_gemm_lanes(47, 22), 40);
    }

    #[test]
    fn patch_spans_cutting_rows_equal_the_whole_patch_matrix() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for case in 0..60 {
            let rank = 1 + case % 3;
            let (k, st, p, d, n) = random_geometry(rank, &mut rng);
            let c_in = rng.random_range(1..3);
            let c = Conv::with_geometry(
                c_in,
                1,
                k,
                st,
                p,
                d,
                vec![0.0; c_in * k.iter().product::<usize>()],
                None,
                false,
            );
            let Some(od) = c.out_dims(n) else { continue };
            let x: Features = random_features(1, c_in, n, &mut rng);
            let g = c.geom();
            let (k_len, out_s) = (g.k_len(), od.iter().product::<usize>());
            let rows_total = od[0] * od[1];
            let mut whole = vec![0.0f32; k_len * out_s];
            im2col(&g, p, &x.data, n, od, 0, rows_total, &mut whole);
            for _ in 0..5 {
                let p0 = rng.random_range(0..out_s);
                let p1 = rng.random_range(p0 + 1..=out_s);
                let m = p1 - p0;
                let mut part = vec![f32::NAN; k_len * m];
                im2col_span(&g, p, &x.data, n, od, p0..p1, 0..k_len, &mut part);
                for kk in 0..k_len {
                    assert_eq!(
                        part[kk * m..(kk + 1) * m],
                        whole[kk * out_s + p0..kk * out_s + p1],
                        "case {case}: k {k:?} s {st:?} p {p:?} d {d:?} in {n:?}, span {p0}..{p1}, row {kk}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_long_signal_split_inside_its_row_matches_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (c_in, c_out) = (3, 5);
        for (k, stride, pad, dilation) in [(9, 1, 4, 1), (5, 2, 3, 2)] {
            let conv = Conv::with_geometry(
                c_in,
                c_out,
                [1, 1, k],
                [1, 1, stride],
                [0, 0, pad],
                [1, 1, dilation],
                random(c_out * c_in * k, &mut rng),
                Some(random(c_out, &mut rng)),
                true,
            );
            let x: Features = random_features(2, c_in, [1, 1, 7001], &mut rng);
            let od = conv.out_dims(x.dims).unwrap();
            assert!(strip_positions(c_in * k, od[2], c_out * od[2], 2) < od[2]);
            let e = max_err(
                &conv.forward(&x, None),
                &naive_conv(&conv, &x, None, conv.pads()),
            );
            assert!(e < 1e-5, "k {k} stride {stride}: err {e}");
        }
    }

    #[test]
    fn a_large_strip_split_conv_matches_the_definition() {
        // Enough rows and channels that the output is split into several strips and tasks.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (c_in, c_out) = (24, 9);
        let conv = Conv::new(
            2,
            c_in,
            c_out,
            3,
            1,
            1,
            random(c_out * c_in * 9, &mut rng),
            None,
            true,
        );
        let x = random_features(1, c_in, [1, 67, 45], &mut rng);
        let e = max_err(
            &conv.forward(&x, None),
            &naive_conv(&conv, &x, None, conv.pads()),
        );
        assert!(e < 1e-4, "err {e}");
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
