//! `tessera serve` with real processes and sockets: jobs stream Started / Iteration / Preview /
//! Finished, cancel stops every rank at one iteration, re-attach replays the history, tokens and
//! protocol versions are checked, and a killed backend leaves the client able to start a new one.

use std::process::Command;
use std::time::{Duration, Instant};

#[path = "support/serve_local.rs"]
mod serve_local;
#[path = "support/serve_tcp.rs"]
mod serve_tcp;
use serve_local::{EXE, is_end, local, quick, submit, until};
use serve_tcp::serve_tcp;

use tessera::preset::Preset;
use tessera::protocol::{
    BackendAddr, Client, ClientEvent, Event, InlineArray, LocalBackend, LocalOptions,
    PROTOCOL_VERSION, PreviewKind, Request, TrainPlan,
};

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
            run_dir,
            outputs,
            summary_json,
            ..
        } => {
            assert_eq!(
                outputs.last().unwrap(),
                std::path::Path::new("metrics.json")
            );
            assert!(
                outputs.iter().all(|p| run_dir.join(p).is_file()),
                "{outputs:?}"
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
    let Some(Event::Cancelled {
        iterations: n,
        summary_json: Some(summary_json),
        ..
    }) = events.last()
    else {
        panic!("expected Cancelled, got {:?}", events.last());
    };
    let s: serde_json::Value = serde_json::from_str(summary_json).unwrap();
    assert_eq!(s["stopped_early"], true);
    assert_eq!(s["iterations"].as_u64(), Some(*n as u64));
    let n = *n as u64;
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
            files: Vec::new(),
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
            files: Vec::new(),
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
    let (token_file, token) = serve_tcp::token_file(dir.path());
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
    // An older client and a newer one are told both versions before any message of theirs is read.
    for (other, client) in [
        (PROTOCOL_VERSION - 1, "from the past"),
        (PROTOCOL_VERSION + 1, "from the future"),
    ] {
        let hello = Request::Hello {
            protocol: other,
            client: client.into(),
            token: Some(token.clone()),
        };
        let err = Client::connect_with(&addr, hello).err().unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("version {other}"))
                && msg.contains(&format!("version {PROTOCOL_VERSION}")),
            "{msg}"
        );
    }
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
    let client = Client::connect(&addr, Some(token.clone())).unwrap();
    assert_eq!(client.welcome().protocol, PROTOCOL_VERSION);
    client.send(Request::Status).unwrap();
    until(&client, |e| {
        matches!(e, Event::Status { world_size: 1, .. })
    });
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `tessera serve` with `args` and HOME in `home`; its exit status and stderr once it stops (it
/// must stop by itself).
fn serve_refuses(home: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(EXE)
        .arg("serve")
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tcp_always_needs_a_strong_private_token_and_a_missing_one_is_created() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let weak = dir.path().join("weak");
    std::fs::write(&weak, "s3cret\n").unwrap();
    std::fs::set_permissions(&weak, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = serve_refuses(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            weak.to_str().unwrap(),
        ],
    );
    assert!(err.contains("too weak"), "{err}");
    let (open, _) = serve_tcp::token_file(dir.path());
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = serve_refuses(
        dir.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--token-file",
            open.to_str().unwrap(),
        ],
    );
    assert!(err.contains("too open"), "{err}");

    // Without --token-file, loopback too gets a token: a private one made under HOME.
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(EXE)
        .args(["serve", "--listen", "127.0.0.1:0", "--out"])
        .arg(home.path().join("out"))
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr: BackendAddr = line
        .split_whitespace()
        .find(|w| w.starts_with("tcp:"))
        .unwrap()
        .parse()
        .unwrap();
    let file = home.path().join(".config/tessera/serve-token");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let err = Client::connect(&addr, None).err().unwrap().to_string();
    assert!(err.contains("missing token"), "{err}");
    let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert!(Client::connect(&addr, Some(token)).is_ok());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn slow_and_silent_connections_neither_hold_the_door_nor_lock_a_client_out() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    let BackendAddr::Tcp(a) = &addr else {
        unreachable!()
    };
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", child.id()))
            .unwrap()
            .count()
    };
    let before = threads();
    // A hello announcing 60,000 bytes that trickles in, and 100 connections that say nothing.
    let mut slow = std::net::TcpStream::connect(a).unwrap();
    slow.write_all(&60_000u32.to_le_bytes()).unwrap();
    let silent: Vec<_> = (0..100)
        .map(|_| std::net::TcpStream::connect(a).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // No thread per unauthenticated connection.
    assert!(
        threads() <= before + 2,
        "{before} threads, then {}",
        threads()
    );
    // A legitimate client still gets in at once.
    let t = Instant::now();
    let client = Client::connect(&addr, Some(token.clone())).unwrap();
    assert_eq!(client.welcome().world_size, 1);
    eprintln!("connected past 100 silent connections in {:?}", t.elapsed());
    // The trickle is cut off at the handshake deadline (10 s in all), not kept alive by bytes.
    let t = Instant::now();
    let closed = loop {
        std::thread::sleep(Duration::from_secs(1));
        if slow.write_all(&[0]).is_err() || t.elapsed() > Duration::from_secs(30) {
            break t.elapsed();
        }
    };
    assert!(
        closed < Duration::from_secs(15),
        "still open after {closed:?}"
    );
    drop(silent);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Wrong tokens are answered later and later, on their own connections; the right token from the
/// same address is never held back (a lockout per address let anyone lock its holder out), and
/// strangers' refusals never reach the clients as `Log` events.
#[test]
fn repeated_wrong_tokens_are_slowed_down_without_locking_the_token_holder_out() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    let holder = Client::connect(&addr, Some(token.clone())).unwrap();
    let wrong = || {
        let t = Instant::now();
        let err = Client::connect(&addr, Some("x".repeat(token.len())))
            .err()
            .unwrap()
            .to_string();
        (err, t.elapsed())
    };
    for _ in 0..4 {
        assert!(wrong().0.contains("wrong token"));
    }
    // Past the free failures: the answer waits (a lower bound, so not a timing assertion).
    let (err, waited) = wrong();
    assert!(err.contains("wrong token"), "{err}");
    assert!(
        waited >= Duration::from_millis(900),
        "answered after {waited:?}"
    );
    // The holder's token gets in at once, however many wrong ones came from this address.
    for _ in 0..3 {
        assert!(Client::connect(&addr, Some(token.clone())).is_ok());
    }
    // Junk hellos galore: none of it reaches the client that holds the token.
    for _ in 0..50 {
        let _ = Client::connect_with(
            &addr,
            Request::Hello {
                protocol: PROTOCOL_VERSION + 7,
                client: "junk".into(),
                token: None,
            },
        );
    }
    holder.send(Request::Status).unwrap();
    let logs: Vec<String> = until(&holder, |e| matches!(e, Event::Status { .. }))
        .into_iter()
        .filter_map(|e| match e {
            Event::Log { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert!(
        logs.iter().all(|m| !m.contains("refused")),
        "strangers' refusals reached the client: {logs:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A flood of connections that never say hello does not push out clients that do.
#[test]
fn a_connection_flood_does_not_refuse_the_token_holder() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    let BackendAddr::Tcp(host_port) = addr.clone() else {
        panic!("{addr}")
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(s) = std::net::TcpStream::connect(&host_port) {
                    held.push_back(s);
                }
                if held.len() > 200 {
                    held.pop_front();
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let refused: Vec<String> = (0..20)
        .filter_map(|_| Client::connect(&addr, Some(token.clone())).err())
        .map(|e| e.to_string())
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.join().unwrap();
    assert!(refused.is_empty(), "{refused:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_regular_file_at_the_socket_path_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("important.txt");
    std::fs::write(&path, "data").unwrap();
    let err = serve_refuses(dir.path(), &["--socket", path.to_str().unwrap()]);
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
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

#[test]
fn measured_data_travels_inline_and_a_misfit_fails_only_its_job() {
    let (_backend, client, dir) = local(2);
    // Measurements simulated once in this process stand in for data from an instrument.
    let simulated = Preset::from_toml(&quick(2), "quick", &[]).unwrap();
    let sim_dir = dir.path().join("sim");
    tessera::job::run(&simulated, sim_dir.as_path(), &mut |_| {
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
            files: Vec::new(),
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
            files: Vec::new(),
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

/// The jobs' terminal events (Finished, Cancelled, Failed) for `job` among `events`.
fn terminal_events(events: &[Event], job: u64) -> usize {
    events
        .iter()
        .filter(|e| match e {
            Event::Finished { job: j, .. } | Event::Cancelled { job: j, .. } => *j == job,
            Event::Failed { job: j, .. } => *j == Some(job),
            _ => false,
        })
        .count()
}

#[test]
fn a_failure_on_rank_0_after_the_solve_fails_only_its_job_on_two_ranks() {
    let (_backend, client, dir) = local(2);
    submit(&client, quick(3000));
    until(&client, |e| matches!(e, Event::Iteration { .. }));
    // The run's staging folder turns into a file: rank 0 cannot write its outputs (as on a full
    // disk), after every collective of the job is done and rank 1 has finished it.
    let out = dir.path().join("out");
    let staging = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tessera-partial")
        })
        .expect("a staging folder while the job runs");
    std::fs::remove_dir_all(&staging).unwrap();
    std::fs::write(&staging, "in the way").unwrap();
    let events = until(&client, is_end);
    match events.last() {
        Some(Event::Failed {
            job: Some(1),
            error,
        }) => assert!(
            error.contains("reconstruction") && !error.contains("backend stops"),
            "{error}"
        ),
        other => panic!("expected job 1 to fail, got {other:?}"),
    }
    // The group is in step: the next job runs on both ranks.
    submit(&client, quick(3));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{:?}",
        events.last()
    );
    assert_eq!(iterations(&events), vec![1, 2, 3]);
}

#[test]
fn bad_tiling_and_missing_weights_fail_their_job_before_the_ranks() {
    let (_backend, client, dir) = local(2);
    let with = |overrides: &[&str]| {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let mut all = vec![
            "algorithm.iterations=2".to_string(),
            "image.size=[48, 40]".into(),
        ];
        all.extend(o);
        Preset::load("quick", &all)
            .unwrap()
            .preset
            .to_toml()
            .unwrap()
    };
    // A patch larger than the image, checked against the real image.
    submit(
        &client,
        with(&["tiling.patch_size=512", "tiling.overlap=8"]),
    );
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Failed { job: Some(1), .. })),
        "{:?}",
        events.last()
    );
    // A DRUNet whose weights file does not exist.
    let missing = dir.path().join("no-such-weights.pth");
    let mut drunet = Preset::from_toml(&with(&[]), "quick", &[]).unwrap();
    drunet.denoiser = Some(
        toml::from_str(&format!(
            "kind = \"drunet\"\nweights = \"{}\"",
            missing.display()
        ))
        .unwrap(),
    );
    submit(&client, drunet.to_toml().unwrap());
    let events = until(&client, is_end);
    match events.last() {
        Some(Event::Failed {
            job: Some(2),
            error,
        }) => assert!(error.contains("no-such-weights.pth"), "{error}"),
        other => panic!("expected job 2 to fail, got {other:?}"),
    }
    submit(&client, with(&[]));
    let events = until(&client, is_end);
    assert!(matches!(
        events.last(),
        Some(Event::Finished { job: 3, .. })
    ));
}

#[test]
fn every_run_gets_its_own_complete_folder_and_every_backend_its_own_log() {
    let (backend, client, dir) = local(1);
    let out = dir.path().join("out");
    let mut folders = Vec::new();
    for job in 1..=3 {
        submit(&client, quick(2));
        let events = until(&client, is_end);
        let Some(Event::Finished {
            run_dir, outputs, ..
        }) = events.last()
        else {
            panic!("job {job}: {:?}", events.last());
        };
        assert_eq!(run_dir.parent(), Some(out.as_path()));
        let name = run_dir.file_name().unwrap().to_string_lossy().into_owned();
        // YYYYMMDD-HHMMSS-quick-N
        let parts: Vec<&str> = name.splitn(3, '-').collect();
        assert_eq!(parts[0].len(), 8, "{name}");
        assert_eq!(parts[1].len(), 6, "{name}");
        assert!(parts[2].starts_with("quick-"), "{name}");
        assert_eq!(
            outputs.last().unwrap(),
            std::path::Path::new("metrics.json")
        );
        let metrics: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run_dir.join("metrics.json")).unwrap()).unwrap();
        assert!(
            metrics["preset"]
                .as_str()
                .unwrap()
                .contains("name = \"quick\"")
        );
        folders.push(run_dir.clone());
    }
    folders.sort();
    folders.dedup();
    assert_eq!(folders.len(), 3, "runs never share a folder");
    let hidden: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "staging folders left: {hidden:?}");
    // A second backend on the same folder keeps the first one's log.
    let first_log = backend.log_path().to_path_buf();
    let mut opts = LocalOptions::new(1, &out);
    opts.exe = Some(EXE.into());
    let (second, _c) = LocalBackend::spawn_with(opts).unwrap();
    assert_ne!(second.log_path(), first_log);
    assert!(first_log.exists() && second.log_path().exists());
    assert!(
        first_log
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("serve-")
    );
}

#[test]
fn a_stop_near_the_end_gives_one_terminal_event_and_the_log_agrees() {
    let (_backend, client, _dir) = local(2);
    for job in 1..=4u64 {
        let n = 12;
        submit(&client, quick(n));
        // Stop at the last iterations: sometimes before the last one, sometimes after.
        let stop_at = n - (job as usize % 3);
        let mut events = until(
            &client,
            |e| matches!(e, Event::Iteration { job: j, report, .. } if *j == job && report.iteration >= stop_at),
        );
        client.send(Request::Cancel { job }).unwrap();
        events.extend(until(&client, is_end));
        // Nothing else ends this job afterwards (the next Status answer comes after any; rank 0's
        // log lines travel through their own thread).
        std::thread::sleep(Duration::from_millis(200));
        client.send(Request::Status).unwrap();
        events.extend(until(&client, |e| matches!(e, Event::Status { .. })));
        assert_eq!(terminal_events(&events, job), 1, "{events:#?}");
        let logs: Vec<&String> = events
            .iter()
            .filter_map(|e| match e {
                Event::Log { message, .. } if message.starts_with(&format!("job {job} ")) => {
                    Some(message)
                }
                _ => None,
            })
            .collect();
        let said_cancelled = logs.iter().any(|m| m.contains("cancelled"));
        let said_finished = logs.iter().any(|m| m.contains("finished"));
        let ran = iterations(&events).into_iter().max().unwrap();
        match events.iter().rev().find(|e| is_end(e)) {
            Some(Event::Cancelled { iterations, .. }) => {
                assert!(*iterations < n && *iterations == ran, "{iterations} of {n}");
                assert!(said_cancelled && !said_finished, "{logs:?}");
            }
            Some(Event::Finished { .. }) => {
                assert_eq!(ran, n);
                assert!(said_finished && !said_cancelled, "{logs:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn headless_attach_streams_a_job_fails_with_it_and_fetches_its_outputs() {
    let (backend, _client, dir) = local(2);
    let address = backend.addr().to_string();
    let attach = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "quick",
            "--set",
            "algorithm.iterations=3",
            "--set",
            "image.size=[48, 40]",
            "--attach",
            &address,
        ];
        args.extend_from_slice(extra);
        Command::new(EXE)
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let o = attach(&["--fetch", "copy"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("reconstruction PSNR"), "{stdout}");
    let server_dir: std::path::PathBuf = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("outputs on the server in "))
        .expect("the server's folder is printed")
        .into();
    for f in ["metrics.json", "reconstruction.npy"] {
        assert_eq!(
            std::fs::read(dir.path().join("copy").join(f)).unwrap(),
            std::fs::read(server_dir.join(f)).unwrap(),
            "{f}"
        );
    }
    // A job that fails makes the command fail; the backend stays up for the next one.
    let o = attach(&[
        "--set",
        "tiling.patch_size=512",
        "--set",
        "tiling.overlap=8",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("failed") && e.contains("512"), "{e}");
    assert!(attach(&[]).status.success());
}

#[test]
fn headless_attach_over_tcp_needs_the_token_and_sends_local_images_along() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, _) = serve_tcp::token_file(dir.path());
    let server_out = dir.path().join("server");
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        server_out.to_str().unwrap(),
    ]);
    // A preset next to an image the server never sees (its path is removed before the run).
    let client_dir = dir.path().join("client");
    std::fs::create_dir(&client_dir).unwrap();
    let image = tessera::Tensor::from_fn(&[1, 1, 24, 20], |i| (i % 11) as f32 / 11.0);
    tessera::io::write_npy(&client_dir.join("photo.npy"), &image).unwrap();
    let text = tessera::preset::BUNDLED[0]
        .1
        .replace(
            "sample = \"natural\"\nsize = [128, 128]",
            "path = \"photo.npy\"",
        )
        .replace("iterations = 8", "iterations = 2");
    std::fs::write(client_dir.join("exp.toml"), text).unwrap();
    let address = addr.to_string();
    let attach = |token: &std::path::Path| {
        Command::new(EXE)
            .args(["run", "exp.toml", "--attach", &address, "--token-file"])
            .arg(token)
            .current_dir(&client_dir)
            .output()
            .unwrap()
    };
    let other = dir.path().join("other-token");
    std::fs::write(&other, "a different token, quite long\n").unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let o = attach(&other);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wrong token"));
    let o = attach(&token_file);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let runs: Vec<_> = std::fs::read_dir(&server_out).unwrap().collect();
    assert_eq!(runs.len(), 1);
    let run = runs[0].as_ref().unwrap().path();
    let truth = tessera::io::read_npy(&run.join("ground_truth.npy")).unwrap();
    assert_eq!(truth, image);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// An FWI preset whose true model is a file beside it on the client: attached over TCP to a
/// 2-rank server that runs elsewhere (another working directory), the file travels with the job,
/// the inverted model equals a local 1-rank run's bit for bit, and the server removes the job's
/// copy of the file when the job ends. A file that is missing fails on the client, by name.
#[test]
fn headless_attach_over_tcp_sends_an_fwi_presets_files_along() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, _) = serve_tcp::token_file(dir.path());
    let (server_cwd, server_tmp) = (dir.path().join("server"), dir.path().join("server-tmp"));
    std::fs::create_dir(&server_cwd).unwrap();
    std::fs::create_dir(&server_tmp).unwrap();
    let (mut child, addr) = serve_tcp::serve_tcp_with(
        &[
            "--ranks",
            "2",
            "--token-file",
            token_file.to_str().unwrap(),
            "--out",
            "runs",
        ],
        |c| {
            c.current_dir(&server_cwd).env("TMPDIR", &server_tmp);
        },
    );
    let client_dir = dir.path().join("client");
    std::fs::create_dir_all(client_dir.join("models")).unwrap();
    let (nz, nx) = (20, 40);
    let truth = tessera::samples::marmousi::marmousi_like(nz, nx, 3);
    let truth = tessera::Tensor::from_vec(&[nz, nx], truth).unwrap();
    tessera::io::write_npy(&client_dir.join("models/true.npy"), &truth).unwrap();
    let (_, bundled) = tessera::fwi::config::BUNDLED_FWI[0];
    let text = bundled.replace(
        "[model.truth]\nkind = \"marmousi\"\nnz = 80\nnx = 240\nseed = 7",
        "[model.truth]\nkind = \"file\"\npath = \"models/true.npy\"",
    );
    assert_ne!(text, bundled, "the bundled preset's [model.truth] changed");
    std::fs::write(client_dir.join("fwi_file.toml"), text).unwrap();
    let small = [
        "fwi.epochs=2",
        "acquisition.shots=3",
        "acquisition.receivers_per_shot=20",
        "wave.nt=150",
        "fwi.batch_size=3",
        "output.figures_every=0",
    ];
    let run = |extra: &[&str]| {
        let mut c = Command::new(EXE);
        c.args(["run", "fwi_file.toml", "-q"]).args(extra);
        for s in small {
            c.args(["--set", s]);
        }
        c.current_dir(&client_dir).output().unwrap()
    };
    let address = addr.to_string();
    let token = token_file.to_str().unwrap();
    let o = run(&[
        "--attach",
        &address,
        "--token-file",
        token,
        "--fetch",
        "fetched",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["--out", "local"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let model = |d: &str| std::fs::read(client_dir.join(d).join("inverted_model.npy")).unwrap();
    assert_eq!(
        model("fetched"),
        model("local"),
        "2 server ranks differ from 1 local"
    );
    let left: Vec<_> = std::fs::read_dir(&server_tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tessera-serve-"))
        .collect();
    assert!(left.is_empty(), "job folders left behind: {left:?}");
    std::fs::remove_file(client_dir.join("models/true.npy")).unwrap();
    let o = run(&["--attach", &address, "--token-file", token]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("models/true.npy"), "{e}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A bundled training preset with `--set` overrides, as the workbench sends it.
fn training_preset(name: &str, overrides: &[&str]) -> String {
    let set: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    match tessera::dsn::run::DsnPreset::load(name, &set).unwrap() {
        Some((p, _)) => p.to_toml().unwrap(),
        None => tessera::train::TrainPreset::load(name, &set)
            .unwrap()
            .0
            .to_toml()
            .unwrap(),
    }
}

const SMALL_DSN: &[&str] = &[
    "model.image_size=16",
    "train.epochs=2",
    "train.steps_per_epoch=3",
    "train.batch=4",
    "train.train_images=16",
    "train.test_images=8",
];

const SMALL_DNCNN: &[&str] = &[
    "image.size=[96,80]",
    "train.steps=5",
    "train.log_every=2",
    "train.crop=40",
    "train.batch=3",
];

/// `tessera train NAME --ranks 2` with the same overrides, in `dir/cli`; returns the folder.
fn cli_training(dir: &std::path::Path, name: &str, overrides: &[&str]) -> std::path::PathBuf {
    let mut c = Command::new(EXE);
    c.args(["train", name, "--ranks", "2", "--quiet", "--out", "cli"]);
    for o in overrides {
        c.args(["--set", o]);
    }
    let out = c.current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("cli")
}

fn finished_run(events: &[Event]) -> (std::path::PathBuf, Vec<std::path::PathBuf>, String) {
    match events.last() {
        Some(Event::Finished {
            run_dir,
            outputs,
            summary_json,
            ..
        }) => (run_dir.clone(), outputs.clone(), summary_json.clone()),
        other => panic!("expected Finished, got {other:?}"),
    }
}

#[test]
fn training_jobs_stream_their_progress_and_train_what_the_cli_trains() {
    let (_backend, client, dir) = local(2);
    // A Multi-DSN: TrainStarted, one DsnEpoch per epoch, then Finished with train.json.
    submit(&client, training_preset("dsn_shapes", SMALL_DSN));
    let events = until(&client, is_end);
    let Some(Event::TrainStarted {
        plan: TrainPlan::Dsn {
            domains, epochs, ..
        },
        world_size: 2,
        ..
    }) = events
        .iter()
        .find(|e| matches!(e, Event::TrainStarted { .. }))
    else {
        panic!("no TrainStarted for a Multi-DSN: {events:#?}");
    };
    assert_eq!((domains.len(), *epochs), (4, 2));
    let reported: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            Event::DsnEpoch { report, .. } => Some(report.epoch),
            _ => None,
        })
        .collect();
    assert_eq!(reported, vec![0, 1]);
    let (run_dir, outputs, json) = finished_run(&events);
    assert_eq!(outputs.last(), Some(&"train.json".into()), "{outputs:?}");
    let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Paths in train.json are the run folder's own, so they survive a move or a fetch.
    assert_eq!(summary["weights"], "dsn.safetensors");
    assert_eq!(summary["reconstructions"][1], "reconstructions/blurred.png");
    for o in &outputs {
        assert!(run_dir.join(o).is_file(), "{} missing", o.display());
    }
    assert_eq!(
        std::fs::read_to_string(run_dir.join("train.json")).unwrap(),
        json
    );
    let cli = cli_training(dir.path(), "dsn_shapes", SMALL_DSN);
    assert_eq!(
        std::fs::read(run_dir.join("dsn.safetensors")).unwrap(),
        std::fs::read(cli.join("dsn.safetensors")).unwrap(),
        "the backend trained other weights than `tessera train --ranks 2`"
    );

    // A denoiser: TrainStep at every log_every-th step and the last.
    submit(&client, training_preset("train-dncnn", SMALL_DNCNN));
    let events = until(&client, is_end);
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::TrainStarted {
                plan: TrainPlan::Denoiser { steps: 5, .. },
                ..
            }
        )),
        "{events:#?}"
    );
    let steps: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            Event::TrainStep { point, .. } => Some(point.step),
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec![0, 2, 4]);
    let (run_dir, _, json) = finished_run(&events);
    let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(summary["steps"], 5);
    assert_eq!(summary["stopped_early"], false);
    assert_eq!(summary["compute_secs"].as_array().unwrap().len(), 2);
    let second = dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let cli = cli_training(&second, "train-dncnn", SMALL_DNCNN);
    assert_eq!(
        std::fs::read(run_dir.join("dncnn_grey.safetensors")).unwrap(),
        std::fs::read(cli.join("dncnn_grey.safetensors")).unwrap(),
    );
}

#[test]
fn a_stopped_training_job_keeps_its_weights_and_the_backend_takes_the_next_job() {
    let (_backend, client, _dir) = local(2);
    let mut long = SMALL_DNCNN.to_vec();
    long.extend(["train.steps=100000", "train.log_every=1"]);
    submit(&client, training_preset("train-dncnn", &long));
    until(
        &client,
        |e| matches!(e, Event::TrainStep { point, .. } if point.step >= 2),
    );
    client.send(Request::Cancel { job: 1 }).unwrap();
    let events = until(&client, is_end);
    let Some(Event::Cancelled {
        iterations: n,
        run_dir: Some(run_dir),
        summary_json: Some(json),
        ..
    }) = events.last()
    else {
        panic!("expected Cancelled, got {:?}", events.last());
    };
    let summary: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(summary["stopped_early"], true);
    assert_eq!(summary["steps"].as_u64(), Some(*n as u64));
    assert!((3..100_000).contains(n), "{n}");
    assert!(run_dir.join("dncnn_grey.safetensors").is_file());
    // Both ranks stopped at the same step: otherwise the next job's collectives would not match.
    submit(&client, quick(2));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{:?}",
        events.last()
    );
}

