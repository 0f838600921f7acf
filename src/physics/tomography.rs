//! 2-D parallel-beam tomography: the discrete Radon transform `A`, its exact adjoint and filtered
//! back-projection (FBP), following deepinv 0.5.0's `physics.Tomography` (`physics/tomography.py`,
//! `physics/functional/radon.py`).
//!
//! # Discretisation (deepinv's)
//! An image of `W×W` pixels is zero-padded to `N×N` with `N = ⌈√2·W⌉` (the detector width; `N = W`
//! when `circle` is set, in which case pixels outside the inscribed disc are zeroed instead). For the
//! angle `θ`, deepinv rotates the `N×N` sampling grid (`affine_grid`, `align_corners=True`), samples
//! the padded image bilinearly at every grid point (`grid_sample`, zeros outside) and sums each grid
//! column. With `c = (N−1)/2`, detector cell `j` and ray step `i` (both `0..N`) sample the padded image
//! at
//!
//! ```text
//! col = c + cos θ·(j − c) + sin θ·(i − c),     row = c − sin θ·(j − c) + cos θ·(i − c),
//! y[j, θ] = Σᵢ bilinear(x_padded, row, col).
//! ```
//!
//! The sinogram is laid out `(B, C, N, N_angles)`, as deepinv's. Angles given as a count `n` are
//! `k·180°/n`, `k = 0..n` (deepinv: `linspace(0, 180, n+1)[:-1]`).
//!
//! # Implementation
//! At construction every ray is clipped to the samples that can touch the image (row and column in
//! `(−1, W)`), so the padding is never materialised and the inner loops have no branches: the image
//! is copied into a buffer with a 2-pixel zero border, which makes the few samples kept by the clipping
//! tolerance read zeros. The forward projection runs in parallel over (plane, angle). The adjoint
//! scatters the bilinear weights (it is the exact transpose of the forward, unlike deepinv's
//! `iradon`); it runs in parallel over a fixed number of contiguous angle chunks per plane, each with
//! its own accumulator, summed in chunk order — so the result does not depend on the thread count.
//!
//! FBP is `π/(2·N_angles) · Aᵀ(ramp ∗ y)` with deepinv's (= scikit-image's) ramp filter, applied along
//! the detector axis after zero-padding to `max(64, 2^⌈log₂ 2N⌉)` samples.
//!
//! The 3-D operator ([`super::tomography3d`]) reuses the plane kernels of this module slice by slice.

use std::time::Instant;

use rayon::prelude::*;
use realfft::RealFftPlanner;
use serde::{Deserialize, Serialize};

use super::{LinearPhysics, Physics};
use crate::error::{Error, Result};
use crate::linalg;
use crate::tensor::Tensor;

/// The largest number of projection angles a config may ask for (0.005° steps over 180°).
pub const MAX_ANGLES: usize = 36_000;

/// Zero border (pixels) around the image in the working buffer; see the module doc.
const BORDER: usize = 2;

/// Samples within this distance (in ray steps) outside the clipped range are kept; they read zeros.
const CLIP_TOL: f64 = 1e-3;

/// Number of angle chunks (and accumulators) per plane in the adjoint: fixed, so that the summation
/// order — and the result — is the same on any number of threads.
const ADJOINT_CHUNKS: usize = 16;

/// Consecutive rays of one angle walked together by the forward projection.
const RAY_GROUP: usize = 4;

/// Tolerance and iteration cap of the power method that computes ‖A‖ for `normalize` (deepinv uses
/// 100 iterations and 1e-3).
const NORMALIZE_TOL: f64 = 1e-5;
const NORMALIZE_ITERS: usize = 100;

/// Projection angles, in degrees: a count (uniform over `[0°, 180°)`, endpoint excluded) or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Angles {
    /// `n` angles `k·180°/n`, `k = 0..n` (deepinv's convention for an integer `angles`).
    Count(usize),
    /// Explicit angles in degrees.
    List(Vec<f32>),
}

impl Angles {
    /// Checks the count or list; `field` names it in the error (e.g. `tomography.angles`).
    pub fn validate(&self, field: &str) -> Result<()> {
        match self {
            Angles::Count(n) if *n == 0 || *n > MAX_ANGLES => Err(Error::config(
                field,
                format!("the number of angles must be in 1..={MAX_ANGLES}, got {n}"),
            )),
            Angles::List(list) if list.is_empty() || list.len() > MAX_ANGLES => Err(Error::config(
                field,
                format!(
                    "the list of angles (degrees) must hold 1..={MAX_ANGLES} values, got {}",
                    list.len()
                ),
            )),
            Angles::List(list) => match list.iter().position(|a| !a.is_finite()) {
                Some(k) => Err(Error::config(
                    field,
                    format!("angle #{k} is {} (angles must be finite degrees)", list[k]),
                )),
                None => Ok(()),
            },
            Angles::Count(_) => Ok(()),
        }
    }

