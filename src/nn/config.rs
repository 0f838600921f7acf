//! Preset configs of the neural denoisers (`[denoiser] kind = "drunet" | "dncnn" | "torchscript"`),
//! validated, and how they become a live [`Denoiser`] on the chosen engine.
//!
//! ```toml
//! [denoiser]
//! kind = "drunet"
//! weights = "drunet_color.pth"   # relative to the preset's folder; omit for random (timing) weights
//! in_channels = 3
//! nc = [64, 128, 256, 512]
//! nb = 4
//! engine = "native"              # or "torch" (build with --features torch)
//! # device = "cuda:0"            # torch engine only; default TESSERA_TORCH_DEVICE, else cpu
//! ```
//!
//! Any denoiser saved with `torch.jit.save` whose `forward(x, sigma)` denoises `x` (docs/TORCH.md):
//!
//! ```toml
//! [denoiser]
//! kind = "torchscript"
//! model = "denoiser.pt"          # relative to the preset's folder
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StateDict;
pub use super::device::TorchDevice;
use super::layers::graph::Network;
use super::models::dncnn::{Dncnn, DncnnArch};
use super::models::drunet::{Drunet, DrunetArch};
use crate::denoise::Denoiser;
use crate::error::{Error, Result};

/// Which engine runs a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// tessera's own CPU kernels.
    #[default]
    Native,
    /// libtorch (the `torch` feature).
    Torch,
}

/// A TorchScript denoiser: any module saved with `torch.jit.save` whose `forward(x, sigma)` returns
/// the denoised `x` (how a deepinv denoiser is brought in; docs/TORCH.md). Runs on libtorch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchScriptConfig {
    /// The `.pt` file; relative paths are relative to the preset's folder.
    pub model: PathBuf,
    /// Unset: `TESSERA_TORCH_DEVICE`, else the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<TorchDevice>,
}

impl TorchScriptConfig {
    pub fn validate(&self) -> Result<()> {
        if self.model.as_os_str().is_empty() {
            return Err(Error::config(
                "denoiser.model",
                "give the TorchScript file (torch.jit.save)",
            ));
        }
        Ok(())
    }

    /// Loads the model (the `torch` feature; without it, an error that says how to get it).
    pub fn build(&self, base_dir: &Path) -> Result<Box<dyn Denoiser>> {
        self.validate()?;
        #[cfg(feature = "torch")]
        {
            super::torch::build_torchscript(&crate::io::resolve(base_dir, &self.model), self.device)
        }
        #[cfg(not(feature = "torch"))]
        {
            let _ = base_dir;
            Err(Error::config(
                "denoiser.kind",
                "TorchScript models run on libtorch, and this build has no torch engine; run \
                 scripts/setup-torch.sh and rebuild with --features torch (docs/TORCH.md)",
            ))
        }
    }
}

/// Parameters of a DRUNet (deepinv's names and defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DrunetConfig {
    /// A `.pth` or `.safetensors` state_dict; relative paths are relative to the preset's folder.
    /// `"bundled"` (also what no `weights` means for the bundled architecture, once tessera bundles
    /// DRUNets — `crate::nn::bundled::DRUNET`, none yet); otherwise without a file (or with
    /// `"random"`, which says it is meant) the network has seeded random weights (timing only;
    /// without `"random"` it warns).
    #[serde(alias = "pretrained")]
    pub weights: Option<PathBuf>,
    /// Image channels, 1 ..= 64 (default 3).
    pub in_channels: usize,
    /// Output channels, 1 ..= 64 (default 3).
    pub out_channels: usize,
    /// Channels of the four scales, each 1 ..= 4096 (default [64, 128, 256, 512]).
    pub nc: Vec<usize>,
    /// Residual blocks per scale, 1 ..= 64 (default 4).
    pub nb: usize,
    /// 2 or 3 spatial axes. Unset: 3 with `inflate_3d`, else from the weights' rank, else 2; a 2-D
    /// network then also denoises volumes with inflated kernels.
    pub dim: Option<usize>,
    /// The weights are 2-D; inflate them into a 3-D network (2-D kernel in the central depth slice).
    pub inflate_3d: bool,
    pub engine: Engine,
    /// Where the torch engine runs it; unset: `TESSERA_TORCH_DEVICE`, else the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<TorchDevice>,
    /// Seed of the random weights used without a `weights` file.
    pub seed: u64,
    /// Run a one-channel network on RGB images, in the opponent colour space (`nn::opponent`):
    /// `in_channels` and `out_channels` are then the network's 1, and images have 3 channels. The
    /// bundled colour DRUNet is the bundled grey one run this way.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub opponent_colour: bool,
}

