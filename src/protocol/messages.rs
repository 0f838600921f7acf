//! Protocol messages (version [`PROTOCOL_VERSION`]). Adding a variant or a field is a version bump:
//! old peers are told the versions differ at the handshake instead of failing mid-stream. The data
//! the events carry are the protocol's own types ([`super::reports`]), not the compute modules'.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::reports::{
    DsnEpochReport, EpochReport, IterationReport, LossPoint, PatchMap, Shot, Transport,
};

/// Bumped on every incompatible change of [`Request`] or [`Event`], i.e. whenever the golden bytes
/// of `tests/protocol.rs` change.
pub const PROTOCOL_VERSION: u32 = 7;

/// Largest frame either side accepts (inline data included); a larger length prefix is an error
/// before anything is allocated.
pub const MAX_FRAME_BYTES: usize = 256 << 20;

/// Most bytes of [`InlineFile`]s one submission carries: a frame, less room for the preset and the
/// rest of the message.
pub const MAX_FILES_BYTES: usize = MAX_FRAME_BYTES - (1 << 20);

/// Identifies one submitted job on a server (1, 2, …; unique for the server's lifetime).
pub type JobId = u64;

/// Most bytes of a file one [`Event::File`] carries; a client asks again from the next offset.
pub const FILE_CHUNK_BYTES: usize = 4 << 20;

/// Client → server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First message on every connection.
    Hello {
        protocol: u32,
        /// Free text, e.g. `tessera-gui 0.1.0`.
        client: String,
        /// Required when the server was started with a token file; compared in constant time.
        token: Option<String>,
    },
    /// Run a preset (the same TOML the CLI runs), optionally with arrays sent along.
    Submit {
        preset_toml: String,
        /// Arrays the preset refers to by name instead of by file (e.g. the image the user opened).
        inline: Vec<InlineArray>,
        /// Files sent along whole (an FWI preset's models and data, for a server that cannot read
        /// this machine's files): the preset names each by its `name`, a bare file name that the
        /// server resolves in a folder of the job's own.
        files: Vec<InlineFile>,
        /// Largest preview the view needs (pixels per side); previews are downsampled to fit.
        preview_max_side: u32,
    },
    /// Continue a stopped denoiser training run from its checkpoint: `run_dir` is its folder on
    /// the server (a `Cancelled` event's `run_dir`), `preset_toml` the preset that made it (fields
    /// that change no number, such as `train.log_every`, may differ). The job runs in a new folder
    /// that starts with a copy of the checkpoint; the stopped run's folder is left as it was.
    Resume {
        preset_toml: String,
        run_dir: PathBuf,
        preview_max_side: u32,
    },
    /// Stop a running job at the end of its current iteration.
    Cancel { job: JobId },
    /// Ask for [`Event::Status`].
    Status,
    /// Re-attach after a dropped connection: the server replays the job's `Started`, its iteration
    /// history and its latest preview, then keeps streaming. `None` means the current job.
    Attach { job: Option<JobId> },
    /// Up to [`FILE_CHUNK_BYTES`] of one output file of a completed job (a name from its
    /// `Finished`/`Cancelled` outputs), from `offset`: answered by [`Event::File`] or
    /// [`Event::FetchFailed`].
    Fetch {
        job: JobId,
        file: String,
        offset: u64,
    },
}