    /// The angles cut into `parts` contiguous runs, as `torch.tensor_split` cuts them (the first
    /// `n mod parts` runs hold one angle more): the sinogram split by angle into `parts` operators
    /// whose measurements, side by side, are the whole operator's.
    pub fn split(&self, parts: usize, field: &str) -> Result<Vec<Angles>> {
        self.validate(field)?;
        let all = self.to_degrees();
        if parts == 0 || parts > all.len() {
            return Err(Error::config(
                field,
                format!(
                    "cannot split {} angle(s) into {parts} operator(s): give 1..={} parts",
                    all.len(),
                    all.len()
                ),
            ));
        }
        let (base, extra) = (all.len() / parts, all.len() % parts);
        let mut start = 0;
        Ok((0..parts)
            .map(|k| {
                let len = base + usize::from(k < extra);
                let part = Angles::List(all[start..start + len].to_vec());
                start += len;
                part
            })
            .collect())
    }

    /// The angles in degrees.
    pub fn to_degrees(&self) -> Vec<f32> {
        match self {
            Angles::Count(n) => (0..*n)
                .map(|k| (k as f64 * 180.0 / *n as f64) as f32)
                .collect(),
            Angles::List(list) => list.clone(),
        }
    }
}

impl Default for Angles {
    fn default() -> Self {
        Angles::Count(180)
    }
}

/// Serde configuration of [`Tomography`]; the image width comes from the input shape at build time.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TomographyConfig {
    /// Projection angles: a count (default 180) or a list in degrees.
    pub angles: Angles,
    /// Restrict the image to its inscribed disc; the detector then has `W` cells instead of `⌈√2·W⌉`.
    pub circle: bool,
    /// Scale `A` (and `Aᵀ`) by `1/‖A‖` so that the operator has unit norm (deepinv's `normalize`).
    pub normalize: bool,
}

impl TomographyConfig {
    /// Checks every field; the error names it.
    pub fn validate(&self) -> Result<()> {
        self.angles.validate("tomography.angles")
    }

    /// Builds the operator for images of shape `(B, C, W, W)`.
    pub fn build(&self, x_shape: &[usize]) -> Result<Tomography> {
        self.validate()?;
        let width = match x_shape {
            [_, _, h, w] if h == w => *w,
            [_, _, h, w] => {
                return Err(Error::config(
                    "tomography",
                    format!("the image must be square, got {h}×{w} (shape {x_shape:?})"),
                ));
            }
            _ => {
                return Err(Error::config(
                    "tomography",
                    format!("expected an image batch (B, C, H, W), got shape {x_shape:?}"),
                ));
            }
        };
        Tomography::new(width, &self.angles, self.circle, self.normalize)
    }
}

/// One ray, clipped to the samples that can touch the image: `count` samples from `(row0, col0)`
/// (buffer coordinates, border included) in steps of the angle's direction.
#[derive(Debug, Clone, Copy)]
struct Ray {
    row0: f32,
    col0: f32,
    count: u32,
    /// The ray step (`0..N`) of the first kept sample: the device adjoint finds a pixel's samples
    /// from its position along the ray.
    first: u32,
}

/// A ray with no samples (the partner of the odd ray out).
const EMPTY_RAY: Ray = Ray {
    row0: 0.0,
    col0: 0.0,
    count: 0,
    first: 0,
};

/// The sampling geometry shared by the forward and the adjoint, computed once.
#[derive(Debug, Clone)]
struct Geometry {
    width: usize,
    /// Row length of the bordered working buffer, `width + 2·BORDER`.
    stride: usize,
    n_det: usize,
    n_angles: usize,
    /// Per angle: ray step `(Δrow, Δcol) = (cos θ, sin θ)`.
    steps: Vec<(f32, f32)>,
    /// Angle-major: `rays[a·n_det + j]`.
    rays: Vec<Ray>,
    /// Per pixel: 1 inside the inscribed disc, 0 outside (only with `circle`).
    mask: Option<Vec<f32>>,
    /// `(N−1)/2`, the rotation centre in padded-grid coordinates.
    center: f32,
    /// Padded-grid coordinates → buffer coordinates.
    shift: f32,
}

/// The open interval of `t` with `lo < p0 + d·t < hi`.
fn open_interval(p0: f64, d: f64, lo: f64, hi: f64) -> (f64, f64) {
    if d.abs() < 1e-12 {
        if p0 > lo && p0 < hi {
            (f64::NEG_INFINITY, f64::INFINITY)
        } else {
            (f64::INFINITY, f64::NEG_INFINITY)
        }
    } else {
        let (a, b) = ((lo - p0) / d, (hi - p0) / d);
        (a.min(b), a.max(b))
    }
}