/// The request the workbench's Resume sends.
fn resume(client: &Client, preset_toml: String, run_dir: &std::path::Path) {
    client
        .send(Request::Resume {
            preset_toml,
            run_dir: run_dir.to_path_buf(),
            preview_max_side: 32,
        })
        .unwrap();
}

fn failed_with(events: &[Event], words: &[&str]) {
    let Some(Event::Failed { error, .. }) = events.last() else {
        panic!("expected Failed, got {:?}", events.last());
    };
    for w in words {
        assert!(error.contains(w), "`{w}` not in: {error}");
    }
}

#[test]
fn a_stopped_training_job_resumes_in_a_new_folder_and_ends_where_an_unbroken_run_ends() {
    let (backend, client, dir) = local(2);
    let tiny: &[&str] = &[
        "image.size=[64,56]",
        "denoiser.depth=3",
        "denoiser.nf=8",
        "train.crop=24",
        "train.batch=2",
        "train.steps=300",
        "train.log_every=1",
        "train.checkpoint_every=0",
    ];
    let preset = training_preset("train-dncnn", tiny);
    submit(&client, preset.clone());
    until(
        &client,
        |e| matches!(e, Event::TrainStep { point, .. } if point.step >= 2),
    );
    client.send(Request::Cancel { job: 1 }).unwrap();
    let events = until(&client, is_end);
    let Some(Event::Cancelled {
        iterations: stopped_at,
        run_dir: Some(stopped),
        outputs,
        ..
    }) = events.last()
    else {
        panic!("expected Cancelled, got {:?}", events.last());
    };
    let stopped_at = *stopped_at;
    assert!((3..300).contains(&stopped_at), "{stopped_at}");
    assert!(
        outputs.contains(&"checkpoint/checkpoint.json".into()),
        "{outputs:?}"
    );
    let before: Vec<Vec<u8>> = outputs
        .iter()
        .map(|o| std::fs::read(stopped.join(o)).unwrap())
        .collect();

    // A preset that would compute other numbers is refused, naming the field.
    let other = training_preset(
        "train-dncnn",
        &[tiny, &["train.learning_rate=0.002"]].concat(),
    );
    resume(&client, other, stopped);
    failed_with(&until(&client, is_end), &["learning_rate"]);
    // Only denoiser training resumes; a folder without a checkpoint is named.
    resume(&client, quick(2), stopped);
    failed_with(
        &until(&client, is_end),
        &["only a denoiser training run resumes"],
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    resume(&client, preset.clone(), &empty);
    failed_with(
        &until(&client, is_end),
        &["no training checkpoint", "empty"],
    );

    resume(&client, preset, stopped);
    let events = until(&client, is_end);
    let (run_dir, _, json) = finished_run(&events);
    assert_ne!(&run_dir, stopped);
    // The curve so far comes first, then the new steps: every step once, in order.
    let steps: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            Event::TrainStep { point, .. } => Some(point.step),
            _ => None,
        })
        .collect();
    assert_eq!(steps, (0..300).collect::<Vec<_>>());
    let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(summary["resumed_from"].as_u64(), Some(stopped_at as u64));
    assert_eq!(summary["steps"], 300);
    // The stopped run's folder is as it was.
    for (o, bytes) in outputs.iter().zip(&before) {
        assert_eq!(
            &std::fs::read(stopped.join(o)).unwrap(),
            bytes,
            "{}",
            o.display()
        );
    }
    // Bit for bit the weights of a run that was never stopped.
    let cli = cli_training(dir.path(), "train-dncnn", tiny);
    assert_eq!(
        std::fs::read(run_dir.join("dncnn_grey.safetensors")).unwrap(),
        std::fs::read(cli.join("dncnn_grey.safetensors")).unwrap(),
        "the resumed run ended with other weights than an unbroken `tessera train --ranks 2`"
    );

    // The command line does the same (`train --attach --resume`), from the same stopped folder:
    // it was left as it was, so it resumes again.
    let address = backend.addr().to_string();
    let mut args = vec!["train", "train-dncnn", "--attach", &address, "--resume"];
    args.push(stopped.to_str().unwrap());
    for s in tiny {
        args.extend(["--set", s]);
    }
    let o = Command::new(EXE)
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let server_dir: std::path::PathBuf = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("outputs on the server in "))
        .expect("the server's folder is printed")
        .into();
    assert_eq!(
        std::fs::read(server_dir.join("dncnn_grey.safetensors")).unwrap(),
        std::fs::read(cli.join("dncnn_grey.safetensors")).unwrap(),
    );
}

