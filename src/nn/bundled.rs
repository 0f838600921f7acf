//! The denoisers tessera ships: small DnCNNs trained with `tessera train` on generated images and
//! photographs (`presets/train-dncnn-grey.toml`, `presets/train-dncnn-colour.toml`), their weights
//! embedded in the binary from `assets/weights/` (how they were trained, their licence and a PSNR
//! table against TV, wavelets and BM3D: `assets/weights/README.md`). A DnCNN config without
//! `weights` whose architecture is one of these runs them; `weights = "random"` asks for random
//! weights instead.
//!
//! The σ-conditional DRUNet (`presets/train-drunet-grey.toml`, then two low-σ fine-tunes:
//! `presets/train-drunet-grey-lowsigma{,2}.toml`, issue #30) is bundled the same way
//! ([`DRUNET`], found by [`drunet_for`]) and is the default neural denoiser
//! ([`DRUNET_PREFERRED`]); on colour images it runs in the opponent colour space
//! ([`super::opponent`]).

use std::path::Path;

use super::{DncnnArch, DrunetArch, StateDict};
use crate::error::Result;

/// `weights = "random"`: seeded random weights (timing only), asked for explicitly.
pub const RANDOM: &str = "random";
/// `weights = "bundled"`: the bundled weights of this architecture (an error if there are none).
pub const BUNDLED: &str = "bundled";

/// Whether a `weights` entry is one of the names [`RANDOM`] and [`BUNDLED`] rather than a file.
pub fn is_named(weights: &Path) -> bool {
    weights == Path::new(RANDOM) || weights == Path::new(BUNDLED)
}

/// Depth and features of the bundled DnCNNs.
pub const DNCNN_DEPTH: usize = 8;
pub const DNCNN_NF: usize = 32;

/// One bundled network's weights.
#[derive(Debug)]
pub struct BundledWeights {
    /// File stem in `assets/weights/`.
    pub name: &'static str,
    /// The training preset that made them (`tessera train PRESET`).
    pub preset: &'static str,
    /// Image channels in and out.
    pub channels: usize,
    bytes: &'static [u8],
}

/// The bundled DnCNNs: grey and colour.
pub static DNCNN: [BundledWeights; 2] = [
    BundledWeights {
        name: "dncnn_grey",
        preset: "presets/train-dncnn-grey.toml",
        channels: 1,
        bytes: include_bytes!("../../assets/weights/dncnn_grey.safetensors"),
    },
    BundledWeights {
        name: "dncnn_colour",
        preset: "presets/train-dncnn-colour.toml",
        channels: 3,
        bytes: include_bytes!("../../assets/weights/dncnn_colour.safetensors"),
    },
];

/// The architecture of the bundled DRUNets (`presets/train-drunet-{grey,colour}.toml`): channels
/// of the four scales and residual blocks per scale.
pub const DRUNET_NC: [usize; 4] = [16, 32, 64, 128];
pub const DRUNET_NB: usize = 2;

/// The bundled σ-conditional DRUNet: one grey network. Colour images run it in the opponent
/// colour space (`DrunetConfig::bundled(3)`, [`super::opponent`]), which beat a DRUNet of the same
/// size trained on colour (`presets/train-drunet-colour.toml`) on every held-out row (the table in
/// `assets/weights/README.md`), at half the weights.
pub static DRUNET: [BundledWeights; 1] = [BundledWeights {
    name: "drunet_grey",
    // The last of three runs: train-drunet-grey (60 000 steps), then its two low-σ fine-tunes.
    preset: "presets/train-drunet-grey-lowsigma2.toml",
    channels: 1,
    bytes: include_bytes!("../../assets/weights/drunet_grey.safetensors"),
}];

/// Whether the bundled DRUNet is the neural denoiser to offer first (the workbench's "drunet"
/// choice starts on its architecture).
pub const DRUNET_PREFERRED: bool = !DRUNET.is_empty();

impl BundledWeights {
    /// Where the weights live in the repository.
    pub fn path(&self) -> String {
        format!("assets/weights/{}.safetensors", self.name)
    }

    /// The weights, by deepinv's names.
    pub fn state_dict(&self) -> Result<StateDict> {
        super::weights::safetensors::parse(Path::new(&self.path()), self.bytes)
    }

    /// What the log says about them.
    pub fn describe(&self) -> String {
        format!(
            "bundled weights {} (trained by `tessera train {}`; see assets/weights/README.md)",
            self.name, self.preset
        )
    }
}

/// The bundled DnCNN of architecture `arch` (2-D, residual, with biases, depth and features as
/// bundled, equal in and out channels), if there is one.
pub fn dncnn_for(arch: &DncnnArch) -> Option<&'static BundledWeights> {
    if arch.depth != DNCNN_DEPTH
        || arch.nf != DNCNN_NF
        || !arch.bias
        || !arch.residual
        || arch.dim != 2
        || arch.in_channels != arch.out_channels
    {
        return None;
    }
    DNCNN.iter().find(|b| b.channels == arch.in_channels)
}

/// The bundled DRUNet of architecture `arch` (2-D, the bundled scales and blocks, equal in and out
/// channels), if there is one.
pub fn drunet_for(arch: &DrunetArch) -> Option<&'static BundledWeights> {
    drunet_in(&DRUNET, arch)
}

