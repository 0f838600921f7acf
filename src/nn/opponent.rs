//! A one-channel denoiser on colour images, in an opponent colour space: the bundled colour
//! denoiser is the bundled grey DRUNet run this way (issue #30; `assets/weights/README.md` has
//! the table against TV and against a DRUNet trained on colour).
//!
//! Each RGB pixel `x` goes to `z = Q·x + o` with `Q = M/√3`, `M` the orthonormal opponent basis
//! (luminance `(R+G+B)/√3`, red–blue `(R−B)/√2`, green–magenta `(R−2G+B)/√6`) and `o = (0, ½, ½)`:
//! the luminance is the mean of the channels and the two chroma channels sit around ½, all in the
//! grey training range. Because `Q` is orthogonal up to the scale `1/√3`, white noise of level `σ`
//! in RGB is white noise of level `σ/√3` in every opponent channel, uncorrelated across them, so the
//! three channels are denoised as three independent grey images at `σ/√3` — one call on a batch of
//! `3B` one-channel images — and mapped back with `Q⁻¹ = √3·Mᵀ`. The maps are pointwise, so
//! overlap tiling and the exact spatial decomposition ([`BlockDenoiser`]) see the inner network's
//! own blocks and halos.

use crate::denoise::{Denoiser, check_sigma};
use crate::error::{Error, Result};
use crate::nn::{BlockDenoiser, Features, Grid, Partition};
use crate::tensor::Tensor;

/// `√3`, `√2`, `√6` as `f64` (the matrix is rounded to `f32` once, from exact `f64` values).
const R3: f64 = 1.732_050_807_568_877_2;
const R2: f64 = std::f64::consts::SQRT_2;
const R6: f64 = 2.449_489_742_783_178;

/// `Q = M/√3`, rows luminance, red–blue, green–magenta.
fn forward_matrix() -> [[f32; 3]; 3] {
    let m = [
        [1.0 / R3, 1.0 / R3, 1.0 / R3],
        [1.0 / R2, 0.0, -1.0 / R2],
        [1.0 / R6, -2.0 / R6, 1.0 / R6],
    ];
    m.map(|row| row.map(|v| (v / R3) as f32))
}

/// `Q⁻¹ = √3·Mᵀ`, indexed `[rgb][opponent]`.
fn inverse_matrix() -> [[f32; 3]; 3] {
    let m = [
        [1.0 / R3, 1.0 / R2, 1.0 / R6],
        [1.0 / R3, 0.0, -2.0 / R6],
        [1.0 / R3, -1.0 / R2, 1.0 / R6],
    ];
    m.map(|row| row.map(|v| (v * R3) as f32))
}

/// The offsets of the opponent channels.
const OFFSET: [f32; 3] = [0.0, 0.5, 0.5];

/// The noise level each opponent channel carries when the RGB image carries `sigma`.
pub fn channel_sigma(sigma: f32) -> f32 {
    (f64::from(sigma) / R3) as f32
}

/// `(B, 3, S…)` RGB values → `(3B, 1, S…)` opponent values: batch item `b`'s channel `c` becomes
/// item `3b + c`, so the memory layout is the same.
fn to_opponent(rgb: &[f32], batch: usize) -> Vec<f32> {
    let q = forward_matrix();
    let s = rgb.len() / (3 * batch.max(1));
    let mut out = vec![0.0; rgb.len()];
    for b in 0..batch {
        let x = &rgb[b * 3 * s..][..3 * s];
        let z = &mut out[b * 3 * s..][..3 * s];
        for i in 0..s {
            let (r, g, bl) = (x[i], x[s + i], x[2 * s + i]);
            for c in 0..3 {
                z[c * s + i] = q[c][0] * r + q[c][1] * g + q[c][2] * bl + OFFSET[c];
            }
        }
    }
    out
}

/// The inverse of [`to_opponent`].
fn to_rgb(opp: &[f32], batch: usize) -> Vec<f32> {
    let p = inverse_matrix();
    let s = opp.len() / (3 * batch.max(1));
    let mut out = vec![0.0; opp.len()];
    for b in 0..batch {
        let z = &opp[b * 3 * s..][..3 * s];
        let x = &mut out[b * 3 * s..][..3 * s];
        for i in 0..s {
            let d = [
                z[i] - OFFSET[0],
                z[s + i] - OFFSET[1],
                z[2 * s + i] - OFFSET[2],
            ];
            for ch in 0..3 {
                x[ch * s + i] = p[ch][0] * d[0] + p[ch][1] * d[1] + p[ch][2] * d[2];
            }
        }
    }
    out
}

/// A one-channel denoiser applied to three-channel (RGB) images in the opponent colour space.
pub struct OpponentColour {
    inner: Box<dyn Denoiser>,
}

impl OpponentColour {
    /// Wraps `inner`, a denoiser of one-channel images.
    pub fn new(inner: Box<dyn Denoiser>) -> Self {
        OpponentColour { inner }
    }

