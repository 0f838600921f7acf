//! `tessera serve`: a process group that stays up between jobs, with rank 0 hosting a control
//! socket for the workbench (see `crate::protocol`).
//!
//! Every rank runs [`serve`]. Rank 0 (the coordinator) accepts connections ([`accept`]: a Unix
//! socket for this user only, or TCP with a token), queues submitted jobs, and for each job
//! broadcasts `RankCommand::Run` (preset TOML, inline arrays); the other ranks loop on that
//! broadcast. All ranks then run `job::run_in_group_with` (on an elastic backend,
//! `job::run_elastic_lent`: see [`ElasticBackend`]). After every iteration the ranks exchange one
//! tiny record each (`all_gather` of a stop flag and this iteration's gradient, denoiser and
//! communication seconds, on the iteration's own group: `job::IterationRanks`), so a cancel set on
//! rank 0 stops every rank at the same iteration and rank 0 learns the per-rank times it streams. Rank 0 turns job events into protocol events through
//! [`hub::Hub`] (history for re-attach, fan-out to clients) and [`preview::PreviewWorker`]
//! (downsampling off the ranks' path). Every job ends with exactly one of `Finished`, `Cancelled`
//! or `Failed`, and writes into a folder of its own (`<out>/<YYYYMMDD-HHMMSS>-<preset>-<n>`, staged
//! under a hidden name until complete).
//!
//! Failure policy: rank 0 checks a submission (preset, inline arrays, image shape, tiling against the
//! image, weight and model files, the output folder) before broadcasting it, so most bad
//! submissions fail without reaching the ranks. A job that fails on the ranks — on one rank or all,
//! at setup, mid-iteration or writing outputs — fails alone: the failing rank tells the others
//! (`Collective::recover`), every rank leaves the job, the group is brought back in step, and the
//! next job runs. Only a broken group (a rank gone, stopped or out of step for good) ends the
//! backend, with `Failed` naming the rank first.
//!
//! Memory: a process that cannot allocate aborts, and an aborted rank breaks the group, so no job
//! may get that far. Every kind of job is sized first ([`crate::memory`]): imaging and training jobs
//! by rank 0's precheck, an inversion on rank 0 once it has read its models (it fails on every rank
//! through `settle`). A rank that still runs short — the estimate is close, another process took
//! the memory meanwhile — takes its large buffers through [`crate::heap::try_vec`], which fails the
//! job with [`Error::InsufficientMemory`] instead of aborting. Jobs do not run in a child process of
//! each rank: the group's socket mesh and thread pools belong to the rank process and are lent to
//! each job (`Arc<dyn Collective>`), a fork of that multi-threaded process is not sound, and a fresh
//! child per job would rebuild the mesh for every job. (Under overcommit the kernel may grant a
//! buffer it later cannot back; only the estimate guards against that.)

pub mod accept;
pub mod hub;
pub mod inputs;
pub mod logs;
pub mod preview;
mod training;

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::device::{Device, coverage};
use crate::dist::elastic::{Member, Plan};
use crate::dist::physics::owner;
use crate::dist::{Collective, RankInfo, wire};
use crate::error::{Error, Result};
use crate::fwi::{FwiEvent, FwiPreset, FwiSummary};
use crate::io::RunDir;
use crate::job::{self, JobEvent, JobSummary};
use crate::preset::Preset;
use crate::protocol::auth::Token;
use crate::protocol::transport::Listener;
use crate::protocol::{
    Event, InlineArray, InlineFile, JobId, OperatorInfo, PROTOCOL_VERSION, PatchMap, PreviewKind,
    RankDevice, RankIteration,
};
use crate::tensor::Tensor;
use hub::Hub;
use preview::{PreviewRequest, PreviewWorker};

/// Where rank 0 listens.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Unix(PathBuf),
    /// `HOST:PORT`; port 0 picks a free one (printed on stdout).
    Tcp(String),
}

/// What `tessera serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub endpoint: Endpoint,
    /// Required from TCP clients (a TCP endpoint without one is refused); Unix-socket clients are
    /// checked by user id instead.
    pub token: Option<Token>,
    /// Each job writes into a folder of its own under it,
    /// `out_dir/<YYYYMMDD-HHMMSS>-<preset name>-<n>` (see [`RunDir::Unique`]).
    pub out_dir: PathBuf,
    /// Ranks of the group on rank 0's machine: they share its memory.
    pub ranks_here: usize,
    /// The group's operation timeout while a job runs (`--op-timeout`). Between jobs ranks wait
    /// for the next one without a timeout: an idle backend is not a hung peer.
    pub op_timeout: Option<Duration>,
    /// Where every job computes (`tessera serve --device`), over a preset's `[distributed]
    /// device`; `None`: the preset's, else `TESSERA_DEVICE`, else the CPU (as `tessera run`).
    pub device: Option<Device>,
}

/// Smallest and largest preview side a client may ask for; 0 means the default.
const PREVIEW_SIDE_RANGE: (u32, u32) = (16, 4096);
const DEFAULT_PREVIEW_SIDE: u32 = 512;
/// At most this many reconstruction previews per second.
const PREVIEW_INTERVAL: Duration = Duration::from_millis(100);
/// …and at most this share of rank 0's time goes into handing previews over (the copy of a large
/// image can take milliseconds): the interval grows to `hand-off time / PREVIEW_BUDGET`.
const PREVIEW_BUDGET: f64 = 0.01;

