//! Command-line interface: `run`, `presets`, `apply`, `denoise`, `bench`, `report`; no subcommand opens the
//! workbench (`tessera::gui`).
//!
//! A thin layer over the library: every subcommand loads its inputs, calls `tessera::job` or one
//! operator/denoiser, and reports errors once, with context naming the file and the problem. Every
//! count and duration a user gives is bounded, and printing never panics (a closed or full stdout
//! is reported once, at the end).

mod attach;
mod output;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde::Deserialize;

use tessera::denoise::DenoiserConfig;
use tessera::dist::placement::{Placement, available_cores};
use tessera::dist::{self, RankFlags, RankInfo};
use tessera::io::RunDir;
use tessera::job::{self, JobEvent};
use tessera::physics::{NoiseConfig, PhysicsConfig};
use tessera::preset::{BUNDLED, Preset};
use tessera::tiling::{TiledDenoiser, TilingConfig};
use tessera::{Tensor, io};

use output::say;

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
struct Cli {
    /// Log filter (error, warn, info, debug, trace), overridden by RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    log: String,
    /// Without a subcommand the workbench window opens.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a preset (a bundled name such as `quick`, or a TOML file).
    Run {
        preset: String,
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
        /// Submit the preset to a running `tessera serve` at HOST:PORT or unix:PATH instead of
        /// running it here; progress streams like a local run, the outputs stay on the server.
        #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["out", "replace"])]
        attach: Option<String>,
        /// With --attach over TCP: the server's token file (default ~/.config/tessera/serve-token).
        #[arg(long, requires = "attach")]
        token_file: Option<PathBuf>,
        /// With --attach: copy the run's outputs from the server into this (new) folder.
        #[arg(long, value_name = "DIR", requires = "attach")]
        fetch: Option<PathBuf>,
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
        /// With --attach over TCP: the server's token file (default ~/.config/tessera/serve-token).
        #[arg(long, requires = "attach")]
        token_file: Option<PathBuf>,
        /// With --attach: copy the run's outputs from the server into this (new) folder.
        #[arg(long, value_name = "DIR", requires = "attach")]
        fetch: Option<PathBuf>,
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
enum BenchWhat {
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
        /// Rank counts to run, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
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
        #[arg(
            long,
            value_name = "LATENCY_US,GB_PER_S",
            value_delimiter = ',',
            num_args = 2
        )]
        link: Vec<f64>,
    },
    /// PSNR of the bundled denoisers against TV and wavelets (best of a few strengths) on held-out
    /// images at a few noise levels: the training presets' held-out generated images (grey and
    /// colour) and the given photographs (colour ones also as grey); the table of
    /// assets/weights/README.md.
    Denoisers {
        /// Real photographs (e.g. scripts/fetch_photos.py's out/photos/*.png); default: the crops
        /// in tests/fixtures/photos.
        photos: Vec<PathBuf>,
        /// Noise levels (image range 0..1), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0.05,0.1,0.2")]
        sigma: Vec<f32>,
        /// Also write the Markdown table to this file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// DnCNN weight files (deepinv's key names, e.g. what `tessera train` wrote) to score
        /// beside the bundled networks, on the images of their channel count; comma-separated.
        #[arg(long, value_delimiter = ',', value_name = "FILE")]
        dncnn: Vec<PathBuf>,
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

/// Where this process sits in a process group. Under torchrun, srun or mpirun the environment says
/// it; `--ranks N` starts N local ranks instead.
#[derive(clap::Args, Debug, Default)]
struct GroupArgs {
    /// Start N rank processes of this binary on this machine, wired over local sockets (1 ..= 256).
    #[arg(long, value_name = "N", value_parser = number_in::<1, 256>)]
    ranks: Option<usize>,
    /// This process's rank (with --world-size; overrides the environment).
    #[arg(long)]
    rank: Option<usize>,
    /// Number of ranks (with --rank).
    #[arg(long)]
    world_size: Option<usize>,
    /// Host of rank 0's rendezvous store (default: MASTER_ADDR, else 127.0.0.1).
    #[arg(long)]
    master_addr: Option<String>,
    /// Port of rank 0's rendezvous store (default: MASTER_PORT, else 29500).
    #[arg(long)]
    master_port: Option<u16>,
    /// Transport between ranks: sockets (default) or mpi (needs the `mpi` build; launch with mpirun/srun).
    #[arg(long, default_value = "sockets")]
    backend: dist::Backend,
    /// Seconds to wait for every rank to arrive (1 ..= 604800).
    #[arg(long, default_value_t = 60, value_parser = number_in::<1, MAX_TIMEOUT_SECS>)]
    rendezvous_timeout: usize,
    /// Seconds one collective may wait for a peer before declaring it hung (0 = forever, at most
    /// 604800). A stopped or dead rank is found sooner by heartbeats (--liveness-timeout); this
    /// bounds a rank that is alive but stuck.
    #[arg(long, default_value_t = 600, value_name = "SECS", value_parser = number_in::<0, MAX_TIMEOUT_SECS>)]
    op_timeout: usize,
    /// Seconds without a heartbeat after which a rank is declared lost (stopped, frozen or cut
    /// off), however long its work takes; 0 = no heartbeats (e.g. to stop a rank in a debugger).
    #[arg(long, default_value_t = 5, value_name = "SECS", value_parser = number_in::<0, 3600>)]
    liveness_timeout: usize,
    /// Compute threads per rank (default: this host's cores divided by its ranks; overrides the
    /// preset's distributed.threads_per_rank).
    #[arg(long, value_name = "N")]
    threads_per_rank: Option<usize>,
}

/// Entry point: runs the command and turns errors into a message and exit code 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        // Forwards rank 0's logs to workbench clients; inert outside `tessera serve`.
        .with(tessera::serve::logs::layer())
        .init();
    let result = match cli.command {
        Some(command) => dispatch(command),
        None => workbench(),
    }
    .and_then(|()| output::stdout_result());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::complain(format_args!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// `tessera` alone: the workbench with the quick sample and a local backend of 2 ranks (outputs in
/// out/workbench/).
#[cfg(feature = "gui")]
fn workbench() -> Result<()> {
    let out_dir = std::env::current_dir()
        .context("finding the working directory")?
        .join("out")
        .join("workbench");
    let options = tessera::gui::WorkbenchOptions {
        starter: tessera::gui::local::local_starter(tessera::protocol::LocalOptions::new(
            2,
            out_dir.clone(),
        )),
        start_backend: true,
        preset: None,
        state_path: None,
        state: tessera::gui::AppState::default(),
        output_root: Some(out_dir),
    };
    tessera::gui::run_workbench(options).context("workbench")
}

/// `tessera` alone in a headless build: says why no window opens and what to type instead.
#[cfg(not(feature = "gui"))]
fn workbench() -> Result<()> {
    bail!(
        "this tessera was built without the workbench (cargo's `gui` feature is off); give a \
         subcommand such as `tessera run quick` or `tessera serve` (`tessera --help` lists them)"
    )
}

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Run {
            preset,
            set,
            out,
            replace,
            quiet,
            attach: Some(address),
            token_file,
            fetch,
            group: _,
        } => {
            let _ = (out, replace);
            attach::run(
                &address,
                token_file.as_deref(),
                &preset,
                &set,
                fetch,
                quiet,
                None,
            )
        }
        Command::Run {
            preset,
            set,
            out,
            replace,
            quiet,
            attach: None,
            group,
            ..
        } => run(&preset, &set, out, replace, quiet, &group),
        Command::Serve {
            socket,
            listen,
            token_file,
            out,
            group,
        } => serve(socket, listen, token_file.as_deref(), out, &group),
        Command::Presets { files } => presets(&files),
        Command::Apply {
            physics,
            adjoint,
            input_shape,
            noisy,
            seed,
            input,
            output,
        } => apply(&physics, adjoint, input_shape, noisy, seed, &input, &output),
        Command::Bench { what } => bench(what),
        Command::Report { run_dir, out } => {
            let out = out.unwrap_or_else(|| run_dir.clone());
            let page = tessera::scaling::write_run_report(&run_dir, &out)
                .with_context(|| format!("reporting the run in {}", run_dir.display()))?;
            say!("{}", page.display());
            Ok(())
        }
        Command::Denoise {
            denoiser,
            sigma,
            input,
            output,
        } => denoise(&denoiser, sigma, &input, &output),
        Command::Train {
            preset,
            set,
            quiet,
            resume,
            attach: Some(address),
            token_file,
            fetch,
            ..
        } => attach::run(
            &address,
            token_file.as_deref(),
            &preset,
            &set,
            fetch,
            quiet,
            resume,
        ),
        Command::Train {
            preset,
            set,
            out,
            stop_after,
            resume,
            quiet,
            attach: None,
            group,
            ..
        } => {
            let control = tessera::train::RunControl {
                stop_after,
                resume: resume.is_some(),
            };
            train(&preset, &set, resume.or(out), &control, quiet, &group)
        }
    }
}

