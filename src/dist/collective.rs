//! The `Collective` trait — what the distributed objects need from a process group — and the
//! single-process implementation that makes one code path serve 1 and N ranks.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How values combine in [`Collective::all_reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    #[default]
    Sum,
    Mean,
    Max,
}

/// How the ranks of a group reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// A group of one: no communication.
    #[default]
    Single,
    /// tessera's socket mesh.
    Sockets(SocketKind),
    /// Open MPI.
    Mpi,
    /// NCCL all-reduce on GPUs, the socket mesh for the rest.
    Nccl(SocketKind),
}

/// Which sockets a socket mesh uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketKind {
    /// Unix domain sockets (every rank on one host).
    Unix,
    /// TCP (ranks on several hosts).
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = |k: &SocketKind| match k {
            SocketKind::Unix => "unix",
            SocketKind::Tcp => "tcp",
        };
        match self {
            Transport::Single => f.write_str("single"),
            Transport::Sockets(k) => write!(f, "sockets({})", kind(k)),
            Transport::Mpi => f.write_str("mpi"),
            Transport::Nccl(k) => write!(f, "nccl + sockets({})", kind(k)),
        }
    }
}

/// Communication among the ranks of a group. Every rank must make the same calls in the same order.
pub trait Collective: Send + Sync {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;

    /// Combines `buf` across ranks in place; every rank ends with the same (bitwise) result.
    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()>;

    /// Every rank's `local` bytes, indexed by rank (sizes may differ).
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Copies `root`'s `buf` to every rank (`buf` is replaced on the others).
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()>;

    /// Returns when every rank has called it.
    fn barrier(&self) -> Result<()>;

    /// Point-to-point: sends `data` to rank `to` (matched by a `recv(from = this rank)` there).
    fn send(&self, to: usize, data: &[u8]) -> Result<()>;

    /// Point-to-point: receives the next message from rank `from`.
    fn recv(&self, from: usize) -> Result<Vec<u8>>;

    /// How the ranks reach each other.
    fn transport(&self) -> Transport;

    /// A short name for logs and timings (`single`, `sockets(unix)`, `mpi`, …).
    fn backend_name(&self) -> String {
        self.transport().to_string()
    }

    /// Brings the group back in step after a failure on some rank, so that it can run the next job:
    /// every rank calls it once it has left the failed work — the rank the failure started on, and
    /// the others when a collective returned [`Error::PeerFailed`]. `failure` is what this rank saw;
    /// the peers learn its origin (as [`Error::PeerFailed`]) instead of waiting for data that will
    /// not come. `Ok` means the ranks are in step again; an error means the group cannot be used any
    /// more (a peer is gone, or the transport cannot realign ranks).
    fn recover(&self, failure: &Error) -> Result<()> {
        let _ = failure;
        if self.world_size() == 1 {
            return Ok(());
        }
        Err(Error::Unsupported(format!(
            "the {} transport cannot bring its ranks back in step after a failure",
            self.backend_name()
        )))
    }

    /// How long one receive or send may wait for a peer before the peer is declared lost
    /// ([`Error::PeerLost`] naming it: hung, stopped, or far slower than this rank); `None` waits
    /// forever. Transports without timeouts (MPI) ignore it; a group of one never waits.
    fn set_op_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        let _ = timeout;
        Ok(())
    }
}

/// A shared group is a group: a long-lived collective (serve's, a test's) is handed to a job as
/// `Box::new(arc.clone())`, and every call, the provided ones included, reaches the one it shares.
impl<C: Collective + ?Sized> Collective for std::sync::Arc<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn world_size(&self) -> usize {
        (**self).world_size()
    }
    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        (**self).all_reduce(buf, op)
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        (**self).all_gather(local)
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        (**self).broadcast(buf, root)
    }
    fn barrier(&self) -> Result<()> {
        (**self).barrier()
    }
    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        (**self).send(to, data)
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        (**self).recv(from)
    }
    fn transport(&self) -> Transport {
        (**self).transport()
    }
    fn backend_name(&self) -> String {
        (**self).backend_name()
    }
    fn recover(&self, failure: &Error) -> Result<()> {
        (**self).recover(failure)
    }
    fn set_op_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        (**self).set_op_timeout(timeout)
    }
}

/// The group of one: every collective is the identity.
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleProcess;

impl Collective for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_reduce(&self, _buf: &mut [f32], _op: ReduceOp) -> Result<()> {
        Ok(())
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![local.to_vec()])
    }
    fn broadcast(&self, _buf: &mut Vec<u8>, root: usize) -> Result<()> {
        check_rank(root, 1, "broadcast root")
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn send(&self, to: usize, _data: &[u8]) -> Result<()> {
        Err(Error::Internal(format!(
            "send: rank {to} does not exist in a group of one"
        )))
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        Err(Error::Internal(format!(
            "recv: rank {from} does not exist in a group of one"
        )))
    }
    fn transport(&self) -> Transport {
        Transport::Single
    }
}

/// Fails unless `rank < world`. The ranks a collective is asked about come from tessera's own
/// placement of work, never from a user, so one out of range is a bug.
pub fn check_rank(rank: usize, world: usize, what: &str) -> Result<()> {
    if rank >= world {
        return Err(Error::Internal(format!(
            "{what}: rank {rank} is not below the world size {world}"
        )));
    }
    Ok(())
}

/// Whether every rank stops here: rank 0's `stop` decides (the others' is ignored), sent to all
/// with one broadcast of a byte, so loops that each rank runs stop at the same step.
pub fn agree_to_stop(comm: &dyn Collective, stop: bool) -> Result<bool> {
    let mut flag = vec![u8::from(stop && comm.rank() == 0)];
    comm.broadcast(&mut flag, 0)?;
    Ok(flag.first() == Some(&1))
}

/// Applies `op` elementwise: `acc ← acc ⊕ x`.
pub fn reduce_into(acc: &mut [f32], x: &[f32], op: ReduceOp) {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            for (a, b) in acc.iter_mut().zip(x) {
                *a += b;
            }
        }
        ReduceOp::Max => {
            for (a, b) in acc.iter_mut().zip(x) {
                *a = a.max(*b);
            }
        }
    }
}