    fn check_channels(channels: usize) -> Result<()> {
        if channels == 3 {
            Ok(())
        } else {
            Err(Error::config(
                "denoiser.opponent_colour",
                format!(
                    "a one-channel network in the opponent colour space denoises RGB images \
                     (3 channels), got {channels} channel(s); for grey images leave \
                     opponent_colour out"
                ),
            ))
        }
    }
}

impl Denoiser for OpponentColour {
    fn name(&self) -> String {
        format!("{} on opponent colour channels", self.inner.name())
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("denoiser", sigma)?;
        x.expect_rank("opponent colour denoiser", &[4, 5])?;
        Self::check_channels(x.shape()[1])?;
        let batch = x.shape()[0];
        let mut grey_shape = x.shape().to_vec();
        grey_shape[0] = 3 * batch;
        grey_shape[1] = 1;
        let z = Tensor::from_vec(&grey_shape, to_opponent(x.data(), batch))?;
        let y = self.inner.denoise(&z, channel_sigma(sigma))?;
        if y.shape() != z.shape() {
            return Err(Error::shape("opponent colour output", z.shape(), y.shape()));
        }
        Tensor::from_vec(x.shape(), to_rgb(y.data(), batch))
    }

    fn as_block_denoiser(&self) -> Option<&dyn BlockDenoiser> {
        self.inner
            .as_block_denoiser()
            .map(|_| self as &dyn BlockDenoiser)
    }
}

impl BlockDenoiser for OpponentColour {
    fn denoise_block(
        &self,
        x: &Features<f32>,
        dims: [usize; 3],
        spatial_axes: usize,
        sigma: f32,
        partition: &dyn Partition<f32>,
    ) -> Result<Features<f32>> {
        check_sigma("denoiser", sigma)?;
        Self::check_channels(x.channels)?;
        let inner = self.inner.as_block_denoiser().ok_or_else(|| {
            Error::Internal("the opponent colour wrapper of a whole-image denoiser".into())
        })?;
        let z = Features {
            batch: 3 * x.batch,
            channels: 1,
            dims: x.dims,
            data: to_opponent(&x.data, x.batch),
        };
        let y = inner.denoise_block(&z, dims, spatial_axes, channel_sigma(sigma), partition)?;
        if y.channels != 1 || y.batch != z.batch {
            return Err(Error::shape(
                "opponent colour block output (items, channels)",
                &[z.batch, 1],
                &[y.batch, y.channels],
            ));
        }
        Ok(Features {
            batch: x.batch,
            channels: 3,
            dims: y.dims,
            data: to_rgb(&y.data, x.batch),
        })
    }

    fn out_channels(&self) -> usize {
        3
    }

