//! 3-D parallel-beam tomography of volumes `(B, C, D, H, W)`, slice by slice.
//!
//! # Geometry
//! The rotation axis is the depth axis `D`; rays are parallel to the `(H, W)` planes. Each axial slice
//! `x[b, c, d]` is therefore an independent 2-D parallel-beam problem with the geometry of
//! [`super::tomography`] (same angles, detector width `N_det = W` with `circle`, `⌈√2·W⌉` otherwise),
//! and detector row `d` records slice `d`. Measurements are laid out `(B, C, D, N_det, N_angles)`: for
//! each slice, the 2-D sinogram in deepinv's layout. `Aᵀ` and FBP are likewise slice by slice, using
//! the 2-D plane kernels (one code path for 2-D and 3-D); ‖A‖ equals the 2-D operator's, since `A` is
//! block diagonal over slices, so `normalize` divides by the 2-D norm.
//!
//! Cone beam (rays diverging from a point source, coupling the slices) is not implemented.

use serde::{Deserialize, Serialize};

use super::tomography::{Angles, Tomography};
use super::{LinearPhysics, Physics};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Serde configuration of [`Tomography3d`]; the slice width comes from the input shape at build time.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tomography3dConfig {
    /// Projection angles about the depth axis: a count (default 180) or a list in degrees.
    pub angles: Angles,
    /// Restrict every slice to its inscribed disc (detector width `W` instead of `⌈√2·W⌉`).
    pub circle: bool,
    /// Scale `A` (and `Aᵀ`) by `1/‖A‖`.
    pub normalize: bool,
}

impl Tomography3dConfig {
    /// Checks every field; the error names it.
    pub fn validate(&self) -> Result<()> {
        self.angles.validate("tomography3d.angles")
    }

    /// Builds the operator for volumes of shape `(B, C, D, W, W)`.
    pub fn build(&self, x_shape: &[usize]) -> Result<Tomography3d> {
        self.validate()?;
        let width = match x_shape {
            [_, _, _, h, w] if h == w => *w,
            [_, _, _, h, w] => {
                return Err(Error::config(
                    "tomography3d",
                    format!("the slices must be square, got {h}×{w} (shape {x_shape:?})"),
                ));
            }
            _ => {
                return Err(Error::config(
                    "tomography3d",
                    format!("expected a volume batch (B, C, D, H, W), got shape {x_shape:?}"),
                ));
            }
        };
        Tomography3d::new(width, &self.angles, self.circle, self.normalize)
    }
}

/// Parallel-beam tomography of volumes, rotation axis along depth: `(B, C, D, W, W)` →
/// `(B, C, D, N_det, N_angles)`.
#[derive(Debug, Clone)]
pub struct Tomography3d {
    slice: Tomography,
}

impl Tomography3d {
    /// The operator for slices of `img_width × img_width` pixels (any depth).
    pub fn new(img_width: usize, angles: &Angles, circle: bool, normalize: bool) -> Result<Self> {
        Ok(Tomography3d {
            slice: Tomography::new(img_width, angles, circle, normalize)?,
        })
    }

    /// The 2-D operator applied to every slice.
    pub fn slice_operator(&self) -> &Tomography {
        &self.slice
    }

    /// Slice-by-slice filtered back-projection: `(B, C, D, N_det, N_angles)` → `(B, C, D, W, W)`.
    pub fn fbp(&self, y: &Tensor) -> Result<Tensor> {
        let planes = self
            .slice
            .sinogram_planes("tomography3d fbp", y.shape(), 3)?;
        let w = self.slice.img_width();
        let s = y.shape();
        Tensor::from_vec(
            &[s[0], s[1], s[2], w, w],
            self.slice.fbp_planes(y.data(), planes),
        )
    }
}

impl Physics for Tomography3d {
    fn name(&self) -> String {
        format!("3-D parallel-beam {}", self.slice.name())
    }

    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        self.slice.image_planes("tomography3d", x_shape, 3)?;
        Ok(vec![
            x_shape[0],
            x_shape[1],
            x_shape[2],
            self.slice.n_det(),
            self.slice.angles_deg().len(),
        ])
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let shape = self.output_shape(x.shape())?;
        let planes = shape[..3].iter().product();
        Tensor::from_vec(&shape, self.slice.project_planes(x.data(), planes))
    }
}

impl LinearPhysics for Tomography3d {
    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        let planes = self
            .slice
            .sinogram_planes("tomography3d adjoint", y.shape(), 3)?;
        let w = self.slice.img_width();
        let s = y.shape();
        Tensor::from_vec(
            &[s[0], s[1], s[2], w, w],
            self.slice.backproject_planes(y.data(), planes),
        )
    }
}
