//! Rank 0's door: accepting connections and authenticating them, apart from the job loop.
//!
//! One thread holds every connection that has not finished its handshake, non-blocking, and polls
//! them together: a handshake has [`HANDSHAKE_DEADLINE`] in all (not per read), at most
//! [`MAX_PENDING`] wait at once (the oldest is dropped to make room, so slow or silent connections
//! cannot lock a client out), and no thread is spent on a connection before it is authenticated.
//! Unix-socket peers must be this user (`SO_PEERCRED`); TCP peers must present the token.
//!
//! Strangers must not disturb the clients who hold the token: a refusal is logged on the server
//! only (at most [`LOGGED_REFUSALS_PER_SEC`] lines a second, never sent to clients as `Log`
//! events); a wrong token is answered only after a delay that grows with its source's recent
//! failures, on that connection alone — the right token from the same address is never held back
//! (it was a lockout per address, which let anyone lock the token holder out); and a new
//! connection's hello is read as soon as it is accepted, while a full table of waiting handshakes
//! gives up the oldest one that has sent nothing, so a flood of silent connections cannot push out
//! a client that says hello at once. Authenticated clients get a reader thread each (at most
//! [`MAX_CLIENTS`]) that turns their requests into [`Hub`] calls.

use std::collections::HashMap;
use std::io::Read;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::hub::Hub;
use crate::protocol::auth::Token;
use crate::protocol::frame;
use crate::protocol::transport::{Listener, Stream};
use crate::protocol::{Event, LogLevel, MAX_FRAME_BYTES, PROTOCOL_VERSION, Request};

/// Time from accepting a connection to its complete, valid hello.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Largest hello accepted.
const HELLO_MAX_BYTES: usize = 64 << 10;
/// Connections waiting for their handshake at once.
pub const MAX_PENDING: usize = 32;
/// … of which at most this many from one IP address.
const MAX_PENDING_PER_SOURCE: usize = 8;
/// Authenticated clients at once.
pub const MAX_CLIENTS: usize = 64;
/// Wrong tokens a source may send before their answers are delayed.
const FREE_FAILURES: u32 = 3;
/// Longest delay before a wrong token is answered (within the handshake deadline).
const MAX_DELAY: Duration = Duration::from_secs(8);
/// A source's failures are forgotten this long after its last one.
const FAILURE_MEMORY: Duration = Duration::from_secs(60);
/// Refusals written to the server's log per second at most; the others are counted.
pub const LOGGED_REFUSALS_PER_SEC: u32 = 5;
/// Sources whose failures are remembered.
const MAX_SOURCES: usize = 4096;

/// What the door checks.
pub struct Door {
    /// Required on TCP connections.
    pub token: Option<Token>,
    /// Shared with the job loop, which updates it when an elastic backend's group shrinks.
    pub welcome: Arc<std::sync::Mutex<Event>>,
}

/// Where a connection comes from, for counting failed logins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Local,
    Ip(IpAddr),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Local => f.write_str("the local socket"),
            Source::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

struct Pending {
    stream: Stream,
    source: Source,
    since: Instant,
    buf: Vec<u8>,
    /// A wrong token, answered (refused with this reason) at this time.
    refuse_at: Option<(Instant, String)>,
}

impl Pending {
    /// Nothing received or waiting to be read, nothing decided: what a flood of connections looks
    /// like (a client's hello that arrived since the last poll is not silent).
    fn silent(&self) -> bool {
        let mut waiting: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int, the bytes waiting on this open socket.
        let rc = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::FIONREAD, &mut waiting) };
        self.buf.is_empty() && self.refuse_at.is_none() && (rc != 0 || waiting == 0)
    }
}

#[derive(Default)]
struct Failures {
    count: u32,
    last: Option<Instant>,
}

/// Wrong tokens per source, and the delay before the next one is answered.
#[derive(Default)]
struct Throttle {
    sources: HashMap<Source, Failures>,
}

impl Throttle {
    /// How long a wrong token from `source` waits for its answer: none for the first
    /// [`FREE_FAILURES`], then 1 s, 2 s, 4 s, … up to [`MAX_DELAY`]; a source quiet for
    /// [`FAILURE_MEMORY`] starts again.
    fn delay(&self, source: Source, now: Instant) -> Duration {
        let Some(f) = self.sources.get(&source) else {
            return Duration::ZERO;
        };
        if f.count <= FREE_FAILURES || f.last.is_some_and(|t| now - t >= FAILURE_MEMORY) {
            return Duration::ZERO;
        }
        let exp = (f.count - FREE_FAILURES - 1).min(16);
        Duration::from_secs(1u64 << exp).min(MAX_DELAY)
    }