impl Geometry {
    fn new(width: usize, angles_deg: &[f32], circle: bool) -> Self {
        // deepinv (radon.py, `Radon.forward`): pad = ⌈√2·W − W⌉, pad_before = (W+pad)//2 − W//2.
        let (n_det, offset) = if circle {
            (width, 0usize)
        } else {
            let n = (std::f32::consts::SQRT_2 * width as f32).ceil() as usize;
            (n, (n / 2) - width / 2)
        };
        let stride = width + 2 * BORDER;
        let center = (n_det as f64 - 1.0) / 2.0;
        // Padded-grid coordinates → buffer coordinates.
        let shift = BORDER as f64 - offset as f64;
        // A sample touches the image iff its row and column lie in (−1, W) (image coordinates).
        let (lo, hi) = (BORDER as f64 - 1.0, (width + BORDER) as f64);
        let mut steps = Vec::with_capacity(angles_deg.len());
        let mut rays = Vec::with_capacity(angles_deg.len() * n_det);
        for &deg in angles_deg {
            let theta = (deg as f64).to_radians();
            let (sin, cos) = theta.sin_cos();
            steps.push((cos as f32, sin as f32));
            for j in 0..n_det {
                let u = j as f64 - center;
                // Position of step i = 0.
                let row_at0 = center - sin * u - cos * center + shift;
                let col_at0 = center + cos * u - sin * center + shift;
                let (a_r, b_r) = open_interval(row_at0, cos, lo, hi);
                let (a_c, b_c) = open_interval(col_at0, sin, lo, hi);
                let first = (a_r.max(a_c) - CLIP_TOL).ceil().max(0.0);
                let last = (b_r.min(b_c) + CLIP_TOL).floor().min(n_det as f64 - 1.0);
                let (first, count) = if last >= first {
                    (first, (last - first) as u32 + 1)
                } else {
                    (0.0, 0)
                };
                rays.push(Ray {
                    row0: (row_at0 + cos * first) as f32,
                    col0: (col_at0 + sin * first) as f32,
                    count,
                    first: first as u32,
                });
            }
        }
        let mask = circle.then(|| {
            // deepinv: coordinates 2k/(W−1) − 1 in float32, kept where x² + y² ≤ 1.
            let axis: Vec<f32> = (0..width)
                .map(|k| 2.0 * k as f32 / (width as f32 - 1.0) - 1.0)
                .collect();
            let mut m = Vec::with_capacity(width * width);
            for &y in &axis {
                for &x in &axis {
                    m.push(if x * x + y * y <= 1.0 { 1.0 } else { 0.0 });
                }
            }
            m
        });
        Geometry {
            width,
            stride,
            n_det,
            n_angles: angles_deg.len(),
            steps,
            rays,
            mask,
            center: center as f32,
            shift: shift as f32,
        }
    }

    /// Buffer index of the top-left neighbour of a sample and its bilinear weights `(w_row, w_col)`.
    ///
    /// The clipping keeps every sample at buffer coordinates in `(0.99, W + 2.01)`, so truncation is
    /// `floor` (and cheaper than `floor` without SSE4.1). The clamp to `stride − 2` never changes a
    /// valid sample; it guarantees `index + stride + 1 < stride²` for any input, NaN included (`as`
    /// saturates and maps NaN to 0), which is what makes the unchecked accesses below sound.
    #[inline(always)]
    fn locate(&self, ray: &Ray, step: (f32, f32), k: usize) -> (usize, f32, f32) {
        let kf = k as f32;
        let row = ray.row0 + kf * step.0;
        let col = ray.col0 + kf * step.1;
        let ir = (row as usize).min(self.stride - 2);
        let ic = (col as usize).min(self.stride - 2);
        (ir * self.stride + ic, row - ir as f32, col - ic as f32)
    }

    /// Adds `value` times the bilinear weights of sample `k` of a ray into a bordered accumulator
    /// (`stride²` values, checked by the caller): the transpose of the bilinear sample of [`sample_pq`].
    #[inline(always)]
    fn spread(&self, acc: &mut [f32], ray: &Ray, step: (f32, f32), k: usize, value: f32) {
        let s = self.stride;
        let (idx, wr, wc) = self.locate(ray, step, k);
        let v_bot = value * wr;
        let v_top = value - v_bot;
        // SAFETY: as in `sample`, idx + s + 1 < s² = acc.len().
        unsafe {
            *acc.get_unchecked_mut(idx) += v_top - v_top * wc;
            *acc.get_unchecked_mut(idx + 1) += v_top * wc;
            *acc.get_unchecked_mut(idx + s) += v_bot - v_bot * wc;
            *acc.get_unchecked_mut(idx + s + 1) += v_bot * wc;
        }
    }

    /// Line integrals of the `G` consecutive rays `rays` of one angle (`step = (Δrow, Δcol)`) through
    /// a bordered image, walked in lockstep: `G` independent dependency chains, and neighbouring rays
    /// read the same cache lines. With `transposed`, `img` is the transposed bordered image and the
    /// roles of rows and columns are swapped, so that the walk runs along memory rows whenever the
    /// ray runs closer to the columns (|Δrow| > |Δcol|). Each sum is over `k` ascending, as before.
    fn ray_group_sums<const G: usize>(
        &self,
        img: &[f32],
        rays: &[Ray],
        step: (f32, f32),
        transposed: bool,
    ) -> [f32; G] {
        let s = self.stride;
        // The stride bound keeps `clamp_trunc` within i32 (and `s * s` from wrapping).
        assert!(s < 1 << 20 && img.len() == s * s && rays.len() == G);
        let (dp, dq) = if transposed { (step.1, step.0) } else { step };
        let mut p0 = [0.0f32; G];
        let mut q0 = [0.0f32; G];
        let mut n = [0usize; G];
        for (g, ray) in rays.iter().enumerate() {
            (p0[g], q0[g]) = if transposed {
                (ray.col0, ray.row0)
            } else {
                (ray.row0, ray.col0)
            };
            n[g] = ray.count as usize;
        }
        let common = n.iter().copied().min().unwrap_or(0);
        let mut sums = [0.0f32; G];
        let max = (s - 2) as f32;
        for k in 0..common {
            // Positions, indices and weights lane by lane (straight-line, so LLVM can vectorise it),
            // then the loads, then the interpolation: the same arithmetic as `sample_pq`.
            let kf = k as f32;
            let mut idx = [0usize; G];
            let mut wp = [0.0f32; G];
            let mut wq = [0.0f32; G];
            for g in 0..G {
                let (p, q) = (p0[g] + kf * dp, q0[g] + kf * dq);
                let (ip, iq) = (clamp_trunc(p, max), clamp_trunc(q, max));
                wp[g] = p - ip as f32;
                wq[g] = q - iq as f32;
                idx[g] = ip as usize * s + iq as usize;
            }
            for g in 0..G {
                let i = idx[g];
                // SAFETY: i ≤ (s−2)·s + s−2, so i + s + 1 < s² = img.len() (asserted above).
                let (t0, t1, b0, b1) = unsafe {
                    (
                        *img.get_unchecked(i),
                        *img.get_unchecked(i + 1),
                        *img.get_unchecked(i + s),
                        *img.get_unchecked(i + s + 1),
                    )
                };
                let t = t0 + wq[g] * (t1 - t0);
                let b = b0 + wq[g] * (b1 - b0);
                sums[g] += t + wp[g] * (b - t);
            }
        }
        for g in 0..G {
            for k in common..n[g] {
                let kf = k as f32;
                sums[g] += sample_pq(img, s, p0[g] + kf * dp, q0[g] + kf * dq);
            }
        }
        sums
    }