impl Default for DrunetConfig {
    fn default() -> Self {
        DrunetConfig {
            weights: None,
            in_channels: 3,
            out_channels: 3,
            nc: vec![64, 128, 256, 512],
            nb: 4,
            dim: None,
            inflate_3d: false,
            engine: Engine::Native,
            device: None,
            seed: 0,
            opponent_colour: false,
        }
    }
}

/// Parameters of a DnCNN (deepinv's names and defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DncnnConfig {
    /// A `.pth` or `.safetensors` state_dict (relative to the preset's folder); `"bundled"` (also
    /// what no `weights` means, for an architecture tessera bundles: depth 8, 32 features, 1 or 3
    /// channels — `crate::nn::bundled`) or `"random"` (seeded random weights, timing only). For
    /// `tessera train`, no `weights` or `"random"` means training from scratch.
    #[serde(alias = "pretrained")]
    pub weights: Option<PathBuf>,
    pub in_channels: usize,
    pub out_channels: usize,
    /// Convolutions, 2 ..= 1000 (default 20).
    pub depth: usize,
    /// Hidden channels, 1 ..= 4096 (default 64).
    pub nf: usize,
    /// Convolutions with biases (default true).
    pub bias: bool,
    /// Add the input to the output (default true, as deepinv always does).
    pub residual: bool,
    /// 2 or 3; unset: 3 with `inflate_3d`, else from the weights' rank, else 2.
    pub dim: Option<usize>,
    pub inflate_3d: bool,
    pub engine: Engine,
    pub seed: u64,
}

impl Default for DncnnConfig {
    fn default() -> Self {
        DncnnConfig {
            weights: None,
            in_channels: 3,
            out_channels: 3,
            depth: 20,
            nf: 64,
            bias: true,
            residual: true,
            dim: None,
            inflate_3d: false,
            engine: Engine::Native,
            seed: 0,
        }
    }
}

fn check_dim(dim: Option<usize>, inflate_3d: bool) -> Result<()> {
    match dim {
        Some(d) if !(2..=3).contains(&d) => Err(Error::config(
            "denoiser.dim",
            format!("must be 2 or 3, got {d}"),
        )),
        Some(2) if inflate_3d => Err(Error::config(
            "denoiser.inflate_3d",
            "inflating to 3-D needs dim = 3 (or no dim)",
        )),
        _ => Ok(()),
    }
}

/// The state dict at `path` (resolved against `base_dir` when relative).
fn load_weights(path: &Path, base_dir: &Path) -> Result<StateDict> {
    StateDict::load(&crate::io::resolve(base_dir, path))
}

/// The dimensionality to build: the config's, else 3 when inflating, else the rank of `probe`'s
/// weight in `dict` (4 → 2-D, 5 → 3-D), else 2.
fn resolve_dim(
    dim: Option<usize>,
    inflate_3d: bool,
    dict: Option<&StateDict>,
    probe: &str,
) -> usize {
    match (dim, inflate_3d, dict.and_then(|d| d.get(probe))) {
        (Some(d), _, _) => d,
        (None, true, _) => 3,
        (None, false, Some(t)) if t.ndim() == 5 => 3,
        _ => 2,
    }
}

/// The weights file a config names, if it names a file (not `"random"` or `"bundled"`).
fn weights_file(weights: &Option<PathBuf>) -> Option<&Path> {
    weights.as_deref().filter(|p| !super::bundled::is_named(p))
}

