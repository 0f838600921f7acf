//! Rendezvous key-value store (like torch's `TCPStore`): rank 0 hosts it at `MASTER_ADDR:MASTER_PORT`,
//! every rank connects as a client to publish its address and find its peers.
//!
//! Operations: `set`, `get` (blocks until the key exists), `add` (atomic counter), `wait` (several
//! keys). Every blocking call has a timeout, and a timed-out `wait` lists the keys that never
//! appeared, so the caller can name the ranks that never arrived. Frames are bounded
//! ([`MAX_STORE_FRAME`]); a malformed request closes that connection only.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::wire::{self, read_frame, read_frame_or_end, write_frame};
use crate::error::{Error, Result};

/// Largest store message: keys and values are small (addresses, counters, shared parameters).
pub const MAX_STORE_FRAME: usize = 16 << 20;

/// Client → store.
#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Set {
        key: String,
        value: Vec<u8>,
    },
    /// Adds to a counter (an `i64`, 0 when absent).
    Add {
        key: String,
        delta: i64,
    },
    /// Waits for one key and returns its value.
    Get {
        key: String,
        timeout_ms: u64,
    },
    /// Waits for every key.
    Wait {
        keys: Vec<String>,
        timeout_ms: u64,
    },
}

/// Store → client.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Done,
    Value(Vec<u8>),
    Counter(i64),
    /// The keys that did not appear in time.
    TimedOut(Vec<String>),
}

#[derive(Default)]
struct State {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

/// The store's server side; it runs on background threads until the process ends.
pub struct StoreServer {
    addr: SocketAddr,
}

impl StoreServer {
    /// Binds `addr` (port 0 picks a free port) and serves in the background.
    pub fn bind(addr: &str) -> Result<StoreServer> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| comm(format!("binding the rendezvous store on {addr}"), e))?;
        let local = listener
            .local_addr()
            .map_err(|e| comm("reading the store's address".into(), e))?;
        let state = Arc::new(State::default());
        thread::Builder::new()
            .name("store-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let state = state.clone();
                    let _ = thread::Builder::new()
                        .name("store-conn".into())
                        .spawn(move || {
                            if let Err(e) = serve_connection(conn, &state) {
                                tracing::debug!("store connection closed: {e}");
                            }
                        });
                }
            })
            .map_err(|e| comm("starting the store thread".into(), e))?;
        Ok(StoreServer { addr: local })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn serve_connection(conn: TcpStream, state: &State) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = BufWriter::new(conn);
    while let Some(frame) = read_frame_or_end(&mut reader, MAX_STORE_FRAME)? {
        let request = wire::decode::<Request>(&frame)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let reply = wire::encode(&handle(request, state))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        write_frame(&mut writer, &reply)?;
    }
    Ok(())
}