    /// `A` for angle `a` of one bordered plane (`img`, and its transpose `img_t`) into `out[j]`.
    fn project_angle(&self, img: &[f32], img_t: &[f32], a: usize, out: &mut [f32], scale: f32) {
        let step = self.steps[a];
        let transposed = step.0.abs() > step.1.abs();
        let img = if transposed { img_t } else { img };
        let rays = &self.rays[a * self.n_det..(a + 1) * self.n_det];
        let mut groups = rays.chunks_exact(RAY_GROUP);
        let mut outs = out.chunks_exact_mut(RAY_GROUP);
        for (group, dst) in (&mut groups).zip(&mut outs) {
            let sums = self.ray_group_sums::<RAY_GROUP>(img, group, step, transposed);
            for (d, v) in dst.iter_mut().zip(sums) {
                *d = v * scale;
            }
        }
        for (ray, d) in groups.remainder().iter().zip(outs.into_remainder()) {
            let [v] = self.ray_group_sums::<1>(img, std::slice::from_ref(ray), step, transposed);
            *d = v * scale;
        }
    }

    /// Spreads `values` along two rays into a bordered accumulator: the exact transpose of
    /// [`Geometry::ray_sums`], walked in the same interleaved order (for the same reason).
    fn ray_spreads(
        &self,
        acc: &mut [f32],
        rays: (&Ray, &Ray),
        step: (f32, f32),
        values: (f32, f32),
    ) {
        assert_eq!(acc.len(), self.stride * self.stride);
        let (a, b) = rays;
        let (na, nb) = (a.count as usize, b.count as usize);
        for k in 0..na.min(nb) {
            self.spread(acc, a, step, k, values.0);
            self.spread(acc, b, step, k, values.1);
        }
        for k in nb.min(na)..na {
            self.spread(acc, a, step, k, values.0);
        }
        for k in na.min(nb)..nb {
            self.spread(acc, b, step, k, values.1);
        }
    }

    /// Pairs of rays `(j, j + n_det/2)` of one angle, then the odd one out (as a pair with an empty
    /// ray): the walking order of [`Geometry::ray_spreads`].
    fn ray_pairs(&self) -> impl Iterator<Item = (usize, Option<usize>)> + use<> {
        let (nd, half) = (self.n_det, self.n_det / 2);
        (0..half)
            .map(move |j| (j, Some(j + half)))
            .chain((nd % 2 == 1).then_some((nd - 1, None)))
    }

    /// Copies a `W×W` plane into a zeroed bordered buffer, applying the disc mask.
    fn bordered(&self, plane: &[f32], buf: &mut [f32]) {
        let (w, s) = (self.width, self.stride);
        for (r, src) in plane.chunks_exact(w).enumerate() {
            let dst = &mut buf[(r + BORDER) * s + BORDER..(r + BORDER) * s + BORDER + w];
            match &self.mask {
                Some(m) => {
                    for ((d, v), mk) in dst.iter_mut().zip(src).zip(&m[r * w..(r + 1) * w]) {
                        *d = v * mk;
                    }
                }
                None => dst.copy_from_slice(src),
            }
        }
    }

    /// `A` on `n_planes` contiguous `W×W` planes; output `[plane][det][angle]`, times `scale`.
    fn project_planes(&self, x: &[f32], n_planes: usize, scale: f32) -> Vec<f32> {
        let (w, s) = (self.width, self.stride);
        // Per plane: the bordered image, then its transpose (for the angles walked along columns).
        let mut padded = vec![0.0f32; n_planes * 2 * s * s];
        padded
            .par_chunks_mut(2 * s * s)
            .zip(x.par_chunks(w * w))
            .for_each(|(buf, plane)| {
                let (img, img_t) = buf.split_at_mut(s * s);
                self.bordered(plane, img);
                transpose(img, img_t, s, s);
            });
        let (nd, na) = (self.n_det, self.n_angles);
        // Angle-major first so that every task writes a contiguous block.
        let mut by_angle = vec![0.0f32; n_planes * na * nd];
        by_angle
            .par_chunks_mut(nd)
            .enumerate()
            .for_each(|(task, out)| {
                let (p, a) = (task / na, task % na);
                let (img, img_t) = padded[p * 2 * s * s..(p + 1) * 2 * s * s].split_at(s * s);
                self.project_angle(img, img_t, a, out, scale);
            });
        let mut y = vec![0.0f32; n_planes * na * nd];
        y.par_chunks_mut(nd * na)
            .zip(by_angle.par_chunks(nd * na))
            .for_each(|(dst, src)| transpose(src, dst, na, nd));
        y
    }

