//! Image-quality metrics between a reconstruction and its ground truth: MSE, PSNR and SSIM.
//!
//! These close the flow: a job compares the algorithm's estimate with the sample it started from.
//! Conventions follow deepinv's metrics for batches (`(B, C, H, W)` or `(B, C, D, H, W)`, one value per
//! batch item, here averaged over the batch) and scikit-image for SSIM's definition. Sums run in f64.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Checks equal shapes and a non-empty input.
fn check_pair(op: &str, x: &Tensor, reference: &Tensor) -> Result<()> {
    reference.expect_shape(op, x.shape())?;
    if x.numel() == 0 {
        return Err(Error::config(op, "cannot compare empty tensors"));
    }
    Ok(())
}

pub(crate) fn check_range(op: &str, data_range: f32) -> Result<()> {
    if !(data_range.is_finite() && data_range > 0.0) {
        return Err(Error::config(
            format!("{op}.data_range"),
            format!("must be a positive finite number, got {data_range}"),
        ));
    }
    Ok(())
}

/// Sum of squared differences in f64.
fn sq_err(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&p, &q)| {
            let d = p as f64 - q as f64;
            d * d
        })
        .sum()
}

/// Number of batch items: the leading axis of a 4-D or 5-D tensor, otherwise the whole tensor is one.
fn batch_items(x: &Tensor) -> usize {
    match x.ndim() {
        4 | 5 => x.shape()[0].max(1),
        _ => 1,
    }
}

/// Mean squared error over all elements, `mean((x − reference)²)`.
pub fn mse(x: &Tensor, reference: &Tensor) -> Result<f64> {
    check_pair("mse", x, reference)?;
    Ok(sq_err(x.data(), reference.data()) / x.numel() as f64)
}

/// Peak signal-to-noise ratio in dB, `10 log10(data_range² / MSE)`.
///
/// As deepinv's `PSNR` metric: the MSE is taken per batch item (over channels and space) and each item
/// gets its own PSNR; this returns their mean (for `B = 1`, simply the PSNR of the whole tensor). An
/// item identical to its reference has PSNR `+∞`, and so then has the mean.
pub fn psnr(x: &Tensor, reference: &Tensor, data_range: f32) -> Result<f64> {
    check_pair("psnr", x, reference)?;
    check_range("psnr", data_range)?;
    let items = batch_items(x);
    let item_len = x.numel() / items;
    let peak_sq = (data_range as f64).powi(2);
    let total: f64 = x
        .data()
        .chunks_exact(item_len)
        .zip(reference.data().chunks_exact(item_len))
        .map(|(a, b)| {
            let mse = sq_err(a, b) / item_len as f64;
            if mse == 0.0 {
                f64::INFINITY
            } else {
                10.0 * (peak_sq / mse).log10()
            }
        })
        .sum();
    Ok(total / items as f64)
}

/// Gaussian window of SSIM: 11 taps, σ = 1.5, normalised to sum 1 — scikit-image's
/// `gaussian_filter(sigma=1.5, truncate=3.5)` has exactly these weights (radius int(3.5·1.5 + 0.5) = 5).
const WIN: usize = 11;
const SIGMA: f64 = 1.5;
const K1: f64 = 0.01;
const K2: f64 = 0.03;

fn gaussian_window() -> [f64; WIN] {
    let half = (WIN / 2) as f64;
    let mut g: [f64; WIN] = std::array::from_fn(|i| {
        let t = i as f64 - half;
        (-t * t / (2.0 * SIGMA * SIGMA)).exp()
    });
    let s: f64 = g.iter().sum();
    g.iter_mut().for_each(|v| *v /= s);
    g
}

/// Structural similarity (Wang, Bovik, Sheikh & Simoncelli, "Image quality assessment: from error
/// visibility to structural similarity", IEEE TIP 13(4), 2004).
///
/// Follows scikit-image's `structural_similarity(x, reference, data_range=…, gaussian_weights=True,
/// sigma=1.5, use_sample_covariance=False)`, with `channel_axis` over C: local statistics under an
/// 11-tap Gaussian window (σ = 1.5), `C1 = (0.01 L)²`, `C2 = (0.03 L)²`,
///
/// `SSIM = (2 μx μy + C1)(2 σxy + C2) / ((μx² + μy² + C1)(σx² + σy² + C2))`,
///
/// averaged over the positions where the window fits entirely inside the image (skimage crops the
/// 5-pixel border it filtered with reflection, which leaves exactly those), then over channels and
/// batch items. This also equals deepinv's `SSIM` (which uses valid convolution with the same window).
///
/// Volumes `(B, C, D, H, W)`: the mean of 2-D SSIM over the D axial slices (H×W planes), not a 3-D
/// window. H and W must be at least 11. Images are 4-D `(B, C, H, W)`; a 2-D `(H, W)` is one plane.
pub fn ssim(x: &Tensor, reference: &Tensor, data_range: f32) -> Result<f64> {
    check_pair("ssim", x, reference)?;
    check_range("ssim", data_range)?;
    let (h, w) = match x.shape() {
        [.., h, w] if x.ndim() >= 2 => (*h, *w),
        s => {
            return Err(Error::config(
                "ssim",
                format!("needs an image of at least 2 dimensions, got shape {s:?}"),
            ));
        }
    };
    if h < WIN || w < WIN {
        return Err(Error::config(
            "ssim",
            format!("images must be at least {WIN}×{WIN} for the Gaussian window, got {h}×{w}"),
        ));
    }
    let plane = h * w;
    let planes = x.numel() / plane;
    let range = data_range as f64;
    let consts = ((K1 * range).powi(2), (K2 * range).powi(2));
    let g = gaussian_window();
    let sum: f64 = (0..planes)
        .map(|p| {
            let s = p * plane..(p + 1) * plane;
            ssim_plane(&x.data()[s.clone()], &reference.data()[s], h, w, &g, consts)
        })
        .sum();
    Ok(sum / planes as f64)
}

