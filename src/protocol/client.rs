//! The workbench's side of a connection: [`Client`] (handshake, then requests out and events in on
//! background threads, so the GUI polls a channel and never blocks) and [`LocalBackend`] (starts
//! `tessera serve --ranks N --socket …` as a child process and owns it).
//!
//! A dropped connection, a killed backend or a garbled frame all end the same way: the event channel
//! yields one [`ClientEvent::Disconnected`] with the reason, then closes. The GUI can then connect
//! again (the job's history is replayed on [`Request::Attach`]) or spawn a new backend.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::frame;
use super::messages::{Event, JobId, MAX_FRAME_BYTES, PROTOCOL_VERSION, Request};
use super::transport::{BackendAddr, Stream};
use crate::error::{Error, Result};

/// Time allowed to connect and complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's [`Event::Welcome`].
#[derive(Debug, Clone, PartialEq)]
pub struct Welcome {
    pub protocol: u32,
    pub server: String,
    pub world_size: usize,
    pub devices: Vec<super::messages::RankDevice>,
    pub backend: super::reports::Transport,
}

/// What the client's event channel yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    Event(Event),
    /// The connection ended (the last item on the channel): the server closed it, died, or sent
    /// something unreadable. The text says which.
    Disconnected(String),
}

type Waker = Arc<Mutex<Option<Box<dyn Fn() + Send + Sync>>>>;

/// A connection to a `tessera serve` coordinator.
pub struct Client {
    addr: BackendAddr,
    welcome: Welcome,
    outgoing: Sender<Request>,
    events: Receiver<ClientEvent>,
    stream: Stream,
    waker: Waker,
    reader: Option<JoinHandle<()>>,
}

impl Client {
    /// Connects, says hello (this build's protocol version, the token if any) and waits for the
    /// welcome. A refusal (wrong token, other protocol version) is an error with the server's reason.
    pub fn connect(addr: &BackendAddr, token: Option<String>) -> Result<Client> {
        Self::connect_with(
            addr,
            Request::Hello {
                protocol: PROTOCOL_VERSION,
                client: format!("tessera-client {}", env!("CARGO_PKG_VERSION")),
                token,
            },
        )
    }