    /// `Aᵀ` on `n_planes` sinograms `[plane][det][angle]`; output `W×W` planes, times `scale`.
    fn backproject_planes(&self, y: &[f32], n_planes: usize, scale: f32) -> Vec<f32> {
        let (w, s) = (self.width, self.stride);
        let (nd, na) = (self.n_det, self.n_angles);
        let mut out = vec![0.0f32; n_planes * w * w];
        let chunks = ADJOINT_CHUNKS.min(na);
        out.par_chunks_mut(w * w)
            .zip(y.par_chunks(nd * na))
            .for_each(|(plane_out, sino)| {
                let mut by_angle = vec![0.0f32; nd * na];
                transpose(sino, &mut by_angle, nd, na);
                let partial: Vec<Vec<f32>> = (0..chunks)
                    .into_par_iter()
                    .map(|k| {
                        let mut acc = vec![0.0f32; s * s];
                        for a in (k * na / chunks)..((k + 1) * na / chunks) {
                            let step = self.steps[a];
                            let rays = &self.rays[a * nd..(a + 1) * nd];
                            let values = &by_angle[a * nd..(a + 1) * nd];
                            for (j, partner) in self.ray_pairs() {
                                let (other, v) =
                                    partner.map_or((&EMPTY_RAY, 0.0), |q| (&rays[q], values[q]));
                                self.ray_spreads(&mut acc, (&rays[j], other), step, (values[j], v));
                            }
                        }
                        acc
                    })
                    .collect();
                let mut parts = partial.into_iter();
                let mut total = parts.next().unwrap_or_else(|| vec![0.0; s * s]);
                for p in parts {
                    for (t, v) in total.iter_mut().zip(&p) {
                        *t += v;
                    }
                }
                for (r, dst) in plane_out.chunks_exact_mut(w).enumerate() {
                    let src = &total[(r + BORDER) * s + BORDER..(r + BORDER) * s + BORDER + w];
                    match &self.mask {
                        Some(m) => {
                            for ((d, v), mk) in dst.iter_mut().zip(src).zip(&m[r * w..(r + 1) * w])
                            {
                                *d = v * mk * scale;
                            }
                        }
                        None => {
                            for (d, v) in dst.iter_mut().zip(src) {
                                *d = v * scale;
                            }
                        }
                    }
                }
            });
        out
    }
}

/// `⌊v⌋` for `v` in `[0, max]`, with `v` clamped to that range first (NaN becomes 0: `f32::max`
/// returns the non-NaN operand); `max` must be below 2³¹ (callers assert `s < 2²⁰`).
#[inline(always)]
fn clamp_trunc(v: f32, max: f32) -> i32 {
    // SAFETY: the clamped value is finite and in [0, max] ⊂ i32's range (max = s − 2 ≪ 2³¹).
    unsafe { v.max(0.0).min(max).to_int_unchecked::<i32>() }
}

/// The bilinear sample at `(p, q)` of a bordered `s × s` image (`p` indexes memory rows, `q` runs
/// along them): interpolated along `q`, then along `p`.
///
/// The clipping keeps every sample at buffer coordinates in `(0.99, W + 2.01)`, so truncation is
/// `floor`. The clamp to `s − 2` never changes a valid sample; it guarantees
/// `index + s + 1 < s²` for any input, NaN included (`as` saturates and maps NaN to 0), which is
/// what makes the unchecked loads sound.
#[inline(always)]
fn sample_pq(img: &[f32], s: usize, p: f32, q: f32) -> f32 {
    debug_assert!(s >= 2 && img.len() == s * s);
    // Clamped as floats (cheaper than integer clamps without SSE4.1); NaN maps to 0 either way.
    let max = (s - 2) as f32;
    let (ip, iq) = (clamp_trunc(p, max), clamp_trunc(q, max));
    let (wp, wq) = (p - ip as f32, q - iq as f32);
    let idx = ip as usize * s + iq as usize;
    // SAFETY: idx ≤ (s−2)·s + s−2, so idx + s + 1 < s² = img.len() (asserted by every caller).
    let (t0, t1, b0, b1) = unsafe {
        (
            *img.get_unchecked(idx),
            *img.get_unchecked(idx + 1),
            *img.get_unchecked(idx + s),
            *img.get_unchecked(idx + s + 1),
        )
    };
    let t = t0 + wq * (t1 - t0);
    let b = b0 + wq * (b1 - b0);
    t + wp * (b - t)
}

/// `dst[c·rows + r] = src[r·cols + c]` for a `rows × cols` matrix.
fn transpose(src: &[f32], dst: &mut [f32], rows: usize, cols: usize) {
    for (r, row) in src.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            dst[c * rows + r] = v;
        }
    }
}

