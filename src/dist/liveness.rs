//! Liveness: every rank sends a heartbeat byte to every other rank on connections of their own,
//! from a thread of its own, so a rank that is stopped (SIGSTOP, a debugger), frozen or cut off is
//! named within `timeout` — independent of how long legitimate work between two collectives takes
//! (that is what `--op-timeout` bounds). A rank that exits closes its heartbeat links, which is not
//! reported here: its data links report it.
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

impl Liveness {
    /// Starts beating to and watching `peers` (`(rank, stream)`); `on_lost` is called once per peer
    /// that stays silent for `timeout`.
    pub(crate) fn start(
        peers: Vec<(usize, Stream)>,
        timeout: Duration,
        on_lost: OnLost,
    ) -> Result<Liveness> {
        let (wake, woken) = UnixStream::pair()
            .map_err(|e| super::net::comm("starting the heartbeat thread".into(), e))?;
        for (_, s) in &peers {
            s.set_nonblocking(true)
                .map_err(|e| super::net::comm("configuring a heartbeat link".into(), e))?;
        }
        let thread = std::thread::Builder::new()
            .name("tessera-heartbeat".into())
            .spawn(move || beat(peers, woken, timeout, on_lost))
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
}

fn beat(peers: Vec<(usize, Stream)>, woken: UnixStream, timeout: Duration, on_lost: OnLost) {
    let interval = (timeout / 5).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let now = Instant::now();
    let mut peers: Vec<Peer> = peers
        .into_iter()
        .map(|(rank, stream)| Peer {
            rank,
            stream,
            last_heard: now,
            done: false,
        })
        .collect();
    let mut last_sent: Option<Instant> = None;
    let mut buf = [0u8; 256];
    loop {
        if last_sent.is_none_or(|t| t.elapsed() >= interval) {
            for p in peers.iter_mut().filter(|p| !p.done) {
                match p.stream.write(&[0]) {
                    Ok(_) => {}
                    // A peer that does not read (stopped) fills its buffer: its silence tells.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => p.done = true,
                }
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
            return;
        }
        let now = Instant::now();
        let watched = peers.iter_mut().filter(|p| !p.done);
        for (p, fd) in watched.zip(&fds[1..]) {
            if fd.revents != 0 {
                loop {
                    match p.stream.read(&mut buf) {
                        Ok(0) => {
                            p.done = true;
                            break;
                        }
                        Ok(_) => p.last_heard = now,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            p.done = true;
                            break;
                        }
                    }
                }
            }
            let silent = now.duration_since(p.last_heard);
            if !p.done && silent >= timeout {
                p.done = true;
                on_lost(
                    p.rank,
                    &format!(
                        "sent no heartbeat for {:.1} s: it is stopped (SIGSTOP, a debugger), \
                         frozen, or its host is unreachable",
                        silent.as_secs_f64()
                    ),
                );
            }
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
}
