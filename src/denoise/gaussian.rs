//! Gaussian smoothing as a denoiser: a separable, normalised Gaussian filter with whole-sample
//! reflect boundary (torch/numpy `reflect`: `d c b | a b c d | c b a`), in 2-D or 3-D.
//!
//! The blur's standard deviation in pixels is `sigma_px + px_per_sigma · σ`, where `σ` is the call's
//! noise level. With the default `px_per_sigma = 0` the call's σ is ignored and the filter is a fixed
//! linear smoother; a positive `px_per_sigma` lets a plug-and-play loop that lowers σ also lower the
//! blur. The kernel is truncated at `⌈4·std⌉` pixels (scipy's `gaussian_filter` default `truncate=4`).

use rayon::prelude::*;

use super::{Denoiser, check_sigma, map_planes, reflect_index};
use crate::error::Result;
use crate::tensor::Tensor;

/// Gaussian smoothing; see the module doc for how the call's σ enters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianDenoiser {
    /// Standard deviation in pixels when σ = 0.
    pub sigma_px: f32,
    /// Extra standard deviation in pixels per unit of the call's σ.
    pub px_per_sigma: f32,
}

impl GaussianDenoiser {
    /// The filter's standard deviation in pixels at noise level `sigma`.
    pub fn std_px(&self, sigma: f32) -> f32 {
        self.sigma_px + self.px_per_sigma * sigma
    }
}

impl Denoiser for GaussianDenoiser {
    fn name(&self) -> String {
        if self.px_per_sigma == 0.0 {
            format!("gaussian({} px)", self.sigma_px)
        } else {
            format!(
                "gaussian({} px + {} px/σ)",
                self.sigma_px, self.px_per_sigma
            )
        }
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("gaussian", sigma)?;
        let std_px = self.std_px(sigma);
        if std_px <= 0.0 {
            x.expect_rank("gaussian", &[4, 5])?;
            return Ok(x.clone());
        }
        let kernel = gaussian_kernel(std_px);
        map_planes("gaussian", x, |input, out, dims| {
            let full = [1, 1, 1];
            let mut shape = full;
            shape[3 - dims.len()..].copy_from_slice(dims);
            let mut buf = input.to_vec();
            for axis in 3 - dims.len()..3 {
                if shape[axis] > 1 {
                    filter_axis(&buf, out, shape, axis, &kernel);
                    buf.copy_from_slice(out);
                }
            }
            out.copy_from_slice(&buf);
        })
    }
}

/// The normalised 1-D Gaussian `w[i] ∝ exp(−i²/(2·std²))` for `i ∈ [−r, r]`, `r = ⌈4·std⌉`.
pub fn gaussian_kernel(std_px: f32) -> Vec<f32> {
    let r = (4.0 * std_px as f64).ceil() as isize;
    let w: Vec<f64> = (-r..=r)
        .map(|i| (-(i * i) as f64 / (2.0 * (std_px as f64).powi(2))).exp())
        .collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|v| (v / total) as f32).collect()
}

/// Correlates `src` with `kernel` (odd length, centred) along `axis` of a `[D, H, W]` buffer.
fn filter_axis(src: &[f32], dst: &mut [f32], dims: [usize; 3], axis: usize, kernel: &[f32]) {
    const MIN_TASK_ELEMS: usize = 1 << 14;
    let n = dims[axis];
    let r = kernel.len() / 2;
    let inner: usize = dims[axis + 1..].iter().product();
    if inner == 1 {
        // Contiguous lines: extend each by reflection once, then a plain sliding dot product.
        dst.par_chunks_mut(n)
            .zip(src.par_chunks(n))
            .with_min_len((MIN_TASK_ELEMS / n).max(1))
            .for_each_init(
                || vec![0.0f32; n + 2 * r],
                |ext, (out, line)| {
                    for (i, e) in ext.iter_mut().enumerate() {
                        *e = line[reflect_index(i as isize - r as isize, n)];
                    }
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = kernel.iter().zip(&ext[i..]).map(|(k, v)| k * v).sum();
                    }
                },
            );
    } else {
        dst.par_chunks_mut(inner)
            .enumerate()
            .with_min_len((MIN_TASK_ELEMS / inner).max(1))
            .for_each(|(q, out)| {
                let (o, m) = (q / n, q % n);
                out.fill(0.0);
                for (t, &c) in kernel.iter().enumerate() {
                    let row = reflect_index(m as isize + t as isize - r as isize, n);
                    let s = (o * n + row) * inner;
                    for (y, &v) in out.iter_mut().zip(&src[s..s + inner]) {
                        *y += c * v;
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_is_normalised_symmetric_and_truncated_at_four_std() {
        let k = gaussian_kernel(1.5);
        assert_eq!(k.len(), 2 * 6 + 1);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        for i in 0..k.len() {
            assert_eq!(k[i], k[k.len() - 1 - i]);
        }
        // Ratio of neighbours follows exp(−(2i+1)/(2·std²)).
        let want = (-1.0f32 / (2.0 * 1.5 * 1.5)).exp();
        assert!((k[5] / k[6] - want).abs() < 1e-6);
    }
}