#[test]
fn a_training_job_with_inline_data_is_refused_alone() {
    let (_backend, client, _dir) = local(1);
    client
        .send(Request::Submit {
            preset_toml: training_preset("train-dncnn", SMALL_DNCNN),
            inline: vec![InlineArray {
                name: "image".into(),
                shape: vec![1, 1, 4, 4],
                data: vec![0.0; 16],
            }],
            files: Vec::new(),
            preview_max_side: 32,
        })
        .unwrap();
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Failed { error, .. }) if error.contains("inline array `image`")),
        "{:?}",
        events.last()
    );
    submit(&client, quick(1));
    assert!(matches!(
        until(&client, is_end).last(),
        Some(Event::Finished { .. })
    ));
}

#[test]
fn headless_attach_trains_on_the_backend_and_fetches_the_run_with_its_sub_folders() {
    let (backend, _client, dir) = local(2);
    let address = backend.addr().to_string();
    let mut args = vec![
        "train",
        "dsn_shapes",
        "--attach",
        &address,
        "--fetch",
        "copy",
    ];
    for s in SMALL_DSN {
        args.extend(["--set", s]);
    }
    let o = Command::new(EXE)
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("4 domains on 2 rank(s), 2 epoch(s); target accuracy"),
        "{stdout}"
    );
    let server_dir: std::path::PathBuf = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("outputs on the server in "))
        .expect("the server's folder is printed")
        .into();
    for f in [
        "train.json",
        "dsn.safetensors",
        "reconstructions/noisy.png",
        "reconstructions/noisy.npy",
    ] {
        assert_eq!(
            std::fs::read(dir.path().join("copy").join(f)).unwrap(),
            std::fs::read(server_dir.join(f)).unwrap(),
            "{f}"
        );
    }
    // A denoiser too; a broken preset fails on the client, naming the field.
    let mut args = vec!["train", "train-dncnn", "--attach", &address];
    for s in SMALL_DNCNN {
        args.extend(["--set", s]);
    }
    let o = Command::new(EXE)
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("5 step(s); last loss"), "{stdout}");
    args.extend(["--set", "train.batch=0"]);
    let o = Command::new(EXE)
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("train.batch"), "{e}");
}

