//! 2-D parallel-beam tomography on the device: [`DeviceTomography`] samples the rays that
//! `physics::tomography::Tomography` computed (the same positions, the same bilinear weights), so
//! its forward is the CPU forward to float rounding and its adjoint is the exact transpose of its
//! forward (the device dot test). The adjoint gathers per pixel instead of scattering per ray: no
//! atomics, and the same bits on every run. FBP filters the sinogram along the detector with the
//! CPU's ramp filter (zero-padded, cuFFT), then back-projects.
//!
//! [`DeviceTomography3d`] is `physics::tomography3d::Tomography3d` on the device: its slice
//! operator's [`DeviceTomography`] is the plane engine, launched over all `B·C·D` slices at once
//! (the 3-D layouts are the 2-D ones with `D` folded into the planes), so the geometry is the CPU
//! slice operator's and the two cannot drift apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::vector::{scale, transpose};
use super::{crop_grids, expect_len, int_arg, len_arg};
use crate::device::backend::{Arg, Backend, DeviceVec, LaunchConfig};
use crate::device::kernels;
use crate::error::{Error, Result};
use crate::physics::tomography::{Tomography, ramp_fourier_filter, ramp_len};
use crate::physics::tomography3d::Tomography3d;

/// Detector cells per block of the forward projection.
const RAYS_PER_BLOCK: u32 = 128;

/// The largest number of planes (`B·C`) one launch takes (CUDA's limit on `gridDim.z`).
const MAX_PLANES: usize = 65_535;

/// A [`Tomography`] with its rays in device memory.
pub struct DeviceTomography<B: Backend> {
    width: usize,
    border: usize,
    stride: usize,
    n_det: usize,
    n_angles: usize,
    center: f32,
    shift: f32,
    scale: f32,
    ray_row0: DeviceVec<B, f32>,
    ray_col0: DeviceVec<B, f32>,
    ray_count: DeviceVec<B, u32>,
    ray_first: DeviceVec<B, u32>,
    step_row: DeviceVec<B, f32>,
    step_col: DeviceVec<B, f32>,
    /// The disc mask, or one unused value.
    mask: DeviceVec<B, f32>,
    use_mask: bool,
    fbp: RampFilter<B>,
}

/// FBP's ramp filter along the detector: the CPU's filter over its padded length, as complex
/// values over that length (so the transform pair needs no other scaling), with the maps that
/// zero-pad each detector column onto it, and FFT plans by batch size.
struct RampFilter<B: Backend> {
    len: usize,
    spectrum: DeviceVec<B, f32>,
    /// Pad maps of `tsr_conv_pad` for (1, angles, detector) → (1, angles, len).
    maps: [DeviceVec<B, i32>; 3],
    /// `π/(2·N_angles)·‖A‖²`: FBP's factor (deepinv's, as `Tomography::fbp`).
    factor: f32,
    plans: Mutex<HashMap<usize, Arc<B::Fft>>>,
}

impl<B: Backend> DeviceTomography<B> {
    /// Uploads `op`'s geometry.
    pub fn new(backend: &B, op: &Tomography) -> Result<Self> {
        let g = op.device_geometry();
        // Coordinates and counts are i32 in the kernels.
        int_arg("tomography stride²", g.stride * g.stride)?;
        int_arg("tomography rays", g.n_det * g.n_angles)?;
        let len = ramp_len(g.n_det);
        let spectrum: Vec<f32> = ramp_fourier_filter(len)
            .iter()
            .flat_map(|&h| [h / len as f32, 0.0])
            .collect();
        let columns: Vec<i32> = (0..len)
            .map(|j| if j < g.n_det { j as i32 } else { -1 })
            .collect();
        let angles: Vec<i32> = (0..g.n_angles as i32).collect();
        let norm = op.operator_norm();
        let fbp = RampFilter {
            len,
            spectrum: DeviceVec::from_host(backend, &spectrum)?,
            maps: [
                DeviceVec::from_host(backend, &[0])?,
                DeviceVec::from_host(backend, &angles)?,
                DeviceVec::from_host(backend, &columns)?,
            ],
            factor: (std::f64::consts::PI / (2.0 * g.n_angles as f64) * norm * norm) as f32,
            plans: Mutex::new(HashMap::new()),
        };
        Ok(DeviceTomography {
            width: g.width,
            border: g.border,
            stride: g.stride,
            n_det: g.n_det,
            n_angles: g.n_angles,
            center: g.center,
            shift: g.shift,
            scale: g.scale,
            ray_row0: DeviceVec::from_host(backend, &g.ray_row0)?,
            ray_col0: DeviceVec::from_host(backend, &g.ray_col0)?,
            ray_count: DeviceVec::from_host(backend, &g.ray_count)?,
            ray_first: DeviceVec::from_host(backend, &g.ray_first)?,
            step_row: DeviceVec::from_host(backend, &g.step_row)?,
            step_col: DeviceVec::from_host(backend, &g.step_col)?,
            use_mask: g.mask.is_some(),
            mask: DeviceVec::from_host(backend, g.mask.as_deref().unwrap_or(&[1.0]))?,
            fbp,
        })
    }