fn train(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    control: &tessera::train::RunControl,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::train::TrainPreset;
    if let Some(dsn) = tessera::dsn::run::DsnPreset::load(name, set)
        .with_context(|| format!("loading training preset `{name}`"))?
    {
        if *control != tessera::train::RunControl::default() {
            anyhow::bail!(
                "--stop-after and --resume are for denoiser training presets, not Multi-DSN (`{name}`)"
            );
        }
        return train_dsn(dsn, out, quiet, group);
    }
    if group.ranks.is_some() && std::env::var_os(dist::launch::LAUNCHED_ENV).is_none() {
        // A bad preset fails here, before any rank starts.
        TrainPreset::load(name, set)
            .with_context(|| format!("loading training preset `{name}`"))?;
    }
    if launch_local_group(group)? {
        return Ok(());
    }
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let (preset, base_dir) = TrainPreset::load(name, set)
        .with_context(|| format!("loading training preset `{name}`"))?;
    let out_dir = out.unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let loud = !quiet && comm.rank() == 0;
    let steps = preset.train.steps;
    let summary = tessera::train::train(&preset, &base_dir, &out_dir, &*comm, control, &mut |p| {
        if loud {
            eprintln!(
                "step {:>6}/{steps}  loss {:.4e}  (PSNR {:.2} dB)",
                p.step + 1,
                p.loss,
                -10.0 * p.loss.log10()
            );
        }
        std::ops::ControlFlow::Continue(())
    })
    .with_context(|| format!("training `{}`", preset.name))?;
    if comm.rank() == 0 && !quiet {
        println!(
            "{}: {} parameters on {} rank(s), grid {:?}; weights {}",
            summary.denoiser,
            summary.parameters,
            summary.ranks,
            summary.grid,
            summary.weights.display()
        );
        for h in &summary.held_out {
            println!(
                "held out {} at sigma {}: noisy {:.2} dB, denoised {:.2} dB",
                h.image, h.sigma, h.noisy_psnr_db, h.denoised_psnr_db
            );
        }
        if summary.stopped_early {
            println!(
                "stopped after step {} of {steps}; continue with --resume {}",
                summary.steps,
                out_dir.display()
            );
        }
    }
    Ok(())
}