/// Plays a lying server on a Unix socket: every connection is welcomed, its job "finishes" with
/// `outputs`, and every `Fetch` is answered with the file's bytes from `files` (empty if unnamed).
fn lying_server(
    socket: &std::path::Path,
    runs: Vec<Vec<std::path::PathBuf>>,
) -> std::thread::JoinHandle<()> {
    use std::os::unix::net::UnixListener;
    use tessera::protocol::{MAX_FRAME_BYTES, frame};
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for (job, outputs) in (1..).zip(runs) {
            let (mut s, _) = listener.accept().unwrap();
            let send = |s: &mut std::os::unix::net::UnixStream, e: &Event| {
                frame::write_message(s, e, MAX_FRAME_BYTES).unwrap()
            };
            let _hello: Option<Request> = frame::read_message(&mut s, MAX_FRAME_BYTES).unwrap();
            send(
                &mut s,
                &Event::Welcome {
                    protocol: PROTOCOL_VERSION,
                    server: "a lying server".into(),
                    world_size: 1,
                    devices: Vec::new(),
                    backend: Default::default(),
                },
            );
            let _submit: Option<Request> = frame::read_message(&mut s, MAX_FRAME_BYTES).unwrap();
            send(&mut s, &Event::Accepted { job });
            send(
                &mut s,
                &Event::Finished {
                    job,
                    run_dir: "/srv/out/run-1".into(),
                    outputs,
                    summary_json: "{}".into(),
                },
            );
            // Answers fetches (with four bytes each) until the client hangs up.
            while let Ok(Some(Request::Fetch { job, file, .. })) =
                frame::read_message::<Request>(&mut s, MAX_FRAME_BYTES)
            {
                send(
                    &mut s,
                    &Event::File {
                        job,
                        file,
                        offset: 0,
                        total: 4,
                        data: b"evil".to_vec(),
                    },
                );
            }
        }
    })
}

