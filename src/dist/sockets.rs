//! The default transport: a full mesh of stream sockets between ranks — Unix domain sockets when all
//! ranks share a host, TCP otherwise — with ring collectives.
//!
//! `all_reduce` is a pipelined ring (reduce-scatter then all-gather, each chunk streamed in segments
//! while the previous segment is reduced); every element is reduced on exactly one rank and then
//! copied, so all ranks end with bitwise-identical results. Messages are framed and bounded. A peer
//! that exits or is killed closes its sockets, which turns into [`Error::PeerLost`] naming it on every
//! rank that talks to it, so a failure spreads through the group instead of hanging it; a peer that
//! is stopped or frozen is found by heartbeats ([`super::liveness`]), which close its links.
//!
//! A rank that fails on its own (bad input on its host, a full disk) sends an abort marker on every
//! link ([`Collective::recover`]): its peers stop waiting for it with [`Error::PeerFailed`], and
//! each link is read up to the marker, which realigns the streams for the next job.

use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::collective::{Collective, ReduceOp, SocketKind, Transport, check_rank, reduce_into};
use super::env::RankInfo;
use super::liveness::{DEFAULT_LIVENESS_TIMEOUT, Liveness};
use super::net::{self, Listener, Stream, comm};
use super::store::{StoreClient, StoreServer};
use super::wire::{self, read_frame, write_frame};
use crate::error::{Error, Result};

/// Largest point-to-point or gather message (1 GiB).
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 30;
/// Ring segments: large enough to amortise syscalls, small enough to overlap send and reduce.
const SEGMENT_FLOATS: usize = 1 << 20;

struct Link {
    reader: Mutex<BufReader<Stream>>,
    writer: Mutex<BufWriter<Stream>>,
    /// A third handle on the same socket, to change its timeouts while a reader or writer is busy
    /// (socket options are shared by every handle).
    control: Stream,
    /// Shared with the heartbeat thread, which marks the link broken when the peer goes silent.
    state: Arc<Mutex<LinkState>>,
}

/// Where a link stands in the current epoch (the run of collectives since the last recovery).
#[derive(Default)]
struct LinkState {
    /// This rank sent its abort marker on the link (it writes nothing more this epoch).
    marker_sent: bool,
    /// The peer's abort marker arrived (it sends nothing more this epoch).
    marker_seen: Option<Marker>,
    /// How the link broke (a read or write failed part-way, or the peer went silent): the byte
    /// stream is out of step for good.
    broken: Option<String>,
}