    fn failed(&mut self, source: Source, now: Instant) {
        if self.sources.len() >= MAX_SOURCES && !self.sources.contains_key(&source) {
            // Forget the source whose last failure is oldest.
            if let Some(oldest) = self
                .sources
                .iter()
                .min_by_key(|(_, f)| f.last)
                .map(|(s, _)| *s)
            {
                self.sources.remove(&oldest);
            }
        }
        let f = self.sources.entry(source).or_default();
        if f.last.is_some_and(|t| now - t >= FAILURE_MEMORY) {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = Some(now);
    }
}

/// What a hello earns.
enum Verdict {
    Admit(String),
    Refuse(String),
    /// A wrong token: refused after this delay.
    RefuseAfter(Duration, String),
}

/// Accepts and authenticates connections until the listener fails for good; runs on its own
/// thread.
pub fn accept_loop(listener: Listener, hub: Arc<Hub>, door: Door) {
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(
            "the control socket cannot be made non-blocking: {e}; no client can connect"
        );
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let clients = Arc::new(AtomicUsize::new(0));
    let mut pending: Vec<Pending> = Vec::new();
    let mut throttle = Throttle::default();
    loop {
        let now = Instant::now();
        // Deadlines first: a handshake gets HANDSHAKE_DEADLINE in all; a wrong token its answer
        // when its delay is up.
        pending.retain(|p| {
            if let Some((at, reason)) = &p.refuse_at {
                if *at <= now {
                    refuse(&p.stream, reason.clone());
                    return false;
                }
                return true;
            }
            let late = now.duration_since(p.since) >= HANDSHAKE_DEADLINE;
            if late {
                refuse(
                    &p.stream,
                    format!(
                        "the handshake took longer than {} s",
                        HANDSHAKE_DEADLINE.as_secs()
                    ),
                );
            }
            !late
        });
        let wait = pending
            .iter()
            .map(|p| match &p.refuse_at {
                Some((at, _)) => at.saturating_duration_since(now),
                None => (p.since + HANDSHAKE_DEADLINE).saturating_duration_since(now),
            })
            .min()
            .unwrap_or(Duration::from_secs(3600));
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // A connection waiting for its answer is not read again (a hang-up still wakes the poll).
        for (f, p) in fds[1..].iter_mut().zip(&pending) {
            if p.refuse_at.is_some() {
                f.events = 0;
            }
        }
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::warn!("waiting for connections failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        // Handshakes that can make progress, newest last so indices stay valid while removing.
        let readable: Vec<usize> = fds[1..]
            .iter()
            .enumerate()
            .filter(|(_, f)| f.revents != 0)
            .map(|(i, _)| i)
            .collect();
        for i in readable.into_iter().rev() {
            if pending[i].refuse_at.is_some() {
                // Only a hang-up wakes these: the answer has nobody to go to.
                pending.swap_remove(i);
                continue;
            }
            match progress(&mut pending[i]) {
                Progress::Waiting => {}
                Progress::Closed => {
                    pending.swap_remove(i);
                }
                Progress::Hello(hello) => {
                    let p = pending.swap_remove(i);
                    decide(
                        p,
                        hello,
                        (&door, &mut throttle),
                        (&hub, &clients),
                        &mut pending,
                    );
                }
            }
        }
        if fds[0].revents != 0 {
            for mut p in accept_new(&listener, me, &mut pending) {
                // A client's hello is usually here already: it is answered without taking a
                // place among the waiting handshakes.
                match progress(&mut p) {
                    Progress::Closed => {}
                    Progress::Hello(hello) => decide(
                        p,
                        hello,
                        (&door, &mut throttle),
                        (&hub, &clients),
                        &mut pending,
                    ),
                    Progress::Waiting => make_room_for(p, &mut pending),
                }
            }
        }
    }
}

/// Admits, refuses, or holds `p` for its delayed refusal, as its hello earns.
fn decide(
    mut p: Pending,
    hello: Request,
    (door, throttle): (&Door, &mut Throttle),
    (hub, clients): (&Arc<Hub>, &Arc<AtomicUsize>),
    pending: &mut Vec<Pending>,
) {
    match check_hello(&p, hello, door, throttle) {
        Verdict::Admit(client) => admit(p.stream, client, hub, door, clients),
        Verdict::Refuse(reason) => refuse(&p.stream, reason),
        Verdict::RefuseAfter(delay, reason) => {
            p.refuse_at = Some((Instant::now() + delay, reason));
            make_room_for(p, pending);
        }
    }
}

/// Puts `p` among the waiting handshakes. When its source already has
/// [`MAX_PENDING_PER_SOURCE`] or all have [`MAX_PENDING`], the oldest silent one (of the source,
/// else of all) is dropped for it; with none silent, `p` itself is refused.
fn make_room_for(p: Pending, pending: &mut Vec<Pending>) {
    let full_source =
        pending.iter().filter(|q| q.source == p.source).count() >= MAX_PENDING_PER_SOURCE;
    if full_source || pending.len() >= MAX_PENDING {
        let victim = pending
            .iter()
            .position(|q| q.silent() && (!full_source || q.source == p.source));
        match victim {
            Some(i) => refuse(
                &pending.remove(i).stream,
                "too many handshakes at once".into(),
            ),
            None => {
                refuse(&p.stream, "too many handshakes at once; try again".into());
                return;
            }
        }
    }
    pending.push(p);
}

/// Every connection waiting on the listener (non-blocking, its source known). When accepting
/// fails (out of file descriptors, mostly), the oldest pending handshake is given up.
fn accept_new(listener: &Listener, me: u32, pending: &mut Vec<Pending>) -> Vec<Pending> {
    let mut new = Vec::new();
    loop {
        let stream = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return new,
            Err(e) => {
                log_refusal(&format!("accepting a connection failed: {e}"));
                if !pending.is_empty() {
                    refuse(
                        &pending.remove(0).stream,
                        "the server is short of resources".into(),
                    );
                }
                return new;
            }
        };
        let source = match (stream.peer_ip(), stream.peer_uid()) {
            (Some(ip), _) => Source::Ip(ip),
            (None, Ok(Some(uid))) if uid == me => Source::Local,
            (None, Ok(uid)) => {
                refuse(
                    &stream,
                    format!(
                        "this server accepts local connections from its own user only (user id \
                         {me}), not from user id {}",
                        uid.map_or("?".into(), |u| u.to_string())
                    ),
                );
                continue;
            }
            (None, Err(e)) => {
                refuse(&stream, format!("cannot tell who is connecting: {e}"));
                continue;
            }
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        new.push(Pending {
            stream,
            source,
            since: Instant::now(),
            buf: Vec::new(),
            refuse_at: None,
        });
    }
}

enum Progress {
    Waiting,
    Closed,
    Hello(Request),
}

/// Reads what a pending connection has sent, never past its hello (what follows stays in the
/// socket for the client's reader); a whole frame is its hello.
fn progress(p: &mut Pending) -> Progress {
    let mut chunk = [0u8; 4096];
    loop {
        let want = match p.buf.len() {
            n if n < 4 => 4 - n,
            n => {
                let len = u32::from_le_bytes([p.buf[0], p.buf[1], p.buf[2], p.buf[3]]) as usize;
                if len > HELLO_MAX_BYTES {
                    refuse(
                        &p.stream,
                        unreadable(&format!(
                            "a hello of {len} bytes, over the limit of {HELLO_MAX_BYTES}"
                        )),
                    );
                    return Progress::Closed;
                }
                if n == 4 + len {
                    break;
                }
                4 + len - n
            }
        };
        let want = want.min(chunk.len());
        match p.stream.read(&mut chunk[..want]) {
            Ok(0) => return Progress::Closed,
            Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Progress::Waiting,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Progress::Closed,
        }
    }
    match frame::decode::<Request>(&p.buf[4..]) {
        Ok(hello) => Progress::Hello(hello),
        Err(e) => {
            refuse(&p.stream, unreadable(&e.to_string()));
            Progress::Closed
        }
    }
}

fn unreadable(why: &str) -> String {
    format!("unreadable hello ({why}); this server speaks protocol version {PROTOCOL_VERSION}")
}

/// What `p`'s hello earns: the client's name when it is acceptable.
fn check_hello(p: &Pending, hello: Request, door: &Door, throttle: &mut Throttle) -> Verdict {
    let Request::Hello {
        protocol,
        client,
        token: given,
    } = hello
    else {
        return Verdict::Refuse("the first message must be Hello".into());
    };
    if protocol != PROTOCOL_VERSION {
        return Verdict::Refuse(format!(
            "protocol version mismatch: the client speaks version {protocol}, this server \
             speaks version {PROTOCOL_VERSION}; use the same tessera release on both sides"
        ));
    }
    // Unix-socket peers were checked by user id; TCP peers show the token.
    if p.source == Source::Local {
        return Verdict::Admit(client);
    }
    let Some(expected) = &door.token else {
        return Verdict::Refuse("this server has no token and takes no TCP clients".into());
    };
    match given.as_deref() {
        // The right token is never held back by others' failures from the same address.
        Some(g) if expected.matches(g) => Verdict::Admit(client),
        given => {
            let now = Instant::now();
            let delay = throttle.delay(p.source, now);
            throttle.failed(p.source, now);
            let what = if given.is_some() { "wrong" } else { "missing" };
            let reason = format!("{what} token (this server needs its token file's token)");
            match delay.is_zero() {
                true => Verdict::Refuse(reason),
                false => Verdict::RefuseAfter(delay, reason),
            }
        }
    }
}

/// Writes `line` to the server's log (never to clients), at most [`LOGGED_REFUSALS_PER_SEC`]
/// lines a second; the lines held back are counted in the next one written.
fn log_refusal(line: &str) {
    struct Window {
        start: Option<Instant>,
        written: u32,
        held_back: u32,
    }
    static WINDOW: std::sync::Mutex<Window> = std::sync::Mutex::new(Window {
        start: None,
        written: 0,
        held_back: 0,
    });
    let mut w = WINDOW.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if w.start.is_none_or(|t| now - t >= Duration::from_secs(1)) {
        if w.held_back > 0 {
            tracing::warn!(
                target: super::logs::SERVER_ONLY,
                "{} more connection(s) refused in the last second",
                w.held_back
            );
        }
        *w = Window {
            start: Some(now),
            written: 0,
            held_back: 0,
        };
    }
    if w.written < LOGGED_REFUSALS_PER_SEC {
        w.written += 1;
        tracing::warn!(target: super::logs::SERVER_ONLY, "{line}");
    } else {
        w.held_back += 1;
    }
}

/// Answers `Refused` (best effort: the connection may be gone) and closes.
fn refuse(stream: &Stream, reason: String) {
    log_refusal(&format!(
        "refused a connection from {}: {reason}",
        stream.peer()
    ));
    if let Ok(mut s) = stream.try_clone() {
        let _ = s.set_nonblocking(false);
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        let _ = frame::write_message(&mut s, &Event::Refused { reason }, MAX_FRAME_BYTES);
    }
    stream.shutdown();
}

/// Welcomes an authenticated client and gives it a reader thread.
fn admit(stream: Stream, client: String, hub: &Arc<Hub>, door: &Door, clients: &Arc<AtomicUsize>) {
    if clients.load(Ordering::SeqCst) >= MAX_CLIENTS {
        refuse(
            &stream,
            format!("the server already has {MAX_CLIENTS} clients"),
        );
        return;
    }
    let mut stream = stream;
    let welcome = door
        .welcome
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if stream.set_nonblocking(false).is_err()
        || stream.set_write_timeout(Some(HANDSHAKE_DEADLINE)).is_err()
        || frame::write_message(&mut stream, &welcome, MAX_FRAME_BYTES).is_err()
        || stream.set_write_timeout(None).is_err()
    {
        stream.shutdown();
        return;
    }
    let (hub, count) = (hub.clone(), clients.clone());
    count.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("tessera-serve-conn".into())
        .spawn(move || {
            serve_client(stream, &hub, &client);
            count.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        clients.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("no thread for a new client: {e}");
    }
}

/// Requests from one authenticated client until its connection ends.
fn serve_client(mut stream: Stream, hub: &Hub, client: &str) {
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
                files,
                preview_max_side,
            })) => {
                hub.submit(id, preset_toml, inline, files, preview_max_side, None);
            }
            Ok(Some(Request::Resume {
                preset_toml,
                run_dir,
                preview_max_side,
            })) => {
                hub.submit(
                    id,
                    preset_toml,
                    Vec::new(),
                    Vec::new(),
                    preview_max_side,
                    Some(run_dir),
                );
            }
            Ok(Some(Request::Cancel { job })) => {
                if let Err(m) = hub.cancel(id, job) {
                    warn(format!("cancel: {m}"));
                }
            }
            Ok(Some(Request::Status)) => hub.send_to(id, &hub.status()),
            Ok(Some(Request::Attach { job })) => {
                if let Err(m) = hub.attach(id, job) {
                    warn(format!("attach: {m}"));
                }
            }
            Ok(Some(Request::Fetch { job, file, offset })) => hub.fetch(id, job, &file, offset),
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
    fn repeated_wrong_tokens_wait_longer_for_their_answer_and_are_forgotten() {
        let mut t = Throttle::default();
        let src = Source::Ip("10.0.0.7".parse().unwrap());
        let other = Source::Ip("10.0.0.8".parse().unwrap());
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert!(t.delay(src, now).is_zero());
            t.failed(src, now);
        }
        t.failed(src, now);
        let first = t.delay(src, now);
        t.failed(src, now);
        let second = t.delay(src, now);
        assert!(
            second > first && !first.is_zero(),
            "{first:?} then {second:?}"
        );
        assert!(
            t.delay(other, now).is_zero(),
            "another source is not affected"
        );
        for _ in 0..40 {
            t.failed(src, now);
        }
        assert_eq!(t.delay(src, now), MAX_DELAY);
        assert!(MAX_DELAY < HANDSHAKE_DEADLINE);
        assert!(t.delay(src, now + FAILURE_MEMORY).is_zero());
    }
}