#[test]
fn a_lying_server_cannot_truncate_or_create_files_outside_the_fetch_folder() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("liar.sock");
    let victim = dir.path().join("bashrc");
    std::fs::write(&victim, "the user's file\n").unwrap();
    // The fetch folder is two levels down, so `../../escaped_dir` would land in `dir`.
    let work = dir.path().join("a").join("b");
    std::fs::create_dir_all(&work).unwrap();
    let server = lying_server(
        &socket,
        vec![
            vec![victim.clone()],
            vec!["../../escaped_dir/created.txt".into()],
            vec!["x.npy".into(), "x.npy".into()],
            // An honest answer, fetched: the fake server itself works.
            vec!["reconstruction.npy".into(), "metrics.json".into()],
        ],
    );
    let attach = |fetch: &str| {
        Command::new(EXE)
            .args(["run", "quick", "--attach"])
            .arg(format!("unix:{}", socket.display()))
            .args(["--fetch", fetch])
            .current_dir(&work)
            .output()
            .unwrap()
    };
    for (fetch, bad) in [
        ("f1", victim.display().to_string()),
        ("f2", "../../escaped_dir/created.txt".into()),
        ("f3", "`x.npy` is named twice".into()),
    ] {
        let o = attach(fetch);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(e.contains(&bad) && e.contains("output files"), "{e}");
        assert!(!work.join(fetch).exists(), "{fetch} was created");
    }
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the user's file\n"
    );
    assert!(!dir.path().join("a").join("escaped_dir").exists());
    assert!(!dir.path().join("escaped_dir").exists());
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    let o = attach("f4");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(work.join("f4/metrics.json")).unwrap(),
        b"evil"
    );
    server.join().unwrap();
}