fn names(weights: &Option<PathBuf>, name: &str) -> bool {
    weights.as_deref() == Some(Path::new(name))
}

/// The bundled weights a config with `weights` runs: those `find` returns for its architecture
/// when it asks for `"bundled"` or gives no `weights`; `None` when it names a file or `"random"`.
/// Asking for `"bundled"` where `find` has none is a config error whose message is `missing()`.
fn bundled_weights_for(
    weights: &Option<PathBuf>,
    find: impl FnOnce() -> Option<&'static super::bundled::BundledWeights>,
    missing: impl FnOnce() -> String,
) -> Result<Option<&'static super::bundled::BundledWeights>> {
    let asked = names(weights, super::bundled::BUNDLED);
    if !asked && weights.is_some() {
        return Ok(None);
    }
    let found = find();
    if asked && found.is_none() {
        return Err(Error::config("denoiser.weights", missing()));
    }
    Ok(found)
}

impl DncnnConfig {
    /// The bundled architecture with `channels` image channels (grey 1, colour 3), running the
    /// bundled weights: the workbench's and the presets' default DnCNN.
    pub fn bundled(channels: usize) -> Self {
        DncnnConfig {
            in_channels: channels,
            out_channels: channels,
            depth: super::bundled::DNCNN_DEPTH,
            nf: super::bundled::DNCNN_NF,
            ..DncnnConfig::default()
        }
    }

    /// The bundled weights this config runs: asked for with `"bundled"` (an error when there are
    /// none for the architecture), or by giving no `weights` for a bundled architecture.
    pub fn bundled_weights(&self) -> Result<Option<&'static super::bundled::BundledWeights>> {
        bundled_weights_for(
            &self.weights,
            || super::bundled::dncnn_for(&self.arch(self.dim.unwrap_or(2))),
            || {
                format!(
                    "no bundled weights for this DnCNN: tessera bundles depth {}, nf {}, 1 or 3 channels, 2-D (give a weights file, or \"random\")",
                    super::bundled::DNCNN_DEPTH,
                    super::bundled::DNCNN_NF
                )
            },
        )
    }

    /// The architecture and graph `tessera train` trains: with a weights file or `"bundled"`, those
    /// weights (fine-tuning, `true`); without, or with `"random"`, seeded placeholders the trainer
    /// re-initialises (`false`).
    pub(crate) fn network_to_train(&self, base_dir: &Path) -> Result<(DncnnArch, Network, bool)> {
        self.validate()?;
        let dict = match weights_file(&self.weights) {
            Some(p) => Some(load_weights(p, base_dir)?),
            None if names(&self.weights, super::bundled::BUNDLED) => self
                .bundled_weights()?
                .map(|b| b.state_dict())
                .transpose()?,
            None => None,
        };
        let dim = resolve_dim(self.dim, self.inflate_3d, dict.as_ref(), "in_conv.weight");
        let arch = self.arch(dim);
        let loaded = dict.is_some();
        let net = match dict {
            Some(d) => Dncnn::from_state_dict(arch.clone(), d, self.inflate_3d)?,
            None => Dncnn::random_quiet(arch.clone())?,
        };
        Ok((arch, net.network().clone(), loaded))
    }
}

impl DrunetConfig {
    /// As [`DncnnConfig::network_to_train`]; the graph takes the image channels plus the
    /// noise-level channel.
    pub(crate) fn network_to_train(&self, base_dir: &Path) -> Result<(DrunetArch, Network, bool)> {
        self.validate()?;
        let dict = match weights_file(&self.weights) {
            Some(p) => Some(load_weights(p, base_dir)?),
            None if names(&self.weights, super::bundled::BUNDLED) => self
                .bundled_weights()?
                .map(|b| b.state_dict())
                .transpose()?,
            None => None,
        };
        let dim = resolve_dim(self.dim, self.inflate_3d, dict.as_ref(), "m_head.weight");
        let arch = self.arch(dim);
        let loaded = dict.is_some();
        let net = match dict {
            Some(d) => Drunet::from_state_dict(arch.clone(), d, self.inflate_3d)?
                .network()
                .clone(),
            None => super::models::drunet::build_unet(
                &arch,
                &mut super::weights::source::WeightSource::random(self.seed),
            )?,
        };
        Ok((arch, net, loaded))
    }
}