    /// The inner network's exchanges, each carrying three one-channel items per colour item.
    fn halo_volumes(
        &self,
        dims: [usize; 3],
        spatial_axes: usize,
        grid: Grid,
    ) -> Result<Option<Vec<(String, usize)>>> {
        let Some(inner) = self.inner.as_block_denoiser() else {
            return Ok(None);
        };
        Ok(inner
            .halo_volumes(dims, spatial_axes, grid)?
            .map(|layers| layers.into_iter().map(|(l, v)| (l, 3 * v)).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::denoise::Identity;
    use crate::nn::{Drunet, DrunetArch, Whole};

    fn colour_batch(shape: &[usize]) -> Tensor {
        Tensor::from_fn(shape, |i| ((i * 7919) % 1000) as f32 / 1000.0)
    }

    /// The matrices are inverse to each other and `Q` is `1/√3` times an orthogonal matrix, which
    /// is what makes RGB white noise of level σ white noise of level σ/√3 in each channel.
    #[test]
    fn the_opponent_transform_is_scaled_orthogonal_and_inverts() {
        let (q, p) = (forward_matrix(), inverse_matrix());
        for i in 0..3 {
            for j in 0..3 {
                let qp: f32 = (0..3).map(|k| q[i][k] * p[k][j]).sum();
                let qqt: f32 = (0..3).map(|k| q[i][k] * q[j][k]).sum();
                let eye = if i == j { 1.0 } else { 0.0 };
                assert!((qp - eye).abs() < 1e-6, "Q·Q⁻¹[{i}][{j}] = {qp}");
                assert!((qqt - eye / 3.0).abs() < 1e-7, "Q·Qᵀ[{i}][{j}] = {qqt}");
            }
        }
        // Grey pixels have zero chroma: the chroma channels sit at their offset.
        let z = to_opponent(&[0.3, 0.3, 0.3], 1);
        assert!(
            (z[0] - 0.3).abs() < 1e-7 && (z[1] - 0.5).abs() < 1e-7 && (z[2] - 0.5).abs() < 1e-7
        );
        assert!((channel_sigma(0.05) - 0.05 / 3f32.sqrt()).abs() < 1e-9);
    }

    /// With the identity inside, the wrapper returns its input within the rounding of two 3×3
    /// products (2-D and 3-D batches).
    #[test]
    fn around_the_identity_it_returns_the_input() {
        let d = OpponentColour::new(Box::new(Identity));
        for shape in [vec![2, 3, 5, 7], vec![1, 3, 3, 4, 5]] {
            let x = colour_batch(&shape);
            let y = d.denoise(&x, 0.1).unwrap();
            assert_eq!(y.shape(), x.shape());
            let worst = x
                .data()
                .iter()
                .zip(y.data())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-6, "max |D(x) − x| = {worst}");
        }
    }

    /// What the inner denoiser was handed: the batch and the noise level.
    struct Seen {
        x: Tensor,
        sigma: f32,
    }

    /// Records what the inner denoiser is handed.
    struct Probe(std::sync::Mutex<Vec<Seen>>);
    impl Denoiser for Probe {
        fn name(&self) -> String {
            "probe".into()
        }
        fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
            let seen = Seen {
                x: x.clone(),
                sigma,
            };
            self.0.lock().unwrap().push(seen);
            Ok(x.clone())
        }
    }

    /// The inner denoiser sees one batch of `3B` one-channel images at σ/√3, item `3b + c` being
    /// colour item `b`'s opponent channel `c`: luminance = the mean of R, G, B; chroma around ½.
    #[test]
    fn the_inner_denoiser_sees_opponent_channels_as_grey_images_at_the_scaled_sigma() {
        let probe = std::sync::Arc::new(Probe(Default::default()));
        struct Shared(std::sync::Arc<Probe>);
        impl Denoiser for Shared {
            fn name(&self) -> String {
                self.0.name()
            }
            fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
                self.0.denoise(x, sigma)
            }
        }
        let d = OpponentColour::new(Box::new(Shared(probe.clone())));
        let x = colour_batch(&[2, 3, 4, 6]);
        d.denoise(&x, 0.2).unwrap();
        let seen = probe.0.lock().unwrap();
        let (shape, sigma, data) = (seen[0].x.shape(), seen[0].sigma, seen[0].x.data());
        assert_eq!(shape, &[6, 1, 4, 6]);
        assert!((sigma - 0.2 / 3f32.sqrt()).abs() < 1e-7);
        let s = 24;
        for b in 0..2 {
            for i in 0..s {
                let px = |c: usize| x.data()[(b * 3 + c) * s + i];
                let mean = (px(0) + px(1) + px(2)) / 3.0;
                assert!((data[(3 * b) * s + i] - mean).abs() < 1e-6);
                let red_blue = (px(0) - px(2)) / 6f32.sqrt() + 0.5;
                assert!((data[(3 * b + 1) * s + i] - red_blue).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn anything_but_three_channels_is_refused_by_name() {
        let d = OpponentColour::new(Box::new(Identity));
        for c in [1, 2, 4] {
            let e = d.denoise(&Tensor::zeros(&[1, c, 4, 4]), 0.1).unwrap_err();
            assert!(e.to_string().contains("opponent_colour"), "{e}");
        }
        assert!(d.denoise(&Tensor::zeros(&[3, 4, 4]), 0.1).is_err());
        assert!(d.denoise(&Tensor::zeros(&[1, 3, 4, 4]), f32::NAN).is_err());
        // The identity has no block form, so neither has the wrapper.
        assert!(d.as_block_denoiser().is_none());
    }

    /// The block form on one process (the `Whole` partition) gives the bits of the whole-image
    /// form, and predicts three times the inner network's halo traffic.
    #[test]
    fn the_block_form_is_the_whole_form() {
        let arch = DrunetArch {
            in_channels: 1,
            out_channels: 1,
            nc: [4, 6, 8, 10],
            nb: 1,
            dim: 2,
        };
        let d = OpponentColour::new(Box::new(Drunet::random(arch.clone(), 3).unwrap()));
        let x = colour_batch(&[2, 3, 16, 24]);
        let whole = d.denoise(&x, 0.05).unwrap();
        let block = d.as_block_denoiser().expect("a DRUNet has a block form");
        let f = Features {
            batch: 2,
            channels: 3,
            dims: [1, 16, 24],
            data: x.data().to_vec(),
        };
        let y = block
            .denoise_block(&f, [1, 16, 24], 2, 0.05, &Whole)
            .unwrap();
        assert_eq!(y.data, whole.data());
        assert_eq!(block.out_channels(), 3);
        let grid = Grid::single();
        let inner = Drunet::random(arch, 3).unwrap();
        let theirs = inner
            .as_block_denoiser()
            .unwrap()
            .halo_volumes([1, 16, 24], 2, grid)
            .unwrap();
        let ours = block.halo_volumes([1, 16, 24], 2, grid).unwrap();
        assert_eq!(
            ours,
            theirs.map(|l| l.into_iter().map(|(n, v)| (n, 3 * v)).collect())
        );
    }
}
