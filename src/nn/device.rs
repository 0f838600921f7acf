//! Where a libtorch network runs (`[denoiser] device`): parsed in every build, so presets read the
//! same with and without the `torch` feature; `super::torch` maps it to libtorch's devices.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where libtorch runs a network: `cpu`, `cuda` (GPU 0) or `cuda:N` in presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TorchDevice {
    /// The CPU (libtorch's own thread pool).
    #[default]
    Cpu,
    /// CUDA GPU number `n`.
    Cuda(usize),
}

impl TorchDevice {
    /// Parses `cpu`, `cuda` (GPU 0) or `cuda:N`; `field` names the setting in errors.
    pub fn parse(field: &str, text: &str) -> Result<Self> {
        match text.trim() {
            "cpu" => Ok(TorchDevice::Cpu),
            "cuda" => Ok(TorchDevice::Cuda(0)),
            s => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(TorchDevice::Cuda)
                .ok_or_else(|| {
                    Error::config(field, format!("expected cpu, cuda or cuda:N, got `{text}`"))
                }),
        }
    }

    /// The device a network runs on: `configured` if given, else `TESSERA_TORCH_DEVICE`, else the CPU.
    pub fn chosen(configured: Option<TorchDevice>) -> Result<Self> {
        match (configured, std::env::var("TESSERA_TORCH_DEVICE")) {
            (Some(d), _) => Ok(d),
            (None, Ok(text)) => TorchDevice::parse("TESSERA_TORCH_DEVICE", &text),
            (None, Err(_)) => Ok(TorchDevice::Cpu),
        }
    }
}

impl TryFrom<String> for TorchDevice {
    type Error = String;

    fn try_from(text: String) -> std::result::Result<Self, String> {
        TorchDevice::parse("denoiser.device", &text).map_err(|e| e.to_string())
    }
}

impl From<TorchDevice> for String {
    fn from(d: TorchDevice) -> String {
        d.to_string()
    }
}

impl fmt::Display for TorchDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TorchDevice::Cpu => write!(f, "cpu"),
            TorchDevice::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