#[cfg(not(feature = "torch"))]
fn no_torch() -> Error {
    Error::config(
        "denoiser.engine",
        "this build has no torch engine; rebuild with --features torch",
    )
}

impl DrunetConfig {
    pub fn validate(&self) -> Result<()> {
        if self.nc.len() != 4 {
            return Err(Error::config(
                "denoiser.nc",
                format!(
                    "DRUNet has four scales: give 4 channel counts, got {:?}",
                    self.nc
                ),
            ));
        }
        check_dim(self.dim, self.inflate_3d)?;
        if self.engine == Engine::Native
            && let Some(d) = self.device
            && d != TorchDevice::Cpu
        {
            return Err(Error::config(
                "denoiser.device",
                format!("{d} needs engine = \"torch\"; the native engine runs on the CPU"),
            ));
        }
        if self.inflate_3d && weights_file(&self.weights).is_none() {
            return Err(Error::config(
                "denoiser.inflate_3d",
                "inflating needs 2-D `weights`",
            ));
        }
        if self.opponent_colour && (self.in_channels, self.out_channels) != (1, 1) {
            return Err(Error::config(
                "denoiser.opponent_colour",
                format!(
                    "runs a one-channel network on each opponent channel of an RGB image: \
                     in_channels and out_channels must be 1 (the network's), got {} and {}",
                    self.in_channels, self.out_channels
                ),
            ));
        }
        self.bundled_weights()?;
        super::models::drunet::check_arch(&self.arch(self.dim.unwrap_or(2)))
    }

    /// The bundled denoiser for images of `channels` channels: the bundled architecture
    /// (`crate::nn::bundled::DRUNET_NC`, `DRUNET_NB`) with one channel, on colour images (3) in
    /// the opponent colour space, running the bundled grey weights.
    pub fn bundled(channels: usize) -> Self {
        let grey = DrunetConfig {
            in_channels: 1,
            out_channels: 1,
            nc: super::bundled::DRUNET_NC.to_vec(),
            nb: super::bundled::DRUNET_NB,
            ..DrunetConfig::default()
        };
        grey.for_image_channels(channels).unwrap_or(DrunetConfig {
            in_channels: channels,
            out_channels: channels,
            ..grey
        })
    }

    /// This network on images of `channels` channels: itself for its own channel count; a
    /// one-channel network in the opponent colour space for colour images, and on grey images
    /// without it (so a preset of the bundled grey DRUNet on colour, like `quick`, also runs a
    /// grey image); `None` otherwise. It is the one place that decides it: jobs, the bundled
    /// DRUNet and `tessera bench denoisers --drunet` use it.
    pub fn for_image_channels(&self, channels: usize) -> Option<DrunetConfig> {
        if self.image_channels() == channels {
            return Some(self.clone());
        }
        let grey = self.in_channels == 1 && self.out_channels == 1;
        (grey && (channels == 1 || channels == 3)).then(|| DrunetConfig {
            opponent_colour: channels == 3,
            ..self.clone()
        })
    }

    /// The channels of the images this denoiser takes: 3 in the opponent colour space, else the
    /// network's.
    pub fn image_channels(&self) -> usize {
        if self.opponent_colour {
            3
        } else {
            self.in_channels
        }
    }

