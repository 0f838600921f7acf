//! What the workbench knows about the backend and its jobs, built only from [`Event`]s.
//!
//! [`Session::apply`] is the single place where events change state, so tests can feed events and
//! check what the panels will draw. Events of a job other than the current one (a late preview of a
//! cancelled run) are dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dsn::run::DsnSummary;
use crate::protocol::{
    DsnEpochReport, EpochReport, Event, JobId, LogLevel, LossPoint, OperatorInfo, PatchMap,
    RankIteration, Shot, TrainPlan,
};
use crate::train::TrainSummary;

/// Where a job stands.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    Idle,
    /// Submitted, not yet accepted or started.
    Submitted,
    Running {
        job: JobId,
    },
    /// Stop was asked; the job's own final event decides between finished and stopped.
    Stopping {
        job: JobId,
    },
    Finished {
        job: JobId,
    },
    Failed {
        error: String,
    },
    Cancelled {
        job: JobId,
    },
}

/// One iteration as the plots need it.
#[derive(Debug, Clone, PartialEq)]
pub struct IterationPoint {
    pub iteration: usize,
    pub psnr_db: Option<f64>,
    pub objective: Option<f64>,
    pub ranks: Vec<RankIteration>,
}

/// A line of the log panel.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub level: LogLevel,
    pub text: String,
}

/// Backend description from its `Welcome`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BackendInfo {
    pub server: String,
    pub world_size: usize,
    pub devices: Vec<crate::protocol::RankDevice>,
    pub transport: crate::protocol::Transport,
}

/// A rank an elastic job lost (`Event::Regrouped`), named by the rank it started the job as.
#[derive(Debug, Clone, PartialEq)]
pub struct LostRank {
    pub rank: usize,
    /// The iteration the group that went on without it resumed after.
    pub resumed_from: usize,
}

/// An elastic job's group as the plots draw it: each rank keeps the number it started the job
/// with (its colour and its timing line), whatever rank the re-formed groups give it; a
/// replacement that joined takes the next unused number.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankNames {
    /// The name of each rank of the current group (empty: the ranks the job started with).
    pub current: Vec<usize>,
    /// The next name for a rank that joins.
    pub next: usize,
    /// Every rank the job lost, in order.
    pub lost: Vec<LostRank>,
    /// From a regroup until the first iteration after it: the tiles as the lost ranks left them,
    /// drawn greyed before the new owners' map replaces them.
    pub orphaned_tiles: Option<Arc<PatchMap>>,
}

impl RankNames {
    fn started(world_size: usize) -> RankNames {
        RankNames {
            next: world_size,
            ..RankNames::default()
        }
    }

    /// The name of rank `rank` of the current group.
    pub fn of(&self, rank: usize) -> usize {
        self.current.get(rank).copied().unwrap_or(rank)
    }

    /// Renames by a regroup: the lost ranks leave, each rank of the new group takes the name of
    /// its previous rank, each joiner a new one. Returns the lost ranks' and the joiners' names.
    fn regroup(
        &mut self,
        lost_ranks: &[usize],
        previous_ranks: &[Option<usize>],
        resumed_from: usize,
    ) -> (Vec<usize>, Vec<usize>) {
        let lost: Vec<usize> = lost_ranks.iter().map(|&r| self.of(r)).collect();
        let mut joined = Vec::new();
        let current = previous_ranks
            .iter()
            .map(|p| match p {
                Some(r) => self.of(*r),
                None => {
                    joined.push(self.next);
                    self.next += 1;
                    self.next - 1
                }
            })
            .collect();
        self.current = current;
        self.lost
            .extend(lost.iter().map(|&rank| LostRank { rank, resumed_from }));
        (lost, joined)
    }

    /// A map of the current group's tiles with each owner renamed.
    fn rename_map(&self, map: PatchMap) -> PatchMap {
        PatchMap {
            tiles: map
                .tiles
                .into_iter()
                .map(|mut t| {
                    t.rank = self.of(t.rank);
                    t
                })
                .collect(),
            ..map
        }
    }
}

