//! `tessera serve`: a process group that stays up between jobs, with rank 0 hosting a control
//! socket for the workbench (see `crate::protocol`).
//!
//! Every rank runs [`serve`]. Rank 0 (the coordinator) accepts connections (Unix socket locally,
//! TCP with `--listen`, token-checked), queues submitted jobs, and for each job broadcasts
//! `RankCommand::Run` (preset TOML, inline arrays, output folder); the other ranks loop on that
//! broadcast. All ranks then run `job::run_in_group_with`. After every iteration the ranks exchange
//! one tiny record each (`all_gather` of a stop flag and this iteration's gradient, denoiser and
//! communication seconds), so a cancel set on rank 0 stops every rank at the same iteration and rank
//! 0 learns the per-rank times it streams. Rank 0 turns job events into protocol events through
//! [`hub::Hub`] (history for re-attach, fan-out to clients) and [`preview::PreviewWorker`]
//! (downsampling off the ranks' path).
//!
//! Failure policy: rank 0 checks a submission (preset, inline arrays, output folder) before
//! broadcasting it, so a bad submission is a `Failed` event and the group goes on. An error after
//! the broadcast may leave the ranks out of step (say one rank failed to build its operator while
//! the others wait in a collective), so on more than one rank it ends the backend: rank 0 reports
//! `Failed` first, the clients then see the connection close.

pub mod hub;
pub mod logs;
pub mod preview;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::dist::physics::owner;
use crate::dist::{Collective, wire};
use crate::error::{Error, Result};
use crate::job::{self, JobEvent, JobSummary};
use crate::preset::Preset;
use crate::protocol::frame;
use crate::protocol::transport::{Listener, Stream};
use crate::protocol::{
    Event, InlineArray, JobId, LogLevel, MAX_FRAME_BYTES, OperatorInfo, PROTOCOL_VERSION, PatchMap,
    PreviewKind, RankIteration, Request,
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
    /// Required from clients when set (remote attach).
    pub token: Option<String>,
    /// Job `N` writes into `out_dir/job-N`.
    pub out_dir: PathBuf,
    /// Folder that relative paths in presets refer to.
    pub base_dir: PathBuf,
    /// The group's operation timeout while a job runs (`--op-timeout`). Between jobs ranks wait
    /// for the next one without a timeout: an idle backend is not a hung peer.
    pub op_timeout: Option<Duration>,
}

/// Smallest and largest preview side a client may ask for; 0 means the default.
const PREVIEW_SIDE_RANGE: (u32, u32) = (16, 4096);
const DEFAULT_PREVIEW_SIDE: u32 = 512;
/// At most this many reconstruction previews per second.
const PREVIEW_INTERVAL: Duration = Duration::from_millis(100);
/// …and at most this share of rank 0's time goes into handing previews over (the copy of a large
/// image can take milliseconds): the interval grows to `hand-off time / PREVIEW_BUDGET`.
const PREVIEW_BUDGET: f64 = 0.01;
/// Time a connection gets to say hello; the hello's own size limit.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
const HELLO_MAX_BYTES: usize = 64 << 10;

/// Rank 0 → all ranks, once per job.
#[derive(Debug, Serialize, Deserialize)]
enum RankCommand {
    Run {
        job: JobId,
        preset_toml: String,
        inline: Vec<InlineArray>,
        out_dir: PathBuf,
    },
    Shutdown,
}

/// Lets one long-lived collective be handed to a job by value.
struct Shared(Arc<dyn Collective>);

impl Collective for Shared {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn world_size(&self) -> usize {
        self.0.world_size()
    }
    fn all_reduce(&self, buf: &mut [f32], op: crate::dist::ReduceOp) -> Result<()> {
        self.0.all_reduce(buf, op)
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.0.all_gather(local)
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        self.0.broadcast(buf, root)
    }
    fn barrier(&self) -> Result<()> {
        self.0.barrier()
    }
    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.0.send(to, data)
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.0.recv(from)
    }
    fn backend_name(&self) -> String {
        self.0.backend_name()
    }
    fn set_op_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.0.set_op_timeout(timeout)
    }
}

/// Runs the server on this rank until the process is stopped (or the group breaks).
pub fn serve(comm: Box<dyn Collective>, opts: &ServeOptions) -> Result<()> {
    let comm: Arc<dyn Collective> = Arc::from(comm);
    let devices = gather_devices(comm.as_ref())?;
    if comm.rank() != 0 {
        return follow(comm, &devices, opts);
    }
    coordinate(comm, devices, opts)
}

