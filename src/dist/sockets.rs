//! The default transport: a full mesh of stream sockets between ranks — Unix domain sockets when all
//! ranks share a host, TCP otherwise — with ring collectives.
//!
//! `all_reduce` is a pipelined ring (reduce-scatter then all-gather, each chunk streamed in segments
//! while the previous segment is reduced); every element is reduced on exactly one rank and then
//! copied, so all ranks end with bitwise-identical results. Messages are framed and bounded. A peer
//! that exits or is killed closes its sockets, which turns into [`Error::PeerLost`] naming it on every
//! rank that talks to it, so a failure spreads through the group instead of hanging it.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::collective::{Collective, ReduceOp, check_rank, reduce_into};
use super::env::RankInfo;
use super::store::{StoreClient, StoreServer};
use super::wire::{self, read_frame, write_frame};
use crate::error::{Error, Result};

/// Largest point-to-point or gather message (1 GiB).
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 30;
/// Ring segments: large enough to amortise syscalls, small enough to overlap send and reduce.
const SEGMENT_FLOATS: usize = 1 << 20;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
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

/// The first frame on a link: which group (a nonce rank 0 chose) and which rank dials.
#[derive(serde::Serialize, serde::Deserialize)]
struct Greeting {
    session: String,
    rank: usize,
}

struct Link {
    reader: Mutex<BufReader<Stream>>,
    writer: Mutex<BufWriter<Stream>>,
    /// A third handle on the same socket, to change its timeouts while a reader or writer is busy
    /// (socket options are shared by every handle).
    control: Stream,
}

impl Link {
    fn new(s: Stream) -> std::io::Result<Link> {
        s.set_read_timeout(None)?;
        Ok(Link {
            reader: Mutex::new(BufReader::with_capacity(1 << 16, s.try_clone()?)),
            writer: Mutex::new(BufWriter::with_capacity(1 << 16, s.try_clone()?)),
            control: s,
        })
    }
}

/// A process group over sockets.
pub struct SocketGroup {
    rank: usize,
    world: usize,
    links: Vec<Option<Link>>,
    max_message: usize,
    transport: &'static str,
    /// Longest wait for a peer in one read or write, in milliseconds; 0 = forever.
    op_timeout_ms: AtomicU64,
    /// Rank 0 keeps the rendezvous store alive for the group's lifetime.
    _store: Option<StoreServer>,
}

impl SocketGroup {
    /// Joins the group described by `info`: rendezvous through rank 0's store, then a full mesh.
    /// Fails after `timeout` naming the ranks that never arrived.
    pub fn connect(info: &RankInfo, timeout: Duration) -> Result<SocketGroup> {
        let deadline = super::deadline_after(timeout);
        let left = || deadline.saturating_duration_since(Instant::now());
        let (rank, world) = (info.rank, info.world_size);
        let master = format!("{}:{}", info.master_addr, info.master_port);
        let store_server = if rank == 0 {
            let loopback = matches!(info.master_addr.as_str(), "127.0.0.1" | "localhost" | "::1");
            let bind = if loopback {
                master.clone()
            } else {
                format!("0.0.0.0:{}", info.master_port)
            };
            Some(StoreServer::bind(&bind)?)
        } else {
            None
        };
        let mut store = StoreClient::connect(&master, left())?;
        let session = if rank == 0 {
            let nonce = format!(
                "{:x}{:x}",
                std::process::id(),
                Instant::now().elapsed().as_nanos() ^ seed_from_time()
            );
            store.set("session", nonce.as_bytes())?;
            nonce
        } else {
            String::from_utf8_lossy(&store.get("session", left())?).into_owned()
        };

        let unix = info.single_host();
        let (listener, my_addr, unix_path) = if unix {
            let path = std::env::temp_dir().join(format!("tessera-{session}-{rank}.sock"));
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path)
                .map_err(|e| comm(format!("listening on {}", path.display()), e))?;
            (
                Listener::Unix(l),
                format!("unix:{}", path.display()),
                Some(path),
            )
        } else {
            let l = TcpListener::bind("0.0.0.0:0")
                .map_err(|e| comm("listening for peers".into(), e))?;
            let port = l
                .local_addr()
                .map_err(|e| comm("listening for peers".into(), e))?
                .port();
            let ip = store
                .local_ip()
                .map_err(|e| comm("finding this host's address".into(), e))?;
            (Listener::Tcp(l), format!("tcp:{ip}:{port}"), None)
        };
        let _cleanup = UnlinkOnDrop(unix_path);
        store.set(&format!("addr/{rank}"), my_addr.as_bytes())?;
        let keys: Vec<String> = (0..world).map(|r| format!("addr/{r}")).collect();
        if let Err(missing) = store.wait(&keys, left())? {
            let ranks: Vec<&str> = missing
                .0
                .iter()
                .map(|k| k.trim_start_matches("addr/"))
                .collect();
            return Err(Error::Timeout {
                what: format!(
                    "rank(s) {} to join the group of {world} (they never arrived)",
                    ranks.join(", ")
                ),
                secs: timeout.as_secs_f64(),
            });
        }

