//! The command line as clap reads it: the subcommands, their arguments and the bounds of every
//! count and duration a user gives (`number_in`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use tessera::dist;

/// Longest `--rendezvous-timeout` and `--op-timeout`: a week.
const MAX_TIMEOUT_SECS: usize = 7 * 24 * 3600;

/// A number in `LO ..= HI`, for counts and durations given on the command line.
fn number_in<const LO: usize, const HI: usize>(text: &str) -> std::result::Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number"))?;
    if !(LO..=HI).contains(&n) {
        return Err(format!("{n} is not in {LO} ..= {HI}"));
    }
    Ok(n)
}

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Large-scale image reconstruction: physics, denoisers, tiling, PnP"
)]
pub(super) struct Cli {
    /// Log filter (error, warn, info, debug, trace), overridden by RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    pub(super) log: String,
    /// Without a subcommand the workbench window opens.
    #[command(subcommand)]
    pub(super) command: Option<Command>,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Run a preset (a bundled name such as `quick`, or a TOML file).
    Run {
        /// Optional with --resume (the checkpoint holds the preset; if given, it must match).
        #[arg(required_unless_present = "resume")]
        preset: Option<String>,
        /// Override a preset value, e.g. `--set algorithm.iterations=10` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Output folder for this run: it must not hold files (see --replace). Default: the
        /// preset's output.dir, else a new folder out/NAME/YYYYMMDD-HHMMSS-NAME-N per run.
        #[arg(long)]
        out: Option<PathBuf>,
        /// With --out (or output.dir): replace a previous run in that folder, once this one is
        /// complete (a failed run leaves the previous one in place).
        #[arg(long)]
        replace: bool,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// With --ranks N: survive lost ranks; the others re-form the group and go on from the
        /// last iteration they all completed, with the same result (also `[distributed] elastic`;
        /// `distributed.min_ranks` is the fewest ranks to go on with). Under mpirun, srun or
        /// torchrun: keep a checkpoint instead (a lost rank stops the run, which then continues
        /// with --resume). See docs/ELASTIC.md.
        #[arg(long, conflicts_with = "attach")]
        elastic: bool,
        /// With --ranks N --elastic: start a fresh rank process for each one lost, which joins
        /// the next generation with the state the group's rank 0 hands it, so the run finishes on
        /// N ranks with the same result (at most N replacements per run, then the group shrinks).
        /// Imaging and inversion presets. See docs/ELASTIC.md.
        #[arg(long, conflicts_with = "attach")]
        respawn: bool,
        /// Where every rank computes: cpu, cuda (GPU LOCAL_RANK % count) or cuda:N (also
        /// `[distributed] device`, else TESSERA_DEVICE). A job whose every part is on the GPU runs
        /// there; one with parts not on the GPU yet is refused with their names; see docs/GPU.md.
        #[arg(long, value_name = "DEVICE", conflicts_with = "attach")]
        device: Option<String>,
        /// Continue the run whose checkpoint is in DIR (an elastic run that stopped below
        /// `distributed.min_ranks`, or crashed); the outputs go where that run's would have, with
        /// the same bytes. Add --ranks N --elastic to run it as an elastic group again.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["attach", "out", "replace"])]
        resume: Option<PathBuf>,
        /// Where an elastic run's ranks keep its checkpoint (set by the launcher).
        #[arg(long, value_name = "DIR", hide = true, conflicts_with = "resume")]
        checkpoint_dir: Option<PathBuf>,
        /// Submit the preset to a running `tessera serve` at HOST:PORT or unix:PATH instead of
        /// running it here; progress streams like a local run, the outputs stay on the server.
        #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["out", "replace"])]
        attach: Option<String>,
        #[command(flatten)]
        attached: AttachArgs,
        #[command(flatten)]
        group: GroupArgs,
    },
    /// Keep a process group up and run jobs sent by the workbench (or any protocol client).
    ///
    /// Rank 0 listens on a Unix socket (--socket) or TCP (--listen, loopback by default; another
    /// interface needs --token-file). Under torchrun, srun or mpirun each rank joins from its
    /// environment; --ranks N starts N local ranks.
    Serve {
        /// Unix socket path for the control connection (local mode).
        #[arg(long, conflicts_with = "listen")]
        socket: Option<PathBuf>,
        /// HOST:PORT for the control connection (default 127.0.0.1:7341; port 0 picks one).
        #[arg(long)]
        listen: Option<String>,
        /// File holding the token TCP clients must present (default
        /// ~/.config/tessera/serve-token); created with a random token if missing. It must be
        /// readable by its owner only (chmod 600).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Folder for job outputs: each job writes into a new DIR/YYYYMMDD-HHMMSS-PRESET-N.
        #[arg(long, default_value = "out/serve")]
        out: PathBuf,
        /// Where every job computes: cpu, cuda (GPU LOCAL_RANK % count) or cuda:N, over a
        /// submitted preset's `[distributed] device` (default: the preset's, else
        /// TESSERA_DEVICE). A job with parts not on the GPU yet is refused with their names.
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
        /// With --ranks N: imaging jobs survive a lost rank other than rank 0 (rank 0 holds the
        /// control socket: its loss stops the backend); the others re-form the group, finish the
        /// job with the same result and serve the next jobs. Inversion and training jobs are
        /// refused by name. See docs/ELASTIC.md.
        #[arg(long)]
        elastic: bool,
        /// With --ranks N --elastic: start a fresh rank process for each one lost, which joins
        /// the job in progress with the state rank 0 hands it, so the job finishes and the next
        /// jobs run on N ranks again (at most N replacements in the backend's life, then it
        /// shrinks).
        #[arg(long)]
        respawn: bool,
        #[command(flatten)]
        group: GroupArgs,
    },
    /// List and validate the bundled presets (and any preset files given).
    Presets { files: Vec<PathBuf> },
    /// Apply one operator (or its adjoint) to an .npy array.
    Apply {
        /// TOML file describing the operator (`kind = "blur"`, …), optionally with a [noise] table.
        #[arg(long)]
        physics: PathBuf,
        /// Apply the adjoint Aᵀ instead of A.
        #[arg(long)]
        adjoint: bool,
        /// Shape of A's input, e.g. 1,1,64,64 (needed for the adjoint when it differs from the output's).
        #[arg(long, value_delimiter = ',')]
        input_shape: Option<Vec<usize>>,
        /// Add the file's noise (seeded) to A(x).
        #[arg(long)]
        noisy: bool,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        input: PathBuf,
        output: PathBuf,
    },
    /// Benchmarks of the hot paths, each against a baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Add a rank to a running elastic run (`tessera run PRESET --ranks N --elastic` prints
    /// ADDR): it joins at the run's next iteration (an inversion's: epoch) boundary as rank N of
    /// N+1, receives the run's state from rank 0 and takes a share of the work until the run
    /// ends. It runs the run's own command line in the launcher's working folder, so it must see
    /// the same preset and input files there (same host: elastic runs use local sockets).
    Join {
        /// The launcher's store address, IP:PORT.
        addr: String,
        /// Seconds to reach ADDR and to be taken in by the launcher.
        #[arg(long, default_value_t = 30, value_parser = number_in::<1, MAX_TIMEOUT_SECS>)]
        timeout: usize,
    },
    /// A TCP relay holding every byte for --delay in each direction: the link latency of
    /// scripts/netns-hosts.sh --delay where the kernel has no sch_netem (docs/DISTRIBUTED.md).
    #[command(hide = true)]
    Relay {
        /// One-way delay, in tc's units: 1ms, 0.1ms, 100us, 0.
        #[arg(long)]
        delay: String,
        /// Where to listen: IP:PORT or IP:FIRST-LAST (repeatable).
        #[arg(long, required = true)]
        listen: Vec<String>,
        /// Relay every connection to this address.
        #[arg(
            long,
            value_name = "IP:PORT",
            required_unless_present = "to_net",
            conflicts_with = "to_net"
        )]
        to: Option<std::net::SocketAddr>,
        /// Relay each connection to the address it dialled moved into this IPv4 network (host
        /// bits and port kept), e.g. 10.213.1.0/24.
        #[arg(long, value_name = "A.B.C.D/N")]
        to_net: Option<String>,
        /// Create this file once every address is listening.
        #[arg(long, value_name = "FILE")]
        ready_file: Option<PathBuf>,
    },
    /// Train a native DnCNN/DRUNet denoiser (a training preset: bundled `train-dncnn`, or a TOML
    /// file; each batch is split over the ranks by exact spatial decomposition), or a Multi-DSN
    /// classifier (a `kind = "dsn"` preset: bundled `dsn_shapes`, `dsn_shapes7`; domains on ranks).
    Train {
        preset: String,
        /// Override a preset value, e.g. `--set train.steps=50` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Output folder (default: out/NAME): weights, denoiser.toml, train.json.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Stop once this many steps (from the start of training) are done, writing a checkpoint
        /// that `--resume` continues from bit for bit.
        #[arg(long, value_name = "STEPS")]
        stop_after: Option<usize>,
        /// Continue the run in RUN_DIR from its checkpoint (same preset and `--set` values);
        /// the outputs go to RUN_DIR. With --attach, RUN_DIR is a stopped run's folder on the
        /// server, and the run goes on in a new folder there (RUN_DIR is left as it was).
        #[arg(long, value_name = "RUN_DIR", conflicts_with = "out")]
        resume: Option<PathBuf>,
        /// No loss reports.
        #[arg(long, short)]
        quiet: bool,
        /// Train on a running `tessera serve` at HOST:PORT or unix:PATH instead of here; the
        /// loss streams like a local run, the outputs stay on the server (its files — a training
        /// image, starting weights, domain folders — are read where the server runs).
        #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["out", "stop_after"])]
        attach: Option<String>,
        #[command(flatten)]
        attached: AttachArgs,
        /// Where training computes: cpu, cuda or cuda:N (default TESSERA_DEVICE, else the CPU).
        /// Training is not on the GPU yet: a GPU is refused naming what is missing
        /// (docs/GPU.md).
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
        #[command(flatten)]
        group: GroupArgs,
    },
    /// Write the report of one finished run: report.html and its PNG figures (time per rank and
    /// phase, per iteration, PSNR, peak memory, the patch map with measured per-tile cost).
    Report {
        /// The run's folder (it holds metrics.json).
        run_dir: PathBuf,
        /// Where to write the report (default: the run folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check every GPU operation against its CPU twin (seeded, awkward sizes; forward, adjoint and
    /// dot tests): a table of relative errors, a non-zero exit above 1e-4 (docs/GPU.md).
    Selftest {
        /// The GPU: cuda (GPU 0 for this single process) or cuda:N.
        #[arg(long, default_value = "cuda")]
        device: String,
        /// Only the small cases (seconds instead of a minute).
        #[arg(long)]
        quick: bool,
        /// Also write the report as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Denoise an .npy array (or image) with a configured denoiser.
    Denoise {
        /// TOML file describing the denoiser (`kind = "wavelet"`, …), optionally with a [tiling] table.
        #[arg(long)]
        denoiser: PathBuf,
        /// Noise level / strength handed to the denoiser.
        #[arg(long)]
        sigma: f32,
        input: PathBuf,
        output: PathBuf,
    },
}

#[derive(Subcommand)]
pub(super) enum BenchWhat {
    /// The 8-operator circular Gaussian blur stack (A, Aᵀ, L2 gradient): auto (FFT) vs direct.
    Blur {
        #[arg(long, default_value_t = 1024, value_parser = number_in::<8, 16384>)]
        width: usize,
        #[arg(long, default_value_t = 683, value_parser = number_in::<8, 16384>)]
        height: usize,
        #[arg(long, default_value_t = 3, value_parser = number_in::<1, 1000>)]
        repeats: usize,
    },
    /// 2-D parallel-beam tomography A, Aᵀ and FBP.
    Tomography {
        #[arg(long, default_value_t = 512, value_parser = number_in::<8, 8192>)]
        size: usize,
        #[arg(long, default_value_t = 180, value_parser = number_in::<1, 10000>)]
        angles: usize,
        #[arg(long, default_value_t = 3, value_parser = number_in::<1, 1000>)]
        repeats: usize,
    },
    /// Scaling study of a preset: runs it at each rank count (× image size × threads per rank) as
    /// real rank processes, then writes per-rank/per-iteration and summary CSV, PNG figures and one
    /// self-contained HTML report into --out.
    Scaling {
        /// Bundled preset name or TOML file.
        preset: String,
        /// Rank counts to run, comma-separated, each once (1 ..= 256).
        #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = number_in::<1, 256>)]
        ranks: Vec<usize>,
        /// Longest image sides to run, comma-separated (default: the preset's size); the sample
        /// and the blur widths are scaled.
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Threads per rank to run, comma-separated (default: cores / ranks).
        #[arg(long, value_delimiter = ',')]
        threads_per_rank: Vec<usize>,
        /// Override preset values (repeatable), e.g. --set algorithm.iterations=5.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Output folder (default: out/scaling-<preset name>); runs go to its runs/ folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The link the model assumes past this machine, `LATENCY_US,GBYTES_PER_S` (e.g. from
        /// `tessera bench all-reduce` across scripts/netns-hosts.sh); default: the link fitted
        /// from this study's own multi-rank runs.
        #[arg(long, value_name = "LATENCY_US,GB_PER_S", value_delimiter = ',')]
        link: Vec<f64>,
    },
    /// PSNR of the bundled denoisers against TV and wavelets (best of a few strengths) and BM3D on
    /// held-out images at a few noise levels: the training presets' held-out generated images (grey
    /// and colour) and the given photographs (colour ones also as grey); the table of
    /// assets/weights/README.md. BM3D runs scripts/bench_bm3d.py in the benchmark environment
    /// ($TESSERA_BENCH_VENV, default ~/.cache/tessera/deepinv-venv) on the same noisy inputs; without
    /// it the column is left out and a note says why.
    Denoisers {
        /// Real photographs (e.g. scripts/fetch_photos.py's out/photos/*.png); default: the crops
        /// in tests/fixtures/photos.
        photos: Vec<PathBuf>,
        /// Noise levels (image range 0..1), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0.02,0.05,0.1,0.2")]
        sigma: Vec<f32>,
        /// Also write the Markdown table to this file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// DnCNN or σ-conditional DRUNet weight files (deepinv's key names, e.g. what `tessera
        /// train` wrote; the kind and architecture are read from the keys) to score beside the
        /// bundled networks, on the images of their channel count; comma-separated.
        #[arg(
            long,
            visible_aliases = ["dncnn", "drunet"],
            value_delimiter = ',',
            value_name = "FILE"
        )]
        weights: Vec<PathBuf>,
        /// Leave BM3D out (it takes minutes on full-size photographs).
        #[arg(long, conflicts_with = "bm3d_dir")]
        no_bm3d: bool,
        /// Where the noisy inputs for BM3D and its outputs are written (kept); default: a folder
        /// under the system's temporary folder.
        #[arg(long, value_name = "DIR")]
        bm3d_dir: Option<PathBuf>,
    },
    /// 2-D acoustic wave propagation (forward, forward+adjoint, memory per gradient strategy) on
    /// a Marmousi-sized grid, with the machine's triad memory bandwidth; deepwave's side is
    /// scripts/bench_deepwave.py, which runs this interleaved with deepwave.
    Wave {
        #[arg(long, default_value_t = 250)]
        nz: usize,
        #[arg(long, default_value_t = 600)]
        nx: usize,
        #[arg(long, default_value_t = 2)]
        shots: usize,
        #[arg(long, default_value_t = 500)]
        nt: usize,
        #[arg(long, default_value_t = 4)]
        accuracy: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Forward only.
        #[arg(long)]
        no_gradient: bool,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Memory study of exact spatial decomposition: peak memory per rank of CNN2D, CNN3D, FCN2D and
    /// DRUNet (forward and one training step) against image size on 1, 2, 3 ranks, each rank
    /// holding only its block; compared with one rank's divided by N, and the largest image that
    /// fits a per-rank budget. Each configuration is its own process group, one after the other.
    SpatialMemory {
        /// Models, comma-separated: cnn2d, cnn3d, fcn2d, drunet.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "cnn2d,cnn3d,fcn2d,drunet"
        )]
        models: Vec<String>,
        /// Sides of the square image (cube for cnn3d), comma-separated; default per model.
        #[arg(long, value_delimiter = ',', value_parser = number_in::<8, 16384>)]
        sizes: Vec<usize>,
        /// Rank counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2,3", value_parser = number_in::<1, 64>)]
        ranks: Vec<usize>,
        /// Forward passes only (default: forward and one training step).
        #[arg(long, conflicts_with = "train_only")]
        forward_only: bool,
        /// Training steps only.
        #[arg(long)]
        train_only: bool,
        /// Per-rank budget for the largest-image estimate, in MiB.
        #[arg(long, default_value_t = 1024, value_parser = number_in::<1, 1_048_576>)]
        budget_mib: usize,
        /// Also write the table as CSV here.
        #[arg(long)]
        csv: Option<PathBuf>,
    },
    /// One configuration of `bench spatial-memory` on this process group (its child processes).
    #[command(hide = true)]
    SpatialMemoryRank {
        #[arg(long)]
        model: String,
        #[arg(long, value_parser = number_in::<8, 16384>)]
        size: usize,
        #[arg(long)]
        train: bool,
        #[command(flatten)]
        group: GroupArgs,
    },
    /// All-reduce over local ranks vs a raw Unix-socket copy.
    Collectives {
        #[arg(long, default_value_t = 64, value_parser = number_in::<1, 4096>)]
        mib: usize,
        #[arg(long, default_value_t = 2, value_parser = number_in::<2, 64>)]
        ranks: usize,
        #[arg(long, default_value_t = 5, value_parser = number_in::<1, 1000>)]
        repeats: usize,
    },
    /// All-reduce times in a group started by a launcher (torchrun-style environment, e.g.
    /// scripts/netns-hosts.sh): one line per size on rank 0, for fitting link latency/bandwidth.
    AllReduce {
        /// Buffer sizes in KiB.
        #[arg(long, value_delimiter = ',', default_value = "4,64,1024,8192", value_parser = number_in::<1, 4_194_304>)]
        kib: Vec<usize>,
        #[arg(long, default_value_t = 5, value_parser = number_in::<1, 1000>)]
        repeats: usize,
        /// Print JSON (one object: ranks, sizes and times).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        group: GroupArgs,
    },
}