/// `rank R: cpu (T threads) on host H`, for every rank.
fn gather_devices(comm: &dyn Collective) -> Result<Vec<String>> {
    let mine = format!(
        "rank {}: cpu ({} threads) on host {}",
        comm.rank(),
        rayon::current_num_threads(),
        hostname()
    );
    comm.all_gather(mine.as_bytes())?
        .into_iter()
        .map(|b| {
            String::from_utf8(b).map_err(|_| Error::config("devices", "a rank sent non-UTF-8"))
        })
        .collect()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "?".into()
    }
}

/// Ranks ≠ 0: run whatever rank 0 broadcasts.
fn follow(comm: Arc<dyn Collective>, devices: &[String], opts: &ServeOptions) -> Result<()> {
    loop {
        let mut buf = Vec::new();
        comm.set_op_timeout(None)?;
        comm.broadcast(&mut buf, 0)?;
        comm.set_op_timeout(opts.op_timeout)?;
        match wire::decode_from::<RankCommand>(0, "job command", &buf)? {
            RankCommand::Shutdown => return Ok(()),
            RankCommand::Run {
                job,
                preset_toml,
                inline,
                out_dir,
            } => {
                let preset = Preset::from_toml(&preset_toml, "submitted preset", &[])?;
                let inline = inline_tensors(inline)?;
                let ctx = JobContext {
                    comm: &comm,
                    job,
                    devices,
                    coordinator: None,
                };
                run_job(&ctx, &preset, &inline, &opts.base_dir, &out_dir)?;
            }
        }
    }
}

fn inline_tensors(inline: Vec<InlineArray>) -> Result<Vec<(String, Tensor)>> {
    inline
        .into_iter()
        .map(|a| {
            let t = Tensor::from_vec(&a.shape, a.data)
                .map_err(|e| Error::config(format!("inline array `{}`", a.name), e.to_string()))?;
            Ok((a.name, t))
        })
        .collect()
}

/// Compares tokens in time that depends only on their lengths.
fn same_token(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

struct Welcome {
    server: String,
    world_size: usize,
    devices: Vec<String>,
    backend: String,
}

/// Rank 0: the control socket, the hub, the preview worker and the job loop.
fn coordinate(comm: Arc<dyn Collective>, devices: Vec<String>, opts: &ServeOptions) -> Result<()> {
    let listener = match &opts.endpoint {
        Endpoint::Unix(p) => Listener::bind_unix(p)?,
        Endpoint::Tcp(a) => Listener::bind_tcp(a, opts.token.is_some())?,
    };
    let addr = listener.addr();
    let world = comm.world_size();
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

    let welcome = Arc::new(Welcome {
        server: format!("tessera {}", env!("CARGO_PKG_VERSION")),
        world_size: world,
        devices: devices.clone(),
        backend: comm.backend_name(),
    });
    {
        let (hub, welcome, token) = (hub.clone(), welcome.clone(), opts.token.clone());
        std::thread::Builder::new()
            .name("tessera-serve-accept".into())
            .spawn(move || accept_loop(listener, hub, welcome, token))
            .map_err(|e| Error::io("starting the accept thread", "thread", e))?;
    }
    println!("tessera serve: listening on {addr} ({world} rank(s))");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    tracing::info!("listening on {addr} with {world} rank(s)");

    let previews = {
        let hub = hub.clone();
        PreviewWorker::start(move |event| {
            if let Event::Preview { job, .. } = &event {
                hub.preview(*job, &event);
            }
        })
    };
    loop {
        let queued = hub.next_job();
        let job = queued.job;
        let checked = precheck(&queued, opts);
        let (preset, inline, out_dir) = match checked {
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
        let mut command = wire::encode(&RankCommand::Run {
            job,
            preset_toml: queued.preset_toml,
            inline: queued.inline,
            out_dir: out_dir.clone(),
        })?;
        comm.broadcast(&mut command, 0)?;
        drop(command);
        tracing::info!("job {job} ({}) starts on {world} rank(s)", preset.name);
        let ctx = JobContext {
            comm: &comm,
            job,
            devices: &devices,
            coordinator: Some(Coordinator {
                hub: &hub,
                previews: &previews,
                cancel: queued.cancel,
                preview_max_side: match queued.preview_max_side {
                    0 => DEFAULT_PREVIEW_SIDE,
                    s => s.clamp(PREVIEW_SIDE_RANGE.0, PREVIEW_SIDE_RANGE.1),
                },
            }),
        };
        match run_job(&ctx, &preset, &inline, &opts.base_dir, &out_dir) {
            Ok(summary) => {
                let summary_json = serde_json::to_string_pretty(&summary)
                    .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
                if summary.stopped_early {
                    tracing::info!(
                        "job {job} cancelled after {} iteration(s)",
                        summary.iterations
                    );
                } else {
                    tracing::info!("job {job} finished: outputs in {}", out_dir.display());
                }
                hub.end(
                    job,
                    &Event::Finished {
                        job,
                        outputs: summary.outputs.clone(),
                        summary_json,
                    },
                );
            }
            Err(e) => {
                let fatal = world > 1;
                let error = if fatal {
                    format!("{e} (the backend stops: its ranks may be out of step)")
                } else {
                    e.to_string()
                };
                tracing::error!("job {job} failed: {error}");
                hub.end(
                    job,
                    &Event::Failed {
                        job: Some(job),
                        error,
                    },
                );
                if fatal {
                    // Give the writer threads a moment to deliver the Failed event.
                    std::thread::sleep(Duration::from_millis(300));
                    return Err(e);
                }
            }
        }
    }
}

/// A submission that passed [`precheck`]: the preset, its inline arrays, its output folder.
type CheckedJob = (Preset, Vec<(String, Tensor)>, PathBuf);

/// Checks a submission on rank 0 before any rank sees it.
fn precheck(queued: &hub::QueuedJob, opts: &ServeOptions) -> Result<CheckedJob> {
    let preset = Preset::from_toml(&queued.preset_toml, "submitted preset", &[])?;
    let inline = inline_tensors(queued.inline.clone())?;
    // Loads the image and any measurements and checks their shapes and values, exactly as every
    // rank will: a bad input fails this job, not the group.
    job::check_inputs(&preset, &opts.base_dir, &inline)?;
    let out_dir = opts.out_dir.join(format!("job-{}", queued.job));
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Error::io("creating output folder", &out_dir, e))?;
    Ok((preset, inline, out_dir))
}

struct Coordinator<'a> {
    hub: &'a Hub,
    previews: &'a PreviewWorker,
    cancel: Arc<AtomicBool>,
    preview_max_side: u32,
}

