//! `tessera bench collectives`: all-reduce throughput of the socket transport, against the raw
//! throughput of one Unix socket measured in the same run.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::collective::{Collective, ReduceOp};
use super::env::{RankInfo, RankSource};
use super::sockets::SocketGroup;
use crate::error::{Error, Result};

/// Result of [`bench_all_reduce`].
#[derive(Debug, Clone)]
pub struct CollectiveBench {
    pub bytes: usize,
    pub ranks: usize,
    /// Best all-reduce time over the repeats.
    pub all_reduce_secs: f64,
    /// Best time to stream the same bytes one way through one Unix socket (the baseline).
    pub raw_socket_secs: f64,
}

impl CollectiveBench {
    /// Buffer bytes per second of all-reduce (the "algorithm bandwidth").
    pub fn all_reduce_gbps(&self) -> f64 {
        self.bytes as f64 / self.all_reduce_secs / 1e9
    }
    pub fn raw_gbps(&self) -> f64 {
        self.bytes as f64 / self.raw_socket_secs / 1e9
    }
}

impl std::fmt::Display for CollectiveBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "all-reduce (sum) of {} MiB over {} local ranks (Unix-socket ring):",
            self.bytes >> 20,
            self.ranks
        )?;
        writeln!(
            f,
            "  all-reduce        {:8.1} ms   {:6.2} GB/s effective",
            self.all_reduce_secs * 1e3,
            self.all_reduce_gbps()
        )?;
        writeln!(
            f,
            "  raw socket copy   {:8.1} ms   {:6.2} GB/s (baseline: one stream, same bytes)",
            self.raw_socket_secs * 1e3,
            self.raw_gbps()
        )?;
        write!(
            f,
            "  ratio all-reduce / raw copy: {:.2}",
            self.all_reduce_gbps() / self.raw_gbps()
        )
    }
}

/// Times an all-reduce of `bytes` over `ranks` ranks (threads of this process joined by real sockets).
pub fn bench_all_reduce(bytes: usize, ranks: usize, repeats: usize) -> Result<CollectiveBench> {
    if ranks < 2 {
        return Err(Error::config(
            "--ranks",
            "the collective benchmark needs at least 2 ranks",
        ));
    }
    let floats = bytes / 4;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Comm {
            context: "choosing a port".into(),
            source: e,
        })?
        .port();
    let times: Vec<Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                s.spawn(move || -> Result<f64> {
                    let info = RankInfo {
                        rank,
                        world_size: ranks,
                        local_rank: rank,
                        local_world_size: ranks,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        source: RankSource::Flags,
                    };
                    let g = SocketGroup::connect(&info, Duration::from_secs(30))?;
                    let mut buf = vec![rank as f32; floats];
                    g.all_reduce(&mut buf, ReduceOp::Sum)?; // warm-up
                    let mut best = f64::INFINITY;
                    for _ in 0..repeats.max(1) {
                        g.barrier()?;
                        let t = Instant::now();
                        g.all_reduce(&mut buf, ReduceOp::Sum)?;
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    Ok(best)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Internal("a rank thread panicked".into())))
            })
            .collect()
    });
    let mut all_reduce_secs: f64 = 0.0;
    for t in times {
        all_reduce_secs = all_reduce_secs.max(t?);
    }
    let raw_socket_secs = raw_copy_secs(bytes, repeats)?;
    Ok(CollectiveBench {
        bytes,
        ranks,
        all_reduce_secs,
        raw_socket_secs,
    })
}

fn raw_copy_secs(bytes: usize, repeats: usize) -> Result<f64> {
    let io = |e| Error::Comm {
        context: "raw socket baseline".into(),
        source: e,
    };
    let (mut a, mut b) = UnixStream::pair().map_err(io)?;
    let data = vec![1u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) + 1 {
        let t = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let writer = s.spawn(|| a.write_all(&data));
            let mut sink = vec![0u8; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let n = b.read(&mut sink[..left.min(1 << 20)]).map_err(io)?;
                if n == 0 {
                    return Err(Error::Internal("raw socket closed early".into()));
                }
                left -= n;
            }
            writer
                .join()
                .map_err(|_| Error::Internal("writer panicked".into()))?
                .map_err(io)
        })?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// One all-reduce size timed in a launched group ([`time_all_reduce`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AllReduceTime {
    pub bytes: usize,
    /// The slowest rank's best time over the repeats.
    pub secs: f64,
}

/// Times an f32 sum all-reduce of each of `bytes` over the group `comm` (ranks started by a
/// launcher, e.g. on separate hosts): per size a warm-up, then `repeats` timed calls each after a
/// barrier; the best per rank, the slowest rank's best reported (every rank gets the same list).
pub fn time_all_reduce(
    comm: &dyn Collective,
    bytes: &[usize],
    repeats: usize,
) -> Result<Vec<AllReduceTime>> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        let mut buf = vec![comm.rank() as f32; (b / 4).max(1)];
        comm.all_reduce(&mut buf, ReduceOp::Sum)?;
        let mut best = f64::INFINITY;
        for _ in 0..repeats.max(1) {
            comm.barrier()?;
            let t = Instant::now();
            comm.all_reduce(&mut buf, ReduceOp::Sum)?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let mut slowest = [best as f32];
        comm.all_reduce(&mut slowest, ReduceOp::Max)?;
        out.push(AllReduceTime {
            bytes: buf.len() * 4,
            secs: slowest[0] as f64,
        });
    }
    Ok(out)
}