/// `tessera bench denoisers`: the PSNR table of the bundled denoisers.
fn bench_denoisers(
    photos: Vec<PathBuf>,
    sigmas: &[f32],
    out: Option<PathBuf>,
    dncnn: &[PathBuf],
) -> Result<()> {
    use tessera::train::{TrainImage, data, eval};
    if let Some(bad) = sigmas.iter().find(|s| !(**s > 0.0 && **s <= 1.0)) {
        bail!("--sigma: noise levels must be in (0, 1], got {bad}");
    }
    let extra = dncnn
        .iter()
        .map(|p| eval::ExtraDncnn::load(p))
        .collect::<tessera::Result<Vec<_>>>()?;
    let photos = if photos.is_empty() {
        vec![
            PathBuf::from("tests/fixtures/photos/camera_128.png"),
            PathBuf::from("tests/fixtures/photos/astronaut_128.png"),
        ]
    } else {
        photos
    };
    // The held-out images of presets/train-dncnn-{grey,colour}.toml.
    let held_out = |grayscale| TrainImage {
        sample: Some(tessera::samples::Sample::Natural),
        size: Some(vec![256, 256]),
        seed: Some(1000),
        grayscale,
        ..TrainImage::default()
    };
    let mut images = data::load_images(
        &[held_out(true), held_out(false)],
        "held_out",
        Path::new(""),
        0,
        false,
        &[],
    )?;
    for p in &photos {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut file = TrainImage {
            path: Some(p.clone()),
            ..TrainImage::default()
        };
        let mut photo = data::load_images(&[file.clone()], "photos", Path::new(""), 0, false, &[])?;
        photo[0].name = name.clone();
        let colour = photo[0].image.shape()[1] == 3;
        images.append(&mut photo);
        // A colour photograph is also a grey one, for the grey network.
        if colour {
            file.grayscale = true;
            let mut grey = data::load_images(&[file], "photos", Path::new(""), 0, false, &[])?;
            grey[0].name = format!("{name} (grey)");
            images.append(&mut grey);
        }
    }
    let rows = eval::psnr_table(&images, sigmas, 0, &extra)?;
    let table = eval::markdown(&rows);
    say!("{table}");
    if let Some(path) = out {
        io::write_atomic(&path, table.as_bytes())?;
    }
    Ok(())
}

/// `tessera train` with a Multi-DSN preset: one line per epoch (per-domain losses, accuracies).
fn train_dsn(
    (preset, base_dir): (tessera::dsn::run::DsnPreset, PathBuf),
    out: Option<PathBuf>,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    if launch_local_group(group)? {
        return Ok(());
    }
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let out_dir = out.unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let loud = !quiet && comm.rank() == 0;
    let names: Vec<String> = preset.domains.iter().map(|d| d.name.clone()).collect();
    let summary = tessera::dsn::run::train(&preset, &base_dir, &out_dir, &*comm, &mut |e| {
        if loud {
            let per: Vec<String> = e
                .losses
                .iter()
                .zip(&e.accuracy)
                .zip(&names)
                .map(|((l, a), n)| format!("{n} {:.3}/{:.0}%", l.total(), 100.0 * a))
                .collect();
            eprintln!(
                "epoch {:>3}  target accuracy {:5.1}%  [loss/accuracy: {}]",
                e.epoch + 1,
                100.0 * e.target_accuracy,
                per.join(", ")
            );
        }
        std::ops::ControlFlow::Continue(())
    })
    .with_context(|| format!("training `{}`", preset.name))?;
    if comm.rank() == 0 && !quiet {
        for r in &summary.per_rank {
            println!(
                "rank {}: domains {:?}, {:.1} s compute, {:.1} s exchange ({} received), peak memory {}",
                r.rank,
                r.domains,
                r.compute_secs,
                r.exchange_secs,
                tessera::error::human_bytes(r.received_bytes),
                r.peak_rss_bytes
                    .map_or("unknown".into(), tessera::error::human_bytes)
            );
        }
        println!(
            "{} domains on {} rank(s); weights {}, metrics {}",
            summary.domains.len(),
            summary.ranks,
            summary.weights.display(),
            out_dir.join("train.json").display()
        );
    }
    Ok(())
}

fn run(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    replace: bool,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    if let Some(fwi) = tessera::fwi::FwiPreset::load(name, set)
        .with_context(|| format!("loading preset `{name}`"))?
    {
        return run_fwi(name, fwi, out, replace, quiet, group);
    }
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    let loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let preset = &loaded.preset;
    let placement = place_threads(group, preset.distributed.threads_per_rank)?;
    let out_dir = run_dir(
        out.or_else(|| preset.output.dir.clone()),
        replace,
        &preset.name,
    )?;
    // Checked before any rank starts computing (rank 0 checks again when it stages the run): the
    // output folder, and the inputs against the real image, memory included.
    out_dir.check()?;
    if !launched {
        let (world, here) = match group.ranks {
            Some(n) => (n, n),
            None => {
                let info = RankInfo::discover(&rank_flags(group))?;
                (info.world_size, info.local_world_size)
            }
        };
        job::check_inputs(preset, &[], world, here)
            .with_context(|| format!("checking preset {}", loaded.origin))?;
    }
    if let Some(n) = group.ranks.filter(|&n| n > 1 && !launched) {
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        dist::launch::launch(n, &args).context("local process group")?;
        return Ok(());
    }
    let comm = join_group(group)?;
    let rank = comm.rank();
    if rank == 0 && !quiet {
        eprintln!("threads: {placement}");
    }
    let quiet = quiet || rank != 0;
    let progress = attach::Progress::new(&preset.name, preset.algorithm.iterations(), quiet);
    let mut on_event = |event: JobEvent<'_>| {
        match event {
            JobEvent::Started {
                image_shape,
                operators,
                world_size,
                ..
            } => progress.started(operators, image_shape, world_size),
            JobEvent::Iteration { report, .. } => progress.iteration(report),
        }
        ControlFlow::Continue(())
    };
    let summary = job::run_in_group(preset, out_dir, comm, &mut on_event)
        .with_context(|| format!("running preset {}", loaded.origin))?;
    progress.finish();
    if rank != 0 {
        return Ok(());
    }
    print_summary(&summary);
    if let Some(dir) = &summary.run_dir {
        say!("  outputs in {}", dir.display());
    }
    Ok(())
}