struct JobContext<'a> {
    comm: &'a Arc<dyn Collective>,
    job: JobId,
    devices: &'a [String],
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

/// Which tile each rank denoises, when the preset tiles its denoiser.
fn patch_map(preset: &Preset, image_shape: &[usize], world: usize) -> Option<PatchMap> {
    let tiling = preset.tiling.as_ref()?;
    let spatial = image_shape.get(2..)?;
    PatchMap::plan(tiling, spatial, world, preset.distributed.tile_assignment).ok()
}

/// Runs one job on this rank with the collective stop/timing exchange after every iteration.
fn run_job(
    ctx: &JobContext<'_>,
    preset: &Preset,
    inline: &[(String, Tensor)],
    base_dir: &Path,
    out_dir: &Path,
) -> Result<JobSummary> {
    let comm = ctx.comm;
    let job = ctx.job;
    let mut exchange_error: Option<Error> = None;
    let mut exchange_secs = 0.0;
    let mut handoff_secs = 0.0;
    let mut iterations_seen = 0usize;
    let mut last_preview: Option<Instant> = None;
    let mut preview_interval = PREVIEW_INTERVAL;
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
                if let Some(c) = &ctx.coordinator {
                    c.hub.record(
                        job,
                        &Event::Started {
                            job,
                            name: name.to_string(),
                            world_size,
                            devices: ctx.devices.to_vec(),
                            image_shape: image_shape.to_vec(),
                            operators: operator_names
                                .iter()
                                .enumerate()
                                .map(|(i, n)| OperatorInfo {
                                    name: n.clone(),
                                    rank: owner(i, world_size),
                                })
                                .collect(),
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
            JobEvent::Iteration { report, x } => {
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
                let records = wire::all_gather_as(comm.as_ref(), "iteration record", &mine);
                exchange_secs += t_exchange.elapsed().as_secs_f64();
                let records = match records {
                    Ok(r) => r,
                    Err(e) => {
                        exchange_error = Some(e);
                        return ControlFlow::Break(());
                    }
                };
                let stop = records.iter().any(|r| r.stop);
                if let Some(c) = &ctx.coordinator {
                    c.hub.record(
                        job,
                        &Event::Iteration {
                            job,
                            report: report.clone(),
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
                        c.previews.latest(PreviewRequest {
                            job,
                            iteration: report.iteration,
                            what: PreviewKind::Reconstruction,
                            x: c.previews.copy_of(x),
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
    let result = job::run_in_group_with(
        preset,
        base_dir,
        out_dir,
        Box::new(Shared(comm.clone())),
        inline,
        &mut on_event,
    );
    if let Some(e) = exchange_error {
        return Err(e);
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
    result
}

fn accept_loop(listener: Listener, hub: Arc<Hub>, welcome: Arc<Welcome>, token: Option<String>) {
    loop {
        match listener.accept() {
            Ok(stream) => {
                let (hub, welcome, token) = (hub.clone(), welcome.clone(), token.clone());
                let _ = std::thread::Builder::new()
                    .name("tessera-serve-conn".into())
                    .spawn(move || handle_connection(stream, &hub, &welcome, token.as_deref()));
            }
            Err(e) => {
                tracing::warn!("accepting a connection failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn refuse(mut stream: Stream, reason: String) {
    tracing::warn!("refused a connection from {}: {reason}", stream.peer());
    let _ = frame::write_message(&mut stream, &Event::Refused { reason }, MAX_FRAME_BYTES);
    stream.shutdown();
}

/// The handshake, then requests until the connection ends.
fn handle_connection(mut stream: Stream, hub: &Hub, welcome: &Welcome, token: Option<&str>) {
    let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
    let hello = frame::read_frame(&mut stream, HELLO_MAX_BYTES)
        .and_then(|f| f.map(|p| frame::decode::<Request>(&p)).transpose());
    let client = match hello {
        Ok(None) => return,
        Ok(Some(Request::Hello {
            protocol,
            client,
            token: given,
        })) => {
            if protocol != PROTOCOL_VERSION {
                return refuse(
                    stream,
                    format!(
                        "protocol version mismatch: the client speaks version {protocol}, this \
                         server speaks version {PROTOCOL_VERSION}; use the same tessera release on \
                         both sides"
                    ),
                );
            }
            if let Some(expected) = token
                && !given.as_deref().is_some_and(|g| same_token(g, expected))
            {
                let what = if given.is_some() { "wrong" } else { "missing" };
                return refuse(
                    stream,
                    format!("{what} token (this server needs its token file's token)"),
                );
            }
            client
        }
        Ok(Some(_)) => return refuse(stream, "the first message must be Hello".into()),
        Err(e) => {
            return refuse(
                stream,
                format!(
                    "unreadable hello ({e}); this server speaks protocol version {PROTOCOL_VERSION}"
                ),
            );
        }
    };
    let hello_ok = frame::write_message(
        &mut stream,
        &Event::Welcome {
            protocol: PROTOCOL_VERSION,
            server: welcome.server.clone(),
            world_size: welcome.world_size,
            devices: welcome.devices.clone(),
            backend: welcome.backend.clone(),
        },
        MAX_FRAME_BYTES,
    );
    if hello_ok.is_err() || stream.set_read_timeout(None).is_err() {
        return;
    }
    let Ok(id) = hub.add_client(&stream) else {
        return;
    };
    tracing::debug!("client {id} ({client}) connected from {}", stream.peer());
    let warn = |message: String| {
        hub.send_to(
            id,
            &Event::Log {
                level: LogLevel::Warn,
                rank: None,
                message,
            },
        )
    };
    loop {
        match frame::read_message::<Request>(&mut stream, MAX_FRAME_BYTES) {
            Ok(Some(Request::Submit {
                preset_toml,
                inline,
                preview_max_side,
            })) => {
                hub.submit(id, preset_toml, inline, preview_max_side);
            }
            Ok(Some(Request::Cancel { job })) => {
                if let Err(m) = hub.cancel(job) {
                    warn(format!("cancel: {m}"));
                }
            }
            Ok(Some(Request::Status)) => hub.send_to(id, &hub.status()),
            Ok(Some(Request::Attach { job })) => {
                if let Err(m) = hub.attach(id, job) {
                    warn(format!("attach: {m}"));
                }
            }
            Ok(Some(Request::Hello { .. })) => warn("hello: already connected".into()),
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("client {id}: {e}; closing its connection");
                break;
            }
        }
    }
    hub.remove_client(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(same_token("s3cret", "s3cret"));
        assert!(!same_token("s3cret", "s3cres"));
        assert!(!same_token("s3cret", "s3cret "));
        assert!(!same_token("", "x"));
    }
}
