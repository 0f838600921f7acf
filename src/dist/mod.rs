//! The process group: rank discovery, rendezvous, collectives, and the distributed versions of the
//! physics stack, the tiled denoiser and data fidelity (deepinv's `deepinv.distributed`).
//!
//! One code path serves 1 and N ranks: with one rank the collective is [`SingleProcess`] and every
//! communication is the identity.

pub mod bench;
pub mod codec;
pub mod collective;
pub mod denoise;
pub mod elastic;
pub mod env;
pub mod launch;
pub mod liveness;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "cuda")]
pub mod nccl;
pub(crate) mod net;
pub mod patch_map;
pub mod physics;
pub mod placement;
pub mod profile;
pub mod relay;
pub mod sockets;
pub mod spatial;
pub mod spatial_memory;
pub mod store;
pub mod subgroup;
pub mod timed;
pub mod wire;

use std::time::Duration;

pub use collective::{Collective, ReduceOp, SingleProcess, SocketKind, Transport};
pub use env::{RankFlags, RankInfo, RankSource};
pub use sockets::SocketGroup;

use crate::error::Result;

/// Which transport joins the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Unix sockets on one host, TCP across hosts; no system dependency.
    #[default]
    Sockets,
    /// Open MPI (cargo feature `mpi`; launch with mpirun or srun).
    Mpi,
    /// NCCL all-reduce on NVIDIA GPUs (cargo feature `nccl`), sockets for the rest.
    Nccl,
}

impl std::str::FromStr for Backend {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "sockets" => Ok(Backend::Sockets),
            "mpi" => Ok(Backend::Mpi),
            "nccl" => Ok(Backend::Nccl),
            other => Err(crate::Error::config(
                "--backend",
                format!("`{other}` is not a backend (sockets, mpi, nccl)"),
            )),
        }
    }
}

/// The seed rank `rank` uses: `seed` itself, or with `offset_by_rank` a value distinct for every rank
/// (the rank times an odd 64-bit constant, so nearby seeds on nearby ranks never collide the way
/// `seed + rank` would with per-operator offsets `seed + i`).
pub fn rank_seed(seed: u64, rank: usize, offset_by_rank: bool) -> u64 {
    if offset_by_rank {
        seed.wrapping_add((rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    } else {
        seed
    }
}

/// Joins the process group with the chosen transport: every rank must arrive within `timeout`;
/// a rank silent for `liveness` (no heartbeat) is declared lost (`None`: never).
pub fn init_backend(
    backend: Backend,
    info: &RankInfo,
    timeout: Duration,
    liveness: Option<Duration>,
) -> Result<Box<dyn Collective>> {
    match backend {
        Backend::Sockets => init(info, timeout, liveness),
        #[cfg(feature = "mpi")]
        Backend::Mpi => Ok(Box::new(mpi::MpiGroup::init(liveness)?)),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => Err(crate::Error::Unsupported(
            "this tessera was built without MPI; rebuild with `cargo build --release --features mpi` \
             (needs libopenmpi-dev and libclang-dev)"
                .into(),
        )),
        #[cfg(feature = "cuda")]
        Backend::Nccl => Ok(Box::new(nccl::NcclGroup::connect(info, timeout, liveness)?)),
        #[cfg(not(feature = "cuda"))]
        Backend::Nccl => Err(crate::Error::Unsupported(
            "this tessera was built without NCCL; rebuild with `cargo build --release --features nccl` \
             (needs NVIDIA GPUs with the CUDA driver and libnccl at run time)"
                .into(),
        )),
    }
}

/// This host's name (`?` if the system will not say).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "?".into()
    }
}

/// `timeout` from now; a timeout too long for the clock (`u64::MAX` seconds) means a century.
pub fn deadline_after(timeout: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Default time allowed for all ranks to arrive.
pub const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(60);

/// Joins the process group described by `info` over sockets (a group of one needs no sockets).
pub fn init(
    info: &RankInfo,
    timeout: Duration,
    liveness: Option<Duration>,
) -> Result<Box<dyn Collective>> {
    if info.world_size == 1 {
        return Ok(Box::new(SingleProcess));
    }
    Ok(Box::new(SocketGroup::connect_with(
        info, timeout, liveness,
    )?))
}

/// Helpers for tests that run several ranks as threads of one process over real sockets.
#[cfg(test)]
pub(crate) mod testutil {
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Collective, RankInfo, RankSource, SingleProcess, SocketGroup};

    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    pub fn info(rank: usize, world: usize, port: u16, single_host: bool) -> RankInfo {
        RankInfo {
            rank,
            world_size: world,
            local_rank: if single_host { rank } else { 0 },
            local_world_size: if single_host { world } else { 1 },
            master_addr: "127.0.0.1".into(),
            master_port: port,
            source: RankSource::Flags,
        }
    }

    /// Runs `f` on `world` ranks (threads) joined over real sockets; results indexed by rank.
    pub fn on_ranks<T: Send>(
        world: usize,
        single_host: bool,
        f: impl Fn(&SocketGroup) -> T + Sync,
    ) -> Vec<T> {
        spawn_group(world, single_host, |g| f(&g))
    }

    fn spawn_group<T: Send>(
        world: usize,
        single_host: bool,
        f: impl Fn(SocketGroup) -> T + Sync,
    ) -> Vec<T> {
        let port = free_port();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..world)
                .map(|r| {
                    let f = &f;
                    s.spawn(move || {
                        let info = info(r, world, port, single_host);
                        f(SocketGroup::connect(&info, Duration::from_secs(20)).unwrap())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Like [`on_ranks`] but hands out shareable collectives; world 1 uses [`SingleProcess`].
    pub fn on_group<T: Send>(world: usize, f: impl Fn(Arc<dyn Collective>) -> T + Sync) -> Vec<T> {
        if world == 1 {
            return vec![f(Arc::new(SingleProcess))];
        }
        spawn_group(world, true, |g| f(Arc::new(g)))
    }
}