/// Where `tessera run` writes: the folder named (`--out` or the preset's), replaced only with
/// `--replace`, or a new folder under `out/NAME`.
fn run_dir(out: Option<PathBuf>, replace: bool, name: &str) -> Result<RunDir> {
    Ok(match out {
        Some(path) => RunDir::Exact { path, replace },
        None if replace => bail!("--replace needs --out (or the preset's output.dir)"),
        None => RunDir::Unique {
            root: PathBuf::from("out").join(name),
        },
    })
}

/// What a finished run prints (locally or attached).
fn print_summary(summary: &job::JobSummary) {
    say!(
        "{}: {} in {:.2} s ({} iterations{}; gradient {:.2} s, denoiser {:.2} s)",
        summary.name,
        summary.algorithm,
        summary.solve_secs,
        summary.iterations,
        if summary.stopped_early {
            ", stopped early"
        } else {
            ""
        },
        summary.gradient_secs,
        summary.denoiser_secs
    );
    let ssim = |s: Option<f64>| s.map_or(String::new(), |s| format!(", SSIM {s:.4}"));
    match (&summary.reconstruction, &summary.back_projection) {
        (Some(r), Some(b)) => say!(
            "  reconstruction PSNR {:.2} dB{}   (back-projection {}: PSNR {:.2} dB)",
            r.psnr_db,
            ssim(r.ssim),
            match b.method {
                job::BackProjectionMethod::AdjointMean => "Σ Aᵢᵀyᵢ / n",
                job::BackProjectionMethod::Fbp => "FBP",
            },
            b.quality.psnr_db
        ),
        _ => say!("  no ground truth (measured data): PSNR and SSIM not computed"),
    }
    if summary.world_size > 1 {
        say!("  {} ranks over {}:", summary.world_size, summary.backend);
        for r in &summary.ranks {
            say!(
                "    rank {}: operators {:?}, gradient {:.2} s, denoiser {:.2} s, communication {:.2} s",
                r.rank,
                r.operators,
                r.gradient_secs,
                r.denoiser_secs,
                r.communication_secs
            );
        }
    }
    if let Some(h) = &summary.halo_exchange
        && summary.world_size > 1
    {
        say!(
            "  spatial halos on grid {:?}: {} exchanges, {:.2} MB per denoiser call over all ranks, {}",
            h.grid,
            h.layers.len(),
            h.sent_bytes() as f64 / 1e6,
            match h.matches_prediction() {
                Some(true) => "each equal to its predicted halo volume",
                Some(false) => "NOT equal to the predicted halo volumes (see metrics.json)",
                None => "no prediction for this size (the network is padded or split first)",
            }
        );
    }
}

/// `tessera run` of a full-waveform inversion preset (the `[fwi]` kind): the same launcher and
/// process group as imaging runs, a progress bar of epochs.
fn run_fwi(
    name: &str,
    (preset, base_dir, origin): (tessera::fwi::FwiPreset, PathBuf, String),
    out: Option<PathBuf>,
    replace: bool,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::fwi::FwiEvent;
    let out_dir = run_dir(
        out.or_else(|| preset.output.dir.clone()),
        replace,
        &preset.name,
    )?;
    out_dir.check()?;
    if launch_local_group(group)? {
        return Ok(());
    }
    // Before anything computes: N local ranks share the cores instead of each starting a thread
    // per core (the shots of one rank are modelled on its threads).
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let rank = comm.rank();
    let quiet = quiet || rank != 0;
    let progress = attach::Progress::counting(&preset.name, preset.fwi.epochs, "epochs", quiet);
    let mut on_event = |event: FwiEvent<'_>| {
        match event {
            FwiEvent::Started {
                nz,
                nx,
                shots,
                world_size,
                step_ratio,
                ..
            } => progress.set_message(format!(
                "{nz}×{nx} model, {shots} shots, {world_size} rank(s), {step_ratio} steps/sample"
            )),
            FwiEvent::Epoch { report, .. } => progress.epoch(report),
        }
        ControlFlow::Continue(())
    };
    let summary = tessera::fwi::run_in_group(&preset, &base_dir, out_dir, comm, &mut on_event)
        .with_context(|| format!("running preset {origin} ({name})"))?;
    progress.finish();
    if rank != 0 {
        return Ok(());
    }
    print_fwi_summary(&summary);
    if let Some(dir) = &summary.run_dir {
        say!("  outputs in {}", dir.display());
    }
    Ok(())
}

/// What a finished FWI run prints (locally or attached), less where its outputs are.
fn print_fwi_summary(summary: &tessera::fwi::FwiSummary) {
    let last = summary.history.last();
    say!(
        "{}: {} epochs in {:.1} s on {} rank(s) × {} thread(s) over {}; final loss {:.4e}",
        summary.name,
        summary.epochs,
        summary.solve_secs,
        summary.world_size,
        summary.threads_per_rank,
        summary.backend,
        last.map_or(f64::NAN, |r| r.loss)
    );
    if let (Some(a), Some(b)) = (summary.initial_model_error, summary.final_model_error) {
        say!("  model error {:.2} % → {:.2} %", 100.0 * a, 100.0 * b);
    }
    say!(
        "  {} internal steps per sample, gradient by {:?}: {:.1} MiB per shot",
        summary.step_ratio,
        summary.gradient_strategy,
        summary.peak_bytes_per_shot as f64 / (1 << 20) as f64
    );
}

/// Default control address of `tessera serve` (loopback: reach it from elsewhere by SSH tunnel).
const DEFAULT_LISTEN: &str = "127.0.0.1:7341";

