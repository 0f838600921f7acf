//! The PSNR table of the bundled denoisers (`tessera bench denoisers`, `assets/weights/README.md`):
//! held-out images (generated ones the training presets never used, and real photographs) with
//! seeded Gaussian noise at a few σ, denoised by TV and wavelet thresholding (each at the best of a
//! few strengths, an oracle choice in their favour) and by every bundled network of the image's
//! channel count (and by DnCNN or σ-conditional DRUNet weight files given on the command line, to
//! score a training in progress; a grey DRUNet also scores colour images in the opponent colour
//! space), and by BM3D when the benchmark environment has it ([`super::bm3d`], on the same noisy tensors).

use std::path::Path;

use crate::denoise::{Denoiser, DenoiserConfig, TvConfig, WaveletConfig};
use crate::error::{Error, Result};
use crate::metrics::psnr;
use crate::nn::{DncnnConfig, DrunetConfig, StateDict};
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
    /// BM3D (σ given exactly), when it ran.
    pub bm3d: Option<f64>,
    /// Each bundled network of the image's channel count, then each extra one: name, PSNR.
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

/// The bundled networks for `channels` channels (DnCNNs, then DRUNets; on colour images the grey
/// DRUNet runs in the opponent colour space), built.
fn bundled(channels: usize) -> Result<Vec<(String, Box<dyn Denoiser>)>> {
    use crate::nn::bundled::{DNCNN, DRUNET};
    let dncnn = DNCNN.iter().filter(|b| b.channels == channels).map(|b| {
        (
            b.name.to_string(),
            DenoiserConfig::Dncnn(DncnnConfig::bundled(channels)),
        )
    });
    let drunet = DRUNET.iter().filter_map(|b| {
        let cfg = DrunetConfig::bundled(channels);
        (b.channels == cfg.in_channels)
            .then(|| (net_name(b.name, &cfg), DenoiserConfig::Drunet(cfg)))
    });
    dncnn
        .chain(drunet)
        .map(|(name, cfg)| Ok((name, cfg.build()?)))
        .collect()
}