        let mut links: Vec<Option<Link>> = (0..world).map(|_| None).collect();
        for (peer, slot) in links.iter_mut().enumerate().take(rank) {
            let addr =
                String::from_utf8_lossy(&store.get(&format!("addr/{peer}"), left())?).into_owned();
            let mut s =
                dial(&addr).map_err(|e| comm(format!("connecting to rank {peer} at {addr}"), e))?;
            let greeting = wire::encode(&Greeting {
                session: session.clone(),
                rank,
            })?;
            write_frame(&mut s, &greeting).map_err(|e| comm(format!("greeting rank {peer}"), e))?;
            *slot = Some(Link::new(s).map_err(|e| comm(format!("rank {peer}"), e))?);
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
                    s.set_read_timeout(Some(left().max(Duration::from_millis(100))))
                        .map_err(|e| comm("accepting a peer".into(), e))?;
                    let hello = read_frame(&mut s, 4096)
                        .map_err(|e| comm("reading a peer's greeting".into(), e))?;
                    let Ok(Greeting {
                        session: their_session,
                        rank: peer,
                    }) = wire::decode(&hello)
                    else {
                        tracing::warn!("ignoring a connection with a malformed greeting");
                        continue;
                    };
                    if their_session != session
                        || peer <= rank
                        || peer >= world
                        || links[peer].is_some()
                    {
                        tracing::warn!(peer, "ignoring an unexpected connection");
                        continue;
                    }
                    links[peer] = Some(Link::new(s).map_err(|e| comm(format!("rank {peer}"), e))?);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => return Err(comm("accepting a peer".into(), e)),
            }
        }
        let group = SocketGroup {
            rank,
            world,
            links,
            max_message: DEFAULT_MAX_MESSAGE,
            transport: if unix { "unix" } else { "tcp" },
            op_timeout_ms: AtomicU64::new(0),
            _store: store_server,
        };
        // Nobody leaves set-up (and rank 0's store) before everyone is connected.
        group.barrier()?;
        Ok(group)
    }

    /// Sets the largest accepted message.
    pub fn with_max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    fn op_timeout(&self) -> Option<Duration> {
        match self.op_timeout_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    fn lost(&self, peer: usize, e: std::io::Error) -> Error {
        lost(peer, e, self.op_timeout())
    }

    fn link(&self, peer: usize) -> Result<&Link> {
        check_rank(peer, self.world, "peer")?;
        self.links[peer].as_ref().ok_or_else(|| {
            Error::config("peer", format!("rank {peer} is this rank ({})", self.rank))
        })
    }

    fn write_to(&self, peer: usize, payload: &[u8]) -> Result<()> {
        let link = self.link(peer)?;
        let mut w = link.writer.lock().expect("link lock");
        write_frame(&mut *w, payload).map_err(|e| self.lost(peer, e))
    }

    fn read_from(&self, peer: usize, max: usize) -> Result<Vec<u8>> {
        let link = self.link(peer)?;
        let mut r = link.reader.lock().expect("link lock");
        read_frame(&mut *r, max).map_err(|e| self.lost(peer, e))
    }

    /// Streams `send` to `right` in segments while receiving the same-length region from `left`
    /// and handing each received segment to `on_segment(offset, values)`.
    fn exchange(
        &self,
        right: usize,
        send: &[f32],
        left: usize,
        recv_len: usize,
        mut on_segment: impl FnMut(usize, &[f32]),
    ) -> Result<()> {
        std::thread::scope(|scope| {
            let sender = scope.spawn(|| -> Result<()> {
                let link = self.link(right)?;
                let mut w = link.writer.lock().expect("link lock");
                for seg in send.chunks(SEGMENT_FLOATS) {
                    write_frame(&mut *w, bytemuck::cast_slice(seg))
                        .map_err(|e| self.lost(right, e))?;
                }
                if send.is_empty() {
                    write_frame(&mut *w, &[]).map_err(|e| self.lost(right, e))?;
                }
                Ok(())
            });
            let received = (|| -> Result<()> {
                let link = self.link(left)?;
                let mut r = link.reader.lock().expect("link lock");
                let mut offset = 0;
                let mut seg = vec![0f32; SEGMENT_FLOATS.min(recv_len.max(1))];
                loop {
                    let want = (recv_len - offset).min(SEGMENT_FLOATS);
                    read_segment(&mut *r, &mut seg[..want]).map_err(|e| self.lost(left, e))?;
                    on_segment(offset, &seg[..want]);
                    offset += want;
                    if offset >= recv_len {
                        return Ok(());
                    }
                }
            })();
            let sent = sender
                .join()
                .unwrap_or_else(|_| Err(Error::Internal("the sender thread panicked".into())));
            received.and(sent)
        })
    }
}

