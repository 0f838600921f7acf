//! Rank 0's door: accepting connections and authenticating them, apart from the job loop.
//!
//! One thread holds every connection that has not finished its handshake, non-blocking, and polls
//! them together: a handshake has [`HANDSHAKE_DEADLINE`] in all (not per read), at most
//! [`MAX_PENDING`] wait at once (the oldest is dropped to make room, so slow or silent connections
//! cannot lock a client out), and no thread is spent on a connection before it is authenticated.
//! Unix-socket peers must be this user (`SO_PEERCRED`); TCP peers must present the token, and a
//! source with repeated wrong tokens is locked out for a growing time. Authenticated clients get a
//! reader thread each (at most [`MAX_CLIENTS`]) that turns their requests into [`Hub`] calls.

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
/// Wrong tokens a source may send before it is locked out.
const FREE_FAILURES: u32 = 3;
/// Longest lockout after repeated wrong tokens.
const MAX_LOCKOUT: Duration = Duration::from_secs(60);
/// Sources whose failures are remembered.
const MAX_SOURCES: usize = 4096;

/// What the door checks.
pub struct Door {
    /// Required on TCP connections.
    pub token: Option<Token>,
    pub welcome: Event,
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
}

#[derive(Default)]
struct Failures {
    count: u32,
    locked_until: Option<Instant>,
    last: Option<Instant>,
}

/// Failed logins per source, and the lockout they earn.
#[derive(Default)]
struct Throttle {
    sources: HashMap<Source, Failures>,
}

impl Throttle {
    /// How long `source` must still wait, if it is locked out.
    fn locked(&self, source: Source, now: Instant) -> Option<Duration> {
        let until = self.sources.get(&source)?.locked_until?;
        (until > now).then(|| until - now)
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
        f.count += 1;
        f.last = Some(now);
        if f.count > FREE_FAILURES {
            // 1 s, 2 s, 4 s, … up to a minute.
            let exp = (f.count - FREE_FAILURES - 1).min(16);
            let wait = Duration::from_secs(1u64 << exp).min(MAX_LOCKOUT);
            f.locked_until = Some(now + wait);
        }
    }

    fn succeeded(&mut self, source: Source) {
        self.sources.remove(&source);
    }
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
        // Deadlines first: a handshake gets HANDSHAKE_DEADLINE in all.
        pending.retain(|p| {
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
            .map(|p| (p.since + HANDSHAKE_DEADLINE).saturating_duration_since(now))
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
            match progress(&mut pending[i]) {
                Progress::Waiting => {}
                Progress::Closed => {
                    pending.swap_remove(i);
                }
                Progress::Hello(hello) => {
                    let p = pending.swap_remove(i);
                    if let Some(client) = check_hello(&p, hello, &door, &mut throttle) {
                        admit(p.stream, client, &hub, &door, &clients);
                    }
                }
            }
        }
        if fds[0].revents != 0 {
            accept_new(&listener, &mut pending, me);
        }
    }
}

/// Takes every connection waiting on the listener into `pending`.
fn accept_new(listener: &Listener, pending: &mut Vec<Pending>, me: u32) {
    loop {
        let stream = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                // Out of file descriptors, mostly: pending handshakes are the ones to give up.
                tracing::warn!("accepting a connection failed: {e}");
                if let Some(oldest) = pending.first() {
                    refuse(&oldest.stream, "the server is short of resources".into());
                    pending.remove(0);
                }
                return;
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
        let same = pending.iter().filter(|p| p.source == source).count();
        if same >= MAX_PENDING_PER_SOURCE {
            // Make room among this source's own connections: its oldest goes.
            if let Some(i) = pending.iter().position(|p| p.source == source) {
                refuse(
                    &pending.remove(i).stream,
                    "too many handshakes at once".into(),
                );
            }
        } else if pending.len() >= MAX_PENDING {
            refuse(
                &pending.remove(0).stream,
                "too many handshakes at once".into(),
            );
        }
        pending.push(Pending {
            stream,
            source,
            since: Instant::now(),
            buf: Vec::new(),
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

/// The client's name when its hello is acceptable; refuses the connection otherwise.
fn check_hello(
    p: &Pending,
    hello: Request,
    door: &Door,
    throttle: &mut Throttle,
) -> Option<String> {
    let Request::Hello {
        protocol,
        client,
        token: given,
    } = hello
    else {
        refuse(&p.stream, "the first message must be Hello".into());
        return None;
    };
    if protocol != PROTOCOL_VERSION {
        refuse(
            &p.stream,
            format!(
                "protocol version mismatch: the client speaks version {protocol}, this server \
                 speaks version {PROTOCOL_VERSION}; use the same tessera release on both sides"
            ),
        );
        return None;
    }
    // Unix-socket peers were checked by user id; TCP peers show the token.
    if p.source == Source::Local {
        return Some(client);
    }
    let now = Instant::now();
    if let Some(wait) = throttle.locked(p.source, now) {
        refuse(
            &p.stream,
            format!(
                "too many wrong tokens from {}; try again in {} s",
                p.source,
                wait.as_secs() + 1
            ),
        );
        return None;
    }
    let Some(expected) = &door.token else {
        refuse(
            &p.stream,
            "this server has no token and takes no TCP clients".into(),
        );
        return None;
    };
    match given.as_deref() {
        Some(g) if expected.matches(g) => {
            throttle.succeeded(p.source);
            Some(client)
        }
        given => {
            throttle.failed(p.source, now);
            let what = if given.is_some() { "wrong" } else { "missing" };
            refuse(
                &p.stream,
                format!("{what} token (this server needs its token file's token)"),
            );
            None
        }
    }
}

/// Answers `Refused` (best effort: the connection may be gone) and closes.
fn refuse(stream: &Stream, reason: String) {
    tracing::warn!("refused a connection from {}: {reason}", stream.peer());
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
    if stream.set_nonblocking(false).is_err()
        || stream.set_write_timeout(Some(HANDSHAKE_DEADLINE)).is_err()
        || frame::write_message(&mut stream, &door.welcome, MAX_FRAME_BYTES).is_err()
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
    fn repeated_wrong_tokens_lock_a_source_out_for_a_growing_time() {
        let mut t = Throttle::default();
        let src = Source::Ip("10.0.0.7".parse().unwrap());
        let other = Source::Ip("10.0.0.8".parse().unwrap());
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            t.failed(src, now);
            assert!(t.locked(src, now).is_none());
        }
        t.failed(src, now);
        let first = t.locked(src, now).unwrap();
        t.failed(src, now);
        let second = t.locked(src, now).unwrap();
        assert!(second > first, "{first:?} then {second:?}");
        assert!(
            t.locked(other, now).is_none(),
            "another source is not affected"
        );
        assert!(
            t.locked(src, now + MAX_LOCKOUT + Duration::from_secs(1))
                .is_none()
        );
        for _ in 0..40 {
            t.failed(src, now);
        }
        assert!(t.locked(src, now).unwrap() <= MAX_LOCKOUT);
        t.succeeded(src);
        assert!(t.locked(src, now).is_none());
    }
}
