//! A [`Collective`] decorator that measures the time spent communicating, for the per-rank,
//! per-component timings (gradient, denoiser, communication) that jobs report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::collective::{Collective, ReduceOp};
use crate::error::Result;

/// Wraps a collective and accumulates the wall time of its calls.
pub struct TimedCollective {
    inner: Box<dyn Collective>,
    nanos: AtomicU64,
}

impl TimedCollective {
    pub fn new(inner: Box<dyn Collective>) -> Self {
        TimedCollective {
            inner,
            nanos: AtomicU64::new(0),
        }
    }

    /// Seconds spent in collectives so far.
    pub fn secs(&self) -> f64 {
        self.nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
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
        self.timed(|| self.inner.all_reduce(buf, op))
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.timed(|| self.inner.all_gather(local))
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        self.timed(|| self.inner.broadcast(buf, root))
    }
    fn barrier(&self) -> Result<()> {
        self.timed(|| self.inner.barrier())
    }
    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.timed(|| self.inner.send(to, data))
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.timed(|| self.inner.recv(from))
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
