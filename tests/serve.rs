//! `tessera serve` with real processes and sockets: jobs stream Started / Iteration / Preview /
//! Finished, cancel stops every rank at one iteration, re-attach replays the history, tokens and
//! protocol versions are checked, and a killed backend leaves the client able to start a new one.

use std::process::Command;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

#[path = "support/serve_tcp.rs"]
mod serve_tcp;
use serve_tcp::serve_tcp;

use tessera::preset::Preset;
use tessera::protocol::{
    BackendAddr, Client, ClientEvent, Event, InlineArray, LocalBackend, LocalOptions,
    PROTOCOL_VERSION, PreviewKind, Request,
};

const EXE: &str = env!("CARGO_BIN_EXE_tessera");
const WAIT: Duration = Duration::from_secs(120);

fn local(ranks: usize) -> (LocalBackend, Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = LocalOptions::new(ranks, dir.path().join("out"));
    opts.exe = Some(EXE.into());
    let (backend, client) = LocalBackend::spawn_with(opts).unwrap();
    (backend, client, dir)
}

/// The quick preset on a small image with `iterations`.
fn quick(iterations: usize) -> String {
    Preset::load(
        "quick",
        &[
            format!("algorithm.iterations={iterations}"),
            "image.size=[48, 40]".into(),
        ],
    )
    .unwrap()
    .preset
    .to_toml()
    .unwrap()
}

fn submit(client: &Client, preset_toml: String) {
    client
        .send(Request::Submit {
            preset_toml,
            inline: Vec::new(),
            preview_max_side: 32,
        })
        .unwrap();
}

/// Collects events until `stop` matches one (included); panics on disconnection or timeout.
fn until(client: &Client, mut stop: impl FnMut(&Event) -> bool) -> Vec<Event> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match client.events().recv_timeout(left) {
            Ok(ClientEvent::Event(e)) => {
                let done = stop(&e);
                seen.push(e);
                if done {
                    return seen;
                }
            }
            Ok(ClientEvent::Disconnected(why)) => panic!("disconnected: {why}; saw {seen:#?}"),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("no matching event in {WAIT:?}; saw {} events", seen.len())
            }
        }
    }
}

fn is_end(e: &Event) -> bool {
    matches!(e, Event::Finished { .. } | Event::Failed { .. })
}

fn iterations(events: &[Event]) -> Vec<usize> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Iteration { report, .. } => Some(report.iteration),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_on_two_ranks_streams_started_iterations_previews_and_finished() {
    let (_backend, client, _dir) = local(2);
    assert_eq!(client.welcome().world_size, 2);
    assert_eq!(client.welcome().devices.len(), 2);
    submit(&client, quick(5));
    let events = until(&client, is_end);
    assert!(
        matches!(events[0], Event::Accepted { job: 1 }),
        "{:?}",
        events[0]
    );
    let started = events
        .iter()
        .find_map(|e| match e {
            Event::Started {
                world_size,
                devices,
                operators,
                image_shape,
                iterations,
                ..
            } => Some((
                *world_size,
                devices.len(),
                operators.clone(),
                image_shape.clone(),
                *iterations,
            )),
            _ => None,
        })
        .expect("a Started event");
    assert_eq!((started.0, started.1, started.4), (2, 2, 5));
    assert_eq!(started.3, vec![1, 3, 48, 40]);
    assert_eq!(started.2.len(), 1);
    assert_eq!(started.2[0].rank, 0);
    assert_eq!(iterations(&events), vec![1, 2, 3, 4, 5]);
    for e in &events {
        if let Event::Iteration { ranks, .. } = e {
            let r: Vec<usize> = ranks.iter().map(|r| r.rank).collect();
            assert_eq!(r, vec![0, 1]);
            assert!(ranks.iter().all(|r| r.gradient_secs > 0.0));
        }
    }
    // The last iteration is always previewed; ground truth and the measurement once each.
    let previews: Vec<(usize, PreviewKind, u32, u32, u8)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Preview {
                iteration,
                what,
                image,
                ..
            } => Some((
                *iteration,
                what.clone(),
                image.width,
                image.height,
                image.channels,
            )),
            _ => None,
        })
        .collect();
    assert!(
        previews
            .iter()
            .any(|p| p.1 == PreviewKind::Reconstruction && p.0 == 5),
        "{previews:?}"
    );
    assert!(previews.iter().any(|p| p.1 == PreviewKind::GroundTruth));
    assert!(previews.iter().any(|p| p.1 == PreviewKind::Measurement(0)));
    // 48×40 fits 32 pixels per side with a factor of 2.
    assert!(
        previews.iter().all(|p| (p.2, p.3, p.4) == (20, 24, 3)),
        "{previews:?}"
    );
    match events.last().unwrap() {
        Event::Finished {
            outputs,
            summary_json,
            ..
        } => {
            assert!(
                outputs
                    .iter()
                    .any(|p| p.ends_with("metrics.json") && p.exists())
            );
            let s: serde_json::Value = serde_json::from_str(summary_json).unwrap();
            assert_eq!(s["iterations"], 5);
            assert_eq!(s["world_size"], 2);
            assert!(s["reconstruction"]["psnr_db"].as_f64().unwrap() > 15.0);
        }
        other => panic!("expected Finished, got {other:?}"),
    }
}

