//! The device a rank computes on, as users write it (`--device`, `[distributed] device`,
//! `TESSERA_DEVICE`): `cpu`, `cuda` (GPU `LOCAL_RANK % count`: one GPU per rank on a node, ranks
//! sharing GPUs round-robin when there are fewer) or `cuda:N` (GPU `N` for every rank of the node).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A device choice; parsed in every build, so presets read the same with and without `cuda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Device {
    /// The CPU cores (the default).
    #[default]
    Cpu,
    /// An NVIDIA GPU: `None` picks GPU `LOCAL_RANK % count`, `Some(n)` GPU `n`.
    Cuda(Option<usize>),
}

impl Device {
    /// Parses `cpu`, `cuda` or `cuda:N`; `field` names the setting in errors.
    pub fn parse(field: &str, text: &str) -> Result<Device> {
        match text.trim() {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(None)),
            s => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(|n| Device::Cuda(Some(n)))
                .ok_or_else(|| {
                    Error::config(field, format!("expected cpu, cuda or cuda:N, got `{text}`"))
                }),
        }
    }

    /// The device a rank uses: `configured` (flag or preset) if given, else `TESSERA_DEVICE`, else
    /// the CPU.
    pub fn chosen(configured: Option<Device>) -> Result<Device> {
        match (configured, std::env::var("TESSERA_DEVICE")) {
            (Some(d), _) => Ok(d),
            (None, Ok(text)) => Device::parse("TESSERA_DEVICE", &text),
            (None, Err(_)) => Ok(Device::Cpu),
        }
    }

    /// The GPU ordinal of local rank `local_rank` on a node with `gpus` GPUs; `None` for the CPU.
    /// Errors when there is no GPU or `cuda:N` names one that does not exist.
    pub fn ordinal(self, local_rank: usize, gpus: usize) -> Result<Option<usize>> {
        match self {
            Device::Cpu => Ok(None),
            Device::Cuda(_) if gpus == 0 => Err(Error::Device {
                device: self.to_string(),
                reason: "the CUDA driver sees no GPU on this machine".into(),
            }),
            Device::Cuda(None) => Ok(Some(local_rank % gpus)),
            Device::Cuda(Some(n)) if n < gpus => Ok(Some(n)),
            Device::Cuda(Some(n)) => Err(Error::Device {
                device: self.to_string(),
                reason: format!(
                    "GPU {n} does not exist: this machine has {gpus} (cuda:0 … cuda:{})",
                    gpus - 1
                ),
            }),
        }
    }

    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl TryFrom<String> for Device {
    type Error = String;

    fn try_from(text: String) -> std::result::Result<Self, String> {
        Device::parse("device", &text).map_err(|e| e.to_string())
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(None) => write!(f, "cuda"),
            Device::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_users_write() {
        assert_eq!(Device::parse("d", "cpu").unwrap(), Device::Cpu);
        assert_eq!(Device::parse("d", " cuda ").unwrap(), Device::Cuda(None));
        assert_eq!(Device::parse("d", "cuda:3").unwrap(), Device::Cuda(Some(3)));
        for bad in ["", "cuda:", "cuda:x", "tpu", "cuda:-1"] {
            let e = Device::parse("distributed.device", bad)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("distributed.device") && e.contains("cuda:N"),
                "{e}"
            );
        }
        for d in [Device::Cpu, Device::Cuda(None), Device::Cuda(Some(2))] {
            assert_eq!(Device::parse("d", &d.to_string()).unwrap(), d);
        }
    }

    #[test]
    fn ranks_share_gpus_round_robin() {
        let cuda = Device::Cuda(None);
        let ordinals: Vec<_> = (0..5).map(|r| cuda.ordinal(r, 2).unwrap()).collect();
        assert_eq!(ordinals, [Some(0), Some(1), Some(0), Some(1), Some(0)]);
        assert_eq!(Device::Cuda(Some(1)).ordinal(3, 2).unwrap(), Some(1));
        assert_eq!(Device::Cpu.ordinal(3, 0).unwrap(), None);
        let e = Device::Cuda(Some(2)).ordinal(0, 2).unwrap_err().to_string();
        assert!(
            e.contains("GPU 2 does not exist") && e.contains("cuda:1"),
            "{e}"
        );
        let e = cuda.ordinal(0, 0).unwrap_err().to_string();
        assert!(e.contains("no GPU"), "{e}");
    }
}