/// deepinv's ramp filter in the Fourier domain for a padded length `len` (`len/2 + 1` real values):
/// twice the DFT of the spatial ramp `f[0] = 1/4`, `f[k] = −1/(π·k)²` for odd `k` (circularly
/// symmetric), 0 for even `k` (scikit-image's `_get_fourier_filter`, ramp).
pub(crate) fn ramp_fourier_filter(len: usize) -> Vec<f32> {
    let mut f = vec![0.0f64; len];
    f[0] = 0.25;
    for (k, v) in f.iter_mut().enumerate().skip(1).step_by(2) {
        let n = k.min(len - k) as f64;
        *v = -1.0 / (std::f64::consts::PI * n).powi(2);
    }
    let mut planner = RealFftPlanner::<f64>::new();
    let fft = planner.plan_fft_forward(len);
    let mut spectrum = fft.make_output_vec();
    // The buffers have the lengths the plan asks for, so this cannot fail.
    fft.process(&mut f, &mut spectrum)
        .expect("ramp filter FFT with planned buffer sizes");
    spectrum.iter().map(|c| (2.0 * c.re) as f32).collect()
}

/// Padded length of the ramp filter for `n_det` detector cells (deepinv: `max(64, 2^⌈log₂ 2N⌉)`).
pub(crate) fn ramp_len(n_det: usize) -> usize {
    (2 * n_det).next_power_of_two().max(64)
}

/// Applies deepinv's ramp filter along the detector axis of sinograms laid out `[…][det][angle]`
/// (the last two axes), in place. Every (plane, angle) column is filtered independently.
pub fn ramp_filter(sinogram: &mut Tensor) -> Result<()> {
    if sinogram.ndim() < 2 {
        return Err(Error::config(
            "tomography",
            format!(
                "a sinogram needs (…, detector, angle) axes, got shape {:?}",
                sinogram.shape()
            ),
        ));
    }
    let shape = sinogram.shape().to_vec();
    let (nd, na) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    ramp_filter_planes(sinogram.data_mut(), nd, na);
    Ok(())
}

fn ramp_filter_planes(data: &mut [f32], nd: usize, na: usize) {
    if nd == 0 || na == 0 {
        return;
    }
    let len = ramp_len(nd);
    let filter = ramp_fourier_filter(len);
    let mut planner = RealFftPlanner::<f32>::new();
    let fwd = planner.plan_fft_forward(len);
    let inv = planner.plan_fft_inverse(len);
    let inv_len = 1.0 / len as f32;
    data.par_chunks_mut(nd * na).for_each(|sino| {
        let mut buf = fwd.make_input_vec();
        let mut spec = fwd.make_output_vec();
        for a in 0..na {
            buf.iter_mut().for_each(|v| *v = 0.0);
            for j in 0..nd {
                buf[j] = sino[j * na + a];
            }
            fwd.process(&mut buf, &mut spec)
                .expect("FFT with planned buffer sizes");
            for (c, h) in spec.iter_mut().zip(&filter) {
                *c *= *h;
            }
            // The imaginary parts of DC and Nyquist are zero up to rounding; realfft insists on it.
            spec[0].im = 0.0;
            if let Some(last) = spec.last_mut() {
                last.im = 0.0;
            }
            inv.process(&mut spec, &mut buf)
                .expect("inverse FFT with planned buffer sizes");
            for j in 0..nd {
                sino[j * na + a] = buf[j] * inv_len;
            }
        }
    });
}

/// [`Tomography`]'s rays as plain arrays ([`Tomography::device_geometry`]); rays are angle-major
/// (`a·n_det + j`), coordinates are in the bordered buffer (`stride × stride`, image at `border`).
pub(crate) struct TomographyGeometry {
    pub width: usize,
    pub border: usize,
    pub stride: usize,
    pub n_det: usize,
    pub n_angles: usize,
    /// Per angle, the ray step `(Δrow, Δcol) = (cos θ, sin θ)`.
    pub step_row: Vec<f32>,
    pub step_col: Vec<f32>,
    /// Per ray, the first kept sample's position, the number of kept samples and the step it is.
    pub ray_row0: Vec<f32>,
    pub ray_col0: Vec<f32>,
    pub ray_count: Vec<u32>,
    pub ray_first: Vec<u32>,
    /// The disc mask with `circle`.
    pub mask: Option<Vec<f32>>,
    /// `(N−1)/2` and the padded-grid → buffer shift: sample `i` of ray `j` is at
    /// `row = center + shift − sin θ·(j − center) + cos θ·(i − center)`,
    /// `col = center + shift + cos θ·(j − center) + sin θ·(i − center)`.
    pub center: f32,
    pub shift: f32,
    /// `1/‖A‖` with `normalize`, else 1.
    pub scale: f32,
}

/// 2-D parallel-beam tomography of square images `(B, C, W, W)` → sinograms `(B, C, N_det, N_angles)`.
#[derive(Debug, Clone)]
pub struct Tomography {
    angles_deg: Vec<f32>,
    circle: bool,
    normalize: bool,
    geometry: Geometry,
    /// ‖A‖ of the unnormalised operator when `normalize` (A is divided by it), else 1.
    operator_norm: f64,
}