fn serve(
    socket: Option<PathBuf>,
    listen: Option<String>,
    token_file: Option<&Path>,
    out: PathBuf,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::serve::{Endpoint, ServeOptions};
    let endpoint = match (socket, listen) {
        (Some(p), _) => Endpoint::Unix(p),
        (None, Some(l)) if l.parse::<u16>().is_ok() => Endpoint::Tcp(format!("127.0.0.1:{l}")),
        (None, Some(l)) => Endpoint::Tcp(l),
        (None, None) => Endpoint::Tcp(DEFAULT_LISTEN.into()),
    };
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    // TCP clients need the token; only rank 0 listens, but every rank checks the file so that a
    // bad one fails before the group forms.
    let token = match &endpoint {
        Endpoint::Unix(_) => None,
        Endpoint::Tcp(_) => {
            let path = match token_file {
                Some(f) => f.to_path_buf(),
                None => default_token_file()?,
            };
            let (token, created) = tessera::protocol::auth::Token::load_or_create(&path)
                .context("the token for TCP clients")?;
            if created && !launched {
                output::complain(format_args!(
                    "tessera serve: wrote a new random token to {} (clients need it)",
                    path.display()
                ));
            }
            Some(token)
        }
    };
    if let Some(n) = group.ranks.filter(|&n| n > 1 && !launched) {
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        dist::launch::launch(n, &args).context("local process group")?;
        return Ok(());
    }
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let info = RankInfo::discover(&rank_flags(group))?;
    let opts = ServeOptions {
        endpoint,
        token,
        out_dir: out,
        ranks_here: info.local_world_size,
        op_timeout: Some(Duration::from_secs(group.op_timeout as u64)),
    };
    tessera::serve::serve(comm, &opts).context("tessera serve")
}

/// `$XDG_CONFIG_HOME/tessera/serve-token`, else `~/.config/tessera/serve-token` (the folder is
/// created private).
fn default_token_file() -> Result<PathBuf> {
    let config = match (
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    ) {
        (Some(x), _) if !x.is_empty() => PathBuf::from(x),
        (_, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".config"),
        _ => bail!("no HOME to keep the token in; give --token-file FILE"),
    };
    let dir = config.join("tessera");
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(dir.join("serve-token"))
}

fn rank_flags(group: &GroupArgs) -> RankFlags {
    RankFlags {
        rank: group.rank,
        world_size: group.world_size,
        master_addr: group.master_addr.clone(),
        master_port: group.master_port,
    }
}

/// Sizes this process's thread pool (flag, else `preset_threads`, else the host's cores shared by
/// its ranks) before anything computes (the pool can be sized only once); logged.
fn place_threads(group: &GroupArgs, preset_threads: Option<usize>) -> Result<Placement> {
    let local_ranks = match group.ranks {
        Some(n) => n,
        None => {
            RankInfo::discover(&rank_flags(group))
                .context("finding this process's rank")?
                .local_world_size
        }
    };
    let placement = Placement::choose(
        local_ranks,
        available_cores(),
        group.threads_per_rank,
        preset_threads,
    )?;
    placement.apply()?;
    tracing::info!("threads: {placement}");
    Ok(placement)
}

/// Discovers this process's rank and joins the group with the chosen transport.
/// With `--ranks N` (N > 1) in a process no launcher started: runs this very command as N local rank
/// processes, supervises them and returns true (the caller is done). Otherwise false: this process
/// is a rank (or the only one).
fn launch_local_group(group: &GroupArgs) -> Result<bool> {
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    match group.ranks.filter(|&n| n > 1 && !launched) {
        Some(n) => {
            let args = strip_option(std::env::args_os().skip(1), "--ranks");
            dist::launch::launch(n, &args).context("local process group")?;
            Ok(true)
        }
        None => Ok(false),
    }
}

fn join_group(group: &GroupArgs) -> Result<Box<dyn dist::Collective>> {
    let info = RankInfo::discover(&rank_flags(group)).context("finding this process's rank")?;
    let comm = dist::init_backend(
        group.backend,
        &info,
        Duration::from_secs(group.rendezvous_timeout as u64),
        Some(Duration::from_secs(group.liveness_timeout as u64)).filter(|t| !t.is_zero()),
    )
    .and_then(|c| {
        c.set_op_timeout(Some(Duration::from_secs(group.op_timeout as u64)))?;
        Ok(c)
    })
    .with_context(|| {
        format!(
            "joining the process group as rank {} of {}",
            info.rank, info.world_size
        )
    })?;
    Ok(comm)
}

