//! Liveness: every rank sends a heartbeat byte to every other rank on connections of their own,
//! from a thread of its own, so a rank that is stopped (SIGSTOP, a debugger), frozen or cut off is
//! named within `timeout` — independent of how long legitimate work between two collectives takes
//! (that is what `--op-timeout` bounds). A rank that exits closes its heartbeat links, which is not
//! reported here by default: its data links report it. MPI has no data links of ours, so its
//! heartbeats report exits too ([`Liveness::start_reporting_exits`]): a rank that ends its group
//! (a clean end, or leaving because of a loss it saw) first sends [`BYE`], so only a link that
//! closes without one names its rank as lost (killed, crashed).
//!
//! The sockets transport reacts by closing the data link to the lost rank, so a collective waiting
//! for it fails at once with [`crate::Error::PeerLost`] naming it; MPI, which cannot interrupt a
//! blocked call, ends the process with the reason (mpirun then stops the others).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::net::Stream;
use crate::error::{Error, Result};

/// Default time without a heartbeat after which a rank is declared lost.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(5);

/// The heartbeat thread; stopped when dropped.
pub struct Liveness {
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

/// What the thread tells its owner: `(peer, how it was lost)`.
pub type OnLost = Box<dyn Fn(usize, &str) + Send>;

/// What a rank adds when it ends its own process because a peer was lost (MPI, [`Liveness`]'s
/// owner there) or its launcher stopped it: `lost` is the rank named lost, if known.
pub type StopNote = Box<dyn Fn(Option<usize>) -> Option<String> + Send + Sync>;

static STOP_NOTE: std::sync::OnceLock<StopNote> = std::sync::OnceLock::new();

/// Sets, once per process, what [`stop_note`] says (a run with a checkpoint: where it is and the
/// command that continues it). A second call is ignored.
pub fn set_stop_note(note: StopNote) {
    let _ = STOP_NOTE.set(note);
}

/// What this process says as it stops because `lost` was lost (`None`: unknown), if anything.
pub fn stop_note(lost: Option<usize>) -> Option<String> {
    STOP_NOTE.get().and_then(|note| note(lost))
}

/// A heartbeat.
const BEAT: u8 = 0;
/// The last byte on a link whose rank leaves on purpose: its link's close is no loss.
pub(crate) const BYE: u8 = 1;

impl Liveness {
    /// Starts beating to and watching `peers` (`(rank, stream)`); `on_lost` is called once per peer
    /// that stays silent for `timeout`.
    pub(crate) fn start(
        peers: Vec<(usize, Stream)>,
        timeout: Duration,
        on_lost: OnLost,
    ) -> Result<Liveness> {
        Self::spawn(peers, timeout, on_lost, false)
    }

    /// [`Self::start`] that also calls `on_lost` for a peer whose link closes without [`BYE`]
    /// (its process ended without leaving the group: killed, crashed). Before it calls `on_lost`
    /// for any peer, the thread says [`BYE`] to the others: `on_lost` may end this process, and
    /// they should name the rank that was lost, not this one.
    // Only the MPI transport (cargo feature `mpi`) and the tests call it.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn start_reporting_exits(
        peers: Vec<(usize, Stream)>,
        timeout: Duration,
        on_lost: OnLost,
    ) -> Result<Liveness> {
        Self::spawn(peers, timeout, on_lost, true)
    }

