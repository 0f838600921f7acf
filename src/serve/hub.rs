//! Rank 0's bookkeeping between the job loop and the connected clients: the job queue, each job's
//! history (for re-attach), and fan-out of events to every watching client.
//!
//! An event is encoded once and its frame shared by all clients. Each client has a writer thread
//! behind a bounded queue; the job loop never waits on a client: previews are skipped for a client
//! that is behind, and a client whose queue is full is disconnected (it can re-attach and the
//! history is replayed).
//!
//! Who may do what: one token is one user, so every authenticated client may watch, attach to and
//! fetch the outputs of every job. Stopping is the owners' alone: the client that submitted a job,
//! and any client that attached to it (a deliberate act, e.g. a workbench reconnecting to its run);
//! a Cancel from any other client is refused with a warning, so a second workbench on the same
//! backend cannot stop the first one's run by accident. The queue holds at most
//! [`MAX_QUEUED_JOBS`] jobs and [`MAX_QUEUED_BYTES`] of inline arrays and files; a submission
//! beyond either is accepted and at once failed, naming the limit.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::protocol::frame;
use crate::protocol::transport::Stream;
use crate::protocol::{
    Event, FILE_CHUNK_BYTES, InlineArray, InlineFile, JobId, MAX_FRAME_BYTES, PreviewKind,
};

/// Frames a client may have queued before it is dropped as too slow (a whole replayed history
/// fits; frames are shared, so a slot costs a pointer).
const CLIENT_QUEUE: usize = 1 << 16;
/// A client with more frames than this waiting gets no previews until it catches up.
const PREVIEW_BACKLOG: usize = 8;
/// Finished jobs whose history is kept for [`crate::protocol::Request::Attach`].
const KEPT_JOBS: usize = 16;
/// Jobs waiting at once (the running one aside).
pub const MAX_QUEUED_JOBS: usize = 32;
/// Bytes of inline arrays and files the waiting jobs hold at once (four frames' worth).
pub const MAX_QUEUED_BYTES: usize = 4 * MAX_FRAME_BYTES;

type Frame = Arc<Vec<u8>>;

/// A submitted job waiting for the ranks.
pub struct QueuedJob {
    pub job: JobId,
    pub preset_toml: String,
    pub inline: Vec<InlineArray>,
    pub files: Vec<InlineFile>,
    pub preview_max_side: u32,
    /// A stopped training run's folder whose checkpoint this job continues from.
    pub resume_from: Option<PathBuf>,
    pub cancel: Arc<AtomicBool>,
}

impl QueuedJob {
    /// Bytes of data it carries.
    fn bytes(&self) -> usize {
        self.inline.iter().map(|a| a.data.len() * 4).sum::<usize>()
            + self.files.iter().map(|f| f.bytes.len()).sum::<usize>()
    }
}

struct ClientSlot {
    id: u64,
    tx: SyncSender<Frame>,
    queued: Arc<AtomicUsize>,
    watching: bool,
    stream: Stream,
}

#[derive(Default)]
struct JobRecord {
    started: Option<Frame>,
    history: Vec<Frame>,
    previews: BTreeMap<PreviewKind, Frame>,
    end: Option<Frame>,
    cancel: Arc<AtomicBool>,
    /// The job's folder and its files, once complete (for [`Hub::fetch`]).
    outputs: Option<(PathBuf, Vec<PathBuf>)>,
    /// Clients that may cancel it: its submitter and those that attached to it.
    owners: Vec<u64>,
}

#[derive(Default)]
struct State {
    clients: Vec<ClientSlot>,
    next_client: u64,
    next_job: JobId,
    queue: VecDeque<QueuedJob>,
    running: Option<JobId>,
    done: Vec<JobId>,
    jobs: BTreeMap<JobId, JobRecord>,
}

/// Shared by the job loop, the accept thread and the client threads.
pub struct Hub {
    state: Mutex<State>,
    queue_cv: Condvar,
    /// The group's size now (an elastic backend's shrinks when it loses a rank).
    world_size: AtomicUsize,
    /// Jobs and bytes the queue holds at most ([`MAX_QUEUED_JOBS`], [`MAX_QUEUED_BYTES`]).
    queue_limits: (usize, usize),
}

fn encode(event: &Event) -> Option<Frame> {
    match frame::encode(event) {
        Ok(bytes) if bytes.len() <= MAX_FRAME_BYTES => Some(Arc::new(bytes)),
        Ok(bytes) => {
            tracing::warn!(
                "dropping an event of {} bytes (over the frame limit)",
                bytes.len()
            );
            None
        }
        Err(e) => {
            tracing::warn!("dropping an event that cannot be encoded: {e}");
            None
        }
    }
}