/// A preset's `[distributed] device` is honoured as `tessera run` honours it: a job with parts not
/// on the GPU fails at submission with the same listing (a build without the `cuda` feature says
/// how to rebuild), before any rank starts, and the backend takes the next (CPU) job.
#[test]
fn a_submitted_preset_on_the_gpu_is_refused_by_name_before_the_ranks() {
    let (_backend, client, _dir) = local(2);
    let on = |device: &str, l1: bool| {
        let mut preset = Preset::from_toml(&quick(2), "quick", &[]).unwrap();
        preset.distributed.device = Some(device.into());
        if l1 {
            preset.fidelity = tessera::fidelity::FidelityConfig::L1 {
                reduction: Default::default(),
            };
        }
        preset.to_toml().unwrap()
    };
    submit(&client, on("cuda", true));
    let events = until(&client, is_end);
    if cfg!(feature = "cuda") {
        failed_with(&events, &["--device cuda: not on the GPU yet: fidelity l1"]);
    } else {
        failed_with(&events, &["--features cuda"]);
    }
    assert!(
        !events.iter().any(|e| matches!(e, Event::Started { .. })),
        "{events:?}"
    );
    submit(&client, on("cpu", false));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{:?}",
        events.last()
    );
}

/// A backend's stderr in a file, printed when the test fails (the ranks' logs say why).
struct Stderr(std::path::PathBuf);