/// Rank 0 → all ranks, once per job.
#[derive(Debug, Serialize, Deserialize)]
enum RankCommand {
    Run {
        job: JobId,
        preset_toml: String,
        inline: Vec<InlineArray>,
        files: Vec<InlineFile>,
        /// A stopped training run's folder to continue from (read on rank 0 only).
        resume_from: Option<PathBuf>,
    },
    Shutdown,
}

/// How the ranks of a `tessera serve --elastic` backend go on after one is lost
/// (docs/ELASTIC.md): each imaging job runs as an elastic run, and the group it ends on serves
/// the next jobs.
pub struct ElasticBackend {
    /// This rank's link to the launcher, which decides who is left.
    pub member: Member,
    /// Joins a generation the launcher planned, with the first generation's transport and
    /// timeouts.
    pub join: Box<JoinGeneration>,
    /// A replacement (`serve --respawn`): the plan of the generation it joined, in the middle of
    /// a job, which it learns from the generation's rank 0 ([`job::Elastic::prelude`]) and
    /// finishes with the others before it serves the next jobs as any rank does.
    pub joined: Option<Plan>,
}

/// How a rank joins a generation of its group (the `join` of [`job::Elastic`]).
pub type JoinGeneration = dyn FnMut(&RankInfo) -> Result<Box<dyn Collective>>;

/// Runs the server on this rank until the process is stopped (or the group breaks); `elastic`:
/// this rank's part in an elastic backend.
pub fn serve(
    comm: Box<dyn Collective>,
    opts: &ServeOptions,
    elastic: Option<ElasticBackend>,
) -> Result<()> {
    let comm: Arc<dyn Collective> = Arc::from(comm);
    // A replacement joins a job in progress: rank 0 of its generation sends it the job's command
    // ahead of the job's state (the others are in that job, not here), and the group learns where
    // it computes after the job, as after any re-formed group.
    let (devices, joining) = match elastic.as_ref().and_then(|e| e.joined.as_ref()) {
        Some(plan) if comm.rank() == 0 => {
            return Err(Error::Internal(format!(
                "a replacement is rank 0 of generation {}: only a survivor holds the backend",
                plan.generation
            )));
        }
        Some(_) => (Vec::new(), Some(comm.recv(0)?)),
        None => (gather_devices(comm.as_ref())?, None),
    };
    let group = Group {
        comm: RefCell::new(Some(comm)),
        elastic: elastic.map(RefCell::new),
    };
    if group.get()?.rank() != 0 {
        return follow(&group, devices, joining, opts);
    }
    coordinate(&group, devices, opts)
}

/// The backend's group, lent to each job. An elastic job takes it whole: no other handle may keep
/// it alive, so that a rank that meets a loss drops it and its links close, and every survivor
/// leaves the collective it waits in; the job gives back the generation it ended on.
struct Group {
    comm: RefCell<Option<Arc<dyn Collective>>>,
    elastic: Option<RefCell<ElasticBackend>>,
}

impl Group {
    /// The group now; an error when an elastic job lost it for good (the launcher stopped it, or
    /// a new generation could not be formed: the job's own error says which).
    fn get(&self) -> Result<Arc<dyn Collective>> {
        self.comm.borrow().clone().ok_or_else(|| {
            Error::Internal(
                "the backend's group is gone: an elastic job could not re-form it".into(),
            )
        })
    }

    fn is_elastic(&self) -> bool {
        self.elastic.is_some()
    }

    /// Runs `job` on the group as the only holder of it ([`job::run_elastic_lent`] on an elastic
    /// backend); returns its result and whether the group was re-formed (a rank was lost, or this
    /// rank is a replacement that joined it). `command`: the job's, for replacements that join it.
    fn run_elastic<T>(
        &self,
        command: &[u8],
        job: impl FnOnce(
            Box<dyn Collective>,
            job::Elastic<'_>,
        ) -> (Result<T>, Option<Box<dyn Collective>>),
    ) -> (Result<T>, bool) {
        let Some(elastic) = &self.elastic else {
            return (
                Err(Error::Internal("an elastic job on a plain backend".into())),
                false,
            );
        };
        let Some(comm) = self.comm.borrow_mut().take() else {
            return (
                Err(Error::Internal("an elastic job without its group".into())),
                false,
            );
        };
        let lent = Arc::downgrade(&comm);
        let mut elastic = elastic.borrow_mut();
        let ElasticBackend {
            member,
            join,
            joined,
        } = &mut *elastic;
        let joined = joined.take();
        let joining = joined.is_some();
        let (result, back) = job(
            Box::new(comm),
            job::Elastic {
                member,
                join: join.as_mut(),
                joined,
                prelude: Some(command),
            },
        );
        // The group lent is alive only when no rank was lost (a loss drops it): then `back` is a
        // handle to it, else the new generation's group.
        let (comm, regrouped) = match (lent.upgrade(), back) {
            (Some(lent), _) => (Some(lent), joining),
            (None, back) => (back.map(Arc::from), true),
        };
        *self.comm.borrow_mut() = comm;
        (result, regrouped)
    }
}