fn bench(what: BenchWhat) -> Result<()> {
    let threads = rayon::current_num_threads();
    match what {
        BenchWhat::Blur {
            width,
            height,
            repeats,
        } => {
            let r = tessera::physics::blur_bench::bench_blur_stack(width, height, repeats)?;
            say!("{r}\n(rayon threads: {threads})");
        }
        BenchWhat::Tomography {
            size,
            angles,
            repeats,
        } => {
            let r = tessera::physics::tomography::bench_tomography(size, angles, repeats)?;
            say!(
                "tomography 2-D parallel beam, {size}×{size}, {angles} angles, {} detector cells ({} threads):",
                r.n_det,
                r.threads
            );
            say!("  A    {:8.1} ms", r.forward_secs * 1e3);
            say!("  Aᵀ   {:8.1} ms", r.adjoint_secs * 1e3);
            say!("  FBP  {:8.1} ms", r.fbp_secs * 1e3);
            say!("  (single-threaded reference and ratios: cargo bench --bench tomography)");
        }
        BenchWhat::Scaling {
            preset,
            ranks,
            sizes,
            threads_per_rank,
            set,
            out,
            link,
        } => {
            let link = match link[..] {
                [] => None,
                [us, gbps] if us >= 0.0 && gbps > 0.0 && us.is_finite() && gbps.is_finite() => {
                    Some(tessera::scaling::model::Link {
                        latency_secs: us * 1e-6,
                        bytes_per_sec: gbps * 1e9,
                    })
                }
                _ => bail!(
                    "--link: give LATENCY_US,GB_PER_S with latency ≥ 0 and bandwidth > 0, got {link:?}"
                ),
            };
            bench_scaling(&preset, &ranks, &sizes, &threads_per_rank, &set, out, link)?
        }
        BenchWhat::Denoisers {
            photos,
            sigma,
            out,
            dncnn,
        } => bench_denoisers(photos, &sigma, out, &dncnn)?,
        BenchWhat::Wave {
            nz,
            nx,
            shots,
            nt,
            accuracy,
            repeats,
            no_gradient,
            json,
        } => {
            use tessera::physics::wave::bench::{WaveBenchSpec, bench_wave};
            let spec = WaveBenchSpec {
                nz,
                nx,
                shots,
                nt,
                accuracy,
                repeats,
                gradient: !no_gradient,
                ..WaveBenchSpec::default()
            };
            let r = bench_wave(&spec)?;
            if json {
                let mut v = serde_json::to_value(&r)?;
                v["forward_bandwidth_fraction"] = r.forward_bandwidth_fraction().into();
                say!("{v}");
            } else {
                say!("{r}");
            }
        }
        BenchWhat::SpatialMemory {
            models,
            sizes,
            ranks,
            forward_only,
            train_only,
            budget_mib,
            csv,
        } => bench_spatial_memory(
            &models,
            &sizes,
            &ranks,
            [!train_only, !forward_only],
            budget_mib,
            csv.as_deref(),
        )?,
        BenchWhat::SpatialMemoryRank {
            model,
            size,
            train,
            group,
        } => {
            use tessera::dist::spatial_memory::{MemorySpec, measure};
            if launch_local_group(&group)? {
                return Ok(());
            }
            let spec = MemorySpec {
                model: model.parse()?,
                size,
                train,
            };
            let comm = join_group(&group)?;
            if let Some(point) = measure(comm.as_ref(), spec)? {
                say!("{}", serde_json::to_string(&point)?);
            }
        }
        BenchWhat::Collectives {
            mib,
            ranks,
            repeats,
        } => {
            say!(
                "{}",
                dist::bench::bench_all_reduce(mib << 20, ranks, repeats)?
            );
        }
        BenchWhat::AllReduce {
            kib,
            repeats,
            json,
            group,
        } => {
            if launch_local_group(&group)? {
                return Ok(());
            }
            let comm = join_group(&group)?;
            let bytes: Vec<usize> = kib.iter().map(|k| k << 10).collect();
            let times = dist::bench::time_all_reduce(comm.as_ref(), &bytes, repeats)?;
            if comm.rank() == 0 {
                let ranks = comm.world_size();
                if json {
                    say!(
                        "{}",
                        serde_json::json!({ "ranks": ranks, "all_reduce": times })
                    );
                } else {
                    say!("all-reduce (sum) over {ranks} ranks, best of {repeats}:");
                    for t in &times {
                        say!("  {:>10} B  {:10.3} ms", t.bytes, t.secs * 1e3);
                    }
                }
                // The link a ring all-reduce of these times implies, for `bench scaling --link`.
                let samples: Vec<(f64, f64)> =
                    times.iter().map(|t| (t.bytes as f64, t.secs)).collect();
                match tessera::scaling::model::Link::fit_all_reduce(ranks, &samples) {
                    Ok(l) => say!(
                        "fitted link: --link {:.1},{:.4}  (latency µs, GB/s)",
                        l.latency_secs * 1e6,
                        l.bytes_per_sec / 1e9
                    ),
                    Err(e) => say!("no link fitted: {e}"),
                }
            }
        }
    }
    Ok(())
}