impl Stderr {
    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for Stderr {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the backend's stderr ---\n{}", self.text());
        }
    }
}

/// `tessera serve --listen 127.0.0.1:0 ARGS…` with `env` set, its stderr in `dir/NAME.stderr`.
fn serve_logged(
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> (std::process::Child, BackendAddr, Stderr) {
    let path = dir.join(format!("{name}.stderr"));
    let file = std::fs::File::create(&path).unwrap();
    let (child, addr) = serve_tcp::serve_tcp_with(args, |c| {
        c.stderr(file);
        for (k, v) in env {
            c.env(k, v);
        }
    });
    (child, addr, Stderr(path))
}

/// multiblur at a test's size (8 operators, 6 tiles, PnP), as tests/elastic.rs runs it.
fn small_multiblur(iterations: usize) -> String {
    Preset::load(
        "multiblur",
        &[
            "image.size=[48,64]".into(),
            format!("algorithm.iterations={iterations}"),
            "tiling.patch_size=24".into(),
            "tiling.overlap=4".into(),
            "output.save_measurements=true".into(),
        ],
    )
    .unwrap()
    .preset
    .to_toml()
    .unwrap()
}

/// Every output of a finished job but `metrics.json` (timings differ), by name.
fn job_outputs(end: &Event) -> (Vec<(String, Vec<u8>)>, serde_json::Value) {
    let Event::Finished {
        run_dir,
        outputs,
        summary_json,
        ..
    } = end
    else {
        panic!("expected Finished, got {end:?}");
    };
    let mut files: Vec<(String, Vec<u8>)> = outputs
        .iter()
        .filter(|p| p.as_os_str() != "metrics.json")
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read(run_dir.join(p)).unwrap(),
            )
        })
        .collect();
    files.sort();
    (files, serde_json::from_str(summary_json).unwrap())
}

const ELASTIC_ITERATIONS: usize = 6;

/// Runs the small multiblur job on a fresh backend (`ranks`, `--elastic` or not; `die_at` for
/// `TESSERA_TEST_DIE_AT`) and returns the backend (still serving), a client, the job's events.
fn elastic_backend_job(
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
    die_at: Option<String>,
) -> (std::process::Child, Client, Stderr, Vec<Event>, BackendAddr) {
    let (token_file, token) = serve_tcp::token_file(dir);
    let out = dir.join(format!("{name}-out"));
    let mut all = vec![
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--log",
        "info",
    ];
    all.extend_from_slice(args);
    let env: Vec<(&str, String)> = die_at
        .into_iter()
        .map(|d| ("TESSERA_TEST_DIE_AT", d))
        .collect();
    let (child, addr, stderr) = serve_logged(dir, name, &all, &env);
    let client = Client::connect(&addr, Some(token)).unwrap();
    submit(&client, small_multiblur(ELASTIC_ITERATIONS));
    let events = until(&client, is_end);
    (child, client, stderr, events, addr)
}

/// A seeded iteration in 2..=ELASTIC_ITERATIONS-1: work is redone after the loss and left.
fn seeded_iteration(seed: u64) -> usize {
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    2 + (mixed as usize) % (ELASTIC_ITERATIONS - 2)
}

#[test]
fn an_elastic_backend_survives_a_lost_rank_with_the_same_bytes_and_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    // The reference: the same job on an uninterrupted backend of one rank (N ranks give 1 rank's
    // bytes).
    let (mut plain, _c, _log, events, _) = elastic_backend_job(dir.path(), "reference", &[], None);
    let (want, _) = job_outputs(events.last().unwrap());
    plain.kill().unwrap();
    plain.wait().unwrap();
    assert!(
        want.len() >= 4,
        "{:?}",
        want.iter().map(|f| &f.0).collect::<Vec<_>>()
    );

    // With --respawn a fresh rank 3 joins the job in progress and the backend stays at 3 ranks.
    for (seed, point, respawn) in [
        (29, "start", false),
        (6, "denoiser", false),
        (13, "denoiser", true),
    ] {
        let k = seeded_iteration(seed);
        let die = format!("2:{k}:{point}");
        let name = format!("elastic-{point}-{respawn}");
        let mut args = vec!["--ranks", "3", "--elastic"];
        if respawn {
            args.push("--respawn");
        }
        let world = if respawn { 3 } else { 2 };
        let (mut child, client, stderr, events, addr) =
            elastic_backend_job(dir.path(), &name, &args, Some(die.clone()));
        let (got, summary) = job_outputs(events.last().unwrap());
        assert_eq!(
            want.iter().map(|f| &f.0).collect::<Vec<_>>(),
            got.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for ((name, a), (_, b)) in want.iter().zip(&got) {
            assert!(a == b, "{name} differs after losing rank 2 at {die}");
        }
        // The client saw the recovery as a log line, not a failure.
        let recovered = events.iter().any(|e| {
            matches!(e, Event::Log { message, .. }
                if message.contains("generation 1: lost rank(s) [2]"))
        });
        assert!(recovered, "no recovery line among {events:#?}");
        // And as the event the workbench redraws its ranks from: rank 2 lost, ranks 0 and 1 go
        // on (with the replacement as rank 2), owning every operator and tile, and the
        // iterations after it come from the new group.
        let at = events
            .iter()
            .position(|e| matches!(e, Event::Regrouped { .. }))
            .unwrap_or_else(|| panic!("no Regrouped among {events:#?}"));
        let Event::Regrouped {
            job: 1,
            generation: 1,
            lost_ranks,
            previous_ranks,
            resumed_from,
            operators,
            patch_map,
        } = &events[at]
        else {
            panic!("{:?}", events[at]);
        };
        assert_eq!(lost_ranks, &[2]);
        let mut previous = vec![Some(0), Some(1)];
        if respawn {
            previous.push(None);
        }
        assert_eq!(previous_ranks, &previous);
        assert_eq!(*resumed_from, k - 1);
        let owners: Vec<usize> = operators.iter().map(|o| o.rank).collect();
        assert_eq!(owners.iter().max(), Some(&(world - 1)), "{operators:?}");
        let tiles = &patch_map
            .as_ref()
            .expect("the small multiblur is tiled")
            .tiles;
        assert_eq!(
            tiles.iter().map(|t| t.rank).max(),
            Some(world - 1),
            "{tiles:?}"
        );
        let after: Vec<(usize, usize)> = events[at..]
            .iter()
            .filter_map(|e| match e {
                Event::Iteration { report, ranks, .. } => Some((report.iteration, ranks.len())),
                _ => None,
            })
            .collect();
        let redone: Vec<(usize, usize)> = (k..=ELASTIC_ITERATIONS).map(|i| (i, world)).collect();
        assert_eq!(after, redone);
        assert_eq!(summary["world_size"], world, "{summary}");
        let recoveries = summary["recoveries"].as_array().unwrap();
        assert_eq!(recoveries.len(), 1, "{recoveries:?}");
        assert_eq!(recoveries[0]["lost_slots"], serde_json::json!([2]));
        assert_eq!(recoveries[0]["resumed_from"], k - 1, "{summary}");
        let joined = if respawn { vec![3] } else { vec![] };
        assert_eq!(
            recoveries[0]
                .get("joined")
                .cloned()
                .unwrap_or_else(|| serde_json::json!([])),
            serde_json::json!(joined),
            "{summary}"
        );
        let text = stderr.text();
        assert!(
            text.contains("[launcher] rank 2 was killed by signal 9 (SIGKILL)"),
            "{text}"
        );
        assert_eq!(
            text.contains("[launcher] rank 3 started to replace rank 2 in generation 1"),
            respawn,
            "{text}"
        );

        // The backend serves on, on the ranks it has now (the replacement serves as any rank): a
        // later job completes there, and a new client is welcomed by the group as it is.
        job_2_runs_on(&client, world);
        let (_, token) = serve_tcp::token_file(dir.path());
        let other = Client::connect(&addr, Some(token)).unwrap();
        assert_eq!(other.welcome().world_size, world);
        assert_eq!(other.welcome().devices.len(), world);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// A second job, the small quick preset, completes on `world` ranks.
fn job_2_runs_on(client: &Client, world: usize) {
    submit(client, quick(3));
    let events = until(client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{:?}",
        events.last()
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Started { world_size, .. } if *world_size == world)),
        "{events:#?}"
    );
}

