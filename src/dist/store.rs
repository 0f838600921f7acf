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

use super::wire::{Reader, Writer, read_frame, write_frame};
use crate::error::{Error, Result};

/// Largest store message: keys and values are small (addresses, counters, shared parameters).
pub const MAX_STORE_FRAME: usize = 16 << 20;

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
const OP_WAIT: u8 = 4;

const ST_OK: u8 = 0;
const ST_TIMEOUT: u8 = 1;
const ST_ERROR: u8 = 2;

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
    loop {
        let frame = match read_frame(&mut reader, MAX_STORE_FRAME) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let reply = handle(&frame, state)
            .unwrap_or_else(|e| Writer::default().u8(ST_ERROR).str(&e.to_string()).0);
        write_frame(&mut writer, &reply)?;
    }
}

fn handle(frame: &[u8], state: &State) -> std::io::Result<Vec<u8>> {
    let mut r = Reader(frame);
    let op = r.u8()?;
    let out = match op {
        OP_SET => {
            let key = r.string()?;
            let value = r.bytes()?.to_vec();
            r.finish()?;
            state.map.lock().expect("store lock").insert(key, value);
            state.changed.notify_all();
            Writer::default().u8(ST_OK)
        }
        OP_ADD => {
            let key = r.string()?;
            let delta = r.i64()?;
            r.finish()?;
            let mut map = state.map.lock().expect("store lock");
            let current = map
                .get(&key)
                .and_then(|v| v.as_slice().try_into().ok())
                .map(i64::from_le_bytes)
                .unwrap_or(0);
            let next = current.wrapping_add(delta);
            map.insert(key, next.to_le_bytes().to_vec());
            drop(map);
            state.changed.notify_all();
            Writer::default().u8(ST_OK).i64(next)
        }
        OP_GET | OP_WAIT => {
            let timeout = Duration::from_millis(r.u64()?);
            let n = r.u64()? as usize;
            let mut keys = Vec::new();
            for _ in 0..n {
                keys.push(r.string()?);
            }
            r.finish()?;
            let deadline = Instant::now() + timeout;
            let mut map = state.map.lock().expect("store lock");
            loop {
                let missing: Vec<&String> = keys.iter().filter(|k| !map.contains_key(*k)).collect();
                if missing.is_empty() {
                    let mut w = Writer::default().u8(ST_OK);
                    if op == OP_GET {
                        w = w.bytes(&map[&keys[0]]);
                    }
                    break w;
                }
                let now = Instant::now();
                if now >= deadline {
                    let mut w = Writer::default().u8(ST_TIMEOUT).u64(missing.len() as u64);
                    for k in missing {
                        w = w.str(k);
                    }
                    break w;
                }
                map = state
                    .changed
                    .wait_timeout(map, deadline - now)
                    .expect("store lock")
                    .0;
            }
        }
        other => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unknown store operation {other}"),
            ));
        }
    };
    Ok(out.0)
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
        let deadline = Instant::now() + timeout;
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

    fn call(&mut self, request: Vec<u8>, timeout: Option<Duration>) -> Result<Vec<u8>> {
        let read_timeout = timeout
            .map(|t| t + Duration::from_secs(5))
            .unwrap_or(Duration::from_secs(30));
        self.reader
            .get_ref()
            .set_read_timeout(Some(read_timeout))
            .map_err(|e| comm(self.peer.clone(), e))?;
        write_frame(&mut self.writer, &request)
            .map_err(|e| comm(format!("sending to the store at {}", self.peer), e))?;
        let reply = read_frame(&mut self.reader, MAX_STORE_FRAME)
            .map_err(|e| comm(format!("reading from the store at {}", self.peer), e))?;
        if reply.first() == Some(&ST_ERROR) {
            let msg = Reader(&reply[1..])
                .string()
                .unwrap_or_else(|_| "unreadable error".into());
            return Err(Error::Comm {
                context: format!("the store at {} refused the request", self.peer),
                source: std::io::Error::other(msg),
            });
        }
        Ok(reply)
    }

    /// The local IP address of this connection: the interface through which rank 0 is reachable,
    /// which is the one peers should use too.
    pub fn local_ip(&self) -> std::io::Result<std::net::IpAddr> {
        Ok(self.writer.get_ref().local_addr()?.ip())
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.call(Writer::default().u8(OP_SET).str(key).bytes(value).0, None)?;
        Ok(())
    }

    /// Atomically adds `delta` to the counter `key` (0 if absent) and returns the new value.
    pub fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        let reply = self.call(Writer::default().u8(OP_ADD).str(key).i64(delta).0, None)?;
        let mut r = Reader(&reply[1..]);
        r.i64().map_err(|e| comm(self.peer.clone(), e))
    }

    /// Waits for `key` and returns its value.
    pub fn get(&mut self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        match self.wait_impl(OP_GET, &[key.to_string()], timeout)? {
            Ok(v) => Ok(v),
            Err(_) => Err(Error::Timeout {
                what: format!("key `{key}` in the rendezvous store"),
                secs: timeout.as_secs_f64(),
            }),
        }
    }

    /// Waits until all `keys` exist; `Ok(Err(missing))` when the timeout passes first.
    pub fn wait(
        &mut self,
        keys: &[String],
        timeout: Duration,
    ) -> Result<std::result::Result<(), Missing>> {
        Ok(self.wait_impl(OP_WAIT, keys, timeout)?.map(|_| ()))
    }

    fn wait_impl(
        &mut self,
        op: u8,
        keys: &[String],
        timeout: Duration,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        let mut w = Writer::default()
            .u8(op)
            .u64(timeout.as_millis() as u64)
            .u64(keys.len() as u64);
        for k in keys {
            w = w.str(k);
        }
        let reply = self.call(w.0, Some(timeout))?;
        let mut r = Reader(&reply[1..]);
        let bad = |e| comm(self.peer.clone(), e);
        match reply[0] {
            ST_OK if op == OP_GET => Ok(Ok(r.bytes().map_err(bad)?.to_vec())),
            ST_OK => Ok(Ok(Vec::new())),
            _ => {
                let n = r.u64().map_err(bad)? as usize;
                let mut missing = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    missing.push(r.string().map_err(bad)?);
                }
                Ok(Err(Missing(missing)))
            }
        }
    }
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
