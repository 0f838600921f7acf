//! Blur operators: 2-D ([`Blur`], images `(B,C,H,W)`) and 3-D ([`Blur3d`], volumes `(B,C,D,H,W)`)
//! convolutions with deepinv's semantics, Gaussian kernels, and their serde configs.
//!
//! deepinv 0.5.0 `physics.Blur` / `physics/functional/convolution.py`: a true convolution (the
//! kernel is flipped relative to torch's correlation), kernel centre at `K/2` per axis, `valid`
//! output `N−K+1`, `constant` pads with zeros, and the adjoint folds padded samples back (see
//! [`super::blur_engine`], which holds the arithmetic shared by 2-D and 3-D). Each operator picks the direct
//! or the FFT path per input size ([`ConvMethod::Auto`]); both give the same numbers to float
//! rounding and each is the exact adjoint of itself.
//!
//! Where this departs from deepinv: paddings are defined for kernels larger than the image (torch
//! refuses `reflect` pads ≥ the image size and circular pads > it; here the extension just repeats),
//! and a kernel may not have a batch dimension other than 1 (deepinv allows one kernel per batch item).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::blur_engine::Conv;
use super::{LinearPhysics, Physics};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use super::blur_engine::{ConvMethod, MAX_KERNEL_SIDE, Padding};

/// Largest Gaussian standard deviation accepted in 2-D, in pixels (kernel side ≈ 6.7σ).
pub const MAX_SIGMA_PX: f32 = 500.0;
/// Largest Gaussian standard deviation accepted in 3-D, in voxels (the kernel is a cube).
pub const MAX_SIGMA_3D_PX: f32 = 50.0;

/// deepinv's kernel side for standard deviations `sigma_px`: `2·int(max σ / 0.3 + 1) + 1`, with
/// σ taken as at most `max_sigma_px`. Configs refuse a larger σ with its field's name; the bound
/// here keeps the kernel's size bounded where it is computed, whatever the caller checked (a σ of
/// 10⁹ would ask for 10¹⁹ values).
fn gaussian_side(sigma_px: &[f32], max_sigma_px: f32) -> usize {
    let s = sigma_px
        .iter()
        .copied()
        .fold(0.0f32, f32::max)
        .min(max_sigma_px);
    // deepinv evaluates the size in Python floats from the decimal the user wrote; the shortest
    // decimal of the f32 recovers it (0.9f32 → 0.9, whose 0.9/0.3 + 1 truncates to 4, not 3).
    let s64: f64 = s.to_string().parse().unwrap_or(s as f64);
    2 * ((s64 / 0.3 + 1.0) as usize) + 1
}

/// A 2-D Gaussian kernel `(1, 1, n, n)`, reproducing deepinv's
/// `physics.functional.gaussian_blur(sigma=(σ_rows, σ_cols), angle)`: side `2·int(max σ/0.3+1)+1`,
/// coordinates `(x, y)` = (column, row) offsets from the centre rotated by `angle_deg`
/// (`x' = x cos θ − y sin θ`, `y' = x sin θ + y cos θ`), value `exp(−x'²/2σ_cols² − y'²/2σ_rows²)`,
/// normalised to sum 1. Arguments are assumed validated (σ > 0, finite).
pub fn gaussian_kernel(sigma_px: [f32; 2], angle_deg: f32) -> Tensor {
    let n = gaussian_side(&sigma_px, MAX_SIGMA_PX);
    let half = (n as f64 - 1.0) / 2.0;
    let theta = (angle_deg as f64).to_radians();
    let (sin, cos) = theta.sin_cos();
    let (s_rows, s_cols) = (sigma_px[0] as f64, sigma_px[1] as f64);
    let mut values = Vec::with_capacity(n * n);
    for row in 0..n {
        let y = row as f64 - half;
        for col in 0..n {
            let x = col as f64 - half;
            let (xr, yr) = (cos * x - sin * y, sin * x + cos * y);
            values.push((-0.5 * (xr * xr / (s_cols * s_cols) + yr * yr / (s_rows * s_rows))).exp());
        }
    }
    normalised(&[1, 1, n, n], values)
}