/// Where every rank computes, in rank order.
fn gather_devices(comm: &dyn Collective) -> Result<Vec<RankDevice>> {
    let mine = RankDevice {
        rank: comm.rank(),
        host: crate::dist::host_name(),
        cpu_threads: rayon::current_num_threads(),
    };
    wire::all_gather_as(comm, "devices", &mine)
}

/// Ranks ≠ 0: run whatever rank 0 broadcasts; a replacement first finishes the job it joined
/// (`joining`: that job's command).
fn follow(
    group: &Group,
    mut devices: Vec<RankDevice>,
    mut joining: Option<Vec<u8>>,
    opts: &ServeOptions,
) -> Result<()> {
    let out = RunDir::Unique {
        root: opts.out_dir.clone(),
    };
    loop {
        let buf = match joining.take() {
            Some(command) => command,
            None => {
                let mut buf = Vec::new();
                let comm = group.get()?;
                comm.set_op_timeout(None)?;
                comm.broadcast(&mut buf, 0)?;
                comm.set_op_timeout(opts.op_timeout)?;
                buf
            }
        };
        let (job, preset_toml, inline, files, resume_from) =
            match wire::decode_from::<RankCommand>(0, "job command", &buf)? {
                RankCommand::Shutdown => return Ok(()),
                RankCommand::Run {
                    job,
                    preset_toml,
                    inline,
                    files,
                    resume_from,
                } => (job, preset_toml, inline, files, resume_from),
            };
        let ctx = JobContext {
            group,
            job,
            command: &buf,
            devices: &devices,
            coordinator: None,
        };
        // The same checks as rank 0's precheck, which passed: a difference (a file missing on
        // this host) fails the job on this rank, and `settle` tells the others.
        let (result, regrouped) = match Submission::parse(&preset_toml, inline, files) {
            Ok(s) => s.run(&ctx, &out, resume_from.as_deref()),
            Err(e) => (Err(e), false),
        };
        // A job that cannot re-form its group ends this rank with its error.
        let comm = match group.get() {
            Ok(comm) => comm,
            Err(_) => return result.map(|_| ()),
        };
        if let Err(e) = settle(comm.as_ref(), result)? {
            tracing::warn!("job {job} failed: {e}");
        }
        if regrouped {
            devices = gather_devices(comm.as_ref())?;
        }
    }
}

/// After a job, every rank learns whether it failed anywhere, and the group is brought back in
/// step. `Ok(result)`: the job's outcome on this rank (a failure elsewhere is
/// [`Error::PeerFailed`] naming its rank); `Err`: the group cannot run another job.
fn settle<S>(comm: &dyn Collective, result: Result<S>) -> Result<Result<S>> {
    let failure = match result {
        // The barrier meets either every rank (the job succeeded everywhere) or the marker of a
        // rank that failed late, e.g. rank 0 writing outputs.
        Ok(summary) => match comm.barrier() {
            Ok(()) => return Ok(Ok(summary)),
            Err(e) => e,
        },
        Err(e) => e,
    };
    match comm.recover(&failure) {
        Ok(()) => Ok(Err(failure)),
        Err(e) => Err(Error::PeerLost {
            rank: comm.rank(),
            how: format!(
                "cannot go on: after `{failure}`, the ranks could not be brought back in step: {e}"
            ),
        }),
    }
}

/// What a submitted preset runs: an imaging job with its inline arrays, or a full-waveform
/// inversion (a preset with an `[fwi]` section) with the files sent along (see [`inputs`]; without
/// them its relative paths are read from the server's working directory).
enum Submission {
    Imaging(Box<Preset>, Vec<(String, Tensor)>),
    Fwi(Box<FwiPreset>, Vec<InlineFile>),
    Train(training::TrainJob),
}

impl Submission {
    fn parse(
        preset_toml: &str,
        inline: Vec<InlineArray>,
        files: Vec<InlineFile>,
    ) -> Result<Submission> {
        if let Some(train) = training::TrainJob::parse(preset_toml)? {
            if let Some(what) = inline
                .first()
                .map(|a| format!("inline array `{}`", a.name))
                .or_else(|| files.first().map(|f| format!("sent file `{}`", f.name)))
            {
                return Err(Error::config(
                    what,
                    "a training job reads its images where the server runs: give paths on \
                     that machine or a generated sample",
                ));
            }
            return Ok(Submission::Train(train));
        }
        if !FwiPreset::is_fwi(preset_toml) {
            if let Some(f) = files.first() {
                return Err(Error::config(
                    format!("sent file `{}`", f.name),
                    "an imaging job takes its image and measurements as inline arrays, not files",
                ));
            }
            let preset = Preset::from_toml(preset_toml, "submitted preset", &[])?;
            return Ok(Submission::Imaging(
                Box::new(preset),
                inline_tensors(inline)?,
            ));
        }
        if let Some(a) = inline.first() {
            return Err(Error::config(
                format!("inline array `{}`", a.name),
                "an FWI job takes no inline arrays: its models and data are files (sent along, or the server's)",
            ));
        }
        let mut preset = FwiPreset::from_toml(preset_toml, "submitted FWI preset", &[])?;
        inputs::check(&files, &mut preset)?;
        Ok(Submission::Fwi(Box::new(preset), files))
    }

