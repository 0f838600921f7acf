//! The process group: rank discovery, rendezvous, collectives, and the distributed versions of the
//! physics stack, the tiled denoiser and data fidelity (deepinv's `deepinv.distributed`).
//!
//! One code path serves 1 and N ranks: with one rank the collective is [`SingleProcess`] and every
//! communication is the identity.

pub mod collective;
pub mod env;
pub mod sockets;
pub mod store;
pub mod wire;

use std::time::Duration;

pub use collective::{Collective, ReduceOp, SingleProcess};
pub use env::{RankFlags, RankInfo, RankSource};
pub use sockets::SocketGroup;

use crate::error::Result;

/// Default time allowed for all ranks to arrive.
pub const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(60);

/// Joins the process group described by `info` over sockets (a group of one needs no sockets).
pub fn init(info: &RankInfo, timeout: Duration) -> Result<Box<dyn Collective>> {
    if info.world_size == 1 {
        return Ok(Box::new(SingleProcess));
    }
    Ok(Box::new(SocketGroup::connect(info, timeout)?))
}
