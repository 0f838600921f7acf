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

mod backward;
mod forward;
mod im2col;
mod strips;
#[cfg(test)]
pub(crate) mod testing;

use rayon::prelude::*;

use crate::float::Float;
use backward::{channel_sums_into, conv_backward_input, conv_backward_weight};
use forward::{add_channel_bias, conv_forward};

/// Zero padding before and after each spatial axis `[D, H, W]`: `[[low, high]; 3]`.
pub type Pads = [[usize; 2]; 3];

/// A batch of feature maps `(B, C, D, H, W)` in C order; 2-D maps have `D = 1`, 1-D maps
/// `D = H = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Features<T: Float = f32> {
    pub batch: usize,
    pub channels: usize,
    /// `[D, H, W]`.
    pub dims: [usize; 3],
    pub data: Vec<T>,
}

impl<T: Float> Features<T> {
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
    pub fn cast<U: Float>(&self) -> Features<U> {
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
pub struct Conv<T: Float = f32> {
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

impl<T: Float> Conv<T> {
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
pub struct ConvTranspose<T: Float = f32> {
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

impl<T: Float> ConvTranspose<T> {
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
}