/// `tessera bench spatial-memory`: each configuration runs as `bench spatial-memory-rank --ranks N`
/// (a real process group, so each rank's memory is its own process's), one after the other.
fn bench_spatial_memory(
    models: &[String],
    sizes: &[usize],
    ranks: &[usize],
    [forward, train]: [bool; 2],
    budget_mib: usize,
    csv: Option<&Path>,
) -> Result<()> {
    use tessera::dist::spatial_memory::{self as study, MemoryPoint, StudyModel};
    let models = models
        .iter()
        .map(|m| m.parse::<StudyModel>())
        .collect::<tessera::Result<Vec<_>>>()?;
    let modes: Vec<bool> = [(false, forward), (true, train)]
        .into_iter()
        .filter_map(|(t, on)| on.then_some(t))
        .collect();
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut points: Vec<MemoryPoint> = Vec::new();
    for &model in &models {
        let sizes = match sizes {
            [] => model.default_sizes(),
            given => given,
        };
        for &train in &modes {
            for &size in sizes {
                for &n in ranks {
                    let mode = if train { "train" } else { "forward" };
                    eprintln!("{} {mode} {size} on {n} rank(s)", model.name());
                    let mut cmd = std::process::Command::new(&exe);
                    cmd.args(["bench", "spatial-memory-rank", "--model", model.name()])
                        .args(["--size", &size.to_string(), "--ranks", &n.to_string()]);
                    if train {
                        cmd.arg("--train");
                    }
                    let o = cmd
                        .stderr(std::process::Stdio::inherit())
                        .output()
                        .with_context(|| format!("starting {}", exe.display()))?;
                    if !o.status.success() {
                        bail!(
                            "{} {mode} {size} on {n} rank(s) failed ({})",
                            model.name(),
                            o.status
                        );
                    }
                    let text = String::from_utf8_lossy(&o.stdout);
                    let line = text
                        .lines()
                        .rev()
                        // Rank 0's line, behind the launcher's `[rank 0] ` prefix on N ranks.
                        .find_map(|l| l.find('{').map(|at| &l[at..]))
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "no result from {} {mode} {size} on {n} rank(s)",
                                model.name()
                            )
                        })?;
                    points.push(serde_json::from_str(line).context("reading a rank's result")?);
                }
            }
        }
    }
    let rows = study::rows(&points);
    say!(
        "{:<7} {:<7} {:>5} {:>5} {:>7} {:>10} {:>10} {:>9} {:>6} {:>5} {:>7} {:>9} {:>6} {:>9} {:>5}",
        "model",
        "mode",
        "size",
        "ranks",
        "grid",
        "MiB/rank",
        "1rank/N",
        "halo MiB",
        "ratio",
        "goal",
        "s",
        "live MiB",
        "ratio",
        "halo held",
        "goal"
    );
    for r in &rows {
        let opt =
            |v: Option<f64>, p: usize| v.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
        say!(
            "{:<7} {:<7} {:>5} {:>5} {:>7} {:>10.1} {:>10} {:>9.2} {:>6} {:>5} {:>7.2} {:>9} {:>6} {:>9.2} {:>5}",
            r.model,
            r.mode,
            r.size,
            r.ranks,
            format!("{}x{}x{}", r.grid[0], r.grid[1], r.grid[2]),
            r.max_working_mib,
            opt(r.ideal_mib, 1),
            r.largest_halo_mib,
            opt(r.ratio, 2),
            r.meets_goal
                .map(|b| if b { "yes" } else { "NO" })
                .unwrap_or("-"),
            r.secs,
            opt(r.max_live_mib, 1),
            opt(r.live_ratio, 2),
            r.halo_held_mib,
            r.live_meets_goal
                .map(|b| if b { "yes" } else { "NO" })
                .unwrap_or("-")
        );
    }
    say!(
        "MiB/rank: peak resident above the baseline; live MiB: peak live heap bytes (no allocator holes), ratio against one rank's the same way\ngoal: MiB/rank <= 1.15 x 1rank/N + halo (the largest exchange sent); 1rank/N = (one rank's - R) / N + R, R = a training step's two gradient buffers (2 x weights), held by every rank\nlive goal: every rank's live MiB <= 1.15 x (one rank's live, divided the same way) + the halo it holds at once for one layer (halo held: the largest rank's)"
    );
    say!(
        "largest side whose working memory fits {budget_mib} MiB per rank (line fitted over the sizes):"
    );
    for (spec, n, side) in study::largest_fitting(&points, budget_mib as f64 * 1024.0 * 1024.0) {
        let mode = if spec.train { "train" } else { "forward" };
        match side {
            Some(side) => say!("  {:<7} {:<7} {n} rank(s): {side}", spec.model.name(), mode),
            None => say!(
                "  {:<7} {:<7} {n} rank(s): no increasing fit",
                spec.model.name(),
                mode
            ),
        }
    }
    if let Some(path) = csv {
        tessera::io::write_atomic(path, study::csv(&rows).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `tessera bench scaling`: every configuration is a `tessera run … --ranks N` of this binary (a
/// real process group), run one after the other so they do not compete for the cores.
fn bench_scaling(
    name: &str,
    ranks: &[usize],
    sizes: &[usize],
    threads: &[usize],
    set: &[String],
    out: Option<PathBuf>,
    link: Option<tessera::scaling::model::Link>,
) -> Result<()> {
    use tessera::scaling::{Configuration, Run, RunMetrics, model::Workload};
    let loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let preset = &loaded.preset;
    if ranks.is_empty() || ranks.contains(&0) {
        bail!("--ranks: give rank counts of at least 1, e.g. --ranks 1,2");
    }
    for &t in threads {
        tessera::dist::placement::check_threads("--threads-per-rank", t)?;
    }
    let sizes: Vec<Option<usize>> = if sizes.is_empty() {
        vec![None]
    } else {
        sizes.iter().copied().map(Some).collect()
    };
    let threads: Vec<Option<usize>> = if threads.is_empty() {
        vec![None]
    } else {
        threads.iter().copied().map(Some).collect()
    };
    let mut configs = Vec::new();
    for &size in &sizes {
        // Resize once per size: a bad size fails before any run starts.
        let resize = match size {
            Some(s) => tessera::scaling::size_overrides(preset, s)?,
            None => Vec::new(),
        };
        for &t in &threads {
            for &n in ranks {
                let config = Configuration {
                    size,
                    ranks: n,
                    threads: t,
                };
                configs.push((config, resize.clone()));
            }
        }
    }
    let out = out.unwrap_or_else(|| PathBuf::from("out").join(format!("scaling-{}", preset.name)));
    let exe = std::env::current_exe().context("finding this executable")?;
    let total = configs.len();
    let mut runs = Vec::with_capacity(total);
    for (k, (config, resize)) in configs.into_iter().enumerate() {
        let dir = out.join("runs").join(config.slug());
        eprintln!(
            "[{}/{}] {} → {}",
            k + 1,
            total,
            config.slug(),
            dir.display()
        );
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["run", name, "--quiet", "--ranks"])
            .arg(config.ranks.to_string())
            .arg("--out")
            .arg(&dir);
        for o in set.iter().chain(&resize) {
            cmd.args(["--set", o]);
        }
        if let Some(t) = config.threads {
            cmd.args(["--threads-per-rank", &t.to_string()]);
        }
        let status = cmd
            .status()
            .with_context(|| format!("starting run {}", config.slug()))?;
        if !status.success() {
            bail!(
                "run {} failed ({status}); its output is above, its folder {}",
                config.slug(),
                dir.display()
            );
        }
        let metrics = RunMetrics::load(&dir).with_context(|| format!("run {}", config.slug()))?;
        eprintln!(
            "    {:.2} s (slowest rank; gradient {:.2} s, denoiser {:.2} s)",
            metrics.total_secs(),
            metrics.gradient_secs(),
            metrics.denoiser_secs()
        );
        let overrides: Vec<String> = set.iter().chain(&resize).cloned().collect();
        let workload =
            match Preset::load(name, &overrides).and_then(|p| Workload::of_preset(&p.preset)) {
                Ok(w) => Some(w),
                Err(e) => {
                    eprintln!("    no model for {}: {e}", config.slug());
                    None
                }
            };
        runs.push(Run {
            config,
            metrics,
            workload,
        });
    }
    let report = tessera::scaling::write_report(
        &runs,
        &format!("Scaling study: {}", preset.name),
        &out,
        link,
    )
    .context("writing the scaling report")?;
    println!("{}", tessera::scaling::summary_csv(&runs));
    println!("report: {}", report.display());
    Ok(())
}

/// The arguments without `opt` and its value (`--opt V` or `--opt=V`).
fn strip_option(
    args: impl Iterator<Item = std::ffi::OsString>,
    opt: &str,
) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        let text = a.to_string_lossy();
        if text == opt {
            skip_next = true;
        } else if !text.starts_with(&format!("{opt}=")) {
            out.push(a);
        }
    }
    out
}