/// A 3-D axis-aligned Gaussian kernel `(1, 1, n, n, n)` for standard deviations (depth, rows, cols),
/// as deepinv's `gaussian_blur(sigma=(σ_d, σ_h, σ_w))` with angle 0: a cube whose side follows the
/// 2-D rule from the largest σ, normalised to sum 1.
pub fn gaussian_kernel_3d(sigma_px: [f32; 3]) -> Tensor {
    let n = gaussian_side(&sigma_px, MAX_SIGMA_3D_PX);
    let half = (n as f64 - 1.0) / 2.0;
    let profile = |s: f32| -> Vec<f64> {
        let s = s as f64;
        (0..n)
            .map(|i| {
                let t = i as f64 - half;
                (-0.5 * t * t / (s * s)).exp()
            })
            .collect()
    };
    let (pd, ph, pw) = (
        profile(sigma_px[0]),
        profile(sigma_px[1]),
        profile(sigma_px[2]),
    );
    let mut values = Vec::with_capacity(n * n * n);
    for a in &pd {
        for b in &ph {
            for c in &pw {
                values.push(a * b * c);
            }
        }
    }
    normalised(&[1, 1, n, n, n], values)
}

fn normalised(shape: &[usize], values: Vec<f64>) -> Tensor {
    let sum: f64 = values.iter().sum();
    Tensor::from_fn(shape, |i| (values[i] / sum) as f32)
}

/// Splits a kernel tensor into per-channel kernels: shapes `spatial`, `(1,1,…spatial)` (one kernel for
/// every channel) or `(1,C,…spatial)` (one per channel).
fn split_kernel(kernel: &Tensor, ndim: usize, field: &str) -> Result<(Vec<Vec<f32>>, Vec<usize>)> {
    let shape = kernel.shape();
    let (channels, spatial) = if shape.len() == ndim {
        (1, shape.to_vec())
    } else if shape.len() == ndim + 2 {
        if shape[0] != 1 {
            return Err(Error::config(
                field,
                format!(
                    "kernel shape {shape:?}: the batch dimension must be 1 (one kernel for all images)"
                ),
            ));
        }
        (shape[1], shape[2..].to_vec())
    } else {
        return Err(Error::config(
            field,
            format!(
                "kernel shape {shape:?}: expected {ndim} spatial dimensions, optionally preceded by (1, C)"
            ),
        ));
    };
    if channels == 0 || spatial.contains(&0) {
        return Err(Error::config(
            field,
            format!("kernel shape {shape:?} is empty"),
        ));
    }
    if let Some(&side) = spatial.iter().find(|&&s| s > MAX_KERNEL_SIDE) {
        return Err(Error::config(
            field,
            format!("kernel side {side} exceeds the maximum {MAX_KERNEL_SIDE}"),
        ));
    }
    kernel.check_finite(field)?;
    let n: usize = spatial.iter().product();
    let kernels = kernel.data().chunks_exact(n).map(<[f32]>::to_vec).collect();
    Ok((kernels, spatial))
}

/// The shape logic shared by [`Blur`] and [`Blur3d`]: a [`Conv`] on `rank`-D tensors.
struct ConvOp {
    conv: Conv,
    rank: usize,
    label: String,
}

impl ConvOp {
    /// (planes, channels, spatial dims as 3-D) of an input or output tensor.
    fn geometry(&self, shape: &[usize], op: &str) -> Result<(usize, usize, [usize; 3])> {
        if shape.len() != self.rank {
            let layout = if self.rank == 4 {
                "(B, C, H, W)"
            } else {
                "(B, C, D, H, W)"
            };
            return Err(Error::config(
                op,
                format!(
                    "expected a {}-D array {layout}, got shape {shape:?}",
                    self.rank
                ),
            ));
        }
        let channels = shape[1];
        let kc = self.conv.channels();
        if kc != 1 && kc != channels {
            return Err(Error::config(
                op,
                format!("the kernel has {kc} channels but the input {shape:?} has {channels}"),
            ));
        }
        if shape.contains(&0) {
            return Err(Error::config(op, format!("empty input of shape {shape:?}")));
        }
        let mut dims = [1; 3];
        dims[3 - (self.rank - 2)..].copy_from_slice(&shape[2..]);
        Ok((shape[0] * channels, channels, dims))
    }