#[test]
fn cancel_stops_every_rank_at_one_iteration_and_the_group_takes_the_next_job() {
    let (_backend, client, _dir) = local(2);
    submit(&client, quick(100_000));
    until(
        &client,
        |e| matches!(e, Event::Iteration { report, .. } if report.iteration >= 3),
    );
    client.send(Request::Cancel { job: 1 }).unwrap();
    let events = until(&client, is_end);
    let Some(Event::Finished { summary_json, .. }) = events.last() else {
        panic!("expected Finished, got {:?}", events.last());
    };
    let s: serde_json::Value = serde_json::from_str(summary_json).unwrap();
    assert_eq!(s["stopped_early"], true);
    let n = s["iterations"].as_u64().unwrap();
    assert!((3..100_000).contains(&n), "{n}");
    // Both ranks ran exactly n iterations (their timings were gathered after the same number).
    assert_eq!(s["ranks"].as_array().unwrap().len(), 2);
    // Had a rank gone on iterating, the next job's collectives would not match and it would hang.
    submit(&client, quick(3));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{:?}",
        events.last()
    );
    assert_eq!(iterations(&events), vec![1, 2, 3]);
    // Cancelling what is not running is a warning, not a failure.
    client.send(Request::Cancel { job: 7 }).unwrap();
    until(
        &client,
        |e| matches!(e, Event::Log { message, .. } if message.contains("job 7")),
    );
}

#[test]
fn an_idle_backend_outlives_its_op_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = LocalOptions::new(2, dir.path().join("out"));
    opts.exe = Some(EXE.into());
    opts.extra_args = vec!["--op-timeout".into(), "1".into()];
    let (_backend, client) = LocalBackend::spawn_with(opts).unwrap();
    // Rank 1 waits for a job longer than the operation timeout: that is idleness, not a hung peer.
    std::thread::sleep(Duration::from_secs(3));
    submit(&client, quick(3));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 1, .. })),
        "{:?}",
        events.last()
    );
}

#[test]
fn attach_after_a_dropped_connection_replays_the_history_then_streams_on() {
    let (backend, client, _dir) = local(2);
    submit(&client, quick(60));
    until(
        &client,
        |e| matches!(e, Event::Iteration { report, .. } if report.iteration >= 2),
    );
    drop(client);
    let again = backend.connect().unwrap();
    again.send(Request::Attach { job: None }).unwrap();
    let events = until(&again, is_end);
    assert!(
        matches!(events[0], Event::Started { job: 1, .. }),
        "{:?}",
        events[0]
    );
    // Replayed and live iterations together: each exactly once, in order.
    assert_eq!(iterations(&events), (1..=60).collect::<Vec<_>>());
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Preview {
            what: PreviewKind::GroundTruth,
            ..
        }
    )));
    assert!(matches!(
        events.last(),
        Some(Event::Finished { job: 1, .. })
    ));
    // A finished job can be attached too: the whole story again, ending in Finished.
    let third = backend.connect().unwrap();
    third.send(Request::Attach { job: Some(1) }).unwrap();
    let replay = until(&third, is_end);
    assert_eq!(iterations(&replay).len(), 60);
    third.send(Request::Status).unwrap();
    let status = until(&third, |e| matches!(e, Event::Status { .. }));
    assert!(matches!(
        status.last(),
        Some(Event::Status { world_size: 2, running: None, done }) if done == &vec![1]
    ));
}

