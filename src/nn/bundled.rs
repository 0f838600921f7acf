//! The denoisers tessera ships: small DnCNNs trained with `tessera train` on generated images
//! (`presets/train-dncnn-grey.toml`, `presets/train-dncnn-colour.toml`), their weights embedded in
//! the binary from `assets/weights/` (how they were trained, their licence and a PSNR table
//! against TV and wavelets: `assets/weights/README.md`). A DnCNN config without `weights` whose
//! architecture is one of these runs them; `weights = "random"` asks for random weights instead.

use std::path::Path;

use super::{DncnnArch, StateDict};
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
}
