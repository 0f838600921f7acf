//! The PSNR table of the bundled denoisers (`tessera bench denoisers`, `assets/weights/README.md`):
//! held-out images (generated ones the training presets never used, and real photographs) with
//! seeded Gaussian noise at a few σ, denoised by TV and wavelet thresholding (each at the best of a
//! few strengths, an oracle choice in their favour) and by every bundled DnCNN of the image's
//! channel count.

use crate::denoise::{Denoiser, DenoiserConfig, TvConfig, WaveletConfig};
use crate::error::Result;
use crate::metrics::psnr;
use crate::tensor::Tensor;

use super::data::NamedImage;

/// Strengths tried for TV (`ths = k·σ`) and wavelets (`threshold = k·σ`).
pub const TV_FACTORS: &[f32] = &[0.25, 0.5, 1.0, 2.0];
pub const WAVELET_FACTORS: &[f32] = &[0.5, 1.0, 2.0, 3.0];

/// One image at one noise level: PSNR (dB, peak 1) of each method.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub image: String,
    pub channels: usize,
    pub sigma: f32,
    pub noisy_db: f64,
    /// Best PSNR and the factor `k` that gave it.
    pub tv: (f64, f32),
    pub wavelet: (f64, f32),
    /// Each bundled network of the image's channel count: name, PSNR.
    pub nets: Vec<(String, f64)>,
}

/// `clean + σ·n`, `n` standard normal from the counter-based generator keyed by `key`.
pub fn add_noise(clean: &Tensor, sigma: f32, key: u64) -> Tensor {
    let mut x = clean.clone();
    for (i, v) in x.data_mut().iter_mut().enumerate() {
        *v += sigma * super::normal(key, i as u64);
    }
    x
}

/// The bundled networks for `channels` channels, built.
fn bundled(channels: usize) -> Result<Vec<(String, Box<dyn Denoiser>)>> {
    crate::nn::bundled::DNCNN
        .iter()
        .filter(|b| b.channels == channels)
        .map(|b| {
            let cfg = DenoiserConfig::Dncnn(crate::nn::DncnnConfig::bundled(channels));
            Ok((b.name.to_string(), cfg.build()?))
        })
        .collect()
}

/// The best PSNR of `d` over strengths `k·σ`.
fn best(
    d: &dyn Denoiser,
    noisy: &Tensor,
    clean: &Tensor,
    sigma: f32,
    ks: &[f32],
) -> Result<(f64, f32)> {
    let mut top = (f64::NEG_INFINITY, ks[0]);
    for &k in ks {
        let p = psnr(&d.denoise(noisy, k * sigma)?, clean, 1.0)?;
        if p > top.0 {
            top = (p, k);
        }
    }
    Ok(top)
}

/// Every image at every σ (noise seeded by `seed`, the image's index and the σ's index).
pub fn psnr_table(images: &[NamedImage], sigmas: &[f32], seed: u64) -> Result<Vec<Row>> {
    let tv = DenoiserConfig::Tv(TvConfig::default()).build()?;
    let wavelet = DenoiserConfig::Wavelet(WaveletConfig::default()).build()?;
    let mut rows = Vec::new();
    for (i, im) in images.iter().enumerate() {
        let channels = im.image.shape()[1];
        let nets = bundled(channels)?;
        for (j, &sigma) in sigmas.iter().enumerate() {
            let key = super::mix(seed ^ super::EVAL_KEY, ((i as u64) << 32) | j as u64);
            let noisy = add_noise(&im.image, sigma, key);
            let mut row = Row {
                image: im.name.clone(),
                channels,
                sigma,
                noisy_db: psnr(&noisy, &im.image, 1.0)?,
                tv: best(tv.as_ref(), &noisy, &im.image, sigma, TV_FACTORS)?,
                wavelet: best(wavelet.as_ref(), &noisy, &im.image, sigma, WAVELET_FACTORS)?,
                nets: Vec::new(),
            };
            for (name, net) in &nets {
                row.nets.push((
                    name.clone(),
                    psnr(&net.denoise(&noisy, sigma)?, &im.image, 1.0)?,
                ));
            }
            tracing::info!("{} σ {sigma}: {row:?}", im.name);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The table as Markdown: one line per image and σ.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| image | σ | noisy | TV (best k) | wavelet db8 (best k) | bundled DnCNN |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let nets: Vec<String> = r
            .nets
            .iter()
            .map(|(n, p)| format!("{p:.2} ({n})"))
            .collect();
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} (k {}) | {:.2} (k {}) | {} |\n",
            r.image,
            r.sigma,
            r.noisy_db,
            r.tv.0,
            r.tv.1,
            r.wavelet.0,
            r.wavelet.1,
            nets.join(", ")
        ));
    }
    s
}