/// [`drunet_for`] over the list `bundled`.
fn drunet_in<'a>(bundled: &'a [BundledWeights], arch: &DrunetArch) -> Option<&'a BundledWeights> {
    if arch.nc != DRUNET_NC
        || arch.nb != DRUNET_NB
        || arch.dim != 2
        || arch.in_channels != arch.out_channels
    {
        return None;
    }
    bundled.iter().find(|b| b.channels == arch.in_channels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_weights_parse_and_fit_their_architecture() {
        for b in &DNCNN {
            let arch = DncnnArch {
                in_channels: b.channels,
                out_channels: b.channels,
                depth: DNCNN_DEPTH,
                nf: DNCNN_NF,
                bias: true,
                residual: true,
                dim: 2,
            };
            assert_eq!(dncnn_for(&arch).map(|x| x.name), Some(b.name));
            crate::nn::Dncnn::from_state_dict(arch.clone(), b.state_dict().unwrap(), false)
                .unwrap();
            let deeper = DncnnArch { depth: 9, ..arch };
            assert!(dncnn_for(&deeper).is_none());
        }
    }

    /// The bundled grey DRUNet is found for the bundled grey architecture and for the colour
    /// one (the same network in the opponent colour space), loads every tensor, and denoises:
    /// both configs build, keep shapes and bring a noisy image closer to the clean one.
    #[test]
    fn the_bundled_drunet_denoises_grey_and_colour_images() {
        use crate::nn::DrunetConfig;
        let grey = DrunetConfig::bundled(1);
        let colour = DrunetConfig::bundled(3);
        assert!(colour.opponent_colour && colour.in_channels == 1);
        assert_eq!((grey.image_channels(), colour.image_channels()), (1, 3));
        for (cfg, channels) in [(grey, 1), (colour, 3)] {
            let arch = DrunetArch {
                in_channels: 1,
                out_channels: 1,
                nc: DRUNET_NC,
                nb: DRUNET_NB,
                dim: 2,
            };
            assert_eq!(drunet_for(&arch).map(|b| b.name), Some("drunet_grey"));
            let d = cfg.build(Path::new(".")).unwrap();
            assert!(d.name().contains("drunet_grey"), "{}", d.name());
            let clean = crate::Tensor::from_fn(&[1, channels, 40, 48], |i| {
                let (y, x) = ((i / 48) % 40, i % 48);
                0.2 + 0.6 * (((x / 8 + y / 8) % 2) as f32) + 0.01 * (i % channels) as f32
            });
            // Uniform noise of standard deviation 0.1 from a fixed hash of the index.
            let mut noisy = clean.clone();
            for (i, v) in noisy.data_mut().iter_mut().enumerate() {
                let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                *v += 0.1 * 3f32.sqrt() * (2.0 * h as f32 / (1u64 << 24) as f32 - 1.0);
            }
            let out = d.denoise(&noisy, 0.1).unwrap();
            assert_eq!(out.shape(), clean.shape());
            let psnr = |a: &crate::Tensor| {
                let mse = a
                    .data()
                    .iter()
                    .zip(clean.data())
                    .map(|(p, q)| (p - q).powi(2))
                    .sum::<f32>()
                    / a.numel() as f32;
                -10.0 * mse.log10()
            };
            let (before, after) = (psnr(&noisy), psnr(&out));
            assert!(
                after > before + 3.0,
                "{channels} channels: {before:.2} → {after:.2} dB"
            );
        }
    }

    /// The path a bundled DRUNet takes (found by architecture, parsed from embedded bytes, built)
    /// on a file of the trained layout — what `tessera train presets/train-drunet-grey.toml`
    /// writes, here with seeded weights — loads every parameter bit for bit and gives the same
    /// output as the network that wrote it.
    #[test]
    fn a_bundled_drunet_of_the_trained_layout_loads_exactly() {
        use crate::nn::Drunet;
        let dir = tempfile::tempdir().unwrap();
        for channels in [1, 3] {
            let arch = DrunetArch {
                in_channels: channels,
                out_channels: channels,
                nc: DRUNET_NC,
                nb: DRUNET_NB,
                dim: 2,
            };
            let trained = Drunet::random(arch.clone(), 7).unwrap();
            let written = trained.network().state_dict("drunet").unwrap();
            let path = dir.path().join(format!("drunet_{channels}.safetensors"));
            written.save_safetensors(&path).unwrap();
            // Embedded bytes live as long as the binary.
            let bytes: &'static [u8] = Vec::leak(std::fs::read(&path).unwrap());
            let list = [BundledWeights {
                name: "drunet_test",
                preset: "presets/train-drunet-grey.toml",
                channels,
                bytes,
            }];
            let found = drunet_in(&list, &arch).expect("the trained layout is the bundled one");
            let read = found.state_dict().unwrap();
            let keys = |d: &StateDict| d.keys().map(String::from).collect::<Vec<_>>();
            assert_eq!(keys(&read), keys(&written));
            for k in written.keys() {
                assert_eq!(read.get(k), written.get(k), "{k}");
            }
            let loaded = Drunet::from_state_dict(arch.clone(), read, false).unwrap();
            let x = crate::Tensor::from_fn(&[1, channels, 24, 16], |i| (i % 13) as f32 / 13.0);
            use crate::denoise::Denoiser;
            assert_eq!(
                loaded.denoise(&x, 0.05).unwrap(),
                trained.denoise(&x, 0.05).unwrap()
            );
            let wider = DrunetArch {
                nc: [32, 64, 128, 256],
                ..arch
            };
            assert!(drunet_in(&list, &wider).is_none());
        }
    }
}