/// The file's size and up to [`FILE_CHUNK_BYTES`] of it from `offset`.
fn read_chunk(path: &Path, offset: u64) -> Result<(u64, Vec<u8>), String> {
    let failed = |e: std::io::Error| format!("reading {}: {e}", path.display());
    let mut f = std::fs::File::open(path).map_err(failed)?;
    let total = f.metadata().map_err(failed)?.len();
    if offset > total {
        return Err(format!("offset {offset} is past the end ({total} bytes)"));
    }
    f.seek(SeekFrom::Start(offset)).map_err(failed)?;
    let mut data = Vec::with_capacity(FILE_CHUNK_BYTES.min((total - offset) as usize));
    f.take(FILE_CHUNK_BYTES as u64)
        .read_to_end(&mut data)
        .map_err(failed)?;
    Ok((total, data))
}

impl Hub {
    pub fn new(world_size: usize) -> Hub {
        Hub {
            state: Mutex::new(State {
                next_job: 1,
                ..Default::default()
            }),
            queue_cv: Condvar::new(),
            world_size: AtomicUsize::new(world_size),
            queue_limits: (MAX_QUEUED_JOBS, MAX_QUEUED_BYTES),
        }
    }

    /// The group's size from now on (an elastic backend's, after a lost rank).
    pub fn set_world_size(&self, world_size: usize) {
        self.world_size.store(world_size, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection (after its handshake) and starts its writer thread.
    pub fn add_client(&self, stream: &Stream) -> std::io::Result<u64> {
        let mut write_half = stream.try_clone()?;
        let shutdown_half = stream.try_clone()?;
        let (tx, rx) = sync_channel::<Frame>(CLIENT_QUEUE);
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        std::thread::Builder::new()
            .name("tessera-serve-write".into())
            .spawn(move || {
                for f in rx {
                    q.fetch_sub(1, Ordering::Relaxed);
                    if frame::write_frame(&mut write_half, &f, MAX_FRAME_BYTES).is_err() {
                        write_half.shutdown();
                        return;
                    }
                }
            })?;
        let mut s = self.lock();
        let id = s.next_client;
        s.next_client += 1;
        s.clients.push(ClientSlot {
            id,
            tx,
            queued,
            watching: false,
            stream: shutdown_half,
        });
        Ok(id)
    }

    pub fn remove_client(&self, id: u64) {
        let mut s = self.lock();
        if let Some(i) = s.clients.iter().position(|c| c.id == id) {
            let c = s.clients.remove(i);
            c.stream.shutdown();
        }
    }

    /// Sends to every client (`watching_only`: only those that submitted or attached).
    fn fan_out(s: &mut State, f: &Frame, watching_only: bool, droppable: bool) {
        s.clients.retain(|c| {
            if watching_only && !c.watching {
                return true;
            }
            if droppable && c.queued.load(Ordering::Relaxed) > PREVIEW_BACKLOG {
                return true;
            }
            c.queued.fetch_add(1, Ordering::Relaxed);
            match c.tx.try_send(f.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    tracing::warn!(
                        "a client fell {CLIENT_QUEUE} events behind; disconnecting it (it can re-attach)"
                    );
                    c.stream.shutdown();
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    fn send_slot(s: &mut State, id: u64, f: Frame) {
        if let Some(c) = s.clients.iter().find(|c| c.id == id) {
            c.queued.fetch_add(1, Ordering::Relaxed);
            if c.tx.try_send(f).is_err() {
                c.stream.shutdown();
            }
        }
    }

    /// Sends one event to one client.
    pub fn send_to(&self, id: u64, event: &Event) {
        if let Some(f) = encode(event) {
            Self::send_slot(&mut self.lock(), id, f);
        }
    }

    /// A log line for every client.
    pub fn log(&self, event: &Event) {
        if let Some(f) = encode(event) {
            Self::fan_out(&mut self.lock(), &f, false, false);
        }
    }

    /// Queues a job; the submitter starts watching. Returns its id.
    pub fn submit(
        &self,
        client: u64,
        preset_toml: String,
        inline: Vec<InlineArray>,
        files: Vec<InlineFile>,
        preview_max_side: u32,
        resume_from: Option<PathBuf>,
    ) -> JobId {
        let mut s = self.lock();
        let job = s.next_job;
        s.next_job += 1;
        let cancel = Arc::new(AtomicBool::new(false));
        s.jobs.insert(
            job,
            JobRecord {
                cancel: cancel.clone(),
                owners: vec![client],
                ..Default::default()
            },
        );
        let queued = QueuedJob {
            job,
            preset_toml,
            inline,
            files,
            preview_max_side,
            resume_from,
            cancel,
        };
        if let Some(c) = s.clients.iter_mut().find(|c| c.id == client) {
            c.watching = true;
        }
        if let Some(f) = encode(&Event::Accepted { job }) {
            Self::send_slot(&mut s, client, f);
        }
        let (max_jobs, max_bytes) = self.queue_limits;
        let waiting_bytes: usize = s.queue.iter().map(QueuedJob::bytes).sum();
        let full = if s.queue.len() >= max_jobs {
            Some(format!("{max_jobs} jobs already wait"))
        } else if waiting_bytes + queued.bytes() > max_bytes {
            Some(format!(
                "the waiting jobs carry {} MiB of arrays and files and this one {} MiB, more \
                 than the {} MiB the queue holds",
                waiting_bytes >> 20,
                queued.bytes() >> 20,
                max_bytes >> 20
            ))
        } else {
            None
        };
        if let Some(why) = full {
            drop(s);
            tracing::warn!("job {job} refused: the queue is full ({why})");
            self.end(
                job,
                &Event::Failed {
                    job: Some(job),
                    error: format!("the job queue is full: {why}; submit it when one has ended"),
                },
            );
            return job;
        }
        s.queue.push_back(queued);
        self.queue_cv.notify_all();
        job
    }

    /// Blocks until a job is queued, marks it running and hands it over.
    pub fn next_job(&self) -> QueuedJob {
        let mut s = self.lock();
        loop {
            if let Some(q) = s.queue.pop_front() {
                s.running = Some(q.job);
                return q;
            }
            s = self.queue_cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Cancels a queued or running job for `client`, one of its owners. `Err` explains why
    /// nothing was cancelled.
    pub fn cancel(&self, client: u64, job: JobId) -> Result<(), String> {
        let mut s = self.lock();
        if s.jobs
            .get(&job)
            .is_some_and(|rec| !rec.owners.contains(&client))
        {
            return Err(format!(
                "job {job} was submitted by another client; only its submitter, or a client \
                 that attached to it, may stop it"
            ));
        }
        if let Some(i) = s.queue.iter().position(|q| q.job == job) {
            s.queue.remove(i);
            drop(s);
            self.end(
                job,
                &Event::Cancelled {
                    job,
                    iterations: 0,
                    run_dir: None,
                    outputs: Vec::new(),
                    summary_json: None,
                },
            );
            return Ok(());
        }
        match (s.running, s.jobs.get(&job)) {
            (Some(r), Some(rec)) if r == job => {
                rec.cancel.store(true, Ordering::SeqCst);
                Ok(())
            }
            _ => Err(format!("job {job} is neither running nor queued")),
        }
    }

    /// A job event that belongs to the job's history (Started, Iteration; FwiStarted, FwiEpoch;
    /// TrainStarted, TrainStep, DsnEpoch).
    pub fn record(&self, job: JobId, event: &Event) {
        let Some(f) = encode(event) else { return };
        let mut s = self.lock();
        if let Some(rec) = s.jobs.get_mut(&job) {
            match event {
                Event::Started { .. } | Event::FwiStarted { .. } | Event::TrainStarted { .. } => {
                    rec.started = Some(f.clone())
                }
                _ => rec.history.push(f.clone()),
            }
        }
        Self::fan_out(&mut s, &f, true, false);
    }

    /// A preview: kept as the latest of its kind, sent to clients that are not behind.
    pub fn preview(&self, job: JobId, event: &Event) {
        let Event::Preview { what, .. } = event else {
            return;
        };
        let Some(f) = encode(event) else { return };
        let mut s = self.lock();
        if let Some(rec) = s.jobs.get_mut(&job) {
            rec.previews.insert(what.clone(), f.clone());
        }
        Self::fan_out(&mut s, &f, true, true);
    }

    /// The job's last event (Finished, Cancelled or Failed; exactly one per job); the job leaves
    /// the running slot.
    pub fn end(&self, job: JobId, event: &Event) {
        let Some(f) = encode(event) else { return };
        let mut s = self.lock();
        if let Some(rec) = s.jobs.get_mut(&job) {
            if rec.end.is_some() {
                tracing::error!("job {job} already ended; a second end event is dropped");
                return;
            }
            rec.end = Some(f.clone());
            rec.outputs = match event {
                Event::Finished {
                    run_dir, outputs, ..
                }
                | Event::Cancelled {
                    run_dir: Some(run_dir),
                    outputs,
                    ..
                } => Some((run_dir.clone(), outputs.clone())),
                _ => None,
            };
        }
        if s.running == Some(job) {
            s.running = None;
        }
        s.done.push(job);
        while s.jobs.len() > KEPT_JOBS {
            let oldest = *s.jobs.keys().next().expect("non-empty");
            if s.running == Some(oldest) || s.queue.iter().any(|q| q.job == oldest) {
                break;
            }
            s.jobs.remove(&oldest);
        }
        Self::fan_out(&mut s, &f, true, false);
    }

    /// Sends one client a chunk of an output file of a completed job: only the files that job
    /// listed, so a client cannot read anything else on the server.
    pub fn fetch(&self, client: u64, job: JobId, file: &str, offset: u64) {
        let found = self.lock().jobs.get(&job).map(|rec| rec.outputs.clone());
        let event = match found {
            None => Err(format!("job {job} is not known (or too old)")),
            Some(None) => Err(format!("job {job} has no completed outputs")),
            Some(Some((dir, names))) => match names.iter().find(|n| n.as_os_str() == file) {
                None => Err(format!("`{file}` is not one of job {job}'s outputs")),
                Some(name) => read_chunk(&dir.join(name), offset),
            },
        };
        let event = match event {
            Ok((total, data)) => Event::File {
                job,
                file: file.to_string(),
                offset,
                total,
                data,
            },
            Err(error) => Event::FetchFailed {
                job,
                file: file.to_string(),
                error,
            },
        };
        self.send_to(client, &event);
    }

    pub fn status(&self) -> Event {
        let s = self.lock();
        Event::Status {
            world_size: self.world_size.load(Ordering::SeqCst),
            running: s.running,
            done: s.done.clone(),
        }
    }

    /// Replays a job (the running one, else the latest, for `None`) to one client — Started, its
    /// iterations, its latest previews, its end if it ended — and makes the client a watcher, all
    /// under one lock so nothing is missed or sent twice.
    pub fn attach(&self, client: u64, job: Option<JobId>) -> Result<(), String> {
        let mut s = self.lock();
        let job = job
            .or(s.running)
            .or_else(|| s.jobs.keys().next_back().copied());
        let frames: Vec<Frame> = match job.and_then(|j| s.jobs.get(&j)) {
            Some(rec) => rec
                .started
                .iter()
                .chain(&rec.history)
                .chain(rec.previews.values())
                .chain(&rec.end)
                .cloned()
                .collect(),
            None if job.is_none() => Vec::new(),
            None => {
                return Err(format!(
                    "job {} is not known (or too old)",
                    job.unwrap_or(0)
                ));
            }
        };
        if let Some(c) = s.clients.iter_mut().find(|c| c.id == client) {
            c.watching = true;
        }
        if let Some(rec) = job.and_then(|j| s.jobs.get_mut(&j))
            && !rec.owners.contains(&client)
        {
            rec.owners.push(client);
        }
        for f in frames {
            Self::send_slot(&mut s, client, f);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended_with(hub: &Hub, job: JobId) -> Option<Event> {
        let s = hub.lock();
        let f = s.jobs.get(&job)?.end.clone()?;
        frame::decode(&f).ok()
    }

    #[test]
    fn the_queue_refuses_past_its_count_or_bytes_by_name() {
        let mut hub = Hub::new(1);
        hub.queue_limits = (2, 3 << 20);
        let file = |mib: usize| InlineFile {
            name: "m.npy".into(),
            bytes: vec![0; mib << 20],
        };
        let submit = |files| hub.submit(1, String::new(), Vec::new(), files, 0, None);
        let a = submit(vec![file(2)]);
        // 2 MiB wait, 2 more would make 4 of the 3 the queue holds.
        let b = submit(vec![file(2)]);
        assert!(
            matches!(ended_with(&hub, b), Some(Event::Failed { error, .. }) if error.contains("queue is full") && error.contains("3 MiB")),
            "{:?}",
            ended_with(&hub, b)
        );
        let c = submit(Vec::new());
        let d = submit(Vec::new());
        assert!(
            matches!(ended_with(&hub, d), Some(Event::Failed { error, .. }) if error.contains("2 jobs already wait")),
        );
        assert!(ended_with(&hub, a).is_none() && ended_with(&hub, c).is_none());
        assert_eq!(hub.next_job().job, a);
        // The running job leaves the queue: room for one more.
        let e = submit(Vec::new());
        assert!(ended_with(&hub, e).is_none());
    }

    #[test]
    fn only_a_jobs_submitter_or_a_client_that_attached_may_stop_it() {
        let hub = Hub::new(1);
        let job = hub.submit(1, String::new(), Vec::new(), Vec::new(), 0, None);
        let err = hub.cancel(2, job).unwrap_err();
        assert!(err.contains("another client"), "{err}");
        assert!(ended_with(&hub, job).is_none(), "not cancelled");
        hub.attach(2, Some(job)).unwrap();
        hub.cancel(2, job).unwrap();
        assert!(matches!(
            ended_with(&hub, job),
            Some(Event::Cancelled { .. })
        ));
        let other = hub.submit(1, String::new(), Vec::new(), Vec::new(), 0, None);
        hub.cancel(1, other).unwrap();
    }
}