    fn tensor(&self, batch_channels: &[usize], dims: [usize; 3], data: Vec<f32>) -> Result<Tensor> {
        let mut shape = batch_channels.to_vec();
        shape.extend_from_slice(&dims[3 - (self.rank - 2)..]);
        Tensor::from_vec(&shape, data)
    }

    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        let (_, _, dims) = self.geometry(x_shape, &self.label)?;
        let out = self.conv.out_dims(dims).ok_or_else(|| {
            let k = self.conv.kdims();
            let k = &k[3 - (self.rank - 2)..];
            let d = &dims[3 - (self.rank - 2)..];
            Error::config(
                &self.label,
                format!(
                    "padding `valid` needs an input at least as large as the kernel {k:?}, got spatial size \
                     {d:?}; use a smaller kernel or another padding"
                ),
            )
        })?;
        let mut shape = x_shape[..2].to_vec();
        shape.extend_from_slice(&out[3 - (self.rank - 2)..]);
        Ok(shape)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.output_shape(x.shape())?;
        let (planes, channels, dims) = self.geometry(x.shape(), &self.label)?;
        let out_dims = self.conv.out_dims(dims).expect("checked by output_shape");
        let y = self.conv.forward(x.data(), planes, channels, dims);
        self.tensor(&x.shape()[..2], out_dims, y)
    }

    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        let (planes, channels, out_dims) = self.geometry(y.shape(), &self.label)?;
        let dims = self.conv.in_dims(out_dims);
        let x = self.conv.adjoint(y.data(), planes, channels, out_dims);
        self.tensor(&y.shape()[..2], dims, x)
    }

    fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
        self.output_shape(x.shape())?;
        let (planes, channels, dims) = self.geometry(x.shape(), &self.label)?;
        match self
            .conv
            .adjoint_forward_fused(x.data(), planes, channels, dims)
        {
            Some(data) => Tensor::from_vec(x.shape(), data),
            None => self.adjoint(&self.forward(x)?),
        }
    }

    fn circular_op_norm_sq(&self, x_shape: &[usize]) -> Result<Option<f64>> {
        self.output_shape(x_shape)?;
        if self.conv.padding() != Padding::Circular {
            return Ok(None);
        }
        let (_, _, dims) = self.geometry(x_shape, &self.label)?;
        Ok(Some(self.conv.circular_op_norm_sq(dims)))
    }

    fn method_for(&self, x_shape: &[usize]) -> Result<ConvMethod> {
        let (_, _, dims) = self.geometry(x_shape, &self.label)?;
        Ok(self.conv.resolve(dims))
    }
}

/// The trait impls the 2-D and 3-D blurs share: both delegate to their [`ConvOp`]. Extra tokens
/// are more `LinearPhysics` methods.
macro_rules! conv_physics {
    ($blur:ty $(, $($extra:tt)*)?) => {
        impl std::fmt::Debug for $blur {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.op.label)
            }
        }

        impl Physics for $blur {
            fn name(&self) -> String {
                self.op.label.clone()
            }
            fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
                self.op.output_shape(x_shape)
            }
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                self.op.forward(x)
            }
        }

        impl LinearPhysics for $blur {
            fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
                self.op.adjoint(y)
            }
            fn adjoint_forward(&self, x: &Tensor) -> Result<Tensor> {
                self.op.adjoint_forward(x)
            }
            /// Circular: `max |K̂|²` over the image grid (the operator is diagonal in Fourier);
            /// otherwise the power method.
            fn op_norm_sq(&self, x_shape: &[usize]) -> Result<f64> {
                match self.op.circular_op_norm_sq(x_shape)? {
                    Some(v) => Ok(v),
                    None => crate::linalg::power_method(
                        x_shape,
                        super::POWER_ITERS,
                        super::POWER_TOL,
                        |v| self.adjoint_forward(v),
                    ),
                }
            }
            $($($extra)*)?
        }
    };
}

/// A 2-D convolution `y = k * x` of images `(B, C, H, W)` (deepinv `physics.Blur`).
pub struct Blur {
    op: ConvOp,
}

