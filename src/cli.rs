//! Command-line interface: `run`, `presets`, `apply`, `denoise`, `bench`; no subcommand opens the
//! workbench (`tessera::gui`).
//!
//! A thin layer over the library: every subcommand loads its inputs, calls `tessera::job` or one
//! operator/denoiser, and reports errors once, with context naming the file and the problem.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;

use std::io::IsTerminal;

use tessera::denoise::DenoiserConfig;
use tessera::dist::placement::{Placement, available_cores};
use tessera::dist::{self, RankFlags, RankInfo};
use tessera::job::{self, JobEvent};
use tessera::physics::{NoiseConfig, PhysicsConfig};
use tessera::preset::{BUNDLED, Preset};
use tessera::tiling::{TiledDenoiser, TilingConfig};
use tessera::{Tensor, io};

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
        /// Output folder (default: the preset's output.dir, else out/NAME).
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
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
        /// File holding the token clients must present (required off loopback).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Folder for job outputs (job N writes into DIR/job-N).
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
    /// file); each batch is split over the ranks by exact spatial decomposition.
    Train {
        preset: String,
        /// Override a preset value, e.g. `--set train.steps=50` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Output folder (default: out/NAME): weights, denoiser.toml, train.json.
        #[arg(long)]
        out: Option<PathBuf>,
        /// No loss reports.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        group: GroupArgs,
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
        #[arg(long, default_value_t = 1024)]
        width: usize,
        #[arg(long, default_value_t = 683)]
        height: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
    /// 2-D parallel-beam tomography A, Aᵀ and FBP.
    Tomography {
        #[arg(long, default_value_t = 512)]
        size: usize,
        #[arg(long, default_value_t = 180)]
        angles: usize,
        #[arg(long, default_value_t = 3)]
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
    },
    /// All-reduce over local ranks vs a raw Unix-socket copy.
    Collectives {
        #[arg(long, default_value_t = 64)]
        mib: usize,
        #[arg(long, default_value_t = 2)]
        ranks: usize,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
}

/// Where this process sits in a process group. Under torchrun, srun or mpirun the environment says
/// it; `--ranks N` starts N local ranks instead.
#[derive(clap::Args, Debug, Default)]
struct GroupArgs {
    /// Start N rank processes of this binary on this machine, wired over local sockets.
    #[arg(long, value_name = "N")]
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
    /// Seconds to wait for every rank to arrive.
    #[arg(long, default_value_t = 60)]
    rendezvous_timeout: u64,
    /// Seconds one collective may wait for a peer before declaring it hung (0 = forever). Raise it
    /// when one iteration's work on a rank legitimately takes longer.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    op_timeout: u64,
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `tessera` alone: the workbench with the quick sample and a local backend of 2 ranks (outputs in
/// out/workbench/).
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

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Run {
            preset,
            set,
            out,
            quiet,
            group,
        } => run(&preset, &set, out, quiet, &group),
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
        Command::Denoise {
            denoiser,
            sigma,
            input,
            output,
        } => denoise(&denoiser, sigma, &input, &output),
        Command::Train {
            preset,
            set,
            out,
            quiet,
            group,
        } => train(&preset, &set, out, quiet, &group),
    }
}

fn train(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::train::TrainPreset;
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if let Some(n) = group.ranks.filter(|_| !launched) {
        TrainPreset::load(name, set)
            .with_context(|| format!("loading training preset `{name}`"))?;
        if n > 1 {
            let args = strip_option(std::env::args_os().skip(1), "--ranks");
            dist::launch::launch(n, &args).context("local process group")?;
            return Ok(());
        }
    }
    let (comm, _) = join_group(group, None)?;
    let (preset, base_dir) = TrainPreset::load(name, set)
        .with_context(|| format!("loading training preset `{name}`"))?;
    let out_dir = out.unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let loud = !quiet && comm.rank() == 0;
    let steps = preset.train.steps;
    let summary = tessera::train::train(&preset, &base_dir, &out_dir, &*comm, &mut |p| {
        if loud {
            eprintln!(
                "step {:>6}/{steps}  loss {:.4e}  (PSNR {:.2} dB)",
                p.step + 1,
                p.loss,
                -10.0 * p.loss.log10()
            );
        }
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
    }
    Ok(())
}

fn run(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    quiet: bool,
    group: &GroupArgs,
) -> Result<()> {
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if let Some(n) = group.ranks.filter(|_| !launched) {
        // Validate before starting N processes that would all fail the same way.
        Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
        if n > 1 {
            let args = strip_option(std::env::args_os().skip(1), "--ranks");
            dist::launch::launch(n, &args).context("local process group")?;
            return Ok(());
        }
    }
    let loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let preset = &loaded.preset;
    let (comm, placement) = join_group(group, preset.distributed.threads_per_rank)?;
    let rank = comm.rank();
    if rank == 0 && !quiet {
        eprintln!("threads: {placement}");
    }
    let quiet = quiet || rank != 0;
    let out_dir = out
        .or_else(|| preset.output.dir.clone())
        .unwrap_or_else(|| PathBuf::from("out").join(&preset.name));
    let iterations = preset.algorithm.iterations();
    let interactive = std::io::stderr().is_terminal();
    let bar = if quiet || !interactive {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(iterations as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} it  {msg}  ETA {eta}")
            .expect("static template is valid")
            .progress_chars("=> "),
    );
    bar.set_prefix(preset.name.clone());
    bar.enable_steady_tick(Duration::from_millis(200));
    // Without a terminal (e.g. under a launcher) report about ten times per run.
    let every = iterations.div_ceil(10).max(1);
    let mut on_event = |event: JobEvent<'_>| {
        match event {
            JobEvent::Started {
                image_shape,
                operators,
                world_size,
                ..
            } => {
                bar.set_message(format!(
                    "{operators} operator(s) on {image_shape:?}, {world_size} rank(s)"
                ));
            }
            JobEvent::Iteration { report, .. } => {
                bar.set_position(report.iteration as u64);
                if let Some(p) = report.psnr_db {
                    bar.set_message(format!("PSNR {p:.2} dB"));
                }
                let k = report.iteration;
                if !quiet && !interactive && (k.is_multiple_of(every) || k == iterations) {
                    let psnr = report
                        .psnr_db
                        .map(|p| format!(", PSNR {p:.2} dB"))
                        .unwrap_or_default();
                    eprintln!("iteration {k}/{iterations}{psnr}");
                }
            }
        }
        ControlFlow::Continue(())
    };
    let summary = job::run_in_group(preset, &loaded.base_dir, &out_dir, comm, &mut on_event)
        .with_context(|| format!("running preset {}", loaded.origin))?;
    bar.finish_and_clear();
    if rank != 0 {
        return Ok(());
    }
    println!(
        "{}: {} in {:.2} s ({} iterations; gradient {:.2} s, denoiser {:.2} s)",
        summary.name,
        summary.algorithm,
        summary.solve_secs,
        summary.iterations,
        summary.gradient_secs,
        summary.denoiser_secs
    );
    match (&summary.reconstruction, &summary.adjoint) {
        (Some(r), Some(a)) => println!(
            "  reconstruction PSNR {:.2} dB, SSIM {:.4}   (back-projection Aᵀy: PSNR {:.2} dB)",
            r.psnr_db, r.ssim, a.psnr_db
        ),
        _ => println!("  no ground truth (measured data): PSNR and SSIM not computed"),
    }
    if summary.world_size > 1 {
        println!("  {} ranks over {}:", summary.world_size, summary.backend);
        for r in &summary.ranks {
            println!(
                "    rank {}: operators {:?}, gradient {:.2} s, denoiser {:.2} s, communication {:.2} s",
                r.rank, r.operators, r.gradient_secs, r.denoiser_secs, r.communication_secs
            );
        }
    }
    println!("  outputs in {}", out_dir.display());
    Ok(())
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
    let token = match token_file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading the token file {}", f.display()))?;
            let t = text.trim().to_string();
            if t.is_empty() {
                bail!("the token file is empty: {}", f.display());
            }
            Some(t)
        }
        None => None,
    };
    let endpoint = match (socket, listen) {
        (Some(p), _) => Endpoint::Unix(p),
        (None, Some(l)) if l.parse::<u16>().is_ok() => Endpoint::Tcp(format!("127.0.0.1:{l}")),
        (None, Some(l)) => Endpoint::Tcp(l),
        (None, None) => Endpoint::Tcp(DEFAULT_LISTEN.into()),
    };
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if let Some(n) = group.ranks.filter(|&n| n > 1 && !launched) {
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        dist::launch::launch(n, &args).context("local process group")?;
        return Ok(());
    }
    let (comm, _) = join_group(group, None)?;
    let opts = ServeOptions {
        endpoint,
        token,
        out_dir: out,
        base_dir: PathBuf::from("."),
        op_timeout: Some(Duration::from_secs(group.op_timeout)),
    };
    tessera::serve::serve(comm, &opts).context("tessera serve")
}

