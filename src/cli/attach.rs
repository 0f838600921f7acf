//! `tessera run PRESET --attach ADDRESS`: the preset runs on a `tessera serve` backend (which may be
//! serving a workbench at the same time) while this terminal shows its progress like a local run;
//! the exit status says whether the job succeeded, the backend stays up, and `--fetch DIR` copies
//! the run's files back. Also the progress display that local runs share.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

use tessera::io::{RunDir, Staging};
use tessera::job::JobSummary;
use tessera::optim::IterationReport;
use tessera::preset::Preset;
use tessera::protocol::auth::Token;
use tessera::protocol::{BackendAddr, Client, ClientEvent, Event, InlineArray, LogLevel, Request};

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

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Submits the preset, streams its progress, and fails unless the job finishes.
pub fn run(
    address: &str,
    token_file: Option<&Path>,
    name: &str,
    set: &[String],
    fetch: Option<PathBuf>,
    quiet: bool,
) -> Result<()> {
    let addr: BackendAddr = address.parse()?;
    let token = match &addr {
        // The socket is the server user's own; it checks who connects.
        BackendAddr::Unix(_) => None,
        BackendAddr::Tcp(_) => {
            let path = match token_file {
                Some(f) => f.to_path_buf(),
                None => super::default_token_file()?,
            };
            Some(Token::from_file(&path).context("the server's token")?)
        }
    };
    let loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let mut preset = loaded.preset;
    // A server reached over TCP may not see this machine's files: the image and measurements go
    // along with the job. Weights and models are read by the server at their (absolute) paths.
    let inline = match &addr {
        BackendAddr::Tcp(_) => inline_files(&mut preset)?,
        BackendAddr::Unix(_) => Vec::new(),
    };
    let fetch_into = fetch.map(|path| RunDir::Exact {
        path,
        replace: false,
    });
    if let Some(dest) = &fetch_into {
        dest.check()?;
    }
    let client = Client::connect(&addr, token.map(|t| t.as_str().to_string()))
        .with_context(|| format!("connecting to {addr}"))?;
    client.send(Request::Submit {
        preset_toml: preset.to_toml()?,
        inline,
        preview_max_side: 16,
    })?;
    let progress = Progress::new(&preset.name, preset.algorithm.iterations(), quiet);
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
                match serde_json::from_str::<JobSummary>(&summary_json) {
                    Ok(summary) => super::print_summary(&summary),
                    Err(e) => complain(format_args!("(the job's summary is unreadable: {e})")),
                }
                say!("  outputs on the server in {}", run_dir.display());
                break (run_dir, outputs);
            }
            Event::Cancelled {
                job: j, iterations, ..
            } if ours(j) => {
                progress.finish();
                bail!("job {j} was cancelled on the server after {iterations} iteration(s)");
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
        let staging = Staging::create(&dest)?;
        for name in &outputs {
            let path = staging.path().join(name);
            let mut file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            client.fetch_file(job, name, &mut file).with_context(|| {
                format!("fetching {} from {}", name.display(), run_dir.display())
            })?;
        }
        let dir = staging.commit(&preset.name)?;
        say!("  fetched {} file(s) into {}", outputs.len(), dir.display());
    }
    Ok(())
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