/// Reads one frame of exactly `out.len()` f32 values into `out`.
fn read_segment(r: &mut impl Read, out: &mut [f32]) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len != out.len() * 4 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "expected a segment of {} bytes, got a frame of {len} (ranks out of step)",
                out.len() * 4
            ),
        ));
    }
    r.read_exact(bytemuck::cast_slice_mut(out))
}

/// Chunk `c` of `n` equal-as-possible chunks of `len` elements.
fn chunk(len: usize, n: usize, c: usize) -> Range<usize> {
    (c * len / n)..((c + 1) * len / n)
}

/// A shared and a mutable view of two disjoint ranges of one slice.
fn split_two(buf: &mut [f32], read: Range<usize>, write: Range<usize>) -> (&[f32], &mut [f32]) {
    debug_assert!(read.end <= write.start || write.end <= read.start);
    if read.end <= write.start {
        let (a, b) = buf.split_at_mut(write.start);
        (&a[read], &mut b[..write.end - write.start])
    } else {
        let (a, b) = buf.split_at_mut(read.start);
        (&b[..read.end - read.start], &mut a[write])
    }
}

impl Collective for SocketGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let n = self.world;
        if n == 1 {
            return Ok(());
        }
        let (r, len) = (self.rank, buf.len());
        let right = (r + 1) % n;
        let left = (r + n - 1) % n;
        // Reduce-scatter: after n−1 steps rank r holds the full reduction of chunk (r+1) mod n.
        for s in 0..n - 1 {
            let send_c = chunk(len, n, (r + n - s) % n);
            let recv_c = chunk(len, n, (r + 2 * n - s - 1) % n);
            let recv_len = recv_c.len();
            let (send, acc) = split_two(buf, send_c, recv_c);
            self.exchange(right, send, left, recv_len, |off, seg| {
                reduce_into(&mut acc[off..off + seg.len()], seg, op)
            })?;
        }
        if op == ReduceOp::Mean {
            let own = chunk(len, n, (r + 1) % n);
            for v in &mut buf[own] {
                *v /= n as f32;
            }
        }
        // All-gather: pass the reduced chunks around the ring.
        for s in 0..n - 1 {
            let send_c = chunk(len, n, (r + 1 + n - s) % n);
            let recv_c = chunk(len, n, (r + n - s) % n);
            let recv_len = recv_c.len();
            let (send, dst) = split_two(buf, send_c, recv_c);
            self.exchange(right, send, left, recv_len, |off, seg| {
                dst[off..off + seg.len()].copy_from_slice(seg)
            })?;
        }
        Ok(())
    }

    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.world;
        let r = self.rank;
        if local.len() > self.max_message {
            return Err(Error::config(
                "all_gather",
                format!(
                    "{} bytes exceed the message limit of {}",
                    local.len(),
                    self.max_message
                ),
            ));
        }
        let mut blocks: Vec<Option<Vec<u8>>> = vec![None; n];
        blocks[r] = Some(local.to_vec());
        let right = (r + 1) % n;
        let left = (r + n - 1) % n;
        for s in 0..n.saturating_sub(1) {
            let send_idx = (r + n - s) % n;
            let recv_idx = (r + 2 * n - s - 1) % n;
            let payload = blocks[send_idx]
                .as_deref()
                .expect("ring order delivers blocks in time");
            let received = std::thread::scope(|scope| {
                let sender = scope.spawn(|| self.write_to(right, payload));
                let got = self.read_from(left, self.max_message);
                let sent = sender
                    .join()
                    .unwrap_or_else(|_| Err(Error::Internal("the sender thread panicked".into())));
                sent.and(got)
            })?;
            blocks[recv_idx] = Some(received);
        }
        Ok(blocks
            .into_iter()
            .map(|b| b.expect("every block arrived"))
            .collect())
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        check_rank(root, self.world, "broadcast root")?;
        if self.rank == root {
            for peer in (0..self.world).filter(|&p| p != root) {
                self.write_to(peer, buf)?;
            }
        } else {
            *buf = self.read_from(root, self.max_message)?;
        }
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(|_| ())
    }

    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        if data.len() > self.max_message {
            return Err(Error::config(
                "send",
                format!(
                    "{} bytes exceed the message limit of {}",
                    data.len(),
                    self.max_message
                ),
            ));
        }
        self.write_to(to, data)
    }

    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.read_from(from, self.max_message)
    }

    fn set_op_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        // A zero Duration would mean "fail at once" to the OS's setsockopt: treat it as forever.
        let timeout = timeout.filter(|t| !t.is_zero());
        for (peer, link) in self.links.iter().enumerate() {
            if let Some(link) = link {
                link.control
                    .set_read_timeout(timeout)
                    .and_then(|()| link.control.set_write_timeout(timeout))
                    .map_err(|e| {
                        comm(format!("setting the timeout on the link to rank {peer}"), e)
                    })?;
            }
        }
        let ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u64::MAX as u128) as u64);
        self.op_timeout_ms.store(ms, Ordering::Relaxed);
        Ok(())
    }

    fn backend_name(&self) -> String {
        format!("sockets({})", self.transport)
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Unix(l) => l.set_nonblocking(on),
        }
    }
    fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
        }
    }
}