    /// The bundled weights this config runs: asked for with `"bundled"` (an error when there are
    /// none for the architecture), or by giving no `weights` for a bundled architecture.
    pub fn bundled_weights(&self) -> Result<Option<&'static super::bundled::BundledWeights>> {
        bundled_weights_for(
            &self.weights,
            || super::bundled::drunet_for(&self.arch(self.dim.unwrap_or(2))),
            || {
                let why = if super::bundled::DRUNET.is_empty() {
                    "tessera bundles no DRUNet weights yet (it bundles DnCNNs: kind = \"dncnn\", depth 8, nf 32)".to_string()
                } else {
                    format!(
                        "no bundled DRUNet of this architecture: tessera bundles nc {:?}, nb {}, one channel, 2-D (for colour images with opponent_colour = true)",
                        super::bundled::DRUNET_NC,
                        super::bundled::DRUNET_NB
                    )
                };
                format!("{why}; give a weights file, or \"random\"")
            },
        )
    }

    fn arch(&self, dim: usize) -> DrunetArch {
        let mut nc = [0; 4];
        for (d, s) in nc.iter_mut().zip(&self.nc) {
            *d = *s;
        }
        DrunetArch {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            nc,
            nb: self.nb,
            dim,
        }
    }

    /// Validates, loads the weights (relative paths against `base_dir`) and builds the network
    /// (in the opponent colour space with `opponent_colour`).
    pub fn build(&self, base_dir: &Path) -> Result<Box<dyn Denoiser>> {
        let net = self.build_network(base_dir)?;
        Ok(match self.opponent_colour {
            true => Box::new(super::opponent::OpponentColour::new(net)),
            false => net,
        })
    }

    fn build_network(&self, base_dir: &Path) -> Result<Box<dyn Denoiser>> {
        self.validate()?;
        let dict = match (weights_file(&self.weights), self.bundled_weights()?) {
            (Some(p), _) => Some(load_weights(p, base_dir)?),
            (None, Some(b)) => {
                tracing::info!("DRUNet: {}", b.describe());
                Some(b.state_dict()?)
            }
            (None, None) => {
                if names(&self.weights, super::bundled::RANDOM) {
                    tracing::info!("DRUNet: random weights, as asked (`weights = \"random\"`)");
                }
                None
            }
        };
        let dim = resolve_dim(self.dim, self.inflate_3d, dict.as_ref(), "m_head.weight");
        let arch = self.arch(dim);
        match self.engine {
            Engine::Native => {
                let net = match dict {
                    Some(d) => Drunet::from_state_dict(arch, d, self.inflate_3d)?,
                    None => Drunet::random(arch, self.seed)?,
                };
                Ok(Box::new(if self.dim.is_none() {
                    net.with_inflation_on_demand()
                } else {
                    net
                }))
            }
            #[cfg(feature = "torch")]
            Engine::Torch => super::torch::build_drunet(
                arch,
                dict,
                self.device,
                super::torch::Inflation {
                    on_demand: self.dim.is_none(),
                    now: self.inflate_3d,
                },
                self.seed,
            ),
            #[cfg(not(feature = "torch"))]
            Engine::Torch => Err(no_torch()),
        }
    }
}

impl DncnnConfig {
    fn arch(&self, dim: usize) -> DncnnArch {
        DncnnArch {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            depth: self.depth,
            nf: self.nf,
            bias: self.bias,
            residual: self.residual,
            dim,
        }
    }

    pub fn validate(&self) -> Result<()> {
        check_dim(self.dim, self.inflate_3d)?;
        if self.inflate_3d && weights_file(&self.weights).is_none() {
            return Err(Error::config(
                "denoiser.inflate_3d",
                "inflating needs 2-D `weights`",
            ));
        }
        self.bundled_weights()?;
        super::models::dncnn::check_arch(&self.arch(self.dim.unwrap_or(2)))
    }