/// The rank process of `slot` among the children of the launcher `launcher` (its environment names
/// the slot).
fn rank_process(launcher: u32, slot: usize) -> u32 {
    let want = format!("TESSERA_ELASTIC_SLOT={slot}");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid …`: the parent follows the last parenthesis.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent != Some(launcher) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return pid;
        }
    }
    panic!("no rank process of slot {slot} under the launcher {launcher}");
}

#[test]
fn the_workbenchs_elastic_local_backend_replaces_a_killed_rank_and_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = LocalOptions::new(2, dir.path().join("out"));
    opts.exe = Some(EXE.into());
    opts.elastic = true;
    let (backend, client) = LocalBackend::spawn_with(opts).unwrap();
    submit(&client, small_multiblur(60));
    // A fault from outside, as a crash would be: once the job is under way, rank 1's process is
    // killed (no test hook).
    until(&client, |e| matches!(e, Event::Iteration { .. }));
    let victim = rank_process(backend.pid(), 1);
    let killed = Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let events = until(&client, is_end);
    let (_, summary) = job_outputs(events.last().unwrap());
    // Rank 1 lost, a replacement (slot 2) joined: the job ends on 2 ranks.
    assert_eq!(summary["world_size"], 2, "{summary}");
    let recoveries = summary["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    assert_eq!(recoveries[0]["lost_slots"], serde_json::json!([1]));
    assert_eq!(recoveries[0]["joined"], serde_json::json!([2]));
    let regrouped = events.iter().find_map(|e| match e {
        Event::Regrouped {
            lost_ranks,
            previous_ranks,
            ..
        } => Some((lost_ranks.clone(), previous_ranks.clone())),
        _ => None,
    });
    assert_eq!(regrouped, Some((vec![1], vec![Some(0), None])));
    // The backend serves on 2 ranks, the replacement among them.
    job_2_runs_on(&client, 2);
}

#[test]
fn an_elastic_backend_runs_what_is_not_elastic_plainly_and_stops_when_rank_0_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let out = dir.path().join("out");
    let (mut child, addr, stderr) = serve_logged(
        dir.path(),
        "rank0",
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--ranks",
            "2",
            "--elastic",
        ],
        &[("TESSERA_TEST_DIE_AT", "0:2".into())],
    );
    let client = Client::connect(&addr, Some(token)).unwrap();
    // A minimum of ranks is refused at submission, by name, before any rank computes: the
    // backend goes on down to one rank.
    let at_least_two = Preset::load("quick", &["distributed.min_ranks=2".to_string()])
        .unwrap()
        .preset
        .to_toml()
        .unwrap();
    submit(&client, at_least_two);
    let events = until(&client, is_end);
    match events.last() {
        Some(Event::Failed {
            job: Some(1),
            error,
        }) => assert!(
            error.contains("distributed.min_ranks") && error.contains("down to one rank"),
            "{error}"
        ),
        other => panic!("expected Failed, got {other:?}"),
    }
    // A training is not elastic on a backend yet: it runs as on a plain backend, and the log
    // says that a lost rank would end the backend.
    submit(&client, training_preset("train-dncnn", SMALL_DNCNN));
    let events = until(&client, is_end);
    assert!(
        matches!(events.last(), Some(Event::Finished { job: 2, .. })),
        "{events:#?}"
    );
    let warned = events.iter().any(|e| {
        matches!(e, Event::Log { message, .. }
            if message.contains("job 2 (") && message.contains("is not elastic"))
    });
    assert!(warned, "no warning among {events:#?}");
    // Rank 0 holds the clients: its loss stops the backend, and the launcher says why.
    submit(&client, quick(4));
    let deadline = Instant::now() + serve_local::WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match client.events().recv_timeout(left) {
            Ok(ClientEvent::Event(Event::Finished { .. })) => panic!("the job finished"),
            Ok(ClientEvent::Event(_)) => {}
            Ok(ClientEvent::Disconnected(_)) => break,
            Err(e) => panic!("no disconnection: {e}"),
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success());
    let text = stderr.text();
    assert!(
        text.contains("[launcher] rank 0 was killed by signal 9 (SIGKILL)")
            && text.contains("control socket"),
        "{text}"
    );
}
