//! The plain data that [`Event`](super::Event)s carry: progress reports, the survey, the patch map,
//! the ranks' transport. The protocol owns these types rather than re-exporting the compute
//! modules' own, so a field added to `metrics.json` or to an algorithm's report changes nothing on
//! the wire, and the workbench depends on the protocol only. They mirror the compute types field
//! for field, and `convert.rs` beside this file, the one place that knows both, fills them; a
//! change here changes the bytes, which `tests/protocol.rs`'s golden bytes catch.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One iteration of an imaging algorithm (from `optim::IterationReport`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    /// 1-based iteration number.
    pub iteration: usize,
    /// Planned number of iterations.
    pub iterations: usize,
    /// PSNR (dB) against the ground truth, when known.
    pub psnr_db: Option<f64>,
    /// SSIM against the ground truth, when known and requested.
    pub ssim: Option<f64>,
    /// Data-fidelity value, when requested.
    pub objective: Option<f64>,
    /// ‖xₖ − xₖ₋₁‖ / ‖xₖ‖.
    pub relative_change: f64,
    pub times: ComponentTimes,
}

/// Seconds rank 0 spent per component in one iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComponentTimes {
    /// Data-fidelity gradient (forward and adjoint operators).
    pub gradient_secs: f64,
    /// Denoiser (all tiles).
    pub denoiser_secs: f64,
    /// Everything else: updates, metrics.
    pub other_secs: f64,
    /// Time inside collectives (already part of the gradient and denoiser times).
    pub communication_secs: f64,
}

/// One full-waveform inversion epoch (from `fwi::EpochReport`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochReport {
    /// 1-based.
    pub epoch: usize,
    pub epochs: usize,
    /// `Σ ½‖F(d − d_obs)‖² / batch` over the batch.
    pub loss: f64,
    /// `‖v − v_true‖ / ‖v_true‖` after the step (with a true model).
    pub model_error: Option<f64>,
    /// Low-pass cut-off of the data this epoch (frequency continuation).
    pub cutoff_hz: Option<f64>,
    /// The batch (survey indices of its shots), in draw order.
    pub batch: Vec<usize>,
    pub ranks: Vec<RankEpoch>,
    /// Wall time of the epoch.
    pub secs: f64,
}

/// One rank's part of an FWI epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankEpoch {
    pub rank: usize,
    /// Survey indices of the shots this rank modelled.
    pub shots: Vec<usize>,
    /// Wall time of the forward and adjoint passes.
    pub forward_secs: f64,
    pub adjoint_secs: f64,
    pub communication_secs: f64,
}

/// One shot of an FWI survey: its source and receiver cells, each `[row, col]` = `[depth index,
/// x index]` of the model grid (from `physics::wave::Shot`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shot {
    pub sources: Vec<[usize; 2]>,
    pub receivers: Vec<[usize; 2]>,
}

/// A reported step of denoiser training (from `train::LossPoint`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossPoint {
    /// 0-based.
    pub step: usize,
    /// Mean squared error of the batch (before this step's update).
    pub loss: f64,
}

/// One Multi-DSN epoch (from `dsn::run::EpochReport`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DsnEpochReport {
    /// 0-based.
    pub epoch: usize,
    /// Mean weighted losses over the epoch's steps, per domain.
    pub losses: Vec<DomainLosses>,
    /// Accuracy of the task classifier on each domain's held-out images.
    pub accuracy: Vec<f64>,
    /// Mean target accuracy (domains 1…K).
    pub target_accuracy: f64,
}

/// One domain's weighted losses (from `dsn::network::DomainLosses`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainLosses {
    pub task: f64,
    pub reconstruction: f64,
    pub difference: f64,
    pub similarity: f64,
}

impl DomainLosses {
    /// The loss the network minimises for this domain: the sum of the weighted terms.
    pub fn total(&self) -> f64 {
        self.task + self.reconstruction + self.difference + self.similarity
    }
}

/// Which rank denoises which tile, in image coordinates (from `dist::patch_map::PatchMap`, which
/// plans it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchMap {
    /// Spatial shape of the image, (H, W) or (D, H, W).
    pub spatial: Vec<usize>,
    pub tiles: Vec<PatchTile>,
}

impl PatchMap {
    /// Tiles per rank (index = rank), for a legend.
    pub fn tiles_per_rank(&self) -> Vec<usize> {
        let ranks = self.tiles.iter().map(|t| t.rank + 1).max().unwrap_or(0);
        let mut counts = vec![0; ranks];
        for t in &self.tiles {
            counts[t.rank] += 1;
        }
        counts
    }
}

/// One tile: the window the denoiser sees (with overlap) and the region it owns in the output,
/// both as (start, size) per spatial axis in image coordinates (windows may extend past the edge
/// where the strategy pads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchTile {
    pub window: Vec<(i64, usize)>,
    pub region: Vec<(usize, usize)>,
    pub rank: usize,
}

/// How the server's ranks reach each other (from `dist::Transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// A group of one: no communication.
    #[default]
    Single,
    /// tessera's socket mesh.
    Sockets(SocketKind),
    /// Open MPI.
    Mpi,
    /// NCCL all-reduce on GPUs, the socket mesh for the rest.
    Nccl(SocketKind),
}

/// Which sockets a socket mesh uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketKind {
    /// Unix domain sockets (every rank on one host).
    Unix,
    /// TCP (ranks on several hosts).
    Tcp,
}

/// As `dist::Transport` writes itself (`sockets(unix)`, `nccl + sockets(tcp)`), for the top bar.
impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = |k: &SocketKind| match k {
            SocketKind::Unix => "unix",
            SocketKind::Tcp => "tcp",
        };
        match self {
            Transport::Single => f.write_str("single"),
            Transport::Sockets(k) => write!(f, "sockets({})", kind(k)),
            Transport::Mpi => f.write_str("mpi"),
            Transport::Nccl(k) => write!(f, "nccl + sockets({})", kind(k)),
        }
    }
}
