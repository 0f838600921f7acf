//! Where a backend listens and the byte streams that reach it: a Unix socket (local mode: the socket
//! file is this user's only, and the server checks each peer's user id) or TCP (remote attach, always
//! with a token — see `super::auth`; loopback by default, the documented way in from a laptop is an
//! SSH tunnel to that loopback port).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

/// A backend's control address: `unix:/path/to.sock` (or any path with a `/`) or `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackendAddr {
    Unix(PathBuf),
    Tcp(String),
}

impl FromStr for BackendAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(BackendAddr::Unix(PathBuf::from(path)));
        }
        if s.contains('/') {
            return Ok(BackendAddr::Unix(PathBuf::from(s)));
        }
        let s = s.strip_prefix("tcp:").unwrap_or(s);
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(BackendAddr::Tcp(s.to_string()))
            }
            _ => Err(Error::config(
                "address",
                format!("`{s}` is neither HOST:PORT nor unix:/path/to/socket"),
            )),
        }
    }
}

impl fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            BackendAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A connected byte stream of either kind.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Connects within `timeout` (per resolved address for TCP).
    pub fn connect(addr: &BackendAddr, timeout: Duration) -> Result<Stream> {
        let comm = |source| Error::Comm {
            context: format!("connecting to {addr}"),
            source,
        };
        match addr {
            BackendAddr::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).map_err(comm)?)),
            BackendAddr::Tcp(hostport) => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address resolved");
                for a in hostport.to_socket_addrs().map_err(comm)? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(comm(last))
            }
        }
    }

    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }

    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }

    /// Closes both directions; a thread blocked reading this stream (or a clone) wakes up.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }

    /// The user id of a Unix socket's peer (`SO_PEERCRED`); `None` for TCP.
    pub fn peer_uid(&self) -> io::Result<Option<u32>> {
        let Stream::Unix(s) = self else {
            return Ok(None);
        };
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred as SO_PEERCRED expects.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(cred.uid))
    }

    /// The peer's IP address for TCP (what failed logins are counted by); `None` for Unix.
    pub fn peer_ip(&self) -> Option<std::net::IpAddr> {
        match self {
            Stream::Unix(_) => None,
            Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.ip()),
        }
    }

    /// The peer, for logs.
    pub fn peer(&self) -> String {
        match self {
            Stream::Unix(_) => "local socket".into(),
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into()),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

/// A listening control socket.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    /// Binds a Unix socket at `path` that only this user may connect to (mode 0600), replacing a
    /// stale socket (one nobody answers on) but never any other kind of file.
    pub fn bind_unix(path: &std::path::Path) -> Result<Listener> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(Error::config(
                    "--socket",
                    format!(
                        "the path exists and is not a socket; refusing to replace it: {}",
                        path.display()
                    ),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(Error::config(
                    "--socket",
                    format!("another server already listens on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| Error::io("removing the stale socket", path, e))?;
        }
        let l = UnixListener::bind(path).map_err(|e| Error::io("binding socket", path, e))?;
        let listener = Listener::Unix(l, path.to_path_buf());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("restricting the socket to this user", path, e))?;
        Ok(listener)
    }

    /// Binds TCP at `hostport`. The server requires a token on every TCP connection; without one
    /// (`has_token` false) only loopback addresses are allowed, which the caller then refuses to
    /// serve unauthenticated.
    pub fn bind_tcp(hostport: &str, has_token: bool) -> Result<Listener> {
        let addrs: Vec<_> = hostport
            .to_socket_addrs()
            .map_err(|e| Error::config("--listen", format!("cannot resolve `{hostport}`: {e}")))?
            .collect();
        if addrs.is_empty() {
            return Err(Error::config(
                "--listen",
                format!("`{hostport}` resolves to nothing"),
            ));
        }
        if !has_token && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(Error::config(
                "--listen",
                format!(
                    "refusing to listen on {hostport} (not loopback) without --token-file: anyone who \
                     can reach it could run jobs as this user. Give a token file, or listen on \
                     127.0.0.1 and reach it through an SSH tunnel"
                ),
            ));
        }
        let l = TcpListener::bind(&addrs[..]).map_err(|e| Error::Comm {
            context: format!("listening on {hostport}"),
            source: e,
        })?;
        Ok(Listener::Tcp(l))
    }

    /// The address clients use.
    pub fn addr(&self) -> BackendAddr {
        match self {
            Listener::Unix(_, p) => BackendAddr::Unix(p.clone()),
            Listener::Tcp(l) => BackendAddr::Tcp(
                l.local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| "?".into()),
            ),
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Unix(l, _) => l.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
        }
    }

    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
            Listener::Tcp(l) => {
                let s = l.accept()?.0;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print() {
        let u: BackendAddr = "unix:/tmp/a.sock".parse().unwrap();
        assert_eq!(u, BackendAddr::Unix("/tmp/a.sock".into()));
        assert_eq!(u.to_string(), "unix:/tmp/a.sock");
        let t: BackendAddr = "localhost:7341".parse().unwrap();
        assert_eq!(t, BackendAddr::Tcp("localhost:7341".into()));
        assert_eq!(t.to_string().parse::<BackendAddr>().unwrap(), t);
        assert!("localhost".parse::<BackendAddr>().is_err());
        assert!(":80".parse::<BackendAddr>().is_err());
    }

    #[test]
    fn a_regular_file_is_never_replaced_by_a_socket_but_a_stale_socket_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "precious").unwrap();
        let err = Listener::bind_unix(&file).unwrap_err().to_string();
        assert!(err.contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
        let sock = dir.path().join("serve.sock");
        let stale = UnixListener::bind(&sock).unwrap();
        drop(stale); // the file stays, nobody answers
        let l = Listener::bind_unix(&sock).unwrap();
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let err = Listener::bind_unix(&sock).unwrap_err().to_string();
        assert!(err.contains("already listens"), "{err}");
        drop(l);
    }

    #[test]
    fn a_public_address_without_a_token_is_refused() {
        let err = Listener::bind_tcp("0.0.0.0:0", false).unwrap_err();
        assert!(err.to_string().contains("without --token-file"), "{err}");
        assert!(Listener::bind_tcp("127.0.0.1:0", false).is_ok());
    }
}
