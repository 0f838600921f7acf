//! Stream sockets between ranks: Unix domain sockets when all ranks share a host, TCP otherwise,
//! and the full mesh built from every rank's listening address (each rank dials the ranks below it
//! and accepts the ranks above it; a greeting names the group and the rank).
//!
//! Used for the data links of [`super::SocketGroup`] and for the heartbeat links of
//! [`super::liveness`] (over sockets and over MPI).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::wire::{self, read_frame, write_frame};
use crate::error::{Error, Result};

/// A connected socket of either kind.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    pub fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
    /// Closes both directions: a thread blocked on this socket (through any handle) wakes up.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A listening socket, its address for the peers (`unix:PATH` or `tcp:IP:PORT`), and the socket
/// file removed when it is dropped.
pub(crate) struct Listener {
    inner: ListenerKind,
    pub addr: String,
    path: Option<PathBuf>,
}

enum ListenerKind {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// A Unix socket in the temporary folder, named after the group and the rank.
    pub fn unix(session: &str, rank: usize, what: &str) -> Result<Listener> {
        let path = std::env::temp_dir().join(format!("tessera-{session}-{rank}-{what}.sock"));
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path)
            .map_err(|e| comm(format!("listening on {}", path.display()), e))?;
        Ok(Listener {
            inner: ListenerKind::Unix(l),
            addr: format!("unix:{}", path.display()),
            path: Some(path),
        })
    }

    /// A TCP socket on every interface; peers reach it at `ip`.
    pub fn tcp(ip: std::net::IpAddr) -> Result<Listener> {
        let l =
            TcpListener::bind("0.0.0.0:0").map_err(|e| comm("listening for peers".into(), e))?;
        let port = l
            .local_addr()
            .map_err(|e| comm("listening for peers".into(), e))?
            .port();
        Ok(Listener {
            inner: ListenerKind::Tcp(l),
            addr: format!("tcp:{ip}:{port}"),
            path: None,
        })
    }

    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match &self.inner {
            ListenerKind::Tcp(l) => l.set_nonblocking(on),
            ListenerKind::Unix(l) => l.set_nonblocking(on),
        }
    }

    fn accept(&self) -> std::io::Result<Stream> {
        match &self.inner {
            ListenerKind::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            ListenerKind::Unix(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Connects to a peer's `unix:PATH` or `tcp:HOST:PORT`.
pub(crate) fn dial(addr: &str) -> std::io::Result<Stream> {
    if let Some(path) = addr.strip_prefix("unix:") {
        Ok(Stream::Unix(UnixStream::connect(path)?))
    } else if let Some(a) = addr.strip_prefix("tcp:") {
        let s = TcpStream::connect(a)?;
        s.set_nodelay(true)?;
        Ok(Stream::Tcp(s))
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unknown peer address `{addr}`"),
        ))
    }
}

/// The first frame on a link: which group (a nonce rank 0 chose) and which rank dials.
#[derive(serde::Serialize, serde::Deserialize)]
struct Greeting {
    session: String,
    rank: usize,
}

/// The full mesh on `listener`: a stream to every other rank (`None` at this rank's index), given
/// every rank's listening address. Fails at `deadline` (of a `timeout` in all) naming the ranks
/// that did not connect.
pub(crate) fn mesh(
    rank: usize,
    listener: &Listener,
    addrs: &[String],
    session: &str,
    (deadline, timeout): (Instant, Duration),
) -> Result<Vec<Option<Stream>>> {
    let world = addrs.len();
    let mut links: Vec<Option<Stream>> = (0..world).map(|_| None).collect();
    for (peer, slot) in links.iter_mut().enumerate().take(rank) {
        let addr = &addrs[peer];
        let mut s =
            dial(addr).map_err(|e| comm(format!("connecting to rank {peer} at {addr}"), e))?;
        let greeting = wire::encode(&Greeting {
            session: session.to_string(),
            rank,
        })?;
        write_frame(&mut s, &greeting).map_err(|e| comm(format!("greeting rank {peer}"), e))?;
        *slot = Some(s);
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| comm("listening for peers".into(), e))?;
    while links[rank + 1..].iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<String> = (rank + 1..world)
                .filter(|&r| links[r].is_none())
                .map(|r| r.to_string())
                .collect();
            return Err(Error::Timeout {
                what: format!("rank(s) {} to connect to rank {rank}", missing.join(", ")),
                secs: timeout.as_secs_f64(),
            });
        }
        match listener.accept() {
            Ok(mut s) => {
                let left = deadline.saturating_duration_since(Instant::now());
                s.set_read_timeout(Some(left.max(Duration::from_millis(100))))
                    .map_err(|e| comm("accepting a peer".into(), e))?;
                let hello = match read_frame(&mut s, 4096) {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::warn!("ignoring a connection without a greeting: {e}");
                        continue;
                    }
                };
                let Ok(Greeting {
                    session: theirs,
                    rank: peer,
                }) = wire::decode(&hello)
                else {
                    tracing::warn!("ignoring a connection with a malformed greeting");
                    continue;
                };
                if theirs != session || peer <= rank || peer >= world || links[peer].is_some() {
                    tracing::warn!(peer, "ignoring an unexpected connection");
                    continue;
                }
                s.set_read_timeout(None)
                    .map_err(|e| comm(format!("rank {peer}"), e))?;
                links[peer] = Some(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(comm("accepting a peer".into(), e)),
        }
    }
    Ok(links)
}

pub(crate) fn comm(context: String, source: std::io::Error) -> Error {
    Error::Comm { context, source }
}
