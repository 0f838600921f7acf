//! The control path of `tessera serve`, measured: the bare per-iteration exchange between two
//! ranks, a status round trip over the Unix socket, the mean iteration and the overhead log of a
//! small job, and a 2048² preview's hand-off and downsampling. Prints the numbers quoted in
//! docs/WORKBENCH.md; asserts nothing about time.
//!
//! `cargo bench --bench serve`

use std::time::{Duration, Instant};

#[path = "../tests/support/serve_local.rs"]
mod serve_local;
use serve_local::{is_end, local, quick, submit, until};

use tessera::protocol::{Event, Request};

/// The bare cost of the per-iteration exchange (25 bytes per rank, all_gather) next to a one-float
/// all_reduce, between two ranks (threads) over Unix sockets, with no work in between.
fn exchange_micro_bench() {
    use tessera::dist::{Collective, RankInfo, RankSource, ReduceOp, SocketGroup};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let times: Vec<(f64, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|rank| {
                s.spawn(move || {
                    let info = RankInfo {
                        rank,
                        world_size: 2,
                        local_rank: rank,
                        local_world_size: 2,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        source: RankSource::Flags,
                    };
                    let g = SocketGroup::connect(&info, Duration::from_secs(30)).unwrap();
                    let n = 2000;
                    let t = Instant::now();
                    for _ in 0..n {
                        g.all_gather(&[0u8; 25]).unwrap();
                    }
                    let gather = t.elapsed().as_secs_f64() / n as f64;
                    let t = Instant::now();
                    for _ in 0..n {
                        g.all_reduce(&mut [0f32], ReduceOp::Max).unwrap();
                    }
                    (gather, t.elapsed().as_secs_f64() / n as f64)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "bare exchange between 2 ranks: all_gather of 25 B {:.1} µs, all_reduce max of 1 f32 {:.1} µs",
        times[0].0 * 1e6,
        times[0].1 * 1e6
    );
}

/// A status round trip to a 2-rank backend, the control overhead of a 200-iteration job, and what a
/// large preview costs.
fn main() {
    exchange_micro_bench();
    let (_backend, client, _dir) = local(2);
    let mut rtt = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        client.send(Request::Status).unwrap();
        until(&client, |e| matches!(e, Event::Status { .. }));
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
    }
    rtt.sort_by(f64::total_cmp);
    eprintln!(
        "status round trip over the Unix socket: median {:.0} µs, p90 {:.0} µs",
        rtt[100], rtt[180]
    );
    submit(&client, quick(200));
    let events = until(&client, is_end);
    for e in &events {
        if let Event::Log { message, .. } = e
            && message.contains("overhead")
        {
            eprintln!("{message}");
        }
    }
    let iter_secs: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Iteration { report, .. } => Some(
                report.times.gradient_secs + report.times.denoiser_secs + report.times.other_secs,
            ),
            _ => None,
        })
        .collect();
    let mean = iter_secs.iter().sum::<f64>() / iter_secs.len() as f64;
    eprintln!("mean iteration (quick preset, 48×40) {:.0} µs", mean * 1e6);
    // What a preview costs on a large image: the hand-off on rank 0 is a copy; the downsampling
    // runs on the preview thread.
    let big = tessera::Tensor::from_fn(&[1, 3, 2048, 2048], |i| (i % 255) as f32);
    let t = Instant::now();
    let mut copy = big.clone();
    let clone_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    copy.data_mut().copy_from_slice(big.data()); // the recycled-buffer hand-off
    let copy_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let p = tessera::protocol::PreviewImage::of_tensor(&copy, Default::default(), 512).unwrap();
    let down_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "2048×2048×3 preview: hand-off {:.1} ms (first, fresh allocation {:.1} ms), downsampling \
         to {}×{} {:.1} ms (preview thread)",
        copy_secs * 1e3,
        clone_secs * 1e3,
        p.width,
        p.height,
        down_secs * 1e3
    );
}