impl Tomography {
    /// The operator for `img_width × img_width` images. With `normalize`, ‖A‖ is computed once here
    /// by the power method (as deepinv does at construction).
    pub fn new(img_width: usize, angles: &Angles, circle: bool, normalize: bool) -> Result<Self> {
        angles.validate("tomography.angles")?;
        if img_width < 2 {
            return Err(Error::config(
                "tomography",
                format!("the image width must be at least 2 pixels, got {img_width}"),
            ));
        }
        let angles_deg = angles.to_degrees();
        let geometry = Geometry::new(img_width, &angles_deg, circle);
        let mut op = Tomography {
            angles_deg,
            circle,
            normalize: false,
            geometry,
            operator_norm: 1.0,
        };
        if normalize {
            let shape = [1, 1, img_width, img_width];
            let lambda = linalg::power_method(&shape, NORMALIZE_ITERS, NORMALIZE_TOL, |v| {
                op.adjoint_forward(v)
            })?;
            if lambda > 0.0 {
                op.operator_norm = lambda.sqrt();
            }
            op.normalize = true;
        }
        Ok(op)
    }

    /// Image width `W` (pixels).
    pub fn img_width(&self) -> usize {
        self.geometry.width
    }

    /// Number of detector cells: `W` with `circle`, `⌈√2·W⌉` otherwise.
    pub fn n_det(&self) -> usize {
        self.geometry.n_det
    }

    /// The projection angles in degrees.
    pub fn angles_deg(&self) -> &[f32] {
        &self.angles_deg
    }

    pub fn circle(&self) -> bool {
        self.circle
    }

    pub fn normalize(&self) -> bool {
        self.normalize
    }

    /// ‖A‖ of the unnormalised operator when `normalize` is set (the divisor), else 1.
    pub fn operator_norm(&self) -> f64 {
        self.operator_norm
    }

    fn scale(&self) -> f32 {
        (1.0 / self.operator_norm) as f32
    }

    /// Checks that `x_shape` ends with `(W, W)` after `lead` leading axes and returns the plane count.
    pub(crate) fn image_planes(&self, op: &str, x_shape: &[usize], lead: usize) -> Result<usize> {
        let w = self.img_width();
        if x_shape.len() != lead + 2 || x_shape[lead] != w || x_shape[lead + 1] != w {
            let mut expected = x_shape.get(..lead).unwrap_or(&[]).to_vec();
            expected.resize(lead, 1);
            expected.extend([w, w]);
            return Err(Error::shape(op, &expected, x_shape));
        }
        Ok(x_shape[..lead].iter().product())
    }

    /// Checks that `y_shape` ends with `(N_det, N_angles)` after `lead` leading axes.
    pub(crate) fn sinogram_planes(
        &self,
        op: &str,
        y_shape: &[usize],
        lead: usize,
    ) -> Result<usize> {
        let (nd, na) = (self.n_det(), self.angles_deg.len());
        if y_shape.len() != lead + 2 || y_shape[lead] != nd || y_shape[lead + 1] != na {
            let mut expected = y_shape.get(..lead).unwrap_or(&[]).to_vec();
            expected.resize(lead, 1);
            expected.extend([nd, na]);
            return Err(Error::shape(op, &expected, y_shape));
        }
        Ok(y_shape[..lead].iter().product())
    }

    /// The sampling geometry as plain arrays, for a device implementation of the same operator
    /// (`device::ops::tomography`): it samples where this operator samples.
    pub(crate) fn device_geometry(&self) -> TomographyGeometry {
        let g = &self.geometry;
        TomographyGeometry {
            width: g.width,
            border: BORDER,
            stride: g.stride,
            n_det: g.n_det,
            n_angles: g.n_angles,
            step_row: g.steps.iter().map(|s| s.0).collect(),
            step_col: g.steps.iter().map(|s| s.1).collect(),
            ray_row0: g.rays.iter().map(|r| r.row0).collect(),
            ray_col0: g.rays.iter().map(|r| r.col0).collect(),
            ray_count: g.rays.iter().map(|r| r.count).collect(),
            ray_first: g.rays.iter().map(|r| r.first).collect(),
            mask: g.mask.clone(),
            center: g.center,
            shift: g.shift,
            scale: self.scale(),
        }
    }

    /// `A` on contiguous `W×W` planes → contiguous `N_det×N_angles` sinograms.
    pub(crate) fn project_planes(&self, x: &[f32], n_planes: usize) -> Vec<f32> {
        self.geometry.project_planes(x, n_planes, self.scale())
    }

    /// `Aᵀ` on contiguous sinograms → contiguous `W×W` planes.
    pub(crate) fn backproject_planes(&self, y: &[f32], n_planes: usize) -> Vec<f32> {
        self.geometry.backproject_planes(y, n_planes, self.scale())
    }

    /// FBP on contiguous sinograms: `π/(2·N_angles)·Aᵀ(ramp ∗ y)`, times ‖A‖² when normalised (so that
    /// it inverts the normalised `A`, as in deepinv).
    pub(crate) fn fbp_planes(&self, y: &[f32], n_planes: usize) -> Vec<f32> {
        let (nd, na) = (self.n_det(), self.angles_deg.len());
        let mut filtered = y.to_vec();
        ramp_filter_planes(&mut filtered, nd, na);
        let factor = (std::f64::consts::PI / (2.0 * na as f64)
            * self.operator_norm
            * self.operator_norm) as f32;
        let mut x = self.backproject_planes(&filtered, n_planes);
        x.iter_mut().for_each(|v| *v *= factor);
        x
    }