impl Blur {
    /// A blur by `kernel` — `(h, w)` or `(1, 1, h, w)` (same kernel for every channel) or
    /// `(1, C, h, w)` (one per channel) — with the method chosen per input size.
    pub fn new(kernel: Tensor, padding: Padding) -> Result<Blur> {
        Blur::with_method(kernel, padding, ConvMethod::Auto)
    }

    /// As [`Blur::new`], forcing a method (for benchmarks and tests).
    pub fn with_method(kernel: Tensor, padding: Padding, method: ConvMethod) -> Result<Blur> {
        let (kernels, spatial) = split_kernel(&kernel, 2, "blur.kernel")?;
        let label = format!("blur({}×{}, {})", spatial[0], spatial[1], padding.as_str());
        Ok(Blur {
            op: ConvOp {
                conv: Conv::new(kernels, [1, spatial[0], spatial[1]], padding, method),
                rank: 4,
                label,
            },
        })
    }

    /// Replaces the name reported by [`Physics::name`].
    pub fn with_label(mut self, label: impl Into<String>) -> Blur {
        self.op.label = label.into();
        self
    }

    /// The method [`ConvMethod::Auto`] (or the forced one) resolves to for inputs of `x_shape`.
    pub fn method_for(&self, x_shape: &[usize]) -> Result<ConvMethod> {
        self.op.method_for(x_shape)
    }

    /// The convolution engine, for stacks that fuse transforms across blurs.
    pub(crate) fn conv(&self) -> &Conv {
        &self.op.conv
    }
}

conv_physics!(
    Blur,
    fn shared_fft(&self) -> Option<super::SharedFft<'_>> {
        Some(super::SharedFft::new(&self.op.conv))
    }
);

/// A 3-D convolution of volumes `(B, C, D, H, W)`; paddings `valid` and `circular` only (as deepinv
/// documents for 3-D).
pub struct Blur3d {
    op: ConvOp,
}

impl Blur3d {
    /// A blur by `kernel` — `(d, h, w)`, `(1, 1, d, h, w)` or `(1, C, d, h, w)`.
    pub fn new(kernel: Tensor, padding: Padding) -> Result<Blur3d> {
        Blur3d::with_method(kernel, padding, ConvMethod::Auto)
    }

    /// As [`Blur3d::new`], forcing a method.
    pub fn with_method(kernel: Tensor, padding: Padding, method: ConvMethod) -> Result<Blur3d> {
        if !matches!(padding, Padding::Valid | Padding::Circular) {
            return Err(Error::config(
                "blur3d.padding",
                format!(
                    "`{}` is not available in 3-D; use `valid` or `circular`",
                    padding.as_str()
                ),
            ));
        }
        let (kernels, s) = split_kernel(&kernel, 3, "blur3d.kernel")?;
        let label = format!("blur3d({}×{}×{}, {})", s[0], s[1], s[2], padding.as_str());
        Ok(Blur3d {
            op: ConvOp {
                conv: Conv::new(kernels, [s[0], s[1], s[2]], padding, method),
                rank: 5,
                label,
            },
        })
    }

    /// Replaces the name reported by [`Physics::name`].
    pub fn with_label(mut self, label: impl Into<String>) -> Blur3d {
        self.op.label = label.into();
        self
    }

    /// The method the operator uses for inputs of `x_shape`.
    pub fn method_for(&self, x_shape: &[usize]) -> Result<ConvMethod> {
        self.op.method_for(x_shape)
    }

    /// The convolution engine, for its device twin (`device::ops::blur_engine`).
    pub(crate) fn conv(&self) -> &Conv {
        &self.op.conv
    }
}

conv_physics!(Blur3d);

/// Checks a σ vector: every entry finite, `> 0` and `≤ max`.
fn check_sigma(field: &str, sigma: &[f32], max: f32) -> Result<()> {
    if sigma
        .iter()
        .any(|s| !s.is_finite() || *s <= 0.0 || *s > max)
    {
        return Err(Error::config(
            field,
            format!("{sigma:?}: every standard deviation must be finite and in (0, {max}] pixels"),
        ));
    }
    Ok(())
}