    fn check_planes(&self, planes: usize) -> Result<()> {
        if planes > MAX_PLANES {
            return Err(Error::Unsupported(format!(
                "device tomography takes at most {MAX_PLANES} planes (B·C, or B·C·D slices of volumes) at once, got {planes}"
            )));
        }
        Ok(())
    }

    /// Sinograms `[plane][det][angle]` of `planes` images `W×W`.
    pub fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        self.check_planes(planes)?;
        let (w, s) = (self.width, self.stride);
        expect_len("device tomography", x, planes * w * w)?;
        let img = DeviceVec::<B, f32>::zeros(backend, planes * s * s)?;
        backend.launch(
            &kernels::TOMO_BORDER,
            LaunchConfig::elementwise(planes * w * w),
            &[
                x.arg(),
                self.mask.arg(),
                Arg::I32(self.use_mask.into()),
                img.arg(),
                Arg::I32(w as i32),
                Arg::I32(s as i32),
                Arg::I32(self.border as i32),
                Arg::I64(len_arg(planes)),
            ],
        )?;
        let y = DeviceVec::zeros(backend, planes * self.n_det * self.n_angles)?;
        backend.launch(
            &kernels::TOMO_FORWARD,
            LaunchConfig {
                grid: [
                    (self.n_det as u32).div_ceil(RAYS_PER_BLOCK),
                    self.n_angles as u32,
                    planes as u32,
                ],
                block: [RAYS_PER_BLOCK, 1, 1],
            },
            &[
                img.arg(),
                self.ray_row0.arg(),
                self.ray_col0.arg(),
                self.ray_count.arg(),
                self.step_row.arg(),
                self.step_col.arg(),
                y.arg(),
                Arg::I32(self.n_det as i32),
                Arg::I32(self.n_angles as i32),
                Arg::I32(s as i32),
                Arg::F32(self.scale),
            ],
        )?;
        Ok(y)
    }

    /// Images `W×W` of `planes` sinograms `[plane][det][angle]`: the exact adjoint of
    /// [`Self::forward`].
    pub fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        self.check_planes(planes)?;
        let (nd, na, w) = (self.n_det, self.n_angles, self.width);
        expect_len("device tomography adjoint", y, planes * nd * na)?;
        let by_angle = transpose(backend, y, nd, na, planes)?;
        let x = DeviceVec::zeros(backend, planes * w * w)?;
        backend.launch(
            &kernels::TOMO_ADJOINT,
            LaunchConfig::elementwise(planes * w * w),
            &[
                by_angle.arg(),
                self.ray_row0.arg(),
                self.ray_col0.arg(),
                self.ray_count.arg(),
                self.ray_first.arg(),
                self.step_row.arg(),
                self.step_col.arg(),
                self.mask.arg(),
                Arg::I32(self.use_mask.into()),
                x.arg(),
                Arg::I32(w as i32),
                Arg::I32(self.border as i32),
                Arg::I32(self.stride as i32),
                Arg::I32(nd as i32),
                Arg::I32(na as i32),
                Arg::F32(self.center),
                Arg::F32(self.shift),
                Arg::F32(self.scale),
                Arg::I64(len_arg(planes)),
            ],
        )?;
        Ok(x)
    }

    /// Filtered back-projection of `planes` sinograms `[plane][det][angle]` (deepinv's
    /// `A_dagger(y, fbp=True)`, as `Tomography::fbp`).
    pub fn fbp(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        planes: usize,
    ) -> Result<DeviceVec<B, f32>> {
        self.check_planes(planes)?;
        let (nd, na, len) = (self.n_det, self.n_angles, self.fbp.len);
        expect_len("device fbp", y, planes * nd * na)?;
        let columns = transpose(backend, y, nd, na, planes)?;
        // Each (plane, angle) column zero-padded to the filter's length: a (1, na, len) grid.
        let padded = DeviceVec::<B, f32>::zeros(backend, planes * na * len)?;
        let [md, mh, mw] = &self.fbp.maps;
        let ints = |v: [usize; 3]| v.map(|n| Arg::I32(n as i32));
        let [d, h, w] = ints([1, na, nd]);
        let [gd, gh, gw] = ints([1, na, len]);
        backend.launch(
            &kernels::CONV_PAD,
            LaunchConfig::elementwise(planes * na * len),
            &[
                columns.arg(),
                padded.arg(),
                md.arg(),
                mh.arg(),
                mw.arg(),
                d,
                h,
                w,
                gd,
                gh,
                gw,
                Arg::I64(len_arg(planes)),
            ],
        )?;
        let rows = planes * na;
        let plan = {
            let mut plans = self.fbp.plans.lock().unwrap_or_else(|p| p.into_inner());
            match plans.get(&rows) {
                Some(p) => p.clone(),
                None => {
                    let p = Arc::new(backend.fft_plan([1, 1, len], rows)?);
                    plans.insert(rows, p.clone());
                    p
                }
            }
        };
        let half = len / 2 + 1;
        let spec = DeviceVec::<B, f32>::zeros(backend, rows * half * 2)?;
        backend.fft_forward(&plan, padded.buffer(), spec.buffer())?;
        backend.launch(
            &kernels::SPECTRUM_MULTIPLY,
            LaunchConfig::elementwise(rows * half),
            &[
                spec.arg(),
                self.fbp.spectrum.arg(),
                Arg::I64(len_arg(half)),
                Arg::I32(1),
                Arg::I32(1),
                Arg::I32(0),
                Arg::I64(len_arg(rows)),
            ],
        )?;
        backend.fft_inverse(&plan, spec.buffer(), padded.buffer())?;
        let filtered = crop_grids(
            backend,
            &padded,
            [1, na, len],
            [1, na, nd],
            [0, 0, 0],
            planes,
        )?;
        let sinogram = transpose(backend, &filtered, na, nd, planes)?;
        let mut x = self.adjoint(backend, &sinogram, planes)?;
        scale(backend, &mut x, self.fbp.factor)?;
        Ok(x)
    }

    /// Number of detector cells.
    pub fn n_det(&self) -> usize {
        self.n_det
    }

    pub fn n_angles(&self) -> usize {
        self.n_angles
    }

    pub fn width(&self) -> usize {
        self.width
    }
}