    /// Validates, loads the weights (relative paths against `base_dir`) and builds the network.
    pub fn build(&self, base_dir: &Path) -> Result<Box<dyn Denoiser>> {
        self.validate()?;
        let dict = match (weights_file(&self.weights), self.bundled_weights()?) {
            (Some(p), _) => {
                let path = crate::io::resolve(base_dir, p);
                tracing::info!("DnCNN: weights {}", path.display());
                Some(StateDict::load(&path)?)
            }
            (None, Some(b)) => {
                tracing::info!("DnCNN: {}", b.describe());
                Some(b.state_dict()?)
            }
            (None, None) => {
                if names(&self.weights, super::bundled::RANDOM) {
                    tracing::info!("DnCNN: random weights, as asked (`weights = \"random\"`)");
                }
                None
            }
        };
        let dim = resolve_dim(self.dim, self.inflate_3d, dict.as_ref(), "in_conv.weight");
        let arch = self.arch(dim);
        match self.engine {
            Engine::Native => Ok(Box::new(match dict {
                Some(d) => Dncnn::from_state_dict(arch, d, self.inflate_3d)?,
                None => Dncnn::random(arch, self.seed)?,
            })),
            Engine::Torch => Err(Error::config(
                "denoiser.engine",
                "DnCNN runs on the native engine only",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::denoise::DenoiserConfig;

    fn parse(text: &str) -> std::result::Result<DenoiserConfig, String> {
        let c: DenoiserConfig = toml::from_str(text).map_err(|e| e.message().to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn torchscript_and_devices_parse_validate_and_round_trip() {
        let c = parse("kind = \"torchscript\"\nmodel = \"m.pt\"\ndevice = \"cuda:1\"").unwrap();
        assert_eq!(
            c,
            DenoiserConfig::Torchscript(TorchScriptConfig {
                model: "m.pt".into(),
                device: Some(TorchDevice::Cuda(1)),
            })
        );
        let again: DenoiserConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);

        let e = parse("kind = \"torchscript\"\nmodel = \"m.pt\"\ndevice = \"gpu\"").unwrap_err();
        assert!(
            e.contains("cpu, cuda or cuda:N") && e.contains("gpu"),
            "{e}"
        );
        let e = parse("kind = \"torchscript\"\nmodel = \"\"").unwrap_err();
        assert!(e.contains("denoiser.model"), "{e}");
        let e = parse("kind = \"torchscript\"").unwrap_err();
        assert!(e.contains("model"), "{e}");

        // A DRUNet's device is for the torch engine.
        let drunet = "kind = \"drunet\"\ndevice = \"cuda\"";
        let e = parse(drunet).unwrap_err();
        assert!(e.contains("denoiser.device") && e.contains("torch"), "{e}");
        let c = parse(&format!("{drunet}\nengine = \"torch\"")).unwrap();
        assert!(matches!(
            c,
            DenoiserConfig::Drunet(DrunetConfig {
                device: Some(TorchDevice::Cuda(0)),
                ..
            })
        ));
    }

    #[test]
    fn a_configured_device_wins_over_the_environment_default() {
        assert_eq!(
            TorchDevice::chosen(Some(TorchDevice::Cuda(2))).unwrap(),
            TorchDevice::Cuda(2)
        );
        assert_eq!(
            TorchDevice::parse("f", " cuda ").unwrap(),
            TorchDevice::Cuda(0)
        );
        assert_eq!(TorchDevice::Cuda(3).to_string(), "cuda:3");
    }

    /// A one-channel DRUNet runs colour images in the opponent colour space, and nothing else
    /// changes channel counts; the bundled configs are that decision's.
    #[test]
    fn a_grey_drunet_takes_colour_images_in_the_opponent_space_only() {
        let net = |c: usize| DrunetConfig {
            in_channels: c,
            out_channels: c,
            ..DrunetConfig::default()
        };
        let opponent = net(1).for_image_channels(3).unwrap();
        assert!(opponent.opponent_colour && opponent.in_channels == 1);
        assert_eq!(opponent.image_channels(), 3);
        assert_eq!(net(1).for_image_channels(1), Some(net(1)));
        assert_eq!(net(3).for_image_channels(3), Some(net(3)));
        assert_eq!(net(1).for_image_channels(2), None);
        assert_eq!(net(3).for_image_channels(1), None);
        assert_eq!(opponent.for_image_channels(3), Some(opponent.clone()));
        assert_eq!(opponent.for_image_channels(1), Some(net(1)));
        assert_eq!(opponent.for_image_channels(2), None);
        assert!(DrunetConfig::bundled(3).opponent_colour);
        assert_eq!(DrunetConfig::bundled(1).image_channels(), 1);
        assert_eq!(DrunetConfig::bundled(2).in_channels, 2);
    }
}