    /// Like [`Client::connect`] with a hello of the caller's choosing (tools and tests).
    pub fn connect_with(addr: &BackendAddr, hello: Request) -> Result<Client> {
        let mut stream = Stream::connect(addr, HANDSHAKE_TIMEOUT)?;
        let comm = |context: &str, source| Error::Comm {
            context: format!("{context} {addr}"),
            source,
        };
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| comm("configuring the connection to", e))?;
        frame::write_message(&mut stream, &hello, MAX_FRAME_BYTES)?;
        let answer: Option<Event> = frame::read_message(&mut stream, MAX_FRAME_BYTES)?;
        let welcome = match answer {
            Some(Event::Welcome {
                protocol,
                server,
                world_size,
                devices,
                backend,
            }) => Welcome {
                protocol,
                server,
                world_size,
                devices,
                backend,
            },
            Some(Event::Refused { reason }) => {
                return Err(comm(
                    "refused by",
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason),
                ));
            }
            Some(other) => {
                return Err(comm(
                    "handshake with",
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("expected Welcome, got {}", event_name(&other)),
                    ),
                ));
            }
            None => {
                return Err(comm(
                    "handshake with",
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the server closed the connection without answering",
                    ),
                ));
            }
        };
        stream
            .set_read_timeout(None)
            .map_err(|e| comm("configuring the connection to", e))?;
        let waker: Waker = Arc::new(Mutex::new(None));
        let (event_tx, events) = mpsc::channel();
        let (outgoing, out_rx) = mpsc::channel::<Request>();
        let read_half = stream
            .try_clone()
            .map_err(|e| comm("cloning the connection to", e))?;
        let write_half = stream
            .try_clone()
            .map_err(|e| comm("cloning the connection to", e))?;
        let reader = {
            let waker = waker.clone();
            std::thread::Builder::new()
                .name("tessera-client-read".into())
                .spawn(move || read_loop(read_half, event_tx, waker))
                .map_err(|e| comm("starting the reader thread for", e))?
        };
        std::thread::Builder::new()
            .name("tessera-client-write".into())
            .spawn(move || write_loop(write_half, out_rx))
            .map_err(|e| comm("starting the writer thread for", e))?;
        Ok(Client {
            addr: addr.clone(),
            welcome,
            outgoing,
            events,
            stream,
            waker,
            reader: Some(reader),
        })
    }

    pub fn addr(&self) -> &BackendAddr {
        &self.addr
    }

    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Queues a request; it is written by a background thread, so this never blocks. Fails only
    /// when the connection is already gone (the event channel says why).
    pub fn send(&self, request: Request) -> Result<()> {
        self.outgoing.send(request).map_err(|_| Error::Comm {
            context: format!("sending to {}", self.addr),
            source: std::io::Error::new(std::io::ErrorKind::NotConnected, "disconnected"),
        })
    }

    /// The incoming events; poll with `try_recv` from a UI loop.
    pub fn events(&self) -> &Receiver<ClientEvent> {
        &self.events
    }

    /// The next event if one is waiting. After [`ClientEvent::Disconnected`] it returns `None`.
    pub fn try_recv(&self) -> Option<ClientEvent> {
        self.events.try_recv().ok()
    }

    /// Copies output file `name` of completed job `job` into `dest`, chunk by chunk
    /// ([`Request::Fetch`]); returns its size. Blocks, and drops the other events that arrive
    /// meanwhile (for tools such as `tessera run --attach --fetch`, not for a UI loop). A name
    /// that could leave the run folder is refused before anything is asked ([`output_name`]).
    pub fn fetch_file(&self, job: JobId, name: &Path, dest: &mut impl Write) -> Result<u64> {
        let file = match output_name(name) {
            Some(n) => n,
            None => {
                return Err(Error::config(
                    "fetch",
                    format!("`{}` is not a path inside the run folder", name.display()),
                ));
            }
        };
        let lost = |why: &str| Error::Comm {
            context: format!("fetching {file} from {}", self.addr),
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why.to_string()),
        };
        let mut offset = 0u64;
        loop {
            self.send(Request::Fetch {
                job,
                file: file.clone(),
                offset,
            })?;
            let (total, data) = loop {
                match self.events.recv() {
                    Ok(ClientEvent::Event(Event::File {
                        job: j,
                        file: f,
                        offset: o,
                        total,
                        data,
                    })) if j == job && f == file && o == offset => break (total, data),
                    Ok(ClientEvent::Event(Event::FetchFailed {
                        job: j,
                        file: f,
                        error,
                    })) if j == job && f == file => {
                        return Err(Error::Comm {
                            context: format!("fetching {file} from {}", self.addr),
                            source: std::io::Error::other(error),
                        });
                    }
                    Ok(ClientEvent::Event(_)) => {}
                    Ok(ClientEvent::Disconnected(why)) => return Err(lost(&why)),
                    Err(_) => return Err(lost("disconnected")),
                }
            };
            dest.write_all(&data)
                .map_err(|e| Error::io("writing a fetched file", &file, e))?;
            offset += data.len() as u64;
            if offset >= total {
                return Ok(offset);
            }
            if data.is_empty() {
                return Err(lost(&format!(
                    "the file ended at {offset} of {total} bytes"
                )));
            }
        }
    }

    /// Called (on the reader thread) after each event is queued, e.g. egui's `request_repaint`.
    pub fn set_waker(&self, wake: impl Fn() + Send + Sync + 'static) {
        *self.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(wake));
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stream.shutdown();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