impl Link {
    fn new(s: Stream) -> std::io::Result<Link> {
        s.set_read_timeout(None)?;
        Ok(Link {
            reader: Mutex::new(BufReader::with_capacity(1 << 16, s.try_clone()?)),
            writer: Mutex::new(BufWriter::with_capacity(1 << 16, s.try_clone()?)),
            control: s,
            state: Arc::new(Mutex::new(LinkState::default())),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The length prefix of an abort marker; data frames are at most [`DEFAULT_MAX_MESSAGE`] long, so
/// no data frame has it.
const MARKER_PREFIX: u32 = u32::MAX;
/// Largest marker frame (it carries one error message).
const MAX_MARKER_BYTES: usize = 64 << 10;

/// Sent on every link by a rank that leaves the current work after a failure: the peer stops
/// waiting for data from it, and during recovery reads up to it, which realigns the byte streams.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Marker {
    epoch: u64,
    /// The rank the failure started on, and its message.
    origin: usize,
    reason: String,
}

/// What arrived on a link.
enum Incoming<T> {
    Data(T),
    Marker(Marker),
}

/// Reads a marker's body after its prefix.
fn read_marker(r: &mut impl Read) -> std::io::Result<Marker> {
    let body = read_frame(r, MAX_MARKER_BYTES)?;
    wire::decode(&body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Reads one frame or a marker.
fn read_incoming(r: &mut impl Read, max: usize) -> std::io::Result<Incoming<Vec<u8>>> {
    let mut prefix = [0u8; 4];
    r.read_exact(&mut prefix)?;
    match u32::from_le_bytes(prefix) {
        MARKER_PREFIX => Ok(Incoming::Marker(read_marker(r)?)),
        len => {
            wire::check_len(len as usize, max)?;
            Ok(Incoming::Data(wire::read_body(r, len as usize)?))
        }
    }
}

/// Reads frames and throws them away until a marker arrives.
fn skip_to_marker(r: &mut impl Read) -> std::io::Result<Marker> {
    let mut sink = vec![0u8; 1 << 16];
    loop {
        let mut prefix = [0u8; 4];
        r.read_exact(&mut prefix)?;
        match u32::from_le_bytes(prefix) {
            MARKER_PREFIX => return read_marker(r),
            len => {
                let mut left = len as usize;
                while left > 0 {
                    let n = left.min(sink.len());
                    r.read_exact(&mut sink[..n])?;
                    left -= n;
                }
            }
        }
    }
}

/// A process group over sockets.
pub struct SocketGroup {
    rank: usize,
    world: usize,
    links: Vec<Option<Link>>,
    max_message: usize,
    transport: SocketKind,
    /// Longest wait for a peer in one read or write, in milliseconds; 0 = forever.
    op_timeout_ms: AtomicU64,
    /// Recoveries so far; markers carry it so that a stale one is recognised.
    epoch: AtomicU64,
    /// The heartbeat thread (stopped with the group).
    _liveness: Option<Liveness>,
    /// Rank 0 keeps the rendezvous store alive for the group's lifetime.
    _store: Option<StoreServer>,
}

impl SocketGroup {
    /// Joins the group described by `info`: rendezvous through rank 0's store, then a full mesh.
    /// Fails after `timeout` naming the ranks that never arrived. Peers silent for
    /// [`DEFAULT_LIVENESS_TIMEOUT`] are declared lost.
    pub fn connect(info: &RankInfo, timeout: Duration) -> Result<SocketGroup> {
        Self::connect_with(info, timeout, Some(DEFAULT_LIVENESS_TIMEOUT))
    }

    /// [`SocketGroup::connect`] with a heartbeat timeout of `liveness` (`None`: no heartbeats,
    /// e.g. while a debugger stops ranks).
    pub fn connect_with(
        info: &RankInfo,
        timeout: Duration,
        liveness: Option<Duration>,
    ) -> Result<SocketGroup> {
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
        let listen = |what: &str| match unix {
            true => Listener::unix(&session, rank, what),
            false => Listener::tcp(
                store
                    .local_ip()
                    .map_err(|e| comm("finding this host's address".into(), e))?,
            ),
        };
        // Data links, and heartbeat links apart from them (see `super::liveness`).
        let (data, beats) = (listen("data")?, listen("beat")?);
        store.set(&format!("addr/{rank}"), data.addr.as_bytes())?;
        store.set(&format!("beat/{rank}"), beats.addr.as_bytes())?;
        let keys: Vec<String> = (0..world)
            .flat_map(|r| [format!("addr/{r}"), format!("beat/{r}")])
            .collect();
        if let Err(missing) = store.wait(&keys, left())? {
            let mut ranks: Vec<&str> = missing
                .0
                .iter()
                .map(|k| k.trim_start_matches("addr/").trim_start_matches("beat/"))
                .collect();
            ranks.dedup();
            return Err(Error::Timeout {
                what: format!(
                    "rank(s) {} to join the group of {world} (they never arrived)",
                    ranks.join(", ")
                ),
                secs: timeout.as_secs_f64(),
            });
        }
        let mut addrs = |prefix: &str| -> Result<Vec<String>> {
            (0..world)
                .map(|r| {
                    let a = store.get(&format!("{prefix}/{r}"), left())?;
                    Ok(String::from_utf8_lossy(&a).into_owned())
                })
                .collect()
        };
        let (data_addrs, beat_addrs) = (addrs("addr")?, addrs("beat")?);
        let links = net::mesh(rank, &data, &data_addrs, &session, (deadline, timeout))?
            .into_iter()
            .enumerate()
            .map(|(peer, s)| {
                s.map(|s| Link::new(s).map_err(|e| comm(format!("rank {peer}"), e)))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let beat_links = net::mesh(rank, &beats, &beat_addrs, &session, (deadline, timeout))?;
        drop((data, beats));
        let liveness = match liveness.filter(|t| !t.is_zero()) {
            Some(t) => Some(watch(&links, beat_links, t)?),
            None => None,
        };
        let group = SocketGroup {
            rank,
            world,
            links,
            max_message: DEFAULT_MAX_MESSAGE,
            transport: if unix {
                SocketKind::Unix
            } else {
                SocketKind::Tcp
            },
            op_timeout_ms: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            _liveness: liveness,
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

    /// A failed read or write on the link to `peer`: the link is out of step for good. When the
    /// heartbeats already closed it, their reason is the error.
    fn lost(&self, peer: usize, link: &Link, e: std::io::Error) -> Error {
        let mut state = link.state();
        if let Some(how) = &state.broken {
            return Error::PeerLost {
                rank: peer,
                how: how.clone(),
            };
        }
        let err = match e.kind() {
            std::io::ErrorKind::InvalidData => Error::bad_peer_data(peer, e.to_string()),
            _ => Error::PeerLost {
                rank: peer,
                how: lost_how(e, self.op_timeout()),
            },
        };
        state.broken = Some(err.to_string());
        err
    }

    /// Fails when the link cannot carry this epoch's data any more.
    fn check_open(&self, peer: usize, link: &Link) -> Result<()> {
        let state = link.state();
        if let Some(how) = &state.broken {
            return Err(Error::PeerLost {
                rank: peer,
                how: how.clone(),
            });
        }
        if let Some(m) = &state.marker_seen {
            return Err(Error::PeerFailed {
                rank: m.origin,
                reason: m.reason.clone(),
            });
        }
        if state.marker_sent {
            return Err(Error::Internal(format!(
                "rank {} used its link to rank {peer} after leaving the work (call recover first)",
                self.rank
            )));
        }
        Ok(())
    }

    /// Records a peer's marker; the failure it reports becomes this rank's error.
    fn marker_arrived(&self, peer: usize, link: &Link, m: Marker) -> Error {
        let epoch = self.epoch.load(Ordering::SeqCst);
        if m.epoch != epoch {
            let err = Error::bad_peer_data(
                peer,
                format!("an abort marker of epoch {} in epoch {epoch}", m.epoch),
            );
            link.state().broken = Some(err.to_string());
            return err;
        }
        let err = Error::PeerFailed {
            rank: m.origin,
            reason: m.reason.clone(),
        };
        link.state().marker_seen = Some(m);
        err
    }

    /// A message larger than the group's limit is refused before it is sent: the transport cannot
    /// carry it (its receivers would refuse it), whatever the job.
    fn check_message_size(&self, op: &str, bytes: usize) -> Result<()> {
        if bytes > self.max_message {
            return Err(Error::Unsupported(format!(
                "{op} of {bytes} bytes: more than the message limit of {} bytes between ranks",
                self.max_message
            )));
        }
        Ok(())
    }

    fn link(&self, peer: usize) -> Result<&Link> {
        check_rank(peer, self.world, "peer")?;
        self.links[peer].as_ref().ok_or_else(|| {
            Error::Internal(format!("peer: rank {peer} is this rank ({})", self.rank))
        })
    }

    fn write_to(&self, peer: usize, payload: &[u8]) -> Result<()> {
        let link = self.link(peer)?;
        self.check_open(peer, link)?;
        let mut w = link.writer.lock().unwrap_or_else(|p| p.into_inner());
        write_frame(&mut *w, payload).map_err(|e| self.lost(peer, link, e))
    }

    fn read_from(&self, peer: usize, max: usize) -> Result<Vec<u8>> {
        let link = self.link(peer)?;
        self.check_open(peer, link)?;
        let mut r = link.reader.lock().unwrap_or_else(|p| p.into_inner());
        match read_incoming(&mut *r, max) {
            Ok(Incoming::Data(v)) => Ok(v),
            Ok(Incoming::Marker(m)) => Err(self.marker_arrived(peer, link, m)),
            Err(e) => Err(self.lost(peer, link, e)),
        }
    }

    /// Sends this rank's marker on a link (once per epoch).
    fn send_marker(&self, peer: usize, link: &Link, marker: &Marker) -> Result<()> {
        if link.state().marker_sent {
            return Ok(());
        }
        let body = wire::encode(marker)?;
        let mut w = link.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&MARKER_PREFIX.to_le_bytes())
            .and_then(|()| write_frame(&mut *w, &body))
            .map_err(|e| self.lost(peer, link, e))?;
        link.state().marker_sent = true;
        Ok(())
    }

    /// Reads the link up to the peer's marker (unless it already arrived).
    fn drain_to_marker(&self, peer: usize, link: &Link) -> Result<()> {
        if link.state().marker_seen.is_some() {
            return Ok(());
        }
        let mut r = link.reader.lock().unwrap_or_else(|p| p.into_inner());
        let m = skip_to_marker(&mut *r).map_err(|e| self.lost(peer, link, e))?;
        match self.marker_arrived(peer, link, m) {
            Error::PeerFailed { .. } => Ok(()),
            other => Err(other),
        }
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
                self.check_open(right, link)?;
                let mut w = link.writer.lock().unwrap_or_else(|p| p.into_inner());
                for seg in send.chunks(SEGMENT_FLOATS) {
                    write_frame(&mut *w, bytemuck::cast_slice(seg))
                        .map_err(|e| self.lost(right, link, e))?;
                }
                if send.is_empty() {
                    write_frame(&mut *w, &[]).map_err(|e| self.lost(right, link, e))?;
                }
                Ok(())
            });
            let received = (|| -> Result<()> {
                let link = self.link(left)?;
                self.check_open(left, link)?;
                let mut r = link.reader.lock().unwrap_or_else(|p| p.into_inner());
                let mut offset = 0;
                let mut seg = vec![0f32; SEGMENT_FLOATS.min(recv_len.max(1))];
                loop {
                    let want = (recv_len - offset).min(SEGMENT_FLOATS);
                    match read_segment(&mut *r, &mut seg[..want]) {
                        Ok(Incoming::Data(())) => {}
                        Ok(Incoming::Marker(m)) => return Err(self.marker_arrived(left, link, m)),
                        Err(e) => return Err(self.lost(left, link, e)),
                    }
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

/// Reads one frame of exactly `out.len()` f32 values into `out`, or a marker.
fn read_segment(r: &mut impl Read, out: &mut [f32]) -> std::io::Result<Incoming<()>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len == MARKER_PREFIX {
        return Ok(Incoming::Marker(read_marker(r)?));
    }
    let len = len as usize;
    if len != out.len() * 4 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "expected a segment of {} bytes, got a frame of {len} (ranks out of step)",
                out.len() * 4
            ),
        ));
    }
    r.read_exact(bytemuck::cast_slice_mut(out))?;
    Ok(Incoming::Data(()))
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
        self.check_message_size("all_gather", local.len())?;
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
        self.check_message_size("send", data.len())?;
        self.write_to(to, data)
    }

    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.read_from(from, self.max_message)
    }

    fn recover(&self, failure: &Error) -> Result<()> {
        let (origin, reason) = failure.origin(self.rank);
        let marker = Marker {
            epoch: self.epoch.load(Ordering::SeqCst),
            origin,
            reason,
        };
        let peers: Vec<(usize, &Link)> = self
            .links
            .iter()
            .enumerate()
            .filter_map(|(p, l)| l.as_ref().map(|l| (p, l)))
            .collect();
        // Drain and send at once: two ranks that both send before reading could otherwise block
        // each other on full socket buffers.
        std::thread::scope(|scope| {
            let drains: Vec<_> = peers
                .iter()
                .map(|&(peer, link)| scope.spawn(move || self.drain_to_marker(peer, link)))
                .collect();
            let mut result = Ok(());
            for &(peer, link) in &peers {
                result = result.and(self.send_marker(peer, link, &marker));
            }
            for d in drains {
                let drained = d
                    .join()
                    .unwrap_or_else(|_| Err(Error::Internal("a drain thread panicked".into())));
                result = result.and(drained);
            }
            result
        })?;
        for (_, link) in peers {
            let mut state = link.state();
            state.marker_sent = false;
            state.marker_seen = None;
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
        Ok(())
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

    fn transport(&self) -> Transport {
        Transport::Sockets(self.transport)
    }
}

fn seed_from_time() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Starts heartbeats on `beats` that close a silent peer's data link.
fn watch(
    links: &[Option<Link>],
    beats: Vec<Option<Stream>>,
    timeout: Duration,
) -> Result<Liveness> {
    let mut close = Vec::new();
    for (peer, link) in links.iter().enumerate() {
        if let Some(link) = link {
            let control = link
                .control
                .try_clone()
                .map_err(|e| comm(format!("rank {peer}"), e))?;
            close.push((peer, control, link.state.clone()));
        }
    }
    let peers = beats
        .into_iter()
        .enumerate()
        .filter_map(|(p, s)| s.map(|s| (p, s)))
        .collect();
    Liveness::start(
        peers,
        timeout,
        Box::new(move |peer, how| {
            tracing::error!("rank {peer} {how}");
            if let Some((_, control, state)) = close.iter().find(|(p, _, _)| *p == peer) {
                state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .broken
                    .get_or_insert_with(|| how.to_string());
                control.shutdown();
            }
        }),
    )
}

/// How a failed read or write on a peer's link says the peer is gone or hung (no byte within
/// `op_timeout`).
fn lost_how(e: std::io::Error, op_timeout: Option<Duration>) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted => {
            "closed its connection (it exited or was killed)".to_string()
        }
        WouldBlock | TimedOut => format!(
            "did not answer within the operation timeout of {:.0} s: it is hung, stopped, or far \
             slower than this rank (raise --op-timeout if its work is legitimately that long)",
            op_timeout.map_or(0.0, |t| t.as_secs_f64())
        ),
        _ => format!("could not be reached: {e}"),
    }
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
        // Rank 0 stays connected until rank 1 has read: a peer that closes its socket with bytes
        // still unread on its side resets the connection, and the reset can overtake the frame.
        let read = std::sync::Barrier::new(2);
        let results = on_ranks(2, true, |g| {
            if g.rank() == 0 {
                g.send(1, &vec![0u8; 2048]).unwrap();
                read.wait();
                None
            } else {
                // Read through the group's own (buffered) link, with a smaller bound.
                let err = g.read_from(0, 1024).err().unwrap().to_string();
                read.wait();
                Some(err)
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

    #[test]
    fn a_rank_that_fails_mid_sequence_is_named_and_the_group_recovers() {
        let results = on_ranks(3, true, |g| {
            let mut a = vec![1.0f32; 1000];
            g.all_reduce(&mut a, ReduceOp::Sum).unwrap();
            // Rank 1 fails on its own while the others are inside a long all_reduce (many
            // segments in flight), and tells them.
            let failed = if g.rank() == 1 {
                Err(Error::config("output", "no space left on device"))
            } else {
                let mut b = vec![2.0f32; 3 * SEGMENT_FLOATS + 7];
                g.all_reduce(&mut b, ReduceOp::Sum)
            };
            let err = failed.unwrap_err();
            let msg = err.to_string();
            g.recover(&err).unwrap();
            // In step again: the next collectives see exactly this epoch's data.
            let mut c = vec![g.rank() as f32; 5];
            g.all_reduce(&mut c, ReduceOp::Sum).unwrap();
            let gathered = g.all_gather(&[g.rank() as u8]).unwrap();
            // A second failure and recovery work the same way (rank 0 this time, after a
            // collective the others have left: they meet its marker in the next one).
            let late = match g.rank() {
                0 => Err(Error::config("output", "read-only file system")),
                _ => g.barrier(),
            };
            let late = late.unwrap_err();
            g.recover(&late).unwrap();
            g.barrier().unwrap();
            (msg, c, gathered, late.to_string())
        });
        for (r, (msg, c, gathered, late)) in results.iter().enumerate() {
            assert!(msg.contains("no space left"), "rank {r}: {msg}");
            if r != 1 {
                assert!(msg.contains("rank 1 failed"), "rank {r}: {msg}");
            }
            assert_eq!(c, &vec![3.0; 5], "rank {r}");
            assert_eq!(gathered, &vec![vec![0], vec![1], vec![2]], "rank {r}");
            assert!(late.contains("read-only"), "rank {r}: {late}");
        }
    }

    #[test]
    fn a_broken_link_cannot_be_recovered() {
        let results = on_ranks(2, true, |g| {
            if g.rank() == 0 {
                // Rank 0 leaves without a word: its links close.
                g.links[1].as_ref().unwrap().control.shutdown();
                return None;
            }
            let err = g.barrier().unwrap_err();
            Some((err.to_string(), g.recover(&err).map_err(|e| e.to_string())))
        });
        let (err, recovered) = results[1].clone().unwrap();
        assert!(err.contains("rank 0"), "{err}");
        assert!(recovered.is_err(), "{recovered:?}");
    }
}