fn check_one_source(prefix: &str, has_sigma: bool, has_file: bool) -> Result<()> {
    if has_sigma == has_file {
        return Err(Error::config(
            format!("{prefix}.sigma"),
            format!(
                "set exactly one of `{prefix}.sigma` (Gaussian kernel) or `{prefix}.kernel_file` (.npy kernel)"
            ),
        ));
    }
    Ok(())
}

fn read_kernel(path: &std::path::Path) -> Result<Tensor> {
    crate::io::read_npy(path)
}

/// Configuration of a 2-D blur, as written in presets (`kind = "blur"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlurConfig {
    /// Gaussian standard deviations (rows, cols) in pixels; excludes `kernel_file`.
    #[serde(default)]
    pub sigma: Option<[f32; 2]>,
    /// Rotation of the Gaussian in degrees (deepinv's `angle`).
    #[serde(default)]
    pub angle_deg: f32,
    /// A kernel in a `.npy` file, `(h, w)`, `(1, 1, h, w)` or `(1, C, h, w)`; excludes `sigma`.
    #[serde(default)]
    pub kernel_file: Option<PathBuf>,
    #[serde(default)]
    pub padding: Padding,
    #[serde(default)]
    pub method: ConvMethod,
}

impl Default for BlurConfig {
    /// An isotropic Gaussian of σ = 1 px, `valid` padding (deepinv's defaults).
    fn default() -> Self {
        BlurConfig {
            sigma: Some([1.0, 1.0]),
            angle_deg: 0.0,
            kernel_file: None,
            padding: Padding::Valid,
            method: ConvMethod::Auto,
        }
    }
}

impl BlurConfig {
    /// Checks ranges without touching files; the error names the field.
    pub fn validate(&self) -> Result<()> {
        check_one_source("blur", self.sigma.is_some(), self.kernel_file.is_some())?;
        if let Some(s) = &self.sigma {
            check_sigma("blur.sigma", s, MAX_SIGMA_PX)?;
        }
        if !self.angle_deg.is_finite() {
            return Err(Error::config(
                "blur.angle_deg",
                "must be a finite number of degrees",
            ));
        }
        Ok(())
    }

    /// The operator (reads `kernel_file` if set).
    pub fn build(&self) -> Result<Blur> {
        self.validate()?;
        match (&self.sigma, &self.kernel_file) {
            (Some(s), _) => {
                let label = format!(
                    "blur(σ=({}, {}) px, {}°, {})",
                    s[0],
                    s[1],
                    self.angle_deg,
                    self.padding.as_str()
                );
                Ok(Blur::with_method(
                    gaussian_kernel(*s, self.angle_deg),
                    self.padding,
                    self.method,
                )?
                .with_label(label))
            }
            (None, Some(path)) => {
                let kernel = read_kernel(path)?;
                let blur = Blur::with_method(kernel, self.padding, self.method)
                    .map_err(|e| at_path(e, "blur.kernel_file", path))?;
                let label = format!("blur({}, {})", path.display(), self.padding.as_str());
                Ok(blur.with_label(label))
            }
            (None, None) => unreachable!("validate checked that one source is set"),
        }
    }
}

/// Re-labels a kernel error with the config field and the file it came from.
fn at_path(e: Error, field: &str, path: &std::path::Path) -> Error {
    match e {
        Error::InvalidConfig { reason, .. } => {
            Error::config(field, format!("{reason} (in {})", path.display()))
        }
        Error::NonFinite { count, .. } => Error::config(
            field,
            format!(
                "the kernel contains {count} non-finite value(s) (in {})",
                path.display()
            ),
        ),
        other => other,
    }
}

/// Configuration of a 3-D blur (`kind = "blur3d"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blur3dConfig {
    /// Gaussian standard deviations (depth, rows, cols) in voxels; excludes `kernel_file`.
    #[serde(default)]
    pub sigma: Option<[f32; 3]>,
    /// A kernel in a `.npy` file, `(d, h, w)`, `(1, 1, d, h, w)` or `(1, C, d, h, w)`.
    #[serde(default)]
    pub kernel_file: Option<PathBuf>,
    /// `valid` or `circular`.
    #[serde(default)]
    pub padding: Padding,
    #[serde(default)]
    pub method: ConvMethod,
}