/// Per-rank totals over a run, for the summary table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankTotals {
    pub rank: usize,
    pub gradient_secs: f64,
    pub denoiser_secs: f64,
    pub communication_secs: f64,
    pub iterations: usize,
}

/// A full-waveform inversion job as its events described it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FwiRun {
    /// `[nz, nx]` cells.
    pub model_shape: [usize; 2],
    /// `[dz, dx]`, metres.
    pub spacing_m: [f64; 2],
    pub shots: Vec<Shot>,
    pub epochs: usize,
    pub step_ratio: usize,
    /// One report per finished epoch (loss, model error, batch, per-rank shots and times).
    pub history: Vec<EpochReport>,
}

/// A training job (denoiser or Multi-DSN) as its events, and then its `train.json`, described it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRun {
    pub name: String,
    /// None for a run reopened from its folder (its `train.json` says what it did).
    pub plan: Option<TrainPlan>,
    pub world_size: usize,
    /// Denoiser training: the reported steps.
    pub steps: Vec<LossPoint>,
    /// Multi-DSN: the epochs so far.
    pub epochs: Vec<DsnEpochReport>,
    /// The run's `train.json` once it ended (per-rank times, weights, reconstructions).
    pub result: Option<TrainResult>,
    /// The run's folder (where `train.json`'s relative paths point), once known.
    pub run_dir: Option<PathBuf>,
}

/// A finished training run's `train.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainResult {
    Denoiser(TrainSummary),
    Dsn(DsnSummary),
}

impl TrainResult {
    /// Reads `train.json` text of either kind.
    pub fn parse(json: &str) -> Result<TrainResult, String> {
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let r = if v.get("domains").is_some() {
            serde_json::from_value(v).map(TrainResult::Dsn)
        } else {
            serde_json::from_value(v).map(TrainResult::Denoiser)
        };
        r.map_err(|e| e.to_string())
    }
}

impl TrainRun {
    /// A finished run read back from its folder's `train.json`.
    pub fn reopened(folder: &std::path::Path) -> Result<TrainRun, String> {
        let path = folder.join(crate::io::TRAIN_SUMMARY_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let result = TrainResult::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let (name, world_size, steps, epochs) = match &result {
            TrainResult::Denoiser(s) => {
                let steps = s.loss.iter().map(Into::into).collect();
                (s.name.clone(), s.ranks, steps, Vec::new())
            }
            TrainResult::Dsn(s) => {
                let epochs = s.epochs.iter().map(Into::into).collect();
                (s.name.clone(), s.ranks, Vec::new(), epochs)
            }
        };
        Ok(TrainRun {
            name,
            plan: None,
            world_size,
            steps,
            epochs,
            result: Some(result),
            run_dir: Some(folder.to_path_buf()),
        })
    }

    /// Whether it trains a Multi-DSN.
    pub fn is_dsn(&self) -> bool {
        matches!(self.plan, Some(TrainPlan::Dsn { .. }))
            || matches!(self.result, Some(TrainResult::Dsn(_)))
    }

    /// A path from `train.json` (relative to the run folder when the backend wrote it; absolute
    /// from `tessera train`) as a path here.
    pub fn output_path(&self, p: &std::path::Path) -> Option<PathBuf> {
        match &self.run_dir {
            Some(dir) if p.is_relative() => Some(dir.join(p)),
            _ if p.is_absolute() => Some(p.to_path_buf()),
            _ => None,
        }
    }
}

/// The ranks' devices in a job's `metrics.json` (`job::JobSummary::devices`): none for a CPU run,
/// a training job's summary, an older server's or one that does not parse (the Timing tab reports
/// a broken file; the device table is then just absent).
pub fn devices_of(summary_json: &str) -> Vec<crate::job::RankDeviceUse> {
    #[derive(serde::Deserialize)]
    struct Devices {
        #[serde(default)]
        devices: Vec<crate::job::RankDeviceUse>,
    }
    serde_json::from_str::<Devices>(summary_json)
        .map(|d| d.devices)
        .unwrap_or_default()
}

/// The state the panels draw.
#[derive(Debug, Default)]
pub struct Session {
    pub connected: bool,
    pub backend: Option<BackendInfo>,
    pub state: JobStateCell,
    pub job_name: String,
    pub iterations_planned: usize,
    pub image_shape: Vec<usize>,
    pub operators: Vec<OperatorInfo>,
    /// Which rank denoises which tile, its ranks named as in [`RankNames`].
    pub patch_map: Option<Arc<PatchMap>>,
    /// The ranks of an elastic job's group (lost, joined, renumbered).
    pub ranks: RankNames,
    /// Iterations with each rank's times under its [`RankNames`] name.
    pub history: Vec<IterationPoint>,
    /// The FWI job on screen (None for imaging jobs).
    pub fwi: Option<FwiRun>,
    /// The training job on screen, live or reopened.
    pub training: Option<TrainRun>,
    pub outputs: Vec<PathBuf>,
    /// The finished (or stopped) run's folder on the backend's machine.
    pub run_dir: Option<PathBuf>,
    pub summary_json: Option<String>,
    /// The finished run's devices and their memory, per rank (from its `metrics.json`; empty for
    /// a run on the CPU).
    pub devices_used: Vec<crate::job::RankDeviceUse>,
    pub log: Vec<LogLine>,
    /// After a remote attach: adopt the next job that starts (the server replays the running one).
    pub adopt_next_job: bool,
    /// The newest error, shown in a banner until dismissed.
    pub error: Option<String>,
}

/// [`JobState`] with a default.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStateCell(pub JobState);

impl Default for JobStateCell {
    fn default() -> Self {
        JobStateCell(JobState::Idle)
    }
}

/// Lines kept in the log panel.
const MAX_LOG_LINES: usize = 2000;

impl Session {
    pub fn state(&self) -> &JobState {
        &self.state.0
    }