/// A [`Tomography3d`] on the device: volumes `(B, C, D, W, W)` ↔ sinograms
/// `(B, C, D, N_det, N_angles)`, each axial slice through the 2-D [`DeviceTomography`] of the CPU's
/// slice operator, every slice of a call in the same launches.
pub struct DeviceTomography3d<B: Backend> {
    slices: DeviceTomography<B>,
}

impl<B: Backend> DeviceTomography3d<B> {
    /// Uploads the geometry of `op`'s slice operator.
    pub fn new(backend: &B, op: &Tomography3d) -> Result<Self> {
        Ok(DeviceTomography3d {
            slices: DeviceTomography::new(backend, op.slice_operator())?,
        })
    }

    /// `volumes` (`B·C`) volumes of `depth` slices: as many planes for the 2-D engine.
    fn slices(&self, volumes: usize, depth: usize) -> Result<usize> {
        volumes.checked_mul(depth).ok_or_else(|| {
            Error::Unsupported(format!(
                "device tomography3d: {volumes} volumes of {depth} slices overflow"
            ))
        })
    }

    /// Sinograms of `volumes` volumes of `depth` slices.
    pub fn forward(
        &self,
        backend: &B,
        x: &DeviceVec<B, f32>,
        volumes: usize,
        depth: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let slices = self.slices(volumes, depth)?;
        self.slices.forward(backend, x, slices)
    }

    /// The exact adjoint of [`Self::forward`].
    pub fn adjoint(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        volumes: usize,
        depth: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let slices = self.slices(volumes, depth)?;
        self.slices.adjoint(backend, y, slices)
    }

    /// Slice-by-slice filtered back-projection (`Tomography3d::fbp`).
    pub fn fbp(
        &self,
        backend: &B,
        y: &DeviceVec<B, f32>,
        volumes: usize,
        depth: usize,
    ) -> Result<DeviceVec<B, f32>> {
        let slices = self.slices(volumes, depth)?;
        self.slices.fbp(backend, y, slices)
    }

    /// The 2-D engine of every slice.
    pub fn slice_operator(&self) -> &DeviceTomography<B> {
        &self.slices
    }
}