    fn spawn(
        peers: Vec<(usize, Stream)>,
        timeout: Duration,
        on_lost: OnLost,
        report_exits: bool,
    ) -> Result<Liveness> {
        let (wake, woken) = UnixStream::pair()
            .map_err(|e| super::net::comm("starting the heartbeat thread".into(), e))?;
        for (_, s) in &peers {
            s.set_nonblocking(true)
                .map_err(|e| super::net::comm("configuring a heartbeat link".into(), e))?;
        }
        let thread = std::thread::Builder::new()
            .name("tessera-heartbeat".into())
            .spawn(move || beat(peers, woken, timeout, on_lost, report_exits))
            .map_err(|e| Error::io("starting the heartbeat thread", "thread", e))?;
        Ok(Liveness {
            wake,
            thread: Some(thread),
        })
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        let _ = self.wake.write_all(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Peer {
    rank: usize,
    stream: Stream,
    last_heard: Instant,
    /// Closed (the peer exited) or reported lost: no longer watched.
    done: bool,
    /// It sent [`BYE`]: its link's close is no loss.
    left: bool,
}

/// Says [`BYE`] on every link still watched (a full buffer, a stopped peer's, drops it: that peer
/// is not listening anyway).
fn say_bye(peers: &mut [Peer]) {
    for p in peers.iter_mut().filter(|p| !p.done) {
        let _ = p.stream.write(&[BYE]);
    }
}

fn beat(
    peers: Vec<(usize, Stream)>,
    woken: UnixStream,
    timeout: Duration,
    on_lost: OnLost,
    report_exits: bool,
) {
    let interval = (timeout / 5).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let now = Instant::now();
    let mut peers: Vec<Peer> = peers
        .into_iter()
        .map(|(rank, stream)| Peer {
            rank,
            stream,
            last_heard: now,
            done: false,
            left: false,
        })
        .collect();
    let mut last_sent: Option<Instant> = None;
    let mut buf = [0u8; 256];
    loop {
        if last_sent.is_none_or(|t| t.elapsed() >= interval) {
            for p in peers.iter_mut().filter(|p| !p.done) {
                // Whatever happens is told later: a peer that does not read (stopped) fills its
                // buffer and its silence tells; a closed link is found by the read below, which
                // tells a peer that left from one that was lost.
                let _ = p.stream.write(&[BEAT]);
            }
            last_sent = Some(Instant::now());
        }
        let mut fds: Vec<libc::pollfd> = std::iter::once(woken.as_raw_fd())
            .chain(
                peers
                    .iter()
                    .filter(|p| !p.done)
                    .map(|p| p.stream.as_raw_fd()),
            )
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = interval.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the whole call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready > 0 && fds[0].revents != 0 {
            say_bye(&mut peers);
            return;
        }
        let now = Instant::now();
        let mut lost = Vec::new();
        let watched = peers.iter_mut().filter(|p| !p.done);
        for (p, fd) in watched.zip(&fds[1..]) {
            let mut closed = false;
            if fd.revents != 0 {
                loop {
                    match p.stream.read(&mut buf) {
                        Ok(0) => {
                            closed = true;
                            break;
                        }
                        Ok(n) => {
                            p.last_heard = now;
                            p.left |= buf[..n].contains(&BYE);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            closed = true;
                            break;
                        }
                    }
                }
            }
            let silent = now.duration_since(p.last_heard);
            if closed {
                p.done = true;
                if report_exits && !p.left {
                    let how = "closed its heartbeat link without leaving the group: its process \
                               ended (killed or crashed)";
                    lost.push((p.rank, how.to_string()));
                }
            } else if !p.done && silent >= timeout {
                p.done = true;
                lost.push((
                    p.rank,
                    format!(
                        "sent no heartbeat for {:.1} s: it is stopped (SIGSTOP, a debugger), \
                         frozen, or its host is unreachable",
                        silent.as_secs_f64()
                    ),
                ));
            }
        }
        if report_exits && !lost.is_empty() {
            say_bye(&mut peers);
        }
        for (rank, how) in lost {
            on_lost(rank, &how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn pair() -> (Stream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Stream::Unix(a), b)
    }

    #[test]
    fn a_silent_peer_is_named_within_the_timeout_and_a_beating_one_is_not() {
        let (silent, _silent_end) = pair();
        let (alive, mut alive_end) = pair();
        let (tx, rx) = mpsc::channel();
        let timeout = Duration::from_millis(600);
        let t = Instant::now();
        let live = Liveness::start(
            vec![(3, silent), (5, alive)],
            timeout,
            Box::new(move |peer, how| tx.send((peer, how.to_string(), t.elapsed())).unwrap()),
        )
        .unwrap();
        // Rank 5 keeps beating (and reads ours); rank 3 says nothing.
        let beating = std::thread::spawn(move || {
            alive_end.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 64];
            for _ in 0..30 {
                let _ = alive_end.write(&[0]);
                let _ = alive_end.read(&mut buf);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (peer, how, after) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(peer, 3);
        assert!(how.contains("no heartbeat"), "{how}");
        assert!(after >= timeout, "{after:?}");
        beating.join().unwrap();
        // Only rank 3 was reported while rank 5 beat.
        assert!(rx.try_recv().is_err());
        drop(live);
    }

    #[test]
    fn a_peer_that_exits_is_not_reported_here() {
        let (gone, gone_end) = pair();
        let (tx, rx) = mpsc::channel();
        let live = Liveness::start(
            vec![(1, gone)],
            Duration::from_millis(300),
            Box::new(move |peer, _| tx.send(peer).unwrap()),
        )
        .unwrap();
        drop(gone_end);
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_err());
        drop(live);
    }

    #[test]
    fn reporting_exits_names_a_peer_that_closes_without_leaving_and_says_bye_first() {
        let (gone, gone_end) = pair();
        let (watcher, mut watcher_end) = pair();
        let (tx, rx) = mpsc::channel();
        let live = Liveness::start_reporting_exits(
            vec![(1, gone), (2, watcher)],
            Duration::from_secs(30),
            Box::new(move |peer, how| tx.send((peer, how.to_string())).unwrap()),
        )
        .unwrap();
        drop(gone_end);
        let (peer, how) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(peer, 1);
        assert!(how.contains("closed its heartbeat link"), "{how}");
        // Rank 2 heard BYE before this rank's owner was told (it may end the process).
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        watcher_end.set_nonblocking(true).unwrap();
        while let Ok(n) = watcher_end.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
            if n == 0 || got.contains(&BYE) {
                break;
            }
        }
        assert!(got.contains(&BYE), "{got:?}");
        assert!(rx.try_recv().is_err());
        drop(live);
    }

    #[test]
    fn a_peer_that_leaves_with_bye_is_not_reported_and_dropping_says_bye() {
        let (a, b) = UnixStream::pair().unwrap();
        let (tx, rx) = mpsc::channel();
        let tx_b = tx.clone();
        let live_a = Liveness::start_reporting_exits(
            vec![(1, Stream::Unix(a))],
            Duration::from_secs(30),
            Box::new(move |peer, _| tx.send(('a', peer)).unwrap()),
        )
        .unwrap();
        let live_b = Liveness::start_reporting_exits(
            vec![(0, Stream::Unix(b))],
            Duration::from_secs(30),
            Box::new(move |peer, _| tx_b.send(('b', peer)).unwrap()),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(live_b);
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_err());
        drop(live_a);
    }
}