/// A DRUNet's name in the table: its file's, marked when it runs in the opponent colour space.
fn net_name(name: &str, cfg: &DrunetConfig) -> String {
    match cfg.opponent_colour {
        true => format!("{name} (opponent colour)"),
        false => name.to_string(),
    }
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

/// A weight file to score beside the bundled networks (e.g. one `tessera train` just wrote): a
/// DnCNN or a σ-conditional DRUNet, told apart and sized (channels, depth or scales, features,
/// blocks, biases) by deepinv's key names.
pub struct ExtraNet {
    pub name: String,
    pub channels: usize,
    config: DenoiserConfig,
}

impl ExtraNet {
    pub fn load(path: &Path) -> Result<Self> {
        let dict = StateDict::load(path)?;
        let config = if dict.get("m_head.weight").is_some() {
            DenoiserConfig::Drunet(drunet_config(path, &dict)?)
        } else {
            DenoiserConfig::Dncnn(dncnn_config(path, &dict)?)
        };
        let channels = match &config {
            DenoiserConfig::Drunet(c) => c.in_channels,
            DenoiserConfig::Dncnn(c) => c.in_channels,
            _ => {
                return Err(Error::Internal(
                    "an extra network is a DnCNN or a DRUNet".into(),
                ));
            }
        };
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(ExtraNet {
            name,
            channels,
            config,
        })
    }

    /// The denoiser configuration the file was read as.
    pub fn config(&self) -> &DenoiserConfig {
        &self.config
    }

    /// How the file denoises images of `channels` channels, and its name in the table: as read
    /// for its own channel count; a one-channel DRUNet also on colour images, in the opponent
    /// colour space; `None` otherwise.
    pub fn for_channels(&self, channels: usize) -> Option<(String, DenoiserConfig)> {
        if self.channels == channels {
            return Some((self.name.clone(), self.config.clone()));
        }
        match &self.config {
            DenoiserConfig::Drunet(c) => {
                let cfg = c.for_image_channels(channels)?;
                Some((net_name(&self.name, &cfg), DenoiserConfig::Drunet(cfg)))
            }
            _ => None,
        }
    }
}

/// The shape of `key` in `dict`, of `rank` axes; an error naming the file and the key otherwise.
fn key_shape(
    path: &Path,
    dict: &StateDict,
    key: &str,
    rank: usize,
    what: &str,
) -> Result<Vec<usize>> {
    let shape = dict.get(key).map(|t| t.shape().to_vec()).ok_or_else(|| {
        Error::format(
            path,
            format!("not a {what} state_dict (deepinv's names): no `{key}`"),
        )
    })?;
    if shape.len() != rank {
        return Err(Error::format(
            path,
            format!("{key} has shape {shape:?}; a 2-D {what}'s has {rank} axes"),
        ));
    }
    Ok(shape)
}

fn dncnn_config(path: &Path, dict: &StateDict) -> Result<DncnnConfig> {
    let first = key_shape(path, dict, "in_conv.weight", 4, "DnCNN")?;
    let hidden = dict
        .keys()
        .filter(|k| k.starts_with("conv_list.") && k.ends_with(".weight"))
        .count();
    Ok(DncnnConfig {
        weights: Some(path.to_path_buf()),
        in_channels: first[1],
        out_channels: key_shape(path, dict, "out_conv.weight", 4, "DnCNN")?[0],
        depth: hidden + 2,
        nf: first[0],
        bias: dict.get("in_conv.bias").is_some(),
        ..DncnnConfig::default()
    })
}

/// deepinv's DRUNet: `m_head` takes the image channels plus the noise-level map; the scales'
/// channels are the heads' outputs of `m_down1..3` and `m_body`; `nb` counts `m_body`'s blocks.
fn drunet_config(path: &Path, dict: &StateDict) -> Result<DrunetConfig> {
    let head = key_shape(path, dict, "m_head.weight", 4, "DRUNet")?;
    if head[1] < 2 {
        return Err(Error::format(
            path,
            format!("m_head.weight has shape {head:?}: no channel left for the noise level"),
        ));
    }
    let mut nc = Vec::with_capacity(4);
    for scale in ["m_down1", "m_down2", "m_down3", "m_body"] {
        nc.push(key_shape(path, dict, &format!("{scale}.0.res.0.weight"), 4, "DRUNet")?[0]);
    }
    let nb = dict
        .keys()
        .filter(|k| k.starts_with("m_body.") && k.ends_with(".res.0.weight"))
        .count();
    Ok(DrunetConfig {
        weights: Some(path.to_path_buf()),
        in_channels: head[1] - 1,
        out_channels: key_shape(path, dict, "m_tail.weight", 4, "DRUNet")?[0],
        nc,
        nb,
        ..DrunetConfig::default()
    })
}

/// The noisy input of image `i` at noise level `j` (`sigma`), seeded by `seed`.
pub fn noisy_input(clean: &Tensor, seed: u64, i: usize, j: usize, sigma: f32) -> Tensor {
    let key = super::mix(seed ^ super::EVAL_KEY, ((i as u64) << 32) | j as u64);
    add_noise(clean, sigma, key)
}

/// Every image at every σ (noise seeded by `seed`, the image's index and the σ's index), with the
/// bundled networks and the `extra` ones of the image's channel count, and BM3D (run in `dir` on
/// the same noisy inputs) when `bm3d` is given.
pub fn psnr_table(
    images: &[NamedImage],
    sigmas: &[f32],
    seed: u64,
    extra: &[ExtraNet],
    bm3d: Option<(&super::bm3d::Runner, &Path)>,
) -> Result<Vec<Row>> {
    let tv = DenoiserConfig::Tv(TvConfig::default()).build()?;
    let wavelet = DenoiserConfig::Wavelet(WaveletConfig::default()).build()?;
    let noisy: Vec<Vec<Tensor>> = images
        .iter()
        .enumerate()
        .map(|(i, im)| {
            sigmas
                .iter()
                .enumerate()
                .map(|(j, &sigma)| noisy_input(&im.image, seed, i, j, sigma))
                .collect()
        })
        .collect();
    let mut bm3d_out = match bm3d {
        Some((runner, dir)) => {
            let inputs: Vec<(String, f32, &Tensor)> = images
                .iter()
                .zip(&noisy)
                .flat_map(|(im, row)| {
                    sigmas
                        .iter()
                        .zip(row)
                        .map(|(&sigma, x)| (im.name.clone(), sigma, x))
                })
                .collect();
            runner
                .denoise(dir, &inputs)?
                .into_iter()
                .map(Some)
                .collect()
        }
        None => vec![None; images.len() * sigmas.len()],
    }
    .into_iter();
    let mut rows = Vec::new();
    for (im, noisy_row) in images.iter().zip(&noisy) {
        let channels = im.image.shape()[1];
        let mut nets = bundled(channels)?;
        for (name, cfg) in extra.iter().filter_map(|e| e.for_channels(channels)) {
            nets.push((name, cfg.build()?));
        }
        for (&sigma, noisy) in sigmas.iter().zip(noisy_row) {
            let bm3d = match bm3d_out.next().flatten() {
                Some(y) => Some(psnr(&y, &im.image, 1.0)?),
                None => None,
            };
            let mut row = Row {
                image: im.name.clone(),
                channels,
                sigma,
                noisy_db: psnr(noisy, &im.image, 1.0)?,
                tv: best(tv.as_ref(), noisy, &im.image, sigma, TV_FACTORS)?,
                wavelet: best(wavelet.as_ref(), noisy, &im.image, sigma, WAVELET_FACTORS)?,
                bm3d,
                nets: Vec::new(),
            };
            for (name, net) in &nets {
                row.nets.push((
                    name.clone(),
                    psnr(&net.denoise(noisy, sigma)?, &im.image, 1.0)?,
                ));
            }
            tracing::info!("{} σ {sigma}: {row:?}", im.name);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The table as Markdown: one line per image and σ (a BM3D column when BM3D ran).
pub fn markdown(rows: &[Row]) -> String {
    let with_bm3d = rows.iter().any(|r| r.bm3d.is_some());
    let mut s = String::from("| image | σ | noisy | TV (best k) | wavelet db8 (best k) |");
    if with_bm3d {
        s.push_str(" BM3D |");
    }
    s.push_str(" bundled networks |\n|---|---|---|---|---|");
    if with_bm3d {
        s.push_str("---|");
    }
    s.push_str("---|\n");
    for r in rows {
        let nets: Vec<String> = r
            .nets
            .iter()
            .map(|(n, p)| format!("{p:.2} ({n})"))
            .collect();
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} (k {}) | {:.2} (k {}) |",
            r.image, r.sigma, r.noisy_db, r.tv.0, r.tv.1, r.wavelet.0, r.wavelet.1,
        ));
        if with_bm3d {
            match r.bm3d {
                Some(p) => s.push_str(&format!(" {p:.2} |")),
                None => s.push_str(" – |"),
            }
        }
        s.push_str(&format!(" {} |\n", nets.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::bundled::DNCNN;

    /// A bundled network written to a file and given as an extra one reads back as the same
    /// architecture and scores exactly the bundled network's PSNR; a file that is not a DnCNN is
    /// an error naming the missing key.
    #[test]
    fn an_extra_weight_file_scores_like_the_same_bundled_network() {
        let dir = tempfile::tempdir().unwrap();
        let grey = &DNCNN[0];
        assert_eq!(grey.channels, 1);
        let path = dir.path().join("copy.safetensors");
        grey.state_dict().unwrap().save_safetensors(&path).unwrap();
        let extra = ExtraNet::load(&path).unwrap();
        assert_eq!(
            (extra.name.as_str(), extra.channels),
            ("copy.safetensors", 1)
        );
        let DenoiserConfig::Dncnn(cfg) = &extra.config else {
            panic!("not a DnCNN config")
        };
        assert_eq!(
            (cfg.depth, cfg.nf, cfg.bias, cfg.out_channels),
            (
                crate::nn::bundled::DNCNN_DEPTH,
                crate::nn::bundled::DNCNN_NF,
                true,
                1
            )
        );

        let image = Tensor::from_fn(&[1, 1, 24, 20], |i| ((i * 37) % 101) as f32 / 100.0);
        let images = [NamedImage {
            name: "ramp".into(),
            image,
        }];
        let rows = psnr_table(&images, &[0.1], 3, std::slice::from_ref(&extra), None).unwrap();
        let nets = &rows[0].nets;
        // The bundled DnCNN and DRUNet, then the copy.
        assert_eq!(nets.len(), 3, "{nets:?}");
        assert_eq!(nets[0].0, grey.name);
        assert_eq!(nets[1].0, "drunet_grey");
        assert_eq!(nets[0].1, nets[2].1);

        let mut other = StateDict::new("other");
        other.insert("weight", Tensor::zeros(&[2, 2]));
        let bad = dir.path().join("other.safetensors");
        other.save_safetensors(&bad).unwrap();
        let err = ExtraNet::load(&bad).err().unwrap().to_string();
        assert!(err.contains("in_conv.weight"), "{err}");
    }

    /// A DRUNet file of the trained layout (`presets/train-drunet-grey.toml`'s architecture) is
    /// read as a DRUNet of that architecture and scored with σ given, exactly as the same weights
    /// built from a config; a DRUNet file without its noise-level channel is an error.
    #[test]
    fn an_extra_drunet_file_is_read_as_its_architecture_and_scored_with_sigma() {
        use crate::nn::bundled::{DRUNET_NB, DRUNET_NC};
        use crate::nn::{Drunet, DrunetArch};
        let dir = tempfile::tempdir().unwrap();
        let arch = DrunetArch {
            in_channels: 1,
            out_channels: 1,
            nc: DRUNET_NC,
            nb: DRUNET_NB,
            dim: 2,
        };
        let dict = Drunet::random(arch, 4)
            .unwrap()
            .network()
            .state_dict("drunet")
            .unwrap();
        let path = dir.path().join("drunet_grey.safetensors");
        dict.save_safetensors(&path).unwrap();
        let extra = ExtraNet::load(&path).unwrap();
        assert_eq!(extra.channels, 1);
        let DenoiserConfig::Drunet(cfg) = extra.config() else {
            panic!("not read as a DRUNet: {:?}", extra.config())
        };
        assert_eq!(
            (cfg.nc.as_slice(), cfg.nb, cfg.out_channels),
            (DRUNET_NC.as_slice(), DRUNET_NB, 1)
        );

        let image = Tensor::from_fn(&[1, 1, 32, 24], |i| ((i * 37) % 101) as f32 / 100.0);
        let images = [NamedImage {
            name: "ramp".into(),
            image: image.clone(),
        }];
        let rows = psnr_table(&images, &[0.1], 3, std::slice::from_ref(&extra), None).unwrap();
        let (name, db) = rows[0].nets.last().unwrap();
        assert_eq!(name, "drunet_grey.safetensors");
        let noisy = noisy_input(&image, 3, 0, 0, 0.1);
        let direct = DenoiserConfig::Drunet(DrunetConfig {
            weights: Some(path.clone()),
            in_channels: 1,
            out_channels: 1,
            nc: DRUNET_NC.to_vec(),
            nb: DRUNET_NB,
            ..DrunetConfig::default()
        })
        .build()
        .unwrap();
        let sigma_matters = direct.denoise(&noisy, 0.2).unwrap();
        let out = direct.denoise(&noisy, 0.1).unwrap();
        assert_eq!(*db, psnr(&out, &image, 1.0).unwrap());
        assert!(
            sigma_matters.max_abs_diff(&out) > 0.0,
            "σ must reach the network"
        );

        // On a colour image the grey file scores in the opponent colour space, as the bundled
        // colour denoiser does; a colour DRUNet file does not score grey images.
        let colour = Tensor::from_fn(&[1, 3, 32, 24], |i| ((i * 41) % 103) as f32 / 102.0);
        let images = [NamedImage {
            name: "colour ramp".into(),
            image: colour.clone(),
        }];
        let rows = psnr_table(&images, &[0.1], 3, std::slice::from_ref(&extra), None).unwrap();
        let names: Vec<&str> = rows[0].nets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "dncnn_colour",
                "drunet_grey (opponent colour)",
                "drunet_grey.safetensors (opponent colour)"
            ]
        );
        let DenoiserConfig::Drunet(grey_cfg) = extra.config() else {
            unreachable!()
        };
        let opponent = DenoiserConfig::Drunet(DrunetConfig {
            opponent_colour: true,
            ..grey_cfg.clone()
        })
        .build()
        .unwrap();
        let noisy = noisy_input(&colour, 3, 0, 0, 0.1);
        let out = opponent.denoise(&noisy, 0.1).unwrap();
        assert_eq!(rows[0].nets[2].1, psnr(&out, &colour, 1.0).unwrap());
        assert!(extra.for_channels(2).is_none());

        let mut headless = dict.clone();
        headless.insert("m_head.weight", Tensor::zeros(&[16, 1, 3, 3]));
        let bad = dir.path().join("headless.safetensors");
        headless.save_safetensors(&bad).unwrap();
        let err = ExtraNet::load(&bad).err().unwrap().to_string();
        assert!(err.contains("noise level"), "{err}");
    }
}