    /// The job whose events are drawn.
    pub fn current_job(&self) -> Option<JobId> {
        match self.state.0 {
            JobState::Running { job }
            | JobState::Stopping { job }
            | JobState::Finished { job }
            | JobState::Cancelled { job } => Some(job),
            _ => None,
        }
    }

    pub fn is_busy(&self) -> bool {
        matches!(
            self.state.0,
            JobState::Submitted | JobState::Running { .. } | JobState::Stopping { .. }
        )
    }

    pub fn log(&mut self, level: LogLevel, text: impl Into<String>) {
        let text = text.into();
        if level == LogLevel::Error {
            self.error = Some(text.clone());
        }
        self.log.push(LogLine { level, text });
        if self.log.len() > MAX_LOG_LINES {
            let excess = self.log.len() - MAX_LOG_LINES;
            self.log.drain(..excess);
        }
    }

    /// The folder of the stopped denoiser training on screen, when its checkpoint is among its
    /// outputs (it can then be resumed).
    pub fn resumable_run(&self) -> Option<&Path> {
        let stopped = matches!(self.state.0, JobState::Cancelled { .. });
        let denoiser = self.training.as_ref().is_some_and(|t| !t.is_dsn());
        let dir = self.run_dir.as_deref()?;
        let checkpoint = dir.join("checkpoint").join("checkpoint.json");
        (stopped && denoiser && self.outputs.contains(&checkpoint)).then_some(dir)
    }

    /// A new run was submitted: forget the previous one's curves.
    pub fn submitted(&mut self) {
        self.adopt_next_job = false;
        self.state = JobStateCell(JobState::Submitted);
        self.history.clear();
        self.fwi = None;
        self.training = None;
        self.outputs.clear();
        self.run_dir = None;
        self.summary_json = None;
        self.devices_used.clear();
        self.patch_map = None;
        self.error = None;
    }

    /// The connection is gone; a running job is lost with it.
    pub fn disconnected(&mut self, reason: &str) {
        self.connected = false;
        if self.is_busy() {
            self.state = JobStateCell(JobState::Failed {
                error: format!("the backend went away: {reason}"),
            });
        }
        self.log(LogLevel::Error, format!("backend disconnected: {reason}"));
    }