fn presets(files: &[PathBuf]) -> Result<()> {
    let mut failures = 0;
    for (name, _) in BUNDLED {
        report_preset(name, &mut failures);
    }
    for (name, text) in tessera::fwi::BUNDLED_FWI {
        match tessera::fwi::FwiPreset::from_toml(text, name, &[]) {
            Ok(p) => say!("ok       {:<14} {}", p.name, p.description),
            Err(e) => {
                failures += 1;
                say!("INVALID  {name:<14} {e}");
            }
        }
    }
    for f in files {
        report_preset(&f.to_string_lossy(), &mut failures);
    }
    if failures > 0 {
        bail!("{failures} preset(s) are invalid");
    }
    Ok(())
}

fn report_preset(name: &str, failures: &mut usize) {
    if let Ok(Some((p, _, _))) = tessera::fwi::FwiPreset::load(name, &[]) {
        say!("ok       {:<14} {}", p.name, p.description);
        return;
    }
    match Preset::load(name, &[]) {
        Ok(p) => say!("ok       {:<14} {}", p.preset.name, p.preset.description),
        Err(e) => {
            *failures += 1;
            say!("INVALID  {name:<14} {e}");
        }
    }
}

/// An operator file: the operator's own fields plus an optional [noise] table.
#[derive(Deserialize)]
struct PhysicsFile {
    #[serde(flatten)]
    physics: PhysicsConfig,
    #[serde(default)]
    noise: Option<NoiseConfig>,
}

fn read_input(path: &Path) -> Result<Tensor> {
    let x = io::read_array(path)?;
    x.check_finite(&path.display().to_string())?;
    Ok(x)
}

fn read_toml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("invalid TOML: {}: {}", e.message(), path.display()))
}

fn apply(
    physics_file: &Path,
    adjoint: bool,
    input_shape: Option<Vec<usize>>,
    noisy: bool,
    seed: u64,
    input: &Path,
    output: &Path,
) -> Result<()> {
    let mut file: PhysicsFile = read_toml(physics_file)?;
    // A kernel file is relative to the operator file's folder, as in presets.
    let base = physics_file.parent().unwrap_or(Path::new(""));
    for p in file.physics.paths_mut() {
        *p = io::resolve(base, p);
    }
    let x = read_input(input)?;
    let noise = if noisy { file.noise.as_ref() } else { None };
    let result = if adjoint {
        // The operator is built for A's input shape; assume it equals the adjoint's input (true for
        // shape-preserving operators) unless told otherwise, and check that A maps it to this array.
        let x_shape = input_shape.unwrap_or_else(|| x.shape().to_vec());
        let op = file
            .physics
            .build(&x_shape, None)
            .with_context(|| physics_file.display().to_string())?;
        let y_shape = op.output_shape(&x_shape)?;
        if y_shape != x.shape() {
            bail!(
                "{} has shape {:?} but this operator maps inputs of shape {x_shape:?} to {y_shape:?}; \
                 pass --input-shape with the shape of A's input",
                input.display(),
                x.shape()
            );
        }
        op.adjoint(&x)?
    } else {
        let op = file
            .physics
            .build(x.shape(), noise)
            .with_context(|| physics_file.display().to_string())?;
        op.measure(&x, seed)?
    };
    io::write_array(output, &result)?;
    Ok(())
}

/// A denoiser file: the denoiser's own fields plus an optional [tiling] table.
#[derive(Deserialize)]
struct DenoiserFile {
    #[serde(flatten)]
    denoiser: DenoiserConfig,
    #[serde(default)]
    tiling: Option<TilingConfig>,
}

fn denoise(denoiser_file: &Path, sigma: f32, input: &Path, output: &Path) -> Result<()> {
    if !(sigma >= 0.0 && sigma.is_finite()) {
        bail!("--sigma must be a finite number ≥ 0, got {sigma}");
    }
    let mut file: DenoiserFile = read_toml(denoiser_file)?;
    let x = read_input(input)?;
    // A weights path in the file is relative to the file's folder, as in presets.
    let base = denoiser_file.parent().unwrap_or(Path::new(""));
    for p in file.denoiser.paths_mut() {
        *p = io::resolve(base, p);
    }
    let inner = file
        .denoiser
        .build()
        .with_context(|| denoiser_file.display().to_string())?;
    let d: Box<dyn tessera::denoise::Denoiser> = match &file.tiling {
        // One process: the exact decomposition is a single block (the untiled network).
        Some(t) if t.kind == tessera::tiling::TilingKind::Spatial => {
            Box::new(tessera::dist::spatial::SpatialDenoiser::new(
                std::sync::Arc::new(tessera::dist::SingleProcess),
                inner,
                t,
            )?)
        }
        Some(t) => Box::new(TiledDenoiser::from_config(inner, t)?),
        None => inner,
    };
    let y = d.denoise(&x, sigma)?;
    io::write_array(output, &y)?;
    Ok(())
}
