//! `tessera run PRESET --attach ADDRESS`: the preset runs on a `tessera serve` backend (which may be
//! serving a workbench at the same time) while this terminal shows its progress like a local run;
//! the exit status says whether the job succeeded, the backend stays up, and `--fetch DIR` copies
//! the run's files back. Also the progress display that local runs share.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

use tessera::fwi::{FwiPreset, FwiSummary};
use tessera::io::{RunDir, Staging};
use tessera::job::JobSummary;
use tessera::preset::Preset;
use tessera::protocol::auth::Token;
use tessera::protocol::{
    BackendAddr, Client, ClientEvent, DsnEpochReport, EpochReport, Event, InlineArray, InlineFile,
    IterationReport, LogLevel, LossPoint, MAX_FILES_BYTES, Request, TrainPlan,
};

use super::args::AttachArgs;
use super::output::{complain, say};

/// A progress bar on a terminal; without one (under a launcher, in a log file) about ten lines
/// per run on stderr.
pub struct Progress {
    bar: ProgressBar,
    quiet: bool,
    interactive: bool,
    iterations: usize,
}

impl Progress {
    pub fn new(name: &str, iterations: usize, quiet: bool) -> Progress {
        Self::counting(name, iterations, "it", quiet)
    }

    /// A bar over `steps` of `unit` (`it`, `epochs`).
    pub fn counting(name: &str, steps: usize, unit: &str, quiet: bool) -> Progress {
        let iterations = steps;
        let interactive = std::io::stderr().is_terminal();
        let bar = if quiet || !interactive {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(iterations as u64)
        };
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{msg}}  ETA {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(name.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar,
            quiet,
            interactive,
            iterations,
        }
    }

    pub fn started(&self, operators: usize, image_shape: &[usize], world_size: usize) {
        self.bar.set_message(format!(
            "{operators} operator(s) on {image_shape:?}, {world_size} rank(s)"
        ));
    }

    pub fn iteration(&self, report: &IterationReport) {
        self.bar.set_position(report.iteration as u64);
        if let Some(p) = report.psnr_db {
            self.bar.set_message(format!("PSNR {p:.2} dB"));
        }
        let (k, n) = (report.iteration, self.iterations);
        let every = n.div_ceil(10).max(1);
        if !self.quiet && !self.interactive && (k.is_multiple_of(every) || k == n) {
            let psnr = report
                .psnr_db
                .map(|p| format!(", PSNR {p:.2} dB"))
                .unwrap_or_default();
            complain(format_args!("iteration {k}/{n}{psnr}"));
        }
    }

    /// An FWI epoch: the loss and model error on the bar, or about ten lines per run without one.
    pub fn epoch(&self, report: &EpochReport) {
        self.bar.set_position(report.epoch as u64);
        let err = report
            .model_error
            .map(|e| format!(", model error {:.2} %", 100.0 * e))
            .unwrap_or_default();
        self.bar
            .set_message(format!("loss {:.4e}{err}", report.loss));
        let (k, n) = (report.epoch, self.iterations);
        let every = n.div_ceil(10).max(1);
        if !self.quiet && !self.interactive && (k.is_multiple_of(every) || k == n) {
            complain(format_args!("epoch {k}/{n}: loss {:.4e}{err}", report.loss));
        }
    }

    /// A reported training step: the batch loss (and its PSNR) on the bar.
    pub fn train_step(&self, point: &LossPoint) {
        self.bar.set_position(point.step as u64 + 1);
        let line = format!(
            "loss {:.4e} ({:.2} dB)",
            point.loss,
            -10.0 * point.loss.log10()
        );
        let (k, n) = (point.step + 1, self.iterations);
        let every = n.div_ceil(10).max(1);
        if !self.quiet && !self.interactive && (k.is_multiple_of(every) || k == n) {
            complain(format_args!("step {k}/{n}: {line}"));
        }
        self.bar.set_message(line);
    }

    /// A Multi-DSN epoch: the held-out target accuracy on the bar.
    pub fn dsn_epoch(&self, report: &DsnEpochReport) {
        let k = report.epoch + 1;
        self.bar.set_position(k as u64);
        let line = format!(
            "target accuracy {:.1} % (source {:.1} %)",
            100.0 * report.target_accuracy,
            100.0 * report.accuracy.first().copied().unwrap_or(0.0)
        );
        if !self.quiet && !self.interactive {
            complain(format_args!("epoch {k}/{}: {line}", self.iterations));
        }
        self.bar.set_message(line);
    }