/// An array sent inside a [`Request::Submit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InlineArray {
    /// The name the preset uses for it, e.g. `image`.
    pub name: String,
    /// (B, C, H, W) or (B, C, D, H, W).
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A file sent inside a [`Request::Submit`], byte for byte (its format is its extension's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InlineFile {
    /// A bare file name (no folders), unique within the submission.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Server → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// Handshake accepted.
    Welcome {
        protocol: u32,
        /// e.g. `tessera 0.1.0`.
        server: String,
        world_size: usize,
        /// One entry per rank (shown as `rank 1: cpu (2 threads) on host node12`).
        devices: Vec<RankDevice>,
        /// Transport between ranks: `sockets`, `mpi`, `nccl`.
        backend: Transport,
    },
    /// Handshake refused (version mismatch, bad token); the server closes the connection.
    Refused {
        reason: String,
    },
    /// A submitted job was queued.
    Accepted {
        job: JobId,
    },
    /// The job is set up and its algorithm starts.
    Started {
        job: JobId,
        name: String,
        world_size: usize,
        devices: Vec<RankDevice>,
        image_shape: Vec<usize>,
        /// Operator names and the rank that owns each.
        operators: Vec<OperatorInfo>,
        iterations: usize,
        patch_map: Option<PatchMap>,
    },
    /// A full-waveform inversion job is set up (it streams [`Event::FwiEpoch`] instead of
    /// `Iteration`; its previews are the inverted model (`Reconstruction`), the true model
    /// (`GroundTruth`) and the gradient (`Gradient`)).
    FwiStarted {
        job: JobId,
        name: String,
        world_size: usize,
        devices: Vec<RankDevice>,
        /// `[nz, nx]` cells.
        model_shape: [usize; 2],
        /// `[dz, dx]`, metres.
        spacing_m: [f64; 2],
        /// The survey, for drawing the acquisition over the model.
        shots: Vec<Shot>,
        epochs: usize,
        /// Internal time steps per data sample (CFL).
        step_ratio: usize,
    },
    /// One FWI epoch finished: loss, model error, the batch and which rank modelled which shot,
    /// per-rank forward/adjoint/communication times.
    FwiEpoch {
        job: JobId,
        report: EpochReport,
    },
    /// A training job is set up (a denoiser trained under spatial decomposition, or a Multi-DSN):
    /// it streams [`Event::TrainStep`] or [`Event::DsnEpoch`], and its terminal event's summary is
    /// the run's `train.json`.
    TrainStarted {
        job: JobId,
        name: String,
        world_size: usize,
        devices: Vec<RankDevice>,
        plan: TrainPlan,
    },
    /// A reported step of denoiser training (every `log_every` steps and the last).
    TrainStep {
        job: JobId,
        point: LossPoint,
    },
    /// One Multi-DSN epoch: per-domain losses and held-out accuracies.
    DsnEpoch {
        job: JobId,
        report: DsnEpochReport,
    },
    /// One iteration finished.
    Iteration {
        job: JobId,
        report: IterationReport,
        /// This iteration's times on every rank.
        ranks: Vec<RankIteration>,
    },
    /// A downsampled image for the live view.
    Preview {
        job: JobId,
        /// The iteration it shows (0 for images known before the first iteration).
        iteration: usize,
        what: PreviewKind,
        image: PreviewImage,
    },
    Log {
        level: LogLevel,
        /// The rank that logged it, when known.
        rank: Option<usize>,
        message: String,
    },
    /// The job ran all its iterations. One of `Finished`, `Cancelled`, `Failed` ends every job.
    Finished {
        job: JobId,
        /// The job's own folder on the server's machine (`<out>/<YYYYMMDD-HHMMSS>-<preset>-<n>`).
        run_dir: PathBuf,
        /// The files in it (names relative to `run_dir`; `metrics.json` last).
        outputs: Vec<PathBuf>,
        /// The job's `metrics.json`.
        summary_json: String,
    },
    /// The job stopped on a `Cancel`: after `iterations` iterations (its folder then holds the
    /// reconstruction it had reached), or before it started (`run_dir` `None`).
    Cancelled {
        job: JobId,
        iterations: usize,
        run_dir: Option<PathBuf>,
        outputs: Vec<PathBuf>,
        summary_json: Option<String>,
    },
    Failed {
        job: Option<JobId>,
        error: String,
    },
    /// A part of an output file ([`Request::Fetch`]).
    File {
        job: JobId,
        file: String,
        offset: u64,
        /// The file's size.
        total: u64,
        data: Vec<u8>,
    },
    FetchFailed {
        job: JobId,
        file: String,
        error: String,
    },
    Status {
        world_size: usize,
        running: Option<JobId>,
        /// Jobs finished, failed or cancelled so far, oldest first.
        done: Vec<JobId>,
    },
    /// An elastic job's group was formed again (docs/ELASTIC.md): ranks were lost (and
    /// replacements may have joined), and the job goes on after `resumed_from` on the new group,
    /// whose [`Event::Iteration`]s number ranks anew.
    Regrouped {
        job: JobId,
        /// 1 after the job's group first re-formed.
        generation: u32,
        /// The ranks lost, numbered as in the group that lost them.
        lost_ranks: Vec<usize>,
        /// For each rank of the new group, its rank in the group before (`None`: it joined
        /// without state, a replacement).
        previous_ranks: Vec<Option<usize>>,
        /// The iteration the new group resumes after (work after it is done again).
        resumed_from: usize,
        /// The operators' new owners (ranks of the new group).
        operators: Vec<OperatorInfo>,
        /// The tiles' new owners, when the job is tiled.
        patch_map: Option<PatchMap>,
    },
}

/// What a training job will do, as its preset says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TrainPlan {
    /// A denoiser trained on crops of an image, decomposed over the ranks.
    Denoiser {
        /// `dncnn` or `drunet`.
        network: String,
        steps: usize,
        /// Noise levels the training pairs are drawn with.
        sigmas: Vec<f32>,
    },
    /// A Multi-DSN: domain 0 is the labelled source, the rest are targets.
    Dsn {
        domains: Vec<String>,
        epochs: usize,
        steps_per_epoch: usize,
        /// `mmd` or `dann` (or `source only`).
        similarity: String,
    },
}

impl TrainPlan {
    /// Steps (denoiser) or epochs (Multi-DSN) planned: what progress counts towards.
    pub fn length(&self) -> usize {
        match self {
            TrainPlan::Denoiser { steps, .. } => *steps,
            TrainPlan::Dsn { epochs, .. } => *epochs,
        }
    }
}

/// Where one rank computes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankDevice {
    pub rank: usize,
    pub host: String,
    /// Threads of its CPU pool.
    pub cpu_threads: usize,
}

impl std::fmt::Display for RankDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {}: cpu ({} threads) on host {}",
            self.rank, self.cpu_threads, self.host
        )
    }
}

/// An operator of the physics stack and its owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorInfo {
    pub name: String,
    pub rank: usize,
}

/// Per-rank times of one iteration, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankIteration {
    pub rank: usize,
    pub gradient_secs: f64,
    pub denoiser_secs: f64,
    pub communication_secs: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PreviewKind {
    Reconstruction,
    GroundTruth,
    /// Measurement of operator `i` (when it is an image, e.g. a blur; a sinogram otherwise).
    Measurement(usize),
    /// The summed, post-processed velocity gradient of an FWI epoch.
    Gradient,
}

/// An image for display: `channels` (1 or 3) interleaved f32 samples, row-major, not normalised
/// (the view applies contrast). A volume is previewed as its central slice along depth
/// (`slice` says which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewImage {
    pub width: u32,
    pub height: u32,
    pub channels: u8,
    pub slice: Option<u32>,
    pub pixels: Vec<f32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}