/// How a preset submitted with `--attach` reaches the server and what comes back from it.
#[derive(clap::Args, Debug, Default)]
pub(super) struct AttachArgs {
    /// With --attach over TCP: the server's token file (default ~/.config/tessera/serve-token).
    #[arg(long, requires = "attach")]
    pub(super) token_file: Option<PathBuf>,
    /// With --attach: copy the run's outputs from the server into this (new) folder.
    #[arg(long, value_name = "DIR", requires = "attach")]
    pub(super) fetch: Option<PathBuf>,
}

/// Where this process sits in a process group. Under torchrun, srun or mpirun the environment says
/// it; `--ranks N` starts N local ranks instead.
#[derive(clap::Args, Debug, Default, Clone)]
pub(super) struct GroupArgs {
    /// Start N rank processes of this binary on this machine, wired over local sockets (1 ..= 256).
    #[arg(long, value_name = "N", value_parser = number_in::<1, 256>)]
    pub(super) ranks: Option<usize>,
    /// This process's rank (with --world-size; overrides the environment).
    #[arg(long)]
    pub(super) rank: Option<usize>,
    /// Number of ranks (with --rank).
    #[arg(long)]
    pub(super) world_size: Option<usize>,
    /// Host of rank 0's rendezvous store (default: MASTER_ADDR, else 127.0.0.1).
    #[arg(long)]
    pub(super) master_addr: Option<String>,
    /// Port of rank 0's rendezvous store (default: MASTER_PORT, else 29500).
    #[arg(long)]
    pub(super) master_port: Option<u16>,
    /// Transport between ranks: sockets (default) or mpi (needs the `mpi` build; launch with mpirun/srun).
    #[arg(long, default_value = "sockets")]
    pub(super) backend: dist::Backend,
    /// Seconds to wait for every rank to arrive (1 ..= 604800).
    #[arg(long, default_value_t = 60, value_parser = number_in::<1, MAX_TIMEOUT_SECS>)]
    pub(super) rendezvous_timeout: usize,
    /// Seconds one collective may wait for a peer before declaring it hung (0 = forever, at most
    /// 604800). A stopped or dead rank is found sooner by heartbeats (--liveness-timeout); this
    /// bounds a rank that is alive but stuck.
    #[arg(long, default_value_t = 600, value_name = "SECS", value_parser = number_in::<0, MAX_TIMEOUT_SECS>)]
    pub(super) op_timeout: usize,
    /// Seconds without a heartbeat after which a rank is declared lost (stopped, frozen or cut
    /// off), however long its work takes; 0 = no heartbeats (e.g. to stop a rank in a debugger).
    #[arg(long, default_value_t = 5, value_name = "SECS", value_parser = number_in::<0, 3600>)]
    pub(super) liveness_timeout: usize,
    /// Compute threads per rank (default: this host's cores divided by its ranks; overrides the
    /// preset's distributed.threads_per_rank).
    #[arg(long, value_name = "N")]
    pub(super) threads_per_rank: Option<usize>,
}