    /// The files sent with an FWI job (none for an imaging job).
    fn files(&self) -> &[InlineFile] {
        match self {
            Submission::Imaging(..) | Submission::Train(_) => &[],
            Submission::Fwi(_, files) => files,
        }
    }

    fn name(&self) -> &str {
        match self {
            Submission::Imaging(p, _) => &p.name,
            Submission::Fwi(p, _) => &p.name,
            Submission::Train(t) => t.name(),
        }
    }

    /// Whether the job goes on after a lost rank on an elastic backend: imaging jobs do; an
    /// inversion or a training runs there as on a plain backend (not elastic on a backend yet:
    /// docs/ELASTIC.md), so a loss during it ends the backend, and rank 0 says so when it starts.
    fn survives_a_loss(&self) -> bool {
        match self {
            Submission::Imaging(..) => true,
            Submission::Fwi(..) | Submission::Train(_) => false,
        }
    }

    fn to_toml(&self) -> Result<String> {
        match self {
            Submission::Imaging(p, _) => p.to_toml(),
            Submission::Fwi(p, _) => p.to_toml(),
            Submission::Train(t) => t.to_toml(),
        }
    }

    /// Runs the submission on this rank; `resume_from` (training only, checked by [`precheck`]):
    /// the stopped run to continue. Also says whether the job re-formed the group (an elastic
    /// backend's job that lost a rank).
    fn run(
        &self,
        ctx: &JobContext<'_>,
        out: &RunDir,
        resume_from: Option<&Path>,
    ) -> (Result<Outcome>, bool) {
        match self {
            Submission::Imaging(preset, inline) => {
                let (result, regrouped) = run_job(ctx, preset, inline, out);
                (result.map(|s| Outcome::of_job(&s)), regrouped)
            }
            Submission::Fwi(preset, files) => {
                let run = || {
                    // Removed when the job ends, however it ends.
                    let folder = match files.is_empty() {
                        true => None,
                        false => Some(inputs::JobFolder::write(files, ctx.job)?),
                    };
                    let base_dir = folder.as_ref().map_or(Path::new(""), |f| f.path());
                    run_fwi_job(ctx, preset, base_dir, out).map(|s| Outcome::of_fwi(&s))
                };
                (run(), false)
            }
            Submission::Train(t) => (t.run(ctx, out, resume_from), false),
        }
    }
}

/// How a job that ran ended, for its terminal event.
struct Outcome {
    stopped_early: bool,
    /// Iterations (epochs for FWI) it ran.
    steps: usize,
    run_dir: PathBuf,
    outputs: Vec<PathBuf>,
    summary_json: String,
}