#[test]
fn inline_images_run_and_a_bad_submission_fails_without_stopping_the_backend() {
    let (_backend, client, _dir) = local(1);
    let mut preset = Preset::load("quick", &["algorithm.iterations=2".into()])
        .unwrap()
        .preset;
    preset.image.sample = None;
    preset.image.size = None;
    preset.image.inline = Some("photo".into());
    let with_inline = preset.to_toml().unwrap();
    let image = InlineArray {
        name: "photo".into(),
        shape: vec![1, 1, 24, 20],
        data: (0..480).map(|i| (i % 7) as f32 / 7.0).collect(),
    };
    // Missing array: refused before any rank runs, the backend goes on.
    client
        .send(Request::Submit {
            preset_toml: with_inline.clone(),
            inline: Vec::new(),
            preview_max_side: 64,
        })
        .unwrap();
    let events = until(&client, is_end);
    match events.last() {
        Some(Event::Failed {
            job: Some(1),
            error,
        }) => {
            assert!(error.contains("photo"), "{error}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    client
        .send(Request::Submit {
            preset_toml: with_inline,
            inline: vec![image],
            preview_max_side: 64,
        })
        .unwrap();
    let events = until(&client, is_end);
    assert!(
        events.iter().any(|e| matches!(e, Event::Started { image_shape, .. } if image_shape == &vec![1, 1, 24, 20])),
        "{events:#?}"
    );
    assert!(matches!(
        events.last(),
        Some(Event::Finished { job: 2, .. })
    ));
}

#[test]
fn tokens_and_protocol_versions_are_checked_at_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "correct horse\n").unwrap();
    let out = dir.path().join("out");
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = Client::connect(&addr, Some("wrong horse".into()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("wrong token"), "{err}");
    let err = Client::connect(&addr, None).err().unwrap();
    assert!(err.to_string().contains("missing token"), "{err}");
    let hello = Request::Hello {
        protocol: PROTOCOL_VERSION + 1,
        client: "from the future".into(),
        token: Some("correct horse".into()),
    };
    let err = Client::connect_with(&addr, hello).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("version {}", PROTOCOL_VERSION + 1))
            && msg.contains(&format!("version {PROTOCOL_VERSION}")),
        "{msg}"
    );
    // Garbage instead of a hello is refused; the server keeps serving.
    {
        use std::io::{Read, Write};
        let BackendAddr::Tcp(a) = &addr else {
            unreachable!()
        };
        let mut raw = std::net::TcpStream::connect(a).unwrap();
        raw.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        let mut answer = Vec::new();
        raw.read_to_end(&mut answer).unwrap();
        let refused: Event = tessera::protocol::frame::decode(&answer[4..]).unwrap();
        assert!(matches!(refused, Event::Refused { .. }), "{refused:?}");
    }
    let client = Client::connect(&addr, Some("correct horse".into())).unwrap();
    assert_eq!(client.welcome().protocol, PROTOCOL_VERSION);
    client.send(Request::Status).unwrap();
    until(&client, |e| {
        matches!(e, Event::Status { world_size: 1, .. })
    });
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_public_address_without_a_token_is_refused_with_a_reason() {
    let out = Command::new(EXE)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without --token-file"), "{err}");
}

#[test]
fn killing_the_backend_mid_run_disconnects_the_client_and_a_new_backend_starts() {
    let (backend, client, dir) = local(2);
    submit(&client, quick(100_000));
    until(&client, |e| matches!(e, Event::Iteration { .. }));
    // SAFETY: kill(2) on the child process the backend started.
    unsafe {
        libc::kill(backend.pid() as libc::pid_t, libc::SIGKILL);
    }
    let t = Instant::now();
    let why = loop {
        match client.events().recv_timeout(Duration::from_secs(20)) {
            Ok(ClientEvent::Event(_)) => continue,
            Ok(ClientEvent::Disconnected(why)) => break why,
            Err(e) => panic!("no Disconnected after the backend was killed: {e:?}"),
        }
    };
    eprintln!("disconnected {:?} after SIGKILL: {why}", t.elapsed());
    assert!(client.send(Request::Status).is_err() || client.try_recv().is_none());
    // The launcher's death took its ranks along (PR_SET_PDEATHSIG): nobody answers any more.
    std::thread::sleep(Duration::from_millis(200));
    assert!(Client::connect(backend.addr(), None).is_err());
    let deadline = Instant::now() + Duration::from_secs(10);
    while backend.exit_status().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(backend.exit_status().unwrap().contains("SIGKILL"));
    drop(backend);
    drop(dir);
    let (_fresh, client, _dir) = local(2);
    submit(&client, quick(2));
    let events = until(&client, is_end);
    assert!(matches!(events.last(), Some(Event::Finished { .. })));
}

/// Not a check: prints the numbers quoted in docs/WORKBENCH.md (`cargo test --release --test serve
/// measure -- --nocapture`).
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

#[test]
fn measure_round_trip_and_control_overhead() {
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

#[test]
fn measured_data_travels_inline_and_a_misfit_fails_only_its_job() {
    let (_backend, client, dir) = local(2);
    // Measurements simulated once in this process stand in for data from an instrument.
    let simulated = Preset::from_toml(&quick(2), "quick", &[]).unwrap();
    let sim_dir = dir.path().join("sim");
    tessera::job::run(&simulated, std::path::Path::new("."), &sim_dir, &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let y = tessera::io::read_npy(&sim_dir.join("measurement_0.npy")).unwrap();
    let mut measured = simulated.clone();
    measured.noise = None;
    measured.image = tessera::preset::ImageSource {
        shape: Some(vec![3, 48, 40]),
        ..Default::default()
    };
    measured.measurements = Some(tessera::preset::MeasurementSource {
        paths: Vec::new(),
        inline: vec!["y0".into()],
    });
    let array = |shape: Vec<usize>, data: Vec<f32>| InlineArray {
        name: "y0".into(),
        shape,
        data,
    };
    // A measurement of the wrong size is refused on rank 0 before the ranks start…
    client
        .send(Request::Submit {
            preset_toml: measured.to_toml().unwrap(),
            inline: vec![array(vec![1, 3, 40, 40], vec![0.0; 4800])],
            preview_max_side: 32,
        })
        .unwrap();
    let events = until(&client, is_end);
    match events.last() {
        Some(Event::Failed {
            job: Some(1),
            error,
        }) => assert!(
            error.contains("measurements.inline[0]") && error.contains("[1, 3, 48, 40]"),
            "{error}"
        ),
        other => panic!("expected Failed, got {other:?}"),
    }
    // …and the same 2-rank backend then reconstructs from the right one, with no ground truth.
    client
        .send(Request::Submit {
            preset_toml: measured.to_toml().unwrap(),
            inline: vec![array(y.shape().to_vec(), y.data().to_vec())],
            preview_max_side: 32,
        })
        .unwrap();
    let events = until(&client, is_end);
    let Some(Event::Finished {
        job: 2,
        summary_json,
        ..
    }) = events.last()
    else {
        panic!("expected job 2 to finish: {events:#?}");
    };
    let summary: serde_json::Value = serde_json::from_str(summary_json).unwrap();
    assert!(summary["reconstruction"].is_null(), "{summary}");
    assert_eq!(summary["world_size"], 2);
    let kinds: Vec<&PreviewKind> = events
        .iter()
        .filter_map(|e| match e {
            Event::Preview { what, .. } => Some(what),
            _ => None,
        })
        .collect();
    assert!(kinds.contains(&&PreviewKind::Measurement(0)), "{kinds:?}");
    assert!(!kinds.contains(&&PreviewKind::GroundTruth), "{kinds:?}");
}