/// Discovers this process's rank, sizes its thread pool (flag, else `preset_threads`, else the
/// host's cores shared by its ranks; logged) and joins the group with the chosen transport.
fn join_group(
    group: &GroupArgs,
    preset_threads: Option<usize>,
) -> Result<(Box<dyn dist::Collective>, Placement)> {
    let flags = RankFlags {
        rank: group.rank,
        world_size: group.world_size,
        master_addr: group.master_addr.clone(),
        master_port: group.master_port,
    };
    let info = RankInfo::discover(&flags).context("finding this process's rank")?;
    let placement = Placement::choose(
        info.local_world_size,
        available_cores(),
        group.threads_per_rank,
        preset_threads,
    )?;
    placement.apply()?;
    tracing::info!(rank = info.rank, "threads: {placement}");
    let comm = dist::init_backend(
        group.backend,
        &info,
        Duration::from_secs(group.rendezvous_timeout),
    )
    .and_then(|c| {
        c.set_op_timeout(Some(Duration::from_secs(group.op_timeout)))?;
        Ok(c)
    })
    .with_context(|| {
        format!(
            "joining the process group as rank {} of {}",
            info.rank, info.world_size
        )
    })?;
    Ok((comm, placement))
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
            println!("{r}\n(rayon threads: {threads})");
        }
        BenchWhat::Tomography {
            size,
            angles,
            repeats,
        } => {
            let r = tessera::physics::tomography::bench_tomography(size, angles, repeats)?;
            println!(
                "tomography 2-D parallel beam, {size}×{size}, {angles} angles, {} detector cells ({} threads):",
                r.n_det, r.threads
            );
            println!("  A    {:8.1} ms", r.forward_secs * 1e3);
            println!("  Aᵀ   {:8.1} ms", r.adjoint_secs * 1e3);
            println!("  FBP  {:8.1} ms", r.fbp_secs * 1e3);
            println!("  (single-threaded reference and ratios: cargo bench --bench tomography)");
        }
        BenchWhat::Scaling {
            preset,
            ranks,
            sizes,
            threads_per_rank,
            set,
            out,
        } => bench_scaling(&preset, &ranks, &sizes, &threads_per_rank, &set, out)?,
        BenchWhat::Collectives {
            mib,
            ranks,
            repeats,
        } => {
            println!(
                "{}",
                dist::bench::bench_all_reduce(mib << 20, ranks, repeats)?
            );
        }
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
) -> Result<()> {
    use tessera::scaling::{Configuration, Run, RunMetrics};
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
        runs.push(Run { config, metrics });
    }
    let report =
        tessera::scaling::write_report(&runs, &format!("Scaling study: {}", preset.name), &out)
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
    for f in files {
        report_preset(&f.to_string_lossy(), &mut failures);
    }
    if failures > 0 {
        bail!("{failures} preset(s) are invalid");
    }
    Ok(())
}

fn report_preset(name: &str, failures: &mut usize) {
    match Preset::load(name, &[]) {
        Ok(p) => println!("ok       {:<14} {}", p.preset.name, p.preset.description),
        Err(e) => {
            *failures += 1;
            println!("INVALID  {name:<14} {e}");
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
    let file: PhysicsFile = read_toml(physics_file)?;
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
    let file: DenoiserFile = read_toml(denoiser_file)?;
    let x = read_input(input)?;
    // A weights path in the file is relative to the file's folder, as in presets.
    let base_dir = denoiser_file.parent().unwrap_or(Path::new("."));
    let inner = file
        .denoiser
        .build_in(base_dir)
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