impl Outcome {
    fn json(summary: &impl Serialize) -> String {
        serde_json::to_string_pretty(summary).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    fn of_job(s: &JobSummary) -> Outcome {
        Outcome {
            stopped_early: s.stopped_early,
            steps: s.iterations,
            run_dir: s.run_dir.clone().unwrap_or_default(),
            outputs: s.outputs.clone(),
            summary_json: Self::json(s),
        }
    }

    fn of_fwi(s: &FwiSummary) -> Outcome {
        Outcome {
            stopped_early: s.stopped_early,
            steps: s.epochs,
            run_dir: s.run_dir.clone().unwrap_or_default(),
            outputs: s.outputs.clone(),
            summary_json: Self::json(s),
        }
    }
}

fn inline_tensors(inline: Vec<InlineArray>) -> Result<Vec<(String, Tensor)>> {
    inline
        .into_iter()
        .map(|a| {
            let field = format!("inline array `{}`", a.name);
            let t = Tensor::from_vec(&a.shape, a.data)
                .map_err(|e| Error::config(field.clone(), e.to_string()))?;
            if t.numel() == 0 {
                return Err(Error::config(
                    field,
                    format!("shape {:?} has no elements", t.shape()),
                ));
            }
            Ok((a.name, t))
        })
        .collect()
}

/// Rank 0: the control socket, the hub, the preview worker and the job loop.
fn coordinate(group: &Group, mut devices: Vec<RankDevice>, opts: &ServeOptions) -> Result<()> {
    let listener = match &opts.endpoint {
        Endpoint::Unix(p) => Listener::bind_unix(p)?,
        Endpoint::Tcp(a) if opts.token.is_none() => {
            return Err(Error::config(
                "--token-file",
                format!(
                    "listening on TCP ({a}) needs a token, also on loopback (any local user could \
                     otherwise run jobs as this user): give --token-file FILE (created with a \
                     random token if it does not exist), or use --socket PATH"
                ),
            ));
        }
        Endpoint::Tcp(a) => Listener::bind_tcp(a, true)?,
    };
    let addr = listener.addr();
    let (mut world, transport) = {
        let comm = group.get()?;
        (comm.world_size(), comm.transport())
    };
    let hub = Arc::new(Hub::new(world));

    let (log_tx, log_rx) = std::sync::mpsc::sync_channel::<logs::LogLine>(1024);
    logs::set_sink(log_tx);
    {
        let hub = hub.clone();
        std::thread::Builder::new()
            .name("tessera-serve-log".into())
            .spawn(move || {
                for (level, message) in log_rx {
                    hub.log(&Event::Log {
                        level,
                        rank: Some(0),
                        message,
                    });
                }
            })
            .map_err(|e| Error::io("starting the log thread", "thread", e))?;
    }

    let welcome = |world_size, devices: &[RankDevice]| Event::Welcome {
        protocol: PROTOCOL_VERSION,
        server: format!("tessera {}", env!("CARGO_PKG_VERSION")),
        world_size,
        devices: devices.to_vec(),
        backend: transport.into(),
    };
    let door = accept::Door {
        token: opts.token.clone(),
        welcome: Arc::new(Mutex::new(welcome(world, &devices))),
    };
    let greeting = door.welcome.clone();
    {
        let hub = hub.clone();
        std::thread::Builder::new()
            .name("tessera-serve-accept".into())
            .spawn(move || accept::accept_loop(listener, hub, door))
            .map_err(|e| Error::io("starting the accept thread", "thread", e))?;
    }
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "tessera serve: listening on {addr} ({world} rank(s))");
        let _ = out.flush();
    }
    tracing::info!("listening on {addr} with {world} rank(s)");

    let previews = {
        let hub = hub.clone();
        PreviewWorker::start(move |event| {
            if let Event::Preview { job, .. } = &event {
                hub.preview(*job, &event);
            }
        })
    };
    let out = RunDir::Unique {
        root: opts.out_dir.clone(),
    };
    loop {
        let mut queued = hub.next_job();
        let job = queued.job;
        // All of an elastic backend's ranks are local (its launcher started them).
        let here = (world, opts.ranks_here.min(world));
        let submission = match precheck(&mut queued, &out, here, (opts.device, group.is_elastic()))
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("job {job} refused: {e}");
                hub.end(
                    job,
                    &Event::Failed {
                        job: Some(job),
                        error: e.to_string(),
                    },
                );
                continue;
            }
        };
        // The preset as checked, its paths resolved: every rank reads the same files.
        let mut command = wire::encode(&RankCommand::Run {
            job,
            preset_toml: submission.to_toml()?,
            inline: queued.inline,
            files: submission.files().to_vec(),
            resume_from: queued.resume_from.clone(),
        })?;
        group.get()?.broadcast(&mut command, 0)?;
        if !group.is_elastic() {
            // Only replacements that join an elastic job need it again.
            command = Vec::new();
        }
        tracing::info!(
            "job {job} ({}) starts on {world} rank(s)",
            submission.name()
        );
        if group.is_elastic() && !submission.survives_a_loss() {
            tracing::warn!(
                "job {job} ({}) is not elastic: {} do(es) not survive a lost rank on a backend \
                 yet, so a rank lost during it ends this backend (`tessera run PRESET --ranks N \
                 --elastic` survives it)",
                submission.name(),
                match submission {
                    Submission::Fwi(..) => "inversions",
                    _ => "denoiser trainings",
                }
            );
        }
        let cancel = queued.cancel;
        let ctx = JobContext {
            group,
            job,
            command: &command,
            devices: &devices,
            coordinator: Some(Coordinator {
                hub: &hub,
                previews: &previews,
                cancel: cancel.clone(),
                preview_max_side: match queued.preview_max_side {
                    0 => DEFAULT_PREVIEW_SIDE,
                    s => s.clamp(PREVIEW_SIDE_RANGE.0, PREVIEW_SIDE_RANGE.1),
                },
            }),
        };
        let (result, regrouped) = submission.run(&ctx, &out, queued.resume_from.as_deref());
        let settled = match group.get() {
            Ok(comm) => settle(comm.as_ref(), result),
            // An elastic job whose group could not go on: its error ends the backend.
            Err(lost) => Err(result.err().unwrap_or(lost)),
        };
        match settled {
            Ok(Ok(outcome)) => hub.end(job, &ended(job, outcome, &cancel)),
            Ok(Err(e)) => {
                tracing::error!("job {job} failed: {e}");
                hub.end(
                    job,
                    &Event::Failed {
                        job: Some(job),
                        error: e.to_string(),
                    },
                );
            }
            Err(e) => {
                let error = format!("{e} (the backend stops)");
                tracing::error!("job {job} failed: {error}");
                hub.end(
                    job,
                    &Event::Failed {
                        job: Some(job),
                        error,
                    },
                );
                // Give the writer threads a moment to deliver the Failed event.
                std::thread::sleep(Duration::from_millis(300));
                return Err(e);
            }
        }
        if regrouped {
            // The survivors of a lost rank serve the next jobs: clients see the group as it is.
            devices = gather_devices(group.get()?.as_ref())?;
            world = devices.len();
            hub.set_world_size(world);
            *greeting.lock().unwrap_or_else(|p| p.into_inner()) = welcome(world, &devices);
            tracing::warn!(
                "the backend goes on with {world} rank(s): {}",
                devices
                    .iter()
                    .map(|d| format!("rank {} on {}", d.rank, d.host))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

/// The one terminal event of a job that ran: `Cancelled` when a Stop ended it early, `Finished`
/// when it ran every iteration (also when a Stop came after the last one), with the log saying
/// the same.
fn ended(job: JobId, outcome: Outcome, cancel: &AtomicBool) -> Event {
    let Outcome {
        stopped_early,
        steps,
        run_dir,
        outputs,
        summary_json,
    } = outcome;
    if stopped_early {
        tracing::info!(
            "job {job} cancelled after {steps} iteration(s); its outputs are in {}",
            run_dir.display()
        );
        return Event::Cancelled {
            job,
            iterations: steps,
            run_dir: Some(run_dir),
            outputs,
            summary_json: Some(summary_json),
        };
    }
    if cancel.load(Ordering::SeqCst) {
        tracing::info!(
            "job {job} finished (the stop came after its last iteration): outputs in {}",
            run_dir.display()
        );
    } else {
        tracing::info!("job {job} finished: outputs in {}", run_dir.display());
    }
    Event::Finished {
        job,
        run_dir,
        outputs,
        summary_json,
    }
}

/// Checks a submission on rank 0 before any rank sees it: the preset, its inline arrays, its
/// inputs against the real image (see [`job::check_inputs`]; an FWI job's files are read, and
/// their errors reported, by rank 0 at its start), a training job's memory, the output folder, and
/// the device the job runs on (`device`, the server's `--device`, else the preset's): written into
/// an imaging preset (every rank opens it), and a job with parts not on the GPU is refused naming
/// them all, as `tessera run` refuses it.
fn precheck(
    queued: &mut hub::QueuedJob,
    out: &RunDir,
    (world, ranks_here): (usize, usize),
    (device, elastic): (Option<Device>, bool),
) -> Result<Submission> {
    let mut submission = Submission::parse(
        &queued.preset_toml,
        queued.inline.clone(),
        std::mem::take(&mut queued.files),
    )?;
    if elastic {
        check_elastic(&submission)?;
    }
    match &mut submission {
        Submission::Imaging(preset, inline) => {
            // Relative paths in a submission are the server's, from its working directory.
            preset.resolve_paths(Path::new(""))?;
            let chosen = coverage::place(device, preset)?;
            coverage::check_run(chosen, preset)?;
            if elastic {
                // The rules of `tessera run --elastic` (a job on the GPU is not elastic yet),
                // without changing the preset the job records.
                let mut as_elastic = (**preset).clone();
                as_elastic.distributed.elastic = true;
                coverage::check_run(chosen, &as_elastic)?;
            }
            job::check_inputs(preset, inline, world, ranks_here)?;
        }
        Submission::Train(t) => {
            coverage::check_training(Device::chosen(device)?, t.model())?;
            t.check_memory(world, ranks_here)?
        }
        // Sized on rank 0 once its models are read (see `fwi::run_in_group`): the job fails there.
        Submission::Fwi(..) => coverage::check_fwi(Device::chosen(device)?)?,
    }
    if let Some(dir) = &queued.resume_from {
        if !matches!(&submission, Submission::Train(t) if t.resumes()) {
            return Err(Error::config(
                "resume",
                format!(
                    "only a denoiser training run resumes from a checkpoint, not `{}`",
                    submission.name()
                ),
            ));
        }
        crate::train::checkpoint::check_exists(dir)?;
    }
    // Proves the output folder writable (the probe is removed at once).
    drop(crate::io::Staging::create(out)?);
    Ok(submission)
}

/// On an elastic backend, a preset that asks for a minimum of ranks is refused by name before any
/// rank sees it: the backend goes on down to one rank. (Inversions and trainings run there as on a
/// plain backend: [`Submission::survives_a_loss`].)
fn check_elastic(submission: &Submission) -> Result<()> {
    match submission {
        Submission::Imaging(preset, _) => match preset.distributed.min_ranks {
            Some(n) if n > 1 => Err(Error::config(
                "distributed.min_ranks",
                format!(
                    "{n}: a `tessera serve --elastic` backend goes on down to one rank and keeps \
                     no checkpoint to resume a stopped job from; remove min_ranks, or run the \
                     preset with `tessera run PRESET --ranks N --elastic`"
                ),
            )),
            _ => Ok(()),
        },
        Submission::Fwi(..) | Submission::Train(_) => Ok(()),
    }
}

struct Coordinator<'a> {
    hub: &'a Hub,
    previews: &'a PreviewWorker,
    cancel: Arc<AtomicBool>,
    preview_max_side: u32,
}

struct JobContext<'a> {
    group: &'a Group,
    job: JobId,
    /// The job's [`RankCommand`] as broadcast (empty on rank 0 of a plain backend): what a
    /// replacement that joins the job receives first.
    command: &'a [u8],
    devices: &'a [RankDevice],
    /// Rank 0 only.
    coordinator: Option<Coordinator<'a>>,
}