fn read_loop(mut stream: Stream, tx: Sender<ClientEvent>, waker: Waker) {
    let wake = || {
        if let Some(w) = waker.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            w();
        }
    };
    let reason = loop {
        match frame::read_message::<Event>(&mut stream, MAX_FRAME_BYTES) {
            Ok(Some(event)) => {
                if tx.send(ClientEvent::Event(event)).is_err() {
                    return; // the client was dropped
                }
                wake();
            }
            Ok(None) => break "the backend closed the connection".to_string(),
            Err(e) => break format!("connection lost: {e}"),
        }
    };
    stream.shutdown();
    let _ = tx.send(ClientEvent::Disconnected(reason));
    wake();
}

fn write_loop(mut stream: Stream, rx: Receiver<Request>) {
    for request in rx {
        if let Err(e) = frame::write_message(&mut stream, &request, MAX_FRAME_BYTES) {
            tracing::warn!("sending a request failed: {e}");
            // Wakes the reader, which reports the disconnection.
            stream.shutdown();
            return;
        }
    }
}

/// An output of a job as the protocol names it: a path inside its run folder (`x.npy`, or
/// `reconstructions/source.png` for a training run) as `/`-separated text; None for anything that
/// could leave the folder (`..`, absolute paths), an empty path, or one that is not UTF-8.
pub fn output_name(path: &Path) -> Option<String> {
    let parts: Option<Vec<&str>> = path
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    parts.filter(|v| !v.is_empty()).map(|v| v.join("/"))
}

/// Every output a server named for a job, checked before anything is written (a client creates
/// files only under names that pass): each must be an [`output_name`], named once, and no file may
/// also be another output's folder. A server that names anything else is not trusted with the
/// client's disk: the error names the first bad output and nothing is fetched.
pub fn output_names(outputs: &[PathBuf]) -> Result<Vec<String>> {
    let bad = |what: String| Error::Comm {
        context: "the server's list of output files (nothing was fetched)".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    };
    let mut names = Vec::with_capacity(outputs.len());
    for o in outputs {
        match output_name(o) {
            Some(n) => names.push(n),
            None => {
                return Err(bad(format!(
                    "`{}` is not a path inside the run folder",
                    o.display()
                )));
            }
        }
    }
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a == b {
            return Err(bad(format!("`{a}` is named twice")));
        }
        if b.strip_prefix(a).is_some_and(|rest| rest.starts_with('/')) {
            return Err(bad(format!("`{a}` is both a file and the folder of `{b}`")));
        }
    }
    Ok(names)
}

/// The variant's name, for messages.
pub fn event_name(e: &Event) -> &'static str {
    match e {
        Event::Welcome { .. } => "Welcome",
        Event::Refused { .. } => "Refused",
        Event::Accepted { .. } => "Accepted",
        Event::Started { .. } => "Started",
        Event::FwiStarted { .. } => "FwiStarted",
        Event::FwiEpoch { .. } => "FwiEpoch",
        Event::TrainStarted { .. } => "TrainStarted",
        Event::TrainStep { .. } => "TrainStep",
        Event::DsnEpoch { .. } => "DsnEpoch",
        Event::Iteration { .. } => "Iteration",
        Event::Preview { .. } => "Preview",
        Event::Log { .. } => "Log",
        Event::Finished { .. } => "Finished",
        Event::Cancelled { .. } => "Cancelled",
        Event::Failed { .. } => "Failed",
        Event::File { .. } => "File",
        Event::FetchFailed { .. } => "FetchFailed",
        Event::Status { .. } => "Status",
        Event::Regrouped { .. } => "Regrouped",
    }
}