    pub fn set_message(&self, message: String) {
        self.bar.set_message(message);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Submits the preset (or, with `resume`, continues the stopped training run in that folder on
/// the server), streams its progress, and fails unless the job finishes.
pub(super) fn run(
    address: &str,
    AttachArgs { token_file, fetch }: AttachArgs,
    name: &str,
    set: &[String],
    quiet: bool,
    resume: Option<PathBuf>,
) -> Result<()> {
    let addr: BackendAddr = address.parse()?;
    let token = match &addr {
        // The socket is the server user's own; it checks who connects.
        BackendAddr::Unix(_) => None,
        BackendAddr::Tcp(_) => {
            let path = match token_file {
                Some(f) => f,
                None => super::serve::default_token_file()?,
            };
            Some(Token::from_file(&path).context("the server's token")?)
        }
    };
    let fetch_into = fetch.map(|path| RunDir::Exact {
        path,
        replace: false,
    });
    if let Some(dest) = &fetch_into {
        dest.check()?;
    }
    let (submit, kind) = submission(&addr, name, set, quiet)?;
    let run_name = submit.name.clone();
    let client = Client::connect(&addr, token.map(|t| t.as_str().to_string()))
        .with_context(|| format!("connecting to {addr}"))?;
    client.send(match resume {
        Some(run_dir) => Request::Resume {
            preset_toml: submit.preset_toml,
            run_dir,
            preview_max_side: 16,
        },
        None => Request::Submit {
            preset_toml: submit.preset_toml,
            inline: submit.inline,
            files: submit.files,
            preview_max_side: 16,
        },
    })?;
    let progress = submit.progress;
    let mut job = None;
    let (run_dir, outputs) = loop {
        let event = match client.events().recv() {
            Ok(ClientEvent::Event(e)) => e,
            Ok(ClientEvent::Disconnected(why)) => {
                progress.finish();
                bail!("lost the connection to {addr}: {why}");
            }
            Err(_) => bail!("lost the connection to {addr}"),
        };
        let ours = |j: u64| job == Some(j);
        match event {
            Event::Accepted { job: j } if job.is_none() => {
                job = Some(j);
                if !quiet {
                    complain(format_args!("job {j} submitted to {addr}"));
                }
            }
            Event::Started {
                job: j,
                image_shape,
                operators,
                world_size,
                ..
            } if ours(j) => progress.started(operators.len(), &image_shape, world_size),
            Event::Iteration { job: j, report, .. } if ours(j) => progress.iteration(&report),
            Event::FwiStarted {
                job: j,
                model_shape: [nz, nx],
                shots,
                world_size,
                ..
            } if ours(j) => progress.set_message(format!(
                "{nz}×{nx} model, {} shots, {world_size} rank(s)",
                shots.len()
            )),
            Event::FwiEpoch { job: j, report } if ours(j) => progress.epoch(&report),
            Event::TrainStarted {
                job: j,
                plan,
                world_size,
                ..
            } if ours(j) => progress.set_message(match plan {
                TrainPlan::Denoiser { network, .. } => {
                    format!("training a {network} on {world_size} rank(s)")
                }
                TrainPlan::Dsn { domains, .. } => format!(
                    "training a Multi-DSN of {} domains on {world_size} rank(s)",
                    domains.len()
                ),
            }),
            Event::TrainStep { job: j, point } if ours(j) => progress.train_step(&point),
            Event::DsnEpoch { job: j, report } if ours(j) => progress.dsn_epoch(&report),
            Event::Log {
                level: LogLevel::Warn | LogLevel::Error,
                rank,
                message,
            } if !quiet => {
                let who = rank.map(|r| format!("rank {r}: ")).unwrap_or_default();
                progress
                    .bar
                    .suspend(|| complain(format_args!("server: {who}{message}")));
            }
            Event::Finished {
                job: j,
                run_dir,
                outputs,
                summary_json,
            } if ours(j) => {
                progress.finish();
                let printed = match kind {
                    Kind::Imaging => serde_json::from_str::<JobSummary>(&summary_json)
                        .map(|s| super::summary::print_summary(&s)),
                    Kind::Fwi => serde_json::from_str::<FwiSummary>(&summary_json)
                        .map(|s| super::summary::print_fwi_summary(&s)),
                    Kind::Train => print_training(&summary_json),
                };
                if let Err(e) = printed {
                    complain(format_args!("(the job's summary is unreadable: {e})"));
                }
                say!("  outputs on the server in {}", run_dir.display());
                break (run_dir, outputs);
            }
            Event::Cancelled {
                job: j, iterations, ..
            } if ours(j) => {
                progress.finish();
                bail!(
                    "job {j} was cancelled on the server after {iterations} {}",
                    kind.steps()
                );
            }
            Event::Failed {
                job: Some(j),
                error,
            } if ours(j) => {
                progress.finish();
                bail!("job {j} failed on {addr}: {error}");
            }
            Event::Failed { job: None, error } => {
                progress.finish();
                bail!("{addr} failed: {error}");
            }
            _ => {}
        }
    };
    if let (Some(dest), Some(job)) = (fetch_into, job) {
        // Every name is checked before the disk is touched: a server that names a file outside
        // the fetch folder (`/home/user/.bashrc`, `../x`) gets nothing created or truncated.
        let names = tessera::protocol::client::output_names(&outputs)?;
        let staging = Staging::create(&dest)?;
        for name in &names {
            let path = staging.path().join(name);
            // A training run's reconstructions are in a sub-folder.
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let mut file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            client
                .fetch_file(job, Path::new(name), &mut file)
                .with_context(|| format!("fetching {name} from {}", run_dir.display()))?;
        }
        let dir = staging.commit(&run_name)?;
        say!("  fetched {} file(s) into {}", outputs.len(), dir.display());
    }
    Ok(())
}

/// Which kind of preset a job runs (its events and summary differ).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Imaging,
    Fwi,
    /// A training preset (a denoiser or a Multi-DSN).
    Train,
}

impl Kind {
    fn steps(self) -> &'static str {
        match self {
            Kind::Imaging => "iteration(s)",
            Kind::Fwi => "epoch(s)",
            Kind::Train => "step(s) or epoch(s)",
        }
    }
}

/// What a training run prints once it ends (its `train.json`, either kind).
fn print_training(summary_json: &str) -> serde_json::Result<()> {
    let v: serde_json::Value = serde_json::from_str(summary_json)?;
    if v.get("domains").is_some() {
        let s: tessera::dsn::run::DsnSummary = serde_json::from_value(v)?;
        if let Some(e) = s.epochs.last() {
            say!(
                "{}: {} domains on {} rank(s), {} epoch(s); target accuracy {:.1} %",
                s.name,
                s.domains.len(),
                s.ranks,
                s.epochs.len(),
                100.0 * e.target_accuracy
            );
        }
        return Ok(());
    }
    let s: tessera::train::TrainSummary = serde_json::from_value(v)?;
    let last = s.loss.last().map(|p| p.loss).unwrap_or(f64::NAN);
    say!(
        "{}: {} ({} parameters) on {} rank(s), {} step(s); last loss {last:.4e} ({:.2} dB)",
        s.name,
        s.denoiser,
        s.parameters,
        s.ranks,
        s.steps,
        -10.0 * last.log10()
    );
    Ok(())
}

/// A training preset (either kind) as sent to a server: over a Unix socket (this machine) its
/// paths are made absolute; over TCP they stay as written and are the server's.
fn training_submission(
    addr: &BackendAddr,
    name: &str,
    set: &[String],
    quiet: bool,
) -> Result<Option<Submission>> {
    use tessera::dsn::run::DsnPreset;
    use tessera::train::TrainPreset;
    let loading = || format!("loading training preset `{name}`");
    let local_base = |base: &Path| -> Result<Option<PathBuf>> {
        match addr {
            BackendAddr::Unix(_) => {
                let here = std::env::current_dir().context("the working directory")?;
                Ok(Some(here.join(base)))
            }
            BackendAddr::Tcp(_) => Ok(None),
        }
    };
    let (name, toml, steps, unit) =
        if let Some((mut p, base)) = DsnPreset::load(name, set).with_context(loading)? {
            if let Some(b) = local_base(&base)? {
                p.resolve_paths(&b);
            }
            (p.name.clone(), p.to_toml()?, p.train.epochs, "epochs")
        } else {
            let is_train = tessera::preset::find_text(name, tessera::train::BUNDLED)
                .ok()
                .flatten()
                .is_some_and(|f| TrainPreset::is_train(&f.text));
            if !is_train {
                return Ok(None);
            }
            let (mut p, base) = TrainPreset::load(name, set).with_context(loading)?;
            if let Some(b) = local_base(&base)? {
                p.resolve_paths(&b);
            }
            (p.name.clone(), p.to_toml()?, p.train.steps, "steps")
        };
    Ok(Some(Submission {
        progress: Progress::counting(&name, steps, unit, quiet),
        name,
        preset_toml: toml,
        inline: Vec::new(),
        files: Vec::new(),
    }))
}

/// What goes to the server, and the progress display that follows it.
struct Submission {
    name: String,
    preset_toml: String,
    inline: Vec<InlineArray>,
    files: Vec<InlineFile>,
    progress: Progress,
}

/// Loads the preset (FWI or imaging) and prepares what a server at `addr` needs: over TCP it may
/// not see this machine's files, so an imaging job's image and measurements go along as arrays and
/// an FWI job's models and data as files; over a Unix socket (this machine) paths are made absolute.
/// Weights and TorchScript models are read by the server at their (absolute) paths.
fn submission(
    addr: &BackendAddr,
    name: &str,
    set: &[String],
    quiet: bool,
) -> Result<(Submission, Kind)> {
    if let Some((mut fwi, base_dir, _)) =
        FwiPreset::load(name, set).with_context(|| format!("loading preset `{name}`"))?
    {
        let files = match addr {
            BackendAddr::Tcp(_) => fwi
                .pack_files(&base_dir, MAX_FILES_BYTES)
                .context("the preset's files, sent with the job")?
                .into_iter()
                .map(|(name, bytes)| InlineFile { name, bytes })
                .collect(),
            BackendAddr::Unix(_) => {
                let here = std::env::current_dir().context("the working directory")?;
                fwi.resolve_paths(&here.join(&base_dir));
                Vec::new()
            }
        };
        let progress = Progress::counting(&fwi.name, fwi.fwi.epochs, "epochs", quiet);
        let submission = Submission {
            name: fwi.name.clone(),
            preset_toml: fwi.to_toml()?,
            inline: Vec::new(),
            files,
            progress,
        };
        return Ok((submission, Kind::Fwi));
    }
    if let Some(submission) = training_submission(addr, name, set, quiet)? {
        return Ok((submission, Kind::Train));
    }
    let loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let mut preset = loaded.preset;
    let inline = match addr {
        BackendAddr::Tcp(_) => inline_files(&mut preset)?,
        BackendAddr::Unix(_) => Vec::new(),
    };
    let submission = Submission {
        name: preset.name.clone(),
        preset_toml: preset.to_toml()?,
        inline,
        files: Vec::new(),
        progress: Progress::new(&preset.name, preset.algorithm.iterations(), quiet),
    };
    Ok((submission, Kind::Imaging))
}

/// Moves the preset's image and measurement files into arrays sent with the job.
fn inline_files(preset: &mut Preset) -> Result<Vec<InlineArray>> {
    let mut inline = Vec::new();
    let mut read = |name: String, path: &Path| -> Result<()> {
        let x = tessera::io::read_array(path)?;
        inline.push(InlineArray {
            name,
            shape: x.shape().to_vec(),
            data: x.into_data(),
        });
        Ok(())
    };
    if let Some(path) = preset.image.path.take() {
        read("image".into(), &path)?;
        preset.image.inline = Some("image".into());
    }
    if let Some(m) = &mut preset.measurements
        && !m.paths.is_empty()
    {
        for (i, path) in std::mem::take(&mut m.paths).iter().enumerate() {
            let name = format!("measurement_{i}");
            read(name.clone(), path)?;
            m.inline.push(name);
        }
    }
    Ok(inline)
}