/// One rank's record after every iteration: whether it asks to stop (rank 0, on Cancel) and its
/// times for the iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct IterationRecord {
    stop: bool,
    gradient_secs: f64,
    denoiser_secs: f64,
    communication_secs: f64,
}

impl IterationRecord {
    fn of_rank(&self, rank: usize) -> RankIteration {
        RankIteration {
            rank,
            gradient_secs: self.gradient_secs,
            denoiser_secs: self.denoiser_secs,
            communication_secs: self.communication_secs,
        }
    }
}

/// Each operator's name and the rank that owns it on `world` ranks.
fn owners(names: &[String], world: usize) -> Vec<OperatorInfo> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| OperatorInfo {
            name: n.clone(),
            rank: owner(i, world),
        })
        .collect()
}

/// Which tile each rank denoises, when the preset tiles its denoiser.
fn patch_map(preset: &Preset, image_shape: &[usize], world: usize) -> Option<PatchMap> {
    let tiling = preset.tiling.as_ref()?;
    let spatial = image_shape.get(2..)?;
    crate::dist::patch_map::PatchMap::plan(
        tiling,
        spatial,
        world,
        preset.distributed.tile_assignment,
    )
    .ok()
    .map(|m| PatchMap::from(&m))
}

/// Runs one job on this rank with the collective stop/timing exchange after every iteration (on
/// the job's own group, [`job::IterationRanks`]: an elastic job recovers from a loss there too);
/// an elastic backend runs it as an elastic run. Also says whether the group was re-formed.
fn run_job(
    ctx: &JobContext<'_>,
    preset: &Preset,
    inline: &[(String, Tensor)],
    out: &RunDir,
) -> (Result<JobSummary>, bool) {
    let job = ctx.job;
    let mut exchange_error: Option<Error> = None;
    let mut exchange_secs = 0.0;
    let mut handoff_secs = 0.0;
    let mut iterations_seen = 0usize;
    let mut last_preview: Option<Instant> = None;
    let mut preview_interval = PREVIEW_INTERVAL;
    // The image's shape and the operators' names, for the owners of a re-formed group.
    let mut problem: Option<(Vec<usize>, Vec<String>)> = None;
    let mut on_event = |event: JobEvent<'_>| -> ControlFlow<()> {
        match event {
            JobEvent::Started {
                name,
                image_shape,
                iterations,
                world_size,
                operator_names,
                truth,
                measurements,
                ..
            } => {
                problem = Some((image_shape.to_vec(), operator_names.to_vec()));
                if let Some(c) = &ctx.coordinator {
                    c.hub.record(
                        job,
                        &Event::Started {
                            job,
                            name: name.to_string(),
                            world_size,
                            devices: ctx.devices.to_vec(),
                            image_shape: image_shape.to_vec(),
                            operators: owners(operator_names, world_size),
                            iterations,
                            patch_map: patch_map(preset, image_shape, world_size),
                        },
                    );
                    let once = |what, x: &Tensor| {
                        c.previews.once(PreviewRequest {
                            job,
                            iteration: 0,
                            what,
                            x: x.clone(),
                            max_side: c.preview_max_side,
                        })
                    };
                    if let Some(truth) = truth {
                        once(PreviewKind::GroundTruth, truth);
                    }
                    for (i, y) in measurements.iter().enumerate() {
                        once(PreviewKind::Measurement(i), y);
                    }
                }
                ControlFlow::Continue(())
            }
            JobEvent::Regrouped { recovery } => {
                if let (Some(c), Some((image_shape, names))) = (&ctx.coordinator, &problem) {
                    let world_size = recovery.members.len();
                    c.hub.record(
                        job,
                        &Event::Regrouped {
                            job,
                            generation: recovery.generation,
                            lost_ranks: recovery.lost_ranks.clone(),
                            previous_ranks: recovery.previous_ranks(),
                            resumed_from: recovery.resumed_from,
                            operators: owners(names, world_size),
                            patch_map: patch_map(preset, image_shape, world_size),
                        },
                    );
                }
                ControlFlow::Continue(())
            }
            JobEvent::Iteration {
                report,
                x,
                mut ranks,
            } => {
                iterations_seen += 1;
                let t_exchange = Instant::now();
                let stop_here = ctx
                    .coordinator
                    .as_ref()
                    .is_some_and(|c| c.cancel.load(Ordering::SeqCst));
                let t = &report.times;
                let mine = IterationRecord {
                    stop: stop_here,
                    gradient_secs: t.gradient_secs,
                    denoiser_secs: t.denoiser_secs,
                    communication_secs: t.communication_secs,
                };
                let records = ranks.all_gather("iteration record", &mine);
                exchange_secs += t_exchange.elapsed().as_secs_f64();
                // A failure ends the job with its error (the job holds it).
                let ControlFlow::Continue(records) = records else {
                    return ControlFlow::Break(());
                };
                let stop = records.iter().any(|r| r.stop);
                if let Some(c) = &ctx.coordinator {
                    c.hub.record(
                        job,
                        &Event::Iteration {
                            job,
                            report: report.into(),
                            ranks: records
                                .iter()
                                .enumerate()
                                .map(|(rank, r)| r.of_rank(rank))
                                .collect(),
                        },
                    );
                    let last = stop || report.iteration >= report.iterations;
                    if last || last_preview.is_none_or(|t| t.elapsed() >= preview_interval) {
                        let t_handoff = Instant::now();
                        // The iterate reaches host memory here only (a device run's download).
                        let x = match x.to_host() {
                            Ok(x) => c.previews.copy_of(&x),
                            Err(e) => {
                                exchange_error = Some(e);
                                return ControlFlow::Break(());
                            }
                        };
                        c.previews.latest(PreviewRequest {
                            job,
                            iteration: report.iteration,
                            what: PreviewKind::Reconstruction,
                            x,
                            max_side: c.preview_max_side,
                        });
                        let spent = t_handoff.elapsed();
                        handoff_secs += spent.as_secs_f64();
                        preview_interval = PREVIEW_INTERVAL.max(spent.div_f64(PREVIEW_BUDGET));
                        last_preview = Some(Instant::now());
                    }
                }
                if stop {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        }
    };
    let (result, regrouped) = match ctx.group.is_elastic() {
        true => ctx.group.run_elastic(ctx.command, |comm, elastic| {
            job::run_elastic_lent(preset, out, comm, inline, elastic, &mut on_event)
        }),
        false => match ctx.group.get() {
            Ok(comm) => (
                job::run_in_group_with(preset, out, Box::new(comm), inline, &mut on_event),
                false,
            ),
            Err(e) => (Err(e), false),
        },
    };
    if let Some(e) = exchange_error {
        return (Err(e), regrouped);
    }
    if ctx.coordinator.is_some() && iterations_seen > 0 {
        let n = iterations_seen as f64;
        tracing::info!(
            "job {job}: control overhead per iteration on rank 0: stop/timing exchange {:.1} µs, \
             preview hand-off {:.1} µs (mean of {iterations_seen})",
            exchange_secs / n * 1e6,
            handoff_secs / n * 1e6,
        );
    }
    (result, regrouped)
}

/// Runs one FWI job on this rank. The loop itself stops every rank at the same epoch (rank 0
/// broadcasts its stop flag with each batch) and gathers the per-rank times, so rank 0 only turns
/// its events into protocol events and previews: the model and the true model as
/// `Reconstruction`/`GroundTruth`, the gradient as `Gradient`.
fn run_fwi_job(
    ctx: &JobContext<'_>,
    preset: &FwiPreset,
    base_dir: &Path,
    out: &RunDir,
) -> Result<FwiSummary> {
    let job = ctx.job;
    let mut shape = [0usize; 2];
    let mut on_event = |event: FwiEvent<'_>| -> ControlFlow<()> {
        let Some(c) = &ctx.coordinator else {
            return ControlFlow::Continue(());
        };
        let preview = |what, iteration, v: &[f32], [nz, nx]: [usize; 2]| match Tensor::from_vec(
            &[1, 1, nz, nx],
            v.to_vec(),
        ) {
            Ok(x) => c.previews.once(PreviewRequest {
                job,
                iteration,
                what,
                x,
                max_side: c.preview_max_side,
            }),
            Err(e) => tracing::warn!("job {job}: no preview of {what:?}: {e}"),
        };
        match event {
            FwiEvent::Started {
                name,
                nz,
                nx,
                epochs,
                world_size,
                step_ratio,
                spacing_m,
                acquisition,
                true_model,
                initial_model,
                ..
            } => {
                shape = [nz, nx];
                c.hub.record(
                    job,
                    &Event::FwiStarted {
                        job,
                        name: name.to_string(),
                        world_size,
                        devices: ctx.devices.to_vec(),
                        model_shape: shape,
                        spacing_m,
                        shots: acquisition.shots.iter().map(Into::into).collect(),
                        epochs,
                        step_ratio,
                    },
                );
                if let Some(t) = true_model {
                    preview(PreviewKind::GroundTruth, 0, t, shape);
                }
                preview(PreviewKind::Reconstruction, 0, initial_model, shape);
            }
            FwiEvent::Epoch {
                report,
                model,
                gradient,
                ..
            } => {
                c.hub.record(
                    job,
                    &Event::FwiEpoch {
                        job,
                        report: report.into(),
                    },
                );
                preview(PreviewKind::Reconstruction, report.epoch, model, shape);
                preview(PreviewKind::Gradient, report.epoch, gradient, shape);
            }
        }
        if c.cancel.load(Ordering::SeqCst) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    crate::fwi::run_in_group(
        preset,
        base_dir,
        out.clone(),
        Box::new(ctx.group.get()?),
        &mut on_event,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(toml: &str) -> Submission {
        Submission::parse(toml, Vec::new(), Vec::new()).unwrap()
    }

    fn bundled(name: &str, set: &[&str]) -> String {
        let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        Preset::load(name, &set).unwrap().preset.to_toml().unwrap()
    }

    #[test]
    fn an_elastic_backend_refuses_a_minimum_of_ranks_and_runs_the_rest() {
        assert!(check_elastic(&parsed(&bundled("quick", &[]))).is_ok());
        assert!(check_elastic(&parsed(&bundled("quick", &["distributed.min_ranks=1"]))).is_ok());
        let e = check_elastic(&parsed(&bundled("quick", &["distributed.min_ranks=2"])))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("distributed.min_ranks") && e.contains("down to one rank"),
            "{e}"
        );
        let train = crate::train::TrainPreset::load("train-dncnn", &[])
            .unwrap()
            .0;
        let train = parsed(&train.to_toml().unwrap());
        assert!(check_elastic(&train).is_ok());
        assert!(!train.survives_a_loss());
        assert!(parsed(&bundled("quick", &[])).survives_a_loss());
    }
}
