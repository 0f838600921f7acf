//! A [`Collective`] decorator that measures the time spent communicating, for the per-rank,
//! per-component timings (gradient, denoiser, communication, idle) that jobs report.
//!
//! Besides the running total it keeps a log of every call: its kind, the phase of the iteration it
//! belongs to (set by the job: gradient, denoiser or other), the bytes it carried and its entry and
//! exit times on the host's monotonic clock. `dist::profile` turns the logs of all ranks into idle
//! time (waiting for the last rank to arrive at a collective) and transfer time.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::collective::{Collective, ReduceOp};
use crate::denoise::Denoiser;
use crate::error::Result;
use crate::tensor::Tensor;

/// Which part of an iteration a collective call serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Data-fidelity gradient (operators, their sums and gathers).
    #[default]
    Gradient,
    /// The denoiser (tiles and their gather, halo exchanges).
    Denoiser,
    /// Everything else: set-up, bookkeeping between iterations, the final gathers.
    Other,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Gradient, Phase::Denoiser, Phase::Other];

    fn from_u8(v: u8) -> Phase {
        Phase::ALL.get(v as usize).copied().unwrap_or(Phase::Other)
    }
}

/// What a logged call was. Collectives are made by every rank in the same order (the
/// [`Collective`] contract), so the `k`-th collective of every rank is the same operation;
/// point-to-point calls name their peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    AllReduce,
    AllGather,
    Broadcast,
    Barrier,
    Send { to: usize },
    Recv { from: usize },
}

impl CallKind {
    /// Whether every rank takes part (and so waits for the last one to arrive).
    pub fn is_collective(self) -> bool {
        !matches!(self, CallKind::Send { .. } | CallKind::Recv { .. })
    }
}

/// One call of the wrapped collective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub kind: CallKind,
    pub phase: Phase,
    /// Bytes this rank contributed (all-reduce buffer, gather block, broadcast payload at the root,
    /// message sent) or received (broadcast elsewhere, message received).
    pub bytes: u64,
    /// Entry and exit on this host's monotonic clock, nanoseconds.
    pub start_ns: u64,
    pub end_ns: u64,
}

impl CallRecord {
    pub fn secs(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 * 1e-9
    }
}

/// Nanoseconds on the host's monotonic clock (`CLOCK_MONOTONIC`): comparable between processes
/// of one host (and between network namespaces of one host), unlike [`Instant`].
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wraps a collective, accumulates the wall time of its calls and logs each call.
pub struct TimedCollective {
    inner: Box<dyn Collective>,
    nanos: AtomicU64,
    phase: AtomicU8,
    log: Mutex<Vec<CallRecord>>,
}

impl TimedCollective {
    pub fn new(inner: Box<dyn Collective>) -> Self {
        TimedCollective {
            inner,
            nanos: AtomicU64::new(0),
            phase: AtomicU8::new(Phase::Other as u8),
            log: Mutex::new(Vec::new()),
        }
    }

    /// The collective it times: for exchanges that are not part of the computation (serve's
    /// per-iteration record), which neither its times nor its call log should count.
    pub fn inner(&self) -> &dyn Collective {
        self.inner.as_ref()
    }

    /// The collective it timed, given back once nothing else holds this one.
    pub fn into_inner(self) -> Box<dyn Collective> {
        self.inner
    }

    /// Seconds spent in collectives so far.
    pub fn secs(&self) -> f64 {
        self.nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Attributes the following calls to `phase`.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    /// Number of calls logged so far (a mark for [`TimedCollective::calls_since`]).
    pub fn calls(&self) -> usize {
        self.lock_log().len()
    }

    /// The calls logged from index `mark` on.
    pub fn calls_since(&self, mark: usize) -> Vec<CallRecord> {
        self.lock_log().get(mark..).unwrap_or(&[]).to_vec()
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Vec<CallRecord>> {
        // A panic while pushing a record cannot leave the vector inconsistent.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn timed<T>(&self, kind: CallKind, bytes: u64, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let phase = self.phase();
        let t = Instant::now();
        let start_ns = monotonic_ns();
        let out = f();
        let end_ns = monotonic_ns();
        self.nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.lock_log().push(CallRecord {
            kind,
            phase,
            bytes,
            start_ns,
            end_ns,
        });
        out
    }
}

impl Collective for TimedCollective {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let bytes = std::mem::size_of_val(buf) as u64;
        self.timed(CallKind::AllReduce, bytes, || {
            self.inner.all_reduce(buf, op)
        })
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.timed(CallKind::AllGather, local.len() as u64, || {
            self.inner.all_gather(local)
        })
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        // The root knows the size before the call, the others after it.
        let before = buf.len();
        let mut after = 0;
        let out = self.timed(CallKind::Broadcast, before as u64, || {
            let r = self.inner.broadcast(buf, root);
            after = buf.len();
            r
        });
        if self.rank() != root
            && let Some(last) = self.lock_log().last_mut()
        {
            last.bytes = after as u64;
        }
        out
    }
    fn barrier(&self) -> Result<()> {
        self.timed(CallKind::Barrier, 0, || self.inner.barrier())
    }
    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.timed(CallKind::Send { to }, data.len() as u64, || {
            self.inner.send(to, data)
        })
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        let mut got = 0;
        let out = self.timed(CallKind::Recv { from }, 0, || {
            let r = self.inner.recv(from);
            got = r.as_ref().map_or(0, Vec::len);
            r
        });
        if let Some(last) = self.lock_log().last_mut() {
            last.bytes = got as u64;
        }
        out
    }
    fn transport(&self) -> super::collective::Transport {
        self.inner.transport()
    }
    fn set_op_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        self.inner.set_op_timeout(timeout)
    }
    fn recover(&self, failure: &crate::Error) -> Result<()> {
        self.inner.recover(failure)
    }
}

/// A denoiser whose collective calls count as the [`Phase::Denoiser`] of an iteration.
pub struct PhasedDenoiser {
    pub inner: Box<dyn Denoiser>,
    pub timed: Arc<TimedCollective>,
}

impl Denoiser for PhasedDenoiser {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        let before = self.timed.phase();
        self.timed.set_phase(Phase::Denoiser);
        let out = self.inner.denoise(x, sigma);
        self.timed.set_phase(before);
        out
    }
    fn as_block_denoiser(&self) -> Option<&dyn crate::nn::BlockDenoiser> {
        self.inner.as_block_denoiser()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::SingleProcess;

    #[test]
    fn calls_are_logged_with_their_phase_and_bytes() {
        let t = TimedCollective::new(Box::new(SingleProcess));
        t.set_phase(Phase::Gradient);
        let mut buf = vec![1.0f32; 10];
        t.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
        t.set_phase(Phase::Denoiser);
        t.all_gather(&[0u8; 7]).unwrap();
        let mark = t.calls();
        t.barrier().unwrap();
        let log = t.calls_since(0);
        assert_eq!(log.len(), 3);
        assert_eq!(
            (log[0].kind, log[0].phase, log[0].bytes),
            (CallKind::AllReduce, Phase::Gradient, 40)
        );
        assert_eq!(
            (log[1].kind, log[1].phase, log[1].bytes),
            (CallKind::AllGather, Phase::Denoiser, 7)
        );
        assert!(log.iter().all(|c| c.end_ns >= c.start_ns));
        assert_eq!(t.calls_since(mark).len(), 1);
        assert!(t.calls_since(99).is_empty());
    }
}