    /// Filtered back-projection of sinograms `(B, C, N_det, N_angles)` → images `(B, C, W, W)`,
    /// matching deepinv's `A_dagger(y, fbp=True)`.
    pub fn fbp(&self, y: &Tensor) -> Result<Tensor> {
        let planes = self.sinogram_planes("tomography fbp", y.shape(), 2)?;
        let w = self.img_width();
        let x = self.fbp_planes(y.data(), planes);
        Tensor::from_vec(&[y.shape()[0], y.shape()[1], w, w], x)
    }
}

/// Filtered back-projection with `op` (free-standing form of [`Tomography::fbp`]).
pub fn fbp(op: &Tomography, y: &Tensor) -> Result<Tensor> {
    op.fbp(y)
}

impl Physics for Tomography {
    fn name(&self) -> String {
        format!(
            "tomography({0}×{0} px, {1} angles, {2} detector cells{3}{4})",
            self.img_width(),
            self.angles_deg.len(),
            self.n_det(),
            if self.circle { ", circle" } else { "" },
            if self.normalize { ", normalized" } else { "" },
        )
    }

    fn output_shape(&self, x_shape: &[usize]) -> Result<Vec<usize>> {
        self.image_planes("tomography", x_shape, 2)?;
        Ok(vec![
            x_shape[0],
            x_shape[1],
            self.n_det(),
            self.angles_deg.len(),
        ])
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let shape = self.output_shape(x.shape())?;
        let planes = x.num_planes();
        Tensor::from_vec(&shape, self.project_planes(x.data(), planes))
    }
}

impl LinearPhysics for Tomography {
    fn adjoint(&self, y: &Tensor) -> Result<Tensor> {
        let planes = self.sinogram_planes("tomography adjoint", y.shape(), 2)?;
        let w = self.img_width();
        Tensor::from_vec(
            &[y.shape()[0], y.shape()[1], w, w],
            self.backproject_planes(y.data(), planes),
        )
    }
}

/// Timings of [`bench_tomography`] (seconds, median over the repeats).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TomoBench {
    pub size: usize,
    pub n_angles: usize,
    pub n_det: usize,
    /// Rayon threads used.
    pub threads: usize,
    pub forward_secs: f64,
    pub adjoint_secs: f64,
    pub fbp_secs: f64,
}

/// Times `A`, `Aᵀ` and FBP of the 2-D operator (no circle, not normalised) on a `size × size` image
/// with `n_angles` angles, `repeats` times each (at least once), on the current rayon pool.
pub fn bench_tomography(size: usize, n_angles: usize, repeats: usize) -> Result<TomoBench> {
    let op = Tomography::new(size, &Angles::Count(n_angles), false, false)?;
    let x = linalg::deterministic_start(&[1, 1, size, size], 1);
    let y = op.forward(&x)?;
    let median = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
        let mut times = Vec::new();
        for _ in 0..repeats.max(1) {
            let start = Instant::now();
            f()?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    Ok(TomoBench {
        size,
        n_angles,
        n_det: op.n_det(),
        threads: rayon::current_num_threads(),
        forward_secs: median(&|| op.forward(&x).map(drop))?,
        adjoint_secs: median(&|| op.adjoint(&y).map(drop))?,
        fbp_secs: median(&|| op.fbp(&y).map(drop))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::adjoint_mismatch;

    #[test]
    fn count_angles_exclude_180() {
        assert_eq!(Angles::Count(4).to_degrees(), vec![0.0, 45.0, 90.0, 135.0]);
    }

    #[test]
    fn detector_width_matches_deepinv() {
        let op = Tomography::new(64, &Angles::Count(3), false, false).unwrap();
        assert_eq!(op.n_det(), 91);
        let op = Tomography::new(64, &Angles::Count(3), true, false).unwrap();
        assert_eq!(op.n_det(), 64);
    }

    #[test]
    fn zero_degrees_sums_columns() {
        // At θ = 0 the rays are the image columns; detector j = column j − pad_before (13 for 64).
        let op = Tomography::new(64, &Angles::List(vec![0.0]), false, false).unwrap();
        let x = Tensor::from_fn(&[1, 1, 64, 64], |i| ((i % 64) as f32 * 0.1).sin() + 1.0);
        let y = op.forward(&x).unwrap();
        for c in 0..64 {
            let col: f32 = (0..64).map(|r| x.data()[r * 64 + c]).sum();
            assert!((y.data()[c + 13] - col).abs() < 1e-3, "{c}");
        }
    }

    #[test]
    fn adjoint_matches_forward() {
        for circle in [false, true] {
            let op = Tomography::new(17, &Angles::Count(7), circle, false).unwrap();
            let x = linalg::deterministic_start(&[2, 1, 17, 17], 3);
            let y = linalg::deterministic_start(&[2, 1, op.n_det(), 7], 4);
            assert!(adjoint_mismatch(&op, &x, &y).unwrap() < 1e-5);
        }
    }

    #[test]
    fn ramp_filter_removes_constants_far_from_edges() {
        // The ramp filter has (almost) zero DC gain: a constant column filters to small values.
        let mut y = Tensor::full(&[1, 1, 32, 1], 1.0);
        ramp_filter(&mut y).unwrap();
        assert!(y.data()[16].abs() < 0.05, "{}", y.data()[16]);
    }
}