fn dial(addr: &str) -> std::io::Result<Stream> {
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

struct UnlinkOnDrop(Option<PathBuf>);

impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn seed_from_time() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn comm(context: String, source: std::io::Error) -> Error {
    Error::Comm { context, source }
}

/// A failed read or write on a peer's link: the peer is gone, hung (no byte within `op_timeout`),
/// or sent garbage.
fn lost(peer: usize, e: std::io::Error, op_timeout: Option<Duration>) -> Error {
    use std::io::ErrorKind::*;
    let how = match e.kind() {
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted => {
            "closed its connection (it exited or was killed)".to_string()
        }
        WouldBlock | TimedOut => format!(
            "did not answer within the operation timeout of {:.0} s: it is hung, stopped, or far \
             slower than this rank (raise --op-timeout if its work is legitimately that long)",
            op_timeout.map_or(0.0, |t| t.as_secs_f64())
        ),
        InvalidData => format!("sent a malformed message: {e}"),
        _ => format!("could not be reached: {e}"),
    };
    Error::PeerLost { rank: peer, how }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::dist::testutil::{free_port, info, on_ranks};

    #[test]
    fn all_reduce_matches_the_serial_reduction_on_every_rank() {
        for (world, unix, len) in [
            (2, true, 1001),
            (3, true, 1003),
            (3, false, 1003),
            (4, true, 1004),
            (3, true, 2),
            (2, true, 0),
        ] {
            // Lengths not divisible by the world size, and smaller than it.
            let data = |r: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| ((i * 31 + r * 17) % 97) as f32 * 0.25 - 3.0)
                    .collect()
            };
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
                let results = on_ranks(world, unix, |g| {
                    let mut buf = data(g.rank());
                    g.all_reduce(&mut buf, op).unwrap();
                    buf
                });
                for (i, got) in results[0].iter().enumerate() {
                    let vals: Vec<f32> = (0..world).map(|r| data(r)[i]).collect();
                    let want = match op {
                        ReduceOp::Sum => vals.iter().sum::<f32>(),
                        ReduceOp::Mean => vals.iter().sum::<f32>() / world as f32,
                        ReduceOp::Max => vals.iter().cloned().fold(f32::MIN, f32::max),
                    };
                    assert!((got - want).abs() < 1e-4, "{op:?} world {world} at {i}");
                }
                for r in 1..world {
                    assert_eq!(results[r], results[0], "ranks disagree bitwise");
                }
            }
        }
    }

    #[test]
    fn gather_broadcast_and_point_to_point() {
        let results = on_ranks(3, true, |g| {
            let r = g.rank();
            let gathered = g.all_gather(&vec![r as u8; r * 3]).unwrap();
            let mut b = if r == 1 {
                b"from one".to_vec()
            } else {
                Vec::new()
            };
            g.broadcast(&mut b, 1).unwrap();
            // A ring of point-to-point messages: send right, receive from left.
            let right = (r + 1) % 3;
            let left = (r + 2) % 3;
            std::thread::scope(|s| {
                s.spawn(|| g.send(right, format!("hi from {r}").as_bytes()).unwrap());
            });
            let msg = String::from_utf8(g.recv(left).unwrap()).unwrap();
            g.barrier().unwrap();
            (gathered, b, msg)
        });
        for (r, (gathered, b, msg)) in results.into_iter().enumerate() {
            assert_eq!(
                gathered,
                (0..3).map(|p| vec![p as u8; p * 3]).collect::<Vec<_>>()
            );
            assert_eq!(b, b"from one");
            assert_eq!(msg, format!("hi from {}", (r + 2) % 3));
        }
    }

    #[test]
    fn a_rank_that_never_arrives_is_named() {
        let port = free_port();
        let err = std::thread::scope(|s| {
            let h1 = s.spawn(|| {
                SocketGroup::connect(&info(1, 3, port, true), Duration::from_millis(800)).err()
            });
            let e0 = SocketGroup::connect(&info(0, 3, port, true), Duration::from_millis(800))
                .err()
                .unwrap();
            let _ = h1.join();
            e0
        });
        let msg = err.to_string();
        assert!(
            msg.contains("rank(s) 2") && msg.contains("never arrived"),
            "{msg}"
        );
    }

    #[test]
    fn oversized_messages_are_refused() {
        let results = on_ranks(2, true, |g| {
            if g.rank() == 0 {
                g.send(1, &vec![0u8; 2048]).unwrap();
                None
            } else {
                let small = SocketGroup {
                    max_message: 1024,
                    ..unsafe_clone_for_test(g)
                };
                Some(small.recv(0).err().unwrap().to_string())
            }
        });
        let msg = results[1].clone().unwrap();
        assert!(
            msg.contains("rank 0") && msg.contains("exceeds the limit"),
            "{msg}"
        );
    }

    #[test]
    fn a_peer_that_stays_silent_past_the_op_timeout_is_named() {
        let results = on_ranks(2, true, |g| {
            if g.rank() == 0 {
                // Alive but silent (as if hung): keep the socket open past rank 1's timeout.
                std::thread::sleep(Duration::from_millis(1500));
                None
            } else {
                g.set_op_timeout(Some(Duration::from_millis(300))).unwrap();
                let mut buf = vec![1.0f32; 8];
                Some(
                    g.all_reduce(&mut buf, ReduceOp::Sum)
                        .unwrap_err()
                        .to_string(),
                )
            }
        });
        let msg = results[1].clone().unwrap();
        assert!(
            msg.contains("rank 0") && msg.contains("did not answer within"),
            "{msg}"
        );
    }

    /// A view of the same links with other settings (test only).
    fn unsafe_clone_for_test(g: &SocketGroup) -> SocketGroup {
        let links = g
            .links
            .iter()
            .map(|l| {
                l.as_ref().map(|l| {
                    let r = l.reader.lock().unwrap().get_ref().try_clone().unwrap();
                    let w = l.writer.lock().unwrap().get_ref().try_clone().unwrap();
                    Link {
                        reader: Mutex::new(BufReader::new(r)),
                        control: w.try_clone().unwrap(),
                        writer: Mutex::new(BufWriter::new(w)),
                    }
                })
            })
            .collect();
        SocketGroup {
            rank: g.rank,
            world: g.world,
            links,
            max_message: g.max_message,
            transport: g.transport,
            op_timeout_ms: AtomicU64::new(g.op_timeout_ms.load(Ordering::Relaxed)),
            _store: None,
        }
    }
}