    /// A new backend replaced the one the current job ran on (Restart, Attach…): the old one and
    /// its job are gone, so the job ends here — no event of it will ever come, and a Stop would
    /// ask the new backend about a job it never had.
    pub fn backend_replaced(&mut self) {
        let job = match self.state.0 {
            JobState::Running { job } | JobState::Stopping { job } => format!("job {job}"),
            JobState::Submitted => "the submitted job".to_string(),
            _ => return,
        };
        let error = format!("{job} ended: the backend it ran on was replaced");
        self.state = JobStateCell(JobState::Failed {
            error: error.clone(),
        });
        self.log(LogLevel::Error, error);
    }

    /// Whether an event belongs to the current job (or the job just submitted).
    fn is_current(&self, job: JobId) -> bool {
        match self.state.0 {
            JobState::Submitted => true,
            _ => self.current_job() == Some(job),
        }
    }

    /// Applies one event. Previews are handled by the preview pump, not here.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Welcome {
                server,
                world_size,
                devices,
                backend,
                ..
            } => {
                self.connected = true;
                self.log(
                    LogLevel::Info,
                    format!("connected to {server}: {world_size} rank(s) over {backend}"),
                );
                self.backend = Some(BackendInfo {
                    server,
                    world_size,
                    devices,
                    transport: backend,
                });
            }
            Event::Refused { reason } => {
                self.connected = false;
                self.log(
                    LogLevel::Error,
                    format!("the backend refused the connection: {reason}"),
                );
            }
            Event::Accepted { job } => {
                if self.state.0 == JobState::Submitted {
                    self.state = JobStateCell(JobState::Running { job });
                }
            }
            Event::Started {
                job,
                name,
                image_shape,
                operators,
                iterations,
                patch_map,
                world_size,
                ..
            } => {
                if !self.is_current(job) && !std::mem::take(&mut self.adopt_next_job) {
                    return;
                }
                if self.state.0 != (JobState::Stopping { job }) {
                    self.state = JobStateCell(JobState::Running { job });
                }
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} ({name}) started: {} operator(s) on {image_shape:?}, {world_size} rank(s)",
                        operators.len()
                    ),
                );
                self.job_name = name;
                self.image_shape = image_shape;
                self.operators = operators;
                self.iterations_planned = iterations;
                self.patch_map = patch_map.map(Arc::new);
                self.ranks = RankNames::started(world_size);
                self.history.clear();
                self.fwi = None;
                self.training = None;
            }
            Event::Regrouped {
                job,
                generation,
                lost_ranks,
                previous_ranks,
                resumed_from,
                operators,
                patch_map,
            } => {
                if !self.is_current(job) {
                    return;
                }
                let (lost, joined) = self
                    .ranks
                    .regroup(&lost_ranks, &previous_ranks, resumed_from);
                // A group grows without a loss (`tessera join`) as well as it shrinks.
                let what = match (lost.is_empty(), joined.is_empty()) {
                    (false, true) => format!("lost rank(s) {lost:?}"),
                    (false, false) => format!("lost rank(s) {lost:?}, rank(s) {joined:?} joined"),
                    (true, _) => format!("grew: rank(s) {joined:?} joined"),
                };
                self.log(
                    LogLevel::Warn,
                    format!(
                        "job {job} {what}: {} rank(s) go on after iteration {resumed_from} \
                         (generation {generation}; ranks keep the numbers they started with)",
                        previous_ranks.len()
                    ),
                );
                self.operators = operators
                    .into_iter()
                    .map(|o| OperatorInfo {
                        rank: self.ranks.of(o.rank),
                        ..o
                    })
                    .collect();
                self.ranks.orphaned_tiles = self.patch_map.take();
                self.patch_map = patch_map.map(|m| Arc::new(self.ranks.rename_map(m)));
            }
            Event::FwiStarted {
                job,
                name,
                world_size,
                model_shape,
                spacing_m,
                shots,
                epochs,
                step_ratio,
                ..
            } => {
                if !self.is_current(job) && !std::mem::take(&mut self.adopt_next_job) {
                    return;
                }
                if self.state.0 != (JobState::Stopping { job }) {
                    self.state = JobStateCell(JobState::Running { job });
                }
                let [nz, nx] = model_shape;
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} ({name}) started: FWI of a {nz}×{nx} model, {} shots, {epochs} epochs on {world_size} rank(s)",
                        shots.len()
                    ),
                );
                self.job_name = name;
                self.iterations_planned = epochs;
                self.image_shape = vec![1, 1, nz, nx];
                self.operators.clear();
                self.patch_map = None;
                self.ranks = RankNames::started(world_size);
                self.history.clear();
                self.training = None;
                self.fwi = Some(FwiRun {
                    model_shape,
                    spacing_m,
                    shots,
                    epochs,
                    step_ratio,
                    history: Vec::new(),
                });
            }
            Event::FwiEpoch { job, report } => {
                if !self.is_current(job) {
                    return;
                }
                if let Some(f) = &mut self.fwi {
                    f.history.push(report);
                }
            }
            Event::TrainStarted {
                job,
                name,
                world_size,
                plan,
                ..
            } => {
                if !self.is_current(job) && !std::mem::take(&mut self.adopt_next_job) {
                    return;
                }
                if self.state.0 != (JobState::Stopping { job }) {
                    self.state = JobStateCell(JobState::Running { job });
                }
                let what = match &plan {
                    TrainPlan::Denoiser { network, steps, .. } => {
                        format!("{network} for {steps} steps")
                    }
                    TrainPlan::Dsn {
                        domains, epochs, ..
                    } => format!("Multi-DSN of {} domains for {epochs} epochs", domains.len()),
                };
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} ({name}) started: training a {what} on {world_size} rank(s)"
                    ),
                );
                self.job_name = name.clone();
                self.iterations_planned = plan.length();
                self.image_shape.clear();
                self.operators.clear();
                self.patch_map = None;
                self.ranks = RankNames::started(world_size);
                self.history.clear();
                self.fwi = None;
                self.training = Some(TrainRun {
                    name,
                    plan: Some(plan),
                    world_size,
                    steps: Vec::new(),
                    epochs: Vec::new(),
                    result: None,
                    run_dir: None,
                });
            }
            Event::TrainStep { job, point } => {
                if self.is_current(job)
                    && let Some(t) = &mut self.training
                {
                    t.steps.push(point);
                }
            }
            Event::DsnEpoch { job, report } => {
                if self.is_current(job)
                    && let Some(t) = &mut self.training
                {
                    t.epochs.push(report);
                }
            }
            Event::Iteration { job, report, ranks } => {
                if !self.is_current(job) {
                    return;
                }
                self.ranks.orphaned_tiles = None;
                let ranks = ranks
                    .into_iter()
                    .map(|r| RankIteration {
                        rank: self.ranks.of(r.rank),
                        ..r
                    })
                    .collect();
                self.history.push(IterationPoint {
                    iteration: report.iteration,
                    psnr_db: report.psnr_db,
                    objective: report.objective,
                    ranks,
                });
            }
            Event::Preview { .. } => {}
            Event::Log {
                level,
                rank,
                message,
            } => {
                let text = match rank {
                    Some(r) => format!("[rank {r}] {message}"),
                    None => message,
                };
                self.log(level, text);
            }
            Event::Finished {
                job,
                run_dir,
                outputs,
                summary_json,
            } => {
                if !self.is_current(job) {
                    return;
                }
                // The server's word is final: a Stop that came after the last iteration did not
                // stop anything.
                self.state = JobStateCell(JobState::Finished { job });
                self.log(
                    LogLevel::Info,
                    format!(
                        "job {job} finished; {} output file(s) in {}",
                        outputs.len(),
                        run_dir.display()
                    ),
                );
                self.outputs = outputs.iter().map(|o| run_dir.join(o)).collect();
                self.training_ended(Some(&run_dir), Some(&summary_json));
                self.run_dir = Some(run_dir);
                self.devices_used = devices_of(&summary_json);
                self.summary_json = Some(summary_json);
            }
            Event::Cancelled {
                job,
                iterations,
                run_dir,
                outputs,
                summary_json,
            } => {
                if !self.is_current(job) {
                    return;
                }
                self.state = JobStateCell(JobState::Cancelled { job });
                self.log(
                    LogLevel::Info,
                    format!("job {job} cancelled after {iterations} {}", self.unit()),
                );
                if let Some(dir) = &run_dir {
                    self.outputs = outputs.iter().map(|o| dir.join(o)).collect();
                }
                self.training_ended(run_dir.as_deref(), summary_json.as_deref());
                self.run_dir = run_dir;
                self.devices_used = summary_json.as_deref().map(devices_of).unwrap_or_default();
                self.summary_json = summary_json;
            }
            Event::Failed { job, error } => {
                if let Some(job) = job
                    && !self.is_current(job)
                {
                    return;
                }
                if self.is_busy() {
                    self.state = JobStateCell(JobState::Failed {
                        error: error.clone(),
                    });
                }
                self.log(LogLevel::Error, format!("job failed: {error}"));
            }
            Event::Status { .. } | Event::File { .. } | Event::FetchFailed { .. } => {}
        }
    }

    /// A training job's terminal event: its `train.json` becomes the result.
    fn training_ended(&mut self, run_dir: Option<&std::path::Path>, json: Option<&str>) {
        let Some(t) = &mut self.training else { return };
        t.run_dir = run_dir.map(std::path::Path::to_path_buf);
        match json.map(TrainResult::parse) {
            Some(Ok(r)) => t.result = Some(r),
            Some(Err(e)) => self.log(
                LogLevel::Warn,
                format!("the training run's train.json is unreadable: {e}"),
            ),
            None => {}
        }
    }

    /// The user asked to stop the current job (its final event says how it ended).
    pub fn stopping(&mut self) {
        if let JobState::Running { job } = self.state.0 {
            self.state = JobStateCell(JobState::Stopping { job });
        }
    }

    /// Forgets the last run's results (a new preset was opened): curves, patch map, outputs.
    pub fn clear_run(&mut self) {
        if !self.is_busy() {
            self.state = JobStateCell(JobState::Idle);
        }
        self.history.clear();
        self.fwi = None;
        self.training = None;
        self.outputs.clear();
        self.run_dir = None;
        self.summary_json = None;
        self.devices_used.clear();
        self.patch_map = None;
        self.operators.clear();
        self.image_shape.clear();
    }

    /// What the current job counts: an imaging job's iterations, an FWI or Multi-DSN job's
    /// epochs, a denoiser training's steps.
    pub fn unit(&self) -> &'static str {
        match (&self.training, &self.fwi) {
            (Some(t), _) if !t.is_dsn() => "step(s)",
            (Some(_), _) | (None, Some(_)) => "epoch(s)",
            (None, None) => "iteration(s)",
        }
    }

    /// How far the current job is, in its own unit: (done, planned; 0 when not known).
    pub fn progress(&self) -> Option<(usize, usize)> {
        let done = match (&self.training, &self.fwi) {
            (Some(t), _) if t.is_dsn() => Some(t.epochs.len()),
            (Some(t), _) => t.steps.last().map(|p| p.step + 1),
            (None, Some(f)) => f.history.last().map(|e| e.epoch),
            (None, None) => self.history.last().map(|p| p.iteration),
        }?;
        Some((done, self.iterations_planned))
    }

    /// PSNR of the newest iteration that has one.
    pub fn latest_psnr(&self) -> Option<f64> {
        self.history.iter().rev().find_map(|p| p.psnr_db)
    }

    /// Per-rank sums over the iterations so far, by rank.
    pub fn rank_totals(&self) -> Vec<RankTotals> {
        let mut totals: Vec<RankTotals> = Vec::new();
        for p in &self.history {
            for r in &p.ranks {
                if totals.len() <= r.rank {
                    totals.resize_with(r.rank + 1, Default::default);
                }
                let t = &mut totals[r.rank];
                t.rank = r.rank;
                t.gradient_secs += r.gradient_secs;
                t.denoiser_secs += r.denoiser_secs;
                t.communication_secs += r.communication_secs;
                t.iterations += 1;
            }
        }
        totals.retain(|t| t.iterations > 0);
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ComponentTimes, IterationReport};

    fn iteration(job: JobId, k: usize, psnr: f64) -> Event {
        Event::Iteration {
            job,
            report: IterationReport {
                iteration: k,
                iterations: 3,
                psnr_db: Some(psnr),
                ssim: None,
                objective: None,
                relative_change: 0.1,
                times: ComponentTimes::default(),
            },
            ranks: (0..2)
                .map(|rank| RankIteration {
                    rank,
                    gradient_secs: 0.5,
                    denoiser_secs: 0.25,
                    communication_secs: 0.125,
                })
                .collect(),
        }
    }

    #[test]
    fn events_of_other_jobs_are_dropped() {
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 2 });
        s.apply(iteration(2, 1, 20.0));
        s.apply(iteration(1, 5, 99.0)); // a late event of an older job
        assert_eq!(s.history.len(), 1);
        assert_eq!(s.latest_psnr(), Some(20.0));
        s.apply(iteration(2, 2, 21.0));
        let totals = s.rank_totals();
        assert_eq!(totals.len(), 2);
        assert_eq!(totals[1].gradient_secs, 1.0);
        assert_eq!(totals[1].iterations, 2);
        s.apply(Event::Finished {
            job: 2,
            run_dir: "/tmp/run".into(),
            outputs: vec![],
            summary_json: "{}".into(),
        });
        assert_eq!(s.state(), &JobState::Finished { job: 2 });
    }

    #[test]
    fn a_dead_backend_fails_the_running_job_and_shows_an_error() {
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 1 });
        s.disconnected("broken pipe");
        assert!(matches!(s.state(), JobState::Failed { .. }));
        assert!(s.error.as_deref().unwrap().contains("broken pipe"));
        assert!(!s.is_busy());
    }

    /// A finished job's `metrics.json` gives the Distribution panel each rank's device (the fields
    /// a device run adds); a CPU run's, an older server's and a broken one give none, and the next
    /// submission forgets them.
    #[test]
    fn a_finished_runs_devices_are_decoded_from_its_metrics() {
        let device = r#"{"name": "x", "world_size": 2, "devices": [
            {"rank": 0, "name": "NVIDIA H100 80GB HBM3", "device": "cuda:0",
             "total_bytes": 85899345920, "peak_bytes": 1048576, "estimated_bytes": 2097152},
            {"rank": 1, "name": "NVIDIA H100 80GB HBM3", "device": "cuda:0",
             "total_bytes": 85899345920, "peak_bytes": 524288, "estimated_bytes": 1048576}]}"#;
        let decoded = devices_of(device);
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[1].rank, 1);
        assert_eq!(decoded[0].device, "cuda:0");
        assert_eq!(decoded[0].total_bytes, 80 << 30);
        assert_eq!(decoded[1].peak_bytes, 1 << 19);
        assert_eq!(decoded[0].estimated_bytes, 2 << 20);
        for none in [
            r#"{"name": "cpu run", "world_size": 1}"#,
            "{}",
            "not json",
            r#"{"devices": 3}"#,
        ] {
            assert!(devices_of(none).is_empty(), "{none}");
        }
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 4 });
        s.apply(Event::Finished {
            job: 4,
            run_dir: "/tmp/run".into(),
            outputs: vec![],
            summary_json: device.into(),
        });
        assert_eq!(s.devices_used, decoded);
        s.submitted();
        assert!(s.devices_used.is_empty());
    }

    fn tiles_of(ranks: &[usize]) -> PatchMap {
        PatchMap {
            spatial: vec![8, 8 * ranks.len()],
            tiles: ranks
                .iter()
                .enumerate()
                .map(|(i, &rank)| crate::protocol::PatchTile {
                    window: vec![(0, 8), (8 * i as i64, 8)],
                    region: vec![(0, 8), (8 * i, 8)],
                    rank,
                })
                .collect(),
        }
    }

    fn on_ranks(job: JobId, k: usize, world: usize) -> Event {
        let Event::Iteration { report, .. } = iteration(job, k, 20.0) else {
            unreachable!()
        };
        Event::Iteration {
            job,
            report,
            ranks: (0..world)
                .map(|rank| RankIteration {
                    rank,
                    gradient_secs: 1.0,
                    denoiser_secs: 0.0,
                    communication_secs: 0.0,
                })
                .collect(),
        }
    }

    /// An elastic job's regroups: each rank keeps the name it started with (its colour and its
    /// timing line), a replacement takes a new one, the lost ranks' tiles stay on screen until
    /// the first iteration of the new group, and every later iteration's times land on the
    /// right names.
    #[test]
    fn a_regrouped_job_keeps_each_ranks_name_and_greys_the_lost_tiles_once() {
        let mut s = Session::default();
        s.submitted();
        s.apply(Event::Accepted { job: 3 });
        s.apply(Event::Started {
            job: 3,
            name: "multiblur".into(),
            world_size: 3,
            devices: Vec::new(),
            image_shape: vec![1, 1, 8, 24],
            operators: Vec::new(),
            iterations: 9,
            patch_map: Some(tiles_of(&[0, 1, 2])),
        });
        s.apply(on_ranks(3, 1, 3));
        // Rank 1 is lost; rank 2 becomes rank 1 and a replacement joins as rank 2.
        s.apply(Event::Regrouped {
            job: 3,
            generation: 1,
            lost_ranks: vec![1],
            previous_ranks: vec![Some(0), Some(2), None],
            resumed_from: 1,
            operators: vec![OperatorInfo {
                name: "blur".into(),
                rank: 2,
            }],
            patch_map: Some(tiles_of(&[2, 0, 1])),
        });
        assert_eq!(s.ranks.current, vec![0, 2, 3]);
        assert_eq!(s.operators[0].rank, 3);
        let greyed = s.ranks.orphaned_tiles.clone().expect("the lost tiles");
        assert_eq!(greyed.tiles_per_rank(), vec![1, 1, 1]);
        let map = s.patch_map.clone().unwrap();
        let owners: Vec<usize> = map.tiles.iter().map(|t| t.rank).collect();
        assert_eq!(owners, vec![3, 0, 2]);
        assert!(
            s.log
                .last()
                .unwrap()
                .text
                .contains("lost rank(s) [1], rank(s) [3] joined"),
            "{:?}",
            s.log.last()
        );
        s.apply(on_ranks(3, 2, 3));
        assert!(s.ranks.orphaned_tiles.is_none());
        // Then the group's rank 0 (name 0) is lost: names 2 and 3 go on as ranks 0 and 1.
        s.apply(Event::Regrouped {
            job: 3,
            generation: 2,
            lost_ranks: vec![0],
            previous_ranks: vec![Some(1), Some(2)],
            resumed_from: 2,
            operators: Vec::new(),
            patch_map: None,
        });
        s.apply(on_ranks(3, 3, 2));
        assert_eq!(s.ranks.current, vec![2, 3]);
        let lost: Vec<(usize, usize)> = s
            .ranks
            .lost
            .iter()
            .map(|l| (l.rank, l.resumed_from))
            .collect();
        assert_eq!(lost, vec![(1, 1), (0, 2)]);
        let totals: Vec<(usize, usize)> = s
            .rank_totals()
            .iter()
            .map(|t| (t.rank, t.iterations))
            .collect();
        assert_eq!(totals, vec![(0, 2), (1, 1), (2, 3), (3, 2)]);
        // The next job starts with its own ranks.
        s.submitted();
        s.apply(Event::Accepted { job: 4 });
        s.apply(Event::Started {
            job: 4,
            name: "quick".into(),
            world_size: 2,
            devices: Vec::new(),
            image_shape: vec![1, 1, 8, 8],
            operators: Vec::new(),
            iterations: 3,
            patch_map: None,
        });
        assert_eq!(s.ranks, RankNames::started(2));
    }
}