/// How to start a local backend.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Number of rank processes (≥ 1).
    pub ranks: usize,
    /// Where jobs write their outputs (one folder per job); `serve.log` (the backend's stderr) too.
    pub out_dir: PathBuf,
    /// The `tessera` executable; default: `$TESSERA_EXE`, else this executable.
    pub exe: Option<PathBuf>,
    /// Extra arguments for `tessera serve` (e.g. `--log info`).
    pub extra_args: Vec<String>,
    /// With 2 or more ranks: `--elastic --respawn`, so that an imaging job goes on after a lost
    /// rank (other than rank 0, which holds the socket) and a fresh rank process takes its place
    /// (docs/ELASTIC.md). One rank has no peer to lose: the flags are left out.
    pub elastic: bool,
    /// How long to wait for the control socket.
    pub startup_timeout: Duration,
}

impl LocalOptions {
    pub fn new(ranks: usize, out_dir: impl Into<PathBuf>) -> Self {
        LocalOptions {
            ranks,
            out_dir: out_dir.into(),
            exe: None,
            extra_args: Vec::new(),
            elastic: false,
            startup_timeout: Duration::from_secs(60),
        }
    }
}

/// Environment variable naming the `tessera` executable [`LocalBackend`] starts (for tests and for a
/// GUI binary that is not itself `tessera`).
pub const EXE_ENV: &str = "TESSERA_EXE";

/// A `tessera serve` child process on this machine, reachable over a Unix socket in a private
/// (0700) folder. Dropping it stops the process (SIGTERM, SIGKILL after a grace period); the child
/// also dies with SIGKILL if this process dies (`PR_SET_PDEATHSIG`), so it never outlives the GUI.
pub struct LocalBackend {
    addr: BackendAddr,
    socket_dir: PathBuf,
    log_path: PathBuf,
    pid: u32,
    stop: Arc<AtomicBool>,
    exit: Arc<Mutex<Option<String>>>,
    keeper: Option<JoinHandle<()>>,
}

/// Grace period between SIGTERM and SIGKILL when a backend is dropped.
const STOP_GRACE: Duration = Duration::from_secs(2);

impl LocalBackend {
    /// Starts `tessera serve --ranks N --socket <private tmp path> --out OUT_DIR` and connects.
    pub fn spawn(ranks: usize, out_dir: &Path) -> Result<(LocalBackend, Client)> {
        Self::spawn_with(LocalOptions::new(ranks, out_dir))
    }