/// Whether [`ssim`] can compare arrays of this shape: the last two axes are at least 11 (the
/// Gaussian window). Callers that report SSIM as optional check this instead of failing.
pub fn ssim_fits(shape: &[usize]) -> bool {
    matches!(shape, [.., h, w] if *h >= WIN && *w >= WIN)
}

/// Mean SSIM of one `h × w` plane over valid window positions.
///
/// Works in bands of output rows (in parallel, summed in band order for determinism): each band
/// filters its rows horizontally, then vertically, so memory stays proportional to the band, not the
/// image.
fn ssim_plane(
    x: &[f32],
    y: &[f32],
    h: usize,
    w: usize,
    g: &[f64; WIN],
    (c1, c2): (f64, f64),
) -> f64 {
    const BAND: usize = 64;
    let (oh, ow) = (h - WIN + 1, w - WIN + 1);
    let band_sums: Vec<f64> = (0..oh)
        .step_by(BAND)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|r0| {
            let rows = BAND.min(oh - r0);
            let in_rows = rows + WIN - 1;
            // Horizontally filtered x, y, x², y², xy for input rows r0 .. r0 + in_rows.
            let mut hf = vec![[0.0f64; 5]; in_rows * ow];
            for i in 0..in_rows {
                let src = (r0 + i) * w;
                let (xr, yr) = (&x[src..src + w], &y[src..src + w]);
                for j in 0..ow {
                    let mut acc = [0.0f64; 5];
                    for (k, &gk) in g.iter().enumerate() {
                        let (a, b) = (xr[j + k] as f64, yr[j + k] as f64);
                        acc[0] += gk * a;
                        acc[1] += gk * b;
                        acc[2] += gk * a * a;
                        acc[3] += gk * b * b;
                        acc[4] += gk * a * b;
                    }
                    hf[i * ow + j] = acc;
                }
            }
            let mut band = 0.0;
            for i in 0..rows {
                for j in 0..ow {
                    let mut m = [0.0f64; 5];
                    for (k, &gk) in g.iter().enumerate() {
                        let v = &hf[(i + k) * ow + j];
                        for c in 0..5 {
                            m[c] += gk * v[c];
                        }
                    }
                    let [mx, my, mxx, myy, mxy] = m;
                    let (vx, vy, vxy) = (mxx - mx * mx, myy - my * my, mxy - mx * my);
                    band += ((2.0 * mx * my + c1) * (2.0 * vxy + c2))
                        / ((mx * mx + my * my + c1) * (vx + vy + c2));
                }
            }
            band
        })
        .collect();
    band_sums.iter().sum::<f64>() / (oh * ow) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_matches_scipy_weights() {
        let g = gaussian_window();
        assert!((g.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        // scipy.ndimage._gaussian_kernel1d(1.5, 0, 5): centre weight 0.2660117249 (exp(-t²/4.5), t = −5..5, normalised)
        assert!((g[5] - 0.266_011_724_86).abs() < 1e-9, "{}", g[5]);
        assert_eq!(g[0], g[10]);
    }

    #[test]
    fn single_window_constant_images() {
        // One valid position, no variance: SSIM = (2ab + C1)/(a² + b² + C1), the luminance term.
        let x = Tensor::full(&[1, 1, 11, 11], 0.5);
        let y = Tensor::full(&[1, 1, 11, 11], 0.6);
        let c1 = (0.01f64).powi(2);
        let expected = (2.0 * 0.5 * 0.6 + c1) / (0.25 + 0.36 + c1);
        let got = ssim(&x, &y, 1.0).unwrap();
        assert!((got - expected).abs() < 1e-7, "{got} vs {expected}");
    }
}