impl Default for Blur3dConfig {
    fn default() -> Self {
        Blur3dConfig {
            sigma: Some([1.0, 1.0, 1.0]),
            kernel_file: None,
            padding: Padding::Valid,
            method: ConvMethod::Auto,
        }
    }
}

impl Blur3dConfig {
    /// Checks ranges without touching files; the error names the field.
    pub fn validate(&self) -> Result<()> {
        check_one_source("blur3d", self.sigma.is_some(), self.kernel_file.is_some())?;
        if let Some(s) = &self.sigma {
            check_sigma("blur3d.sigma", s, MAX_SIGMA_3D_PX)?;
        }
        if !matches!(self.padding, Padding::Valid | Padding::Circular) {
            return Err(Error::config(
                "blur3d.padding",
                format!(
                    "`{}` is not available in 3-D; use `valid` or `circular`",
                    self.padding.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// The operator (reads `kernel_file` if set).
    pub fn build(&self) -> Result<Blur3d> {
        self.validate()?;
        match (&self.sigma, &self.kernel_file) {
            (Some(s), _) => {
                let label = format!(
                    "blur3d(σ=({}, {}, {}) px, {})",
                    s[0],
                    s[1],
                    s[2],
                    self.padding.as_str()
                );
                Ok(
                    Blur3d::with_method(gaussian_kernel_3d(*s), self.padding, self.method)?
                        .with_label(label),
                )
            }
            (None, Some(path)) => {
                let kernel = read_kernel(path)?;
                let blur = Blur3d::with_method(kernel, self.padding, self.method)
                    .map_err(|e| at_path(e, "blur3d.kernel_file", path))?;
                let label = format!("blur3d({}, {})", path.display(), self.padding.as_str());
                Ok(blur.with_label(label))
            }
            (None, None) => unreachable!("validate checked that one source is set"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaussian_side_follows_deepinv() {
        assert_eq!(gaussian_side(&[1.0, 1.0], MAX_SIGMA_PX), 9);
        assert_eq!(gaussian_side(&[2.0, 0.5], MAX_SIGMA_PX), 15);
        // Python: int(0.9 / 0.3 + 1) = int(4.000…04) = 4.
        assert_eq!(gaussian_side(&[0.9], MAX_SIGMA_PX), 9);
        assert_eq!(gaussian_side(&[10.24, 5.12], MAX_SIGMA_PX), 71);
        // Bounded where computed: σ = 10⁹ is cut to the largest σ a config accepts.
        assert_eq!(gaussian_side(&[1e9], MAX_SIGMA_PX), 3335);
        assert_eq!(gaussian_kernel_3d([1e9; 3]).shape()[2], 335);
    }

    #[test]
    fn gaussian_kernels_sum_to_one_and_are_symmetric() {
        let k = gaussian_kernel([2.0, 0.7], 30.0);
        let n = k.shape()[2];
        assert!((k.data().iter().map(|&v| v as f64).sum::<f64>() - 1.0).abs() < 1e-5);
        // Point symmetry about the centre holds for any angle.
        for i in 0..n * n {
            assert!((k.data()[i] - k.data()[n * n - 1 - i]).abs() < 1e-7);
        }
        let k3 = gaussian_kernel_3d([1.0, 0.5, 2.0]);
        assert_eq!(k3.shape(), &[1, 1, 15, 15, 15]);
    }

    #[test]
    fn valid_padding_rejects_small_images() {
        let blur = Blur::new(Tensor::full(&[5, 5], 0.04), Padding::Valid).unwrap();
        let err = blur.output_shape(&[1, 1, 4, 9]).unwrap_err().to_string();
        assert!(err.contains("valid"), "{err}");
        assert_eq!(blur.output_shape(&[1, 1, 5, 9]).unwrap(), vec![1, 1, 1, 5]);
    }

    #[test]
    fn per_channel_kernel_needs_matching_channels() {
        let blur = Blur::new(Tensor::full(&[1, 2, 3, 3], 0.1), Padding::Circular).unwrap();
        assert!(blur.forward(&Tensor::zeros(&[1, 3, 8, 8])).is_err());
        assert!(blur.forward(&Tensor::zeros(&[2, 2, 8, 8])).is_ok());
    }
}