    pub fn spawn_with(opts: LocalOptions) -> Result<(LocalBackend, Client)> {
        if opts.ranks == 0 {
            return Err(Error::config("ranks", "must be at least 1"));
        }
        let exe = match (&opts.exe, std::env::var_os(EXE_ENV)) {
            (Some(e), _) => e.clone(),
            (None, Some(e)) => PathBuf::from(e),
            (None, None) => std::env::current_exe()
                .map_err(|e| Error::io("finding this executable", "current_exe", e))?,
        };
        std::fs::create_dir_all(&opts.out_dir)
            .map_err(|e| Error::io("creating output folder", &opts.out_dir, e))?;
        let socket_dir = private_dir()?;
        let socket = socket_dir.join("serve.sock");
        let (log_path, log) = new_log_file(&opts.out_dir)?;
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("serve")
            .arg("--ranks")
            .arg(opts.ranks.to_string())
            .arg("--socket")
            .arg(&socket)
            .arg("--out")
            .arg(&opts.out_dir)
            .args(match opts.elastic && opts.ranks > 1 {
                true => &["--elastic", "--respawn"][..],
                false => &[],
            })
            .args(&opts.extra_args)
            .stdin(std::process::Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|e| Error::io("opening", &log_path, e))?,
            )
            .stderr(log);
        let stop = Arc::new(AtomicBool::new(false));
        let exit = Arc::new(Mutex::new(None));
        let (pid_tx, pid_rx) = mpsc::channel();
        // PR_SET_PDEATHSIG fires when the *thread* that forked exits, so the fork happens on a
        // thread that lives exactly as long as the child (it also reaps it).
        let keeper = {
            let (stop, exit) = (stop.clone(), exit.clone());
            std::thread::Builder::new()
                .name("tessera-backend".into())
                .spawn(move || keep(cmd, pid_tx, stop, exit))
                .map_err(|e| Error::io("starting the backend keeper thread", &exe, e))?
        };
        let pid = match pid_rx.recv() {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => {
                let _ = keeper.join();
                let _ = std::fs::remove_dir_all(&socket_dir);
                return Err(Error::io("starting the backend", &exe, e));
            }
            Err(_) => {
                return Err(Error::Internal(
                    "the backend keeper thread ended early".into(),
                ));
            }
        };
        let backend = LocalBackend {
            addr: BackendAddr::Unix(socket),
            socket_dir,
            log_path,
            pid,
            stop,
            exit,
            keeper: Some(keeper),
        };
        let deadline = Instant::now() + opts.startup_timeout;
        loop {
            if let Some(how) = backend.exit_status() {
                return Err(Error::PeerLost {
                    rank: 0,
                    how: format!(
                        "(tessera serve) {how} before listening; its log ends with:\n{}",
                        backend.log_tail(2000)
                    ),
                });
            }
            if let BackendAddr::Unix(p) = &backend.addr
                && p.exists()
            {
                match Client::connect(&backend.addr, None) {
                    Ok(c) => return Ok((backend, c)),
                    Err(e) if Instant::now() > deadline => return Err(e),
                    Err(_) => {}
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("tessera serve to listen on {}", backend.addr),
                    secs: opts.startup_timeout.as_secs_f64(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Another connection to the same backend (re-attach after a dropped one).
    pub fn connect(&self) -> Result<Client> {
        Client::connect(&self.addr, None)
    }

    pub fn addr(&self) -> &BackendAddr {
        &self.addr
    }

    /// The `tessera serve` process (the launcher when ranks > 1).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The backend's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// How the process ended (`exited with status 1`, `was killed by signal 9 (SIGKILL)`), or
    /// `None` while it runs.
    pub fn exit_status(&self) -> Option<String> {
        self.exit.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The last `max_bytes` of the backend's log.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let text = std::fs::read(&self.log_path).unwrap_or_default();
        let start = text.len().saturating_sub(max_bytes);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
        let _ = std::fs::remove_dir_all(&self.socket_dir);
    }
}

/// Spawns the child, then reaps it; stops it when asked.
fn keep(
    mut cmd: std::process::Command,
    pid_tx: Sender<std::io::Result<u32>>,
    stop: Arc<AtomicBool>,
    exit: Arc<Mutex<Option<String>>>,
) {
    crate::dist::launch::die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => {
            let _ = pid_tx.send(Ok(c.id()));
            c
        }
        Err(e) => {
            let _ = pid_tx.send(Err(e));
            return;
        }
    };
    let mut term_sent: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                *exit.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(crate::dist::launch::describe(status));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                *exit.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("unknown: {e}"));
                return;
            }
        }
        if stop.load(Ordering::SeqCst) {
            match term_sent {
                None => {
                    // SAFETY: kill(2) on our own unreaped child.
                    unsafe {
                        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                    }
                    term_sent = Some(Instant::now());
                }
                Some(t) if t.elapsed() > STOP_GRACE => {
                    let _ = child.kill();
                }
                Some(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A log file of its own for this backend, `serve-<YYYYMMDD-HHMMSS>-<n>.log` in `dir`: a new
/// backend never overwrites an earlier one's log.
fn new_log_file(dir: &Path) -> Result<(PathBuf, std::fs::File)> {
    let stamp = crate::io::run_dir::local_timestamp();
    for n in 1.. {
        let path = dir.join(format!("serve-{stamp}-{n}.log"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("creating the backend log", path, e)),
        }
    }
    unreachable!("some log name is free")
}

/// A fresh folder only this user can enter, for the control socket.
fn private_dir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!("tessera-{}-{n}-{nanos:08x}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("creating a private socket folder", dir, e)),
        }
    }
    Err(Error::Internal(
        "could not create a private socket folder (100 names taken)".into(),
    ))
}