fn handle(request: Request, state: &State) -> Reply {
    let lock = || state.map.lock().unwrap_or_else(|p| p.into_inner());
    let (keys, timeout_ms, get) = match request {
        Request::Set { key, value } => {
            lock().insert(key, value);
            state.changed.notify_all();
            return Reply::Done;
        }
        Request::Add { key, delta } => {
            let mut map = lock();
            let current = map
                .get(&key)
                .and_then(|v| v.as_slice().try_into().ok())
                .map(i64::from_le_bytes)
                .unwrap_or(0);
            let next = current.wrapping_add(delta);
            map.insert(key, next.to_le_bytes().to_vec());
            drop(map);
            state.changed.notify_all();
            return Reply::Counter(next);
        }
        Request::Get { key, timeout_ms } => (vec![key], timeout_ms, true),
        Request::Wait { keys, timeout_ms } => (keys, timeout_ms, false),
    };
    let deadline = super::deadline_after(Duration::from_millis(timeout_ms));
    let mut map = lock();
    loop {
        let missing: Vec<&String> = keys.iter().filter(|k| !map.contains_key(*k)).collect();
        if missing.is_empty() {
            return match keys.first() {
                Some(k) if get => Reply::Value(map[k].clone()),
                _ => Reply::Done,
            };
        }
        let now = Instant::now();
        if now >= deadline {
            return Reply::TimedOut(missing.into_iter().cloned().collect());
        }
        map = state
            .changed
            .wait_timeout(map, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// A connection to the store.
pub struct StoreClient {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    peer: String,
}

/// Outcome of a `wait` that timed out: the keys that never appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing(pub Vec<String>);

impl StoreClient {
    /// Connects to `addr`, retrying until `timeout` (rank 0 may start after the others).
    pub fn connect(addr: &str, timeout: Duration) -> Result<StoreClient> {
        let deadline = super::deadline_after(timeout);
        let mut last_err = None;
        while Instant::now() < deadline {
            let resolved: Vec<SocketAddr> = match addr.to_socket_addrs() {
                Ok(a) => a.collect(),
                Err(e) => return Err(comm(format!("resolving the rendezvous address {addr}"), e)),
            };
            for a in &resolved {
                match TcpStream::connect_timeout(a, Duration::from_millis(500)) {
                    Ok(s) => {
                        s.set_nodelay(true)
                            .map_err(|e| comm(format!("configuring {addr}"), e))?;
                        let reader = BufReader::new(
                            s.try_clone()
                                .map_err(|e| comm(format!("connecting to {addr}"), e))?,
                        );
                        return Ok(StoreClient {
                            reader,
                            writer: BufWriter::new(s),
                            peer: addr.to_string(),
                        });
                    }
                    Err(e) => last_err = Some(e),
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(Error::Timeout {
            what: format!(
                "the rendezvous store at {addr} (is rank 0 running? last error: {})",
                last_err
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "none".into())
            ),
            secs: timeout.as_secs_f64(),
        })
    }

    fn call(&mut self, request: &Request, timeout: Option<Duration>) -> Result<Reply> {
        let read_timeout = timeout
            .map(|t| t.saturating_add(Duration::from_secs(5)))
            .unwrap_or(Duration::from_secs(30));
        self.reader
            .get_ref()
            .set_read_timeout(Some(read_timeout))
            .map_err(|e| comm(self.peer.clone(), e))?;
        write_frame(&mut self.writer, &wire::encode(request)?)
            .map_err(|e| comm(format!("sending to the store at {}", self.peer), e))?;
        let reply = read_frame(&mut self.reader, MAX_STORE_FRAME)
            .map_err(|e| comm(format!("reading from the store at {}", self.peer), e))?;
        wire::decode_from(0, "rendezvous store reply", &reply)
    }

    fn unexpected(&self, reply: Reply) -> Error {
        Error::bad_peer_data(0, format!("the rendezvous store answered {reply:?}"))
    }

    /// The local IP address of this connection: the interface through which rank 0 is reachable,
    /// which is the one peers should use too.
    pub fn local_ip(&self) -> std::io::Result<std::net::IpAddr> {
        Ok(self.writer.get_ref().local_addr()?.ip())
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let request = Request::Set {
            key: key.into(),
            value: value.to_vec(),
        };
        match self.call(&request, None)? {
            Reply::Done => Ok(()),
            other => Err(self.unexpected(other)),
        }
    }

    /// Atomically adds `delta` to the counter `key` (0 if absent) and returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        let request = Request::Add {
            key: key.into(),
            delta,
        };
        match self.call(&request, None)? {
            Reply::Counter(n) => Ok(n),
            other => Err(self.unexpected(other)),
        }
    }

    /// Waits for `key` and returns its value.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let request = Request::Get {
            key: key.into(),
            timeout_ms: millis(timeout),
        };
        match self.call(&request, Some(timeout))? {
            Reply::Value(v) => Ok(v),
            Reply::TimedOut(_) => Err(Error::Timeout {
                what: format!("key `{key}` in the rendezvous store"),
                secs: timeout.as_secs_f64(),
            }),
            other => Err(self.unexpected(other)),
        }
    }

    /// Waits until all `keys` exist; `Ok(Err(missing))` when the timeout passes first.
    pub fn wait(
        &mut self,
        keys: &[String],
        timeout: Duration,
    ) -> Result<std::result::Result<(), Missing>> {
        let request = Request::Wait {
            keys: keys.to_vec(),
            timeout_ms: millis(timeout),
        };
        match self.call(&request, Some(timeout))? {
            Reply::Done => Ok(Ok(())),
            Reply::TimedOut(missing) => Ok(Err(Missing(missing))),
            other => Err(self.unexpected(other)),
        }
    }
}

fn millis(t: Duration) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

fn comm(context: String, source: std::io::Error) -> Error {
    Error::Comm { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> (StoreServer, String) {
        let s = StoreServer::bind("127.0.0.1:0").unwrap();
        let a = s.addr().to_string();
        (s, a)
    }

    #[test]
    fn set_get_add_wait() {
        let (_s, addr) = server();
        let mut a = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        let mut b = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        let waiter = thread::spawn(move || b.get("k", Duration::from_secs(5)).unwrap());
        thread::sleep(Duration::from_millis(50));
        a.set("k", b"v").unwrap();
        assert_eq!(waiter.join().unwrap(), b"v");
        assert_eq!(a.add("n", 2).unwrap(), 2);
        assert_eq!(a.add("n", 3).unwrap(), 5);
        assert_eq!(
            a.wait(&["k".into()], Duration::from_millis(10)).unwrap(),
            Ok(())
        );
    }

    #[test]
    fn wait_timeout_names_missing_keys() {
        let (_s, addr) = server();
        let mut a = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        a.set("rank/0", b"x").unwrap();
        let keys: Vec<String> = (0..3).map(|r| format!("rank/{r}")).collect();
        let missing = a
            .wait(&keys, Duration::from_millis(100))
            .unwrap()
            .unwrap_err();
        assert_eq!(missing.0, vec!["rank/1".to_string(), "rank/2".to_string()]);
        let e = a
            .get("nope", Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn garbage_closes_only_that_connection() {
        use std::io::Write;
        let (_s, addr) = server();
        let mut raw = TcpStream::connect(&addr).unwrap();
        raw.write_all(&u32::MAX.to_le_bytes()).unwrap();
        raw.write_all(b"junk").unwrap();
        let mut good = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        good.set("a", b"1").unwrap();
        assert_eq!(good.get("a", Duration::from_secs(1)).unwrap(), b"1");
    }

    #[test]
    fn a_request_with_an_endless_timeout_does_not_kill_the_store() {
        let (_s, addr) = server();
        let mut a = StoreClient::connect(&addr, Duration::from_secs(5)).unwrap();
        a.set("k", b"v").unwrap();
        // u64::MAX ms from now overflows `Instant`: the store must answer, not panic.
        assert_eq!(a.get("k", Duration::MAX).unwrap(), b"v");
        assert_eq!(a.wait(&["k".into()], Duration::MAX).unwrap(), Ok(()));
    }

    #[test]
    fn connecting_to_nobody_times_out() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = StoreClient::connect(&format!("127.0.0.1:{port}"), Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains("rendezvous store"), "{e}");
    }
}
