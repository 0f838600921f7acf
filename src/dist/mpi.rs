//! The Open MPI transport (cargo feature `mpi`): the [`Collective`] trait over MPI, for runs launched
//! by `mpirun`/`srun` with `--backend mpi`.
//!
//! MPI is initialised with `MPI_THREAD_SERIALIZED` and every call goes through one mutex, so the
//! communicator may be shared between threads even though MPI handles are raw pointers.
//!
//! MPI has no timeouts and a blocked call cannot be interrupted, so liveness runs beside it: the
//! ranks exchange heartbeats over sockets of their own ([`super::liveness`]), and a rank that hears
//! nothing from a peer for the liveness timeout names it and ends its own process (mpirun then
//! stops the others) instead of waiting forever. The heartbeats report a peer whose process ended
//! without leaving the group (killed, crashed) as well, at once: mpirun would stop this rank a
//! second later (Open MPI 4: SIGTERM, then SIGKILL after `odls_base_sigkill_timeout`, 1 s), and
//! this way the rank still names the lost rank and says [`super::liveness::stop_note`] (an
//! elastic run's checkpoint and the command that continues it; MPI communicators cannot shrink
//! without ULFM, so the run cannot go on without it).

use std::io::Write;
use std::net::ToSocketAddrs;
use std::sync::Mutex;
use std::time::Duration;

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::collective::{Collective, ReduceOp, Transport, check_rank};
use super::liveness::Liveness;
use super::net::{self, Listener};
use crate::error::{Error, Result};

/// A process group over MPI's world communicator.
pub struct MpiGroup {
    inner: Mutex<(Universe, SimpleCommunicator)>,
    rank: usize,
    world: usize,
    _liveness: Option<Liveness>,
}

/// Time the ranks get to connect their heartbeat links (they are all running already).
const MESH_TIMEOUT: Duration = Duration::from_secs(60);

// SAFETY: MPI is initialised with at least MPI_THREAD_SERIALIZED (checked in `init`) and every MPI
// call is made while holding `inner`'s lock, so no two threads call MPI at once.
unsafe impl Send for MpiGroup {}
unsafe impl Sync for MpiGroup {}

impl MpiGroup {
    /// Initialises MPI (once per process), joins `MPI_COMM_WORLD` and, with `liveness`, starts
    /// heartbeats with that timeout.
    pub fn init(liveness: Option<Duration>) -> Result<MpiGroup> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| {
                Error::Unsupported("MPI is already initialised in this process".into())
            })?;
        if threading < mpi::Threading::Serialized {
            return Err(Error::Unsupported(format!(
                "this MPI library only offers {threading:?} threading; tessera needs Serialized"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let mut group = MpiGroup {
            inner: Mutex::new((universe, world)),
            rank,
            world: size,
            _liveness: None,
        };
        if let Some(timeout) = liveness.filter(|t| !t.is_zero() && size > 1) {
            group._liveness = Some(group.heartbeats(timeout)?);
        }
        Ok(group)
    }

    /// Heartbeat links to every rank (Unix sockets when all ranks share a host, else TCP on the
    /// address this host's name resolves to), their addresses exchanged over MPI.
    fn heartbeats(&self, timeout: Duration) -> Result<Liveness> {
        let host = super::host_name();
        let hosts = super::wire::all_gather_as(self, "host names", &host)?;
        let mut session = format!("mpi{:x}", std::process::id());
        let mut bytes = session.clone().into_bytes();
        self.broadcast(&mut bytes, 0)?;
        session = String::from_utf8_lossy(&bytes).into_owned();
        let listener = if hosts.iter().all(|h| *h == host) {
            Listener::unix(&session, self.rank, "beat")?
        } else {
            let ip = (host.as_str(), 0)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.find(|a| !a.ip().is_loopback()))
                .map(|a| a.ip())
                .ok_or_else(|| {
                    Error::config(
                        "--backend",
                        format!("this host's name `{host}` resolves to no address peers can reach"),
                    )
                })?;
            Listener::tcp(ip)?
        };
        let addrs = super::wire::all_gather_as(self, "heartbeat addresses", &listener.addr)?;
        let deadline = (super::deadline_after(MESH_TIMEOUT), MESH_TIMEOUT);
        let beats = net::mesh(self.rank, &listener, &addrs, &session, deadline)?;
        let peers = beats
            .into_iter()
            .enumerate()
            .filter_map(|(p, s)| s.map(|s| (p, s)))
            .collect();
        let me = self.rank;
        Liveness::start_reporting_exits(
            peers,
            timeout,
            Box::new(move |peer, how| {
                // A blocked MPI call cannot be interrupted: end this rank, saying why.
                let note = super::liveness::stop_note(Some(peer));
                let mut err = std::io::stderr().lock();
                let _ = writeln!(
                    err,
                    "error: rank {peer} {how}; rank {me} stops (MPI cannot interrupt a waiting call)"
                );
                if let Some(note) = note {
                    let _ = writeln!(err, "{note}");
                }
                let _ = err.flush();
                std::process::exit(1);
            }),
        )
    }

    fn with<T>(&self, f: impl FnOnce(&SimpleCommunicator) -> T) -> T {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&guard.1)
    }
}

fn count(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n)
        .map_err(|_| Error::Unsupported(format!("{what}: {n} elements exceed MPI's count limit")))
}

impl Collective for MpiGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        count(buf.len(), "all_reduce")?;
        let send = buf.to_vec();
        self.with(|c| match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                c.all_reduce_into(&send[..], buf, SystemOperation::sum())
            }
            ReduceOp::Max => c.all_reduce_into(&send[..], buf, SystemOperation::max()),
        });
        if op == ReduceOp::Mean {
            for v in buf.iter_mut() {
                *v /= self.world as f32;
            }
        }
        Ok(())
    }

    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = count(local.len(), "all_gather")?;
        let mut counts = vec![0i32; self.world];
        self.with(|c| c.all_gather_into(&n, &mut counts[..]));
        let mut displs = Vec::with_capacity(self.world);
        let mut total = 0i64;
        for &k in &counts {
            displs.push(count(total as usize, "all_gather")?);
            total += k as i64;
        }
        let mut buf = vec![0u8; total as usize];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            self.with(|c| c.all_gather_varcount_into(local, &mut part));
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&k, &d)| buf[d as usize..(d + k) as usize].to_vec())
            .collect())
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        check_rank(root, self.world, "broadcast root")?;
        let mut len = count(buf.len(), "broadcast")? as u64;
        self.with(|c| c.process_at_rank(root as i32).broadcast_into(&mut len));
        buf.resize(len as usize, 0);
        self.with(|c| c.process_at_rank(root as i32).broadcast_into(&mut buf[..]));
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.with(|c| c.barrier());
        Ok(())
    }

    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        check_rank(to, self.world, "send")?;
        count(data.len(), "send")?;
        self.with(|c| c.process_at_rank(to as i32).send(data));
        Ok(())
    }

    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        check_rank(from, self.world, "recv")?;
        Ok(self.with(|c| c.process_at_rank(from as i32).receive_vec::<u8>().0))
    }

    fn transport(&self) -> Transport {
        Transport::Mpi
    }
}
