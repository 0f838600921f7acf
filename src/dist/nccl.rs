//! The NCCL transport (cargo feature `nccl`): `all_reduce` runs on the GPU through NCCL (cudarc's
//! binding), everything else (gathers of variable-size bytes, broadcast, barrier, point-to-point)
//! over the socket group that also carries NCCL's bootstrap id — the split torch makes between its
//! `nccl` and `gloo` groups.
//!
//! The CUDA and NCCL libraries are loaded at run time, so the feature builds on machines without
//! CUDA; [`NcclGroup::connect`] probes for them first and fails with a clear message when no GPU,
//! driver or NCCL library is present.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{Comm, Id};

use super::collective::{Collective, ReduceOp, Transport};
use super::env::RankInfo;
use super::sockets::SocketGroup;
use crate::error::{Error, Result};

/// GPU all-reduce through NCCL plus a socket group for the rest.
pub struct NcclGroup {
    sockets: SocketGroup,
    comm: Mutex<Comm>,
    stream: Arc<CudaStream>,
}

// SAFETY: NCCL communicators and CUDA streams may be used from any thread as long as calls on one
// communicator are not concurrent; every use of `comm` holds its lock.
unsafe impl Send for NcclGroup {}
unsafe impl Sync for NcclGroup {}

fn no_gpu(what: &str) -> Error {
    Error::Unsupported(format!(
        "the nccl backend needs an NVIDIA GPU: {what}; use --backend sockets (the default) on this machine"
    ))
}

impl NcclGroup {
    /// Joins the group: socket rendezvous, then an NCCL communicator on GPU `local_rank % devices`.
    pub fn connect(
        info: &RankInfo,
        timeout: Duration,
        liveness: Option<Duration>,
    ) -> Result<NcclGroup> {
        // SAFETY: these only try to dlopen the libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(no_gpu("no CUDA driver library (libcuda.so) was found"));
        }
        if !unsafe { cudarc::nccl::sys::is_culib_present() } {
            return Err(no_gpu("no NCCL library (libnccl.so.2) was found"));
        }
        let devices = CudaContext::device_count()
            .map_err(|e| no_gpu(&format!("the CUDA driver reports {e}")))?;
        if devices < 1 {
            return Err(no_gpu("the CUDA driver sees no device"));
        }
        let sockets = SocketGroup::connect_with(info, timeout, liveness)?;
        let ctx = CudaContext::new(info.local_rank % devices as usize).map_err(|e| {
            no_gpu(&format!(
                "opening GPU {}: {e}",
                info.local_rank % devices as usize
            ))
        })?;
        let stream = ctx.default_stream();
        let mut id_bytes = if info.rank == 0 {
            let id =
                Id::new().map_err(|e| no_gpu(&format!("NCCL could not create an id: {e:?}")))?;
            id.internal().iter().map(|&c| c as u8).collect()
        } else {
            Vec::new()
        };
        sockets.broadcast(&mut id_bytes, 0)?;
        let internal: [std::ffi::c_char; 128] = id_bytes
            .iter()
            .map(|&b| b as std::ffi::c_char)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| Error::bad_peer_data(0, "an NCCL id of the wrong size"))?;
        let comm = Comm::from_rank(
            stream.clone(),
            info.rank,
            info.world_size,
            Id::uninit(internal),
        )
        .map_err(|e| no_gpu(&format!("NCCL could not join the group: {e:?}")))?;
        Ok(NcclGroup {
            sockets,
            comm: Mutex::new(comm),
            stream,
        })
    }
}

impl Collective for NcclGroup {
    fn rank(&self) -> usize {
        self.sockets.rank()
    }
    fn world_size(&self) -> usize {
        self.sockets.world_size()
    }
    fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let gpu = |e: cudarc::driver::DriverError| Error::Device {
            device: "CUDA".into(),
            reason: format!("during all-reduce: {e}"),
        };
        let comm = self.comm.lock().unwrap_or_else(|p| p.into_inner());
        let mut dev = self.stream.clone_htod(buf).map_err(gpu)?;
        let nccl_op = match op {
            ReduceOp::Sum | ReduceOp::Mean => cudarc::nccl::ReduceOp::Sum,
            ReduceOp::Max => cudarc::nccl::ReduceOp::Max,
        };
        comm.all_reduce_in_place(&mut dev, &nccl_op)
            .map_err(|e| Error::Device {
                device: "NCCL".into(),
                reason: format!("all-reduce failed: {e:?}"),
            })?;
        self.stream.memcpy_dtoh(&dev, buf).map_err(gpu)?;
        self.stream.synchronize().map_err(gpu)?;
        if op == ReduceOp::Mean {
            let n = self.world_size() as f32;
            buf.iter_mut().for_each(|v| *v /= n);
        }
        Ok(())
    }
    fn all_gather(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.sockets.all_gather(local)
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> Result<()> {
        self.sockets.broadcast(buf, root)
    }
    fn barrier(&self) -> Result<()> {
        self.sockets.barrier()
    }
    fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.sockets.send(to, data)
    }
    fn recv(&self, from: usize) -> Result<Vec<u8>> {
        self.sockets.recv(from)
    }
    fn transport(&self) -> Transport {
        match self.sockets.transport() {
            Transport::Sockets(kind) => Transport::Nccl(kind),
            other => other,
        }
    }
    fn set_op_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        self.sockets.set_op_timeout(timeout)
    }
}
