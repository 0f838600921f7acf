//! The workbench driven through egui_kittest: widgets found by their labels, clicked, and the app's
//! state and text checked. A channel backend stands in for `tessera serve` where the test plays the
//! server itself. Only the `gui` build (the default) has a workbench.
#![cfg(feature = "gui")]

use std::path::Path;
use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

#[path = "support/serve_tcp.rs"]
mod serve_tcp;
use serve_tcp::serve_tcp;

use tessera::gui::document::Training;
use tessera::gui::local::local_starter;
use tessera::gui::session::JobState;
use tessera::gui::{
    AppState, ChannelBackend, Incoming, Link, Starter, TestEnd, Workbench, WorkbenchOptions,
};
use tessera::protocol::{ComponentTimes, IterationReport};
use tessera::protocol::{
    Event, LocalOptions, OperatorInfo, PreviewImage, PreviewKind, RankIteration, Request,
};

/// A starter that hands out the given links one by one.
fn starter(links: Vec<Link>) -> Starter {
    let mut links = links.into_iter();
    Box::new(move |_| {
        links
            .next()
            .ok_or_else(|| tessera::Error::Unsupported("no more test backends".into()))
    })
}

fn workbench(links: Vec<Link>, state: AppState) -> Workbench {
    Workbench::new(WorkbenchOptions {
        starter: starter(links),
        start_backend: true,
        preset: None,
        state_path: None,
        state,
        output_root: None,
    })
}

/// Tall enough that the editor column shows every imaging panel without scrolling (kittest clicks
/// only what is on screen), the FWI presets' row in the Presets panel included.
fn harness(wb: Workbench) -> Harness<'static, Workbench> {
    Harness::builder()
        // Tall enough that quick's editor (the bundled DRUNet's and HQS's controls) fits beside
        // the distribution and tiling panels without scrolling.
        .with_size([1400.0, 1600.0])
        .build_ui_state(|ui, wb: &mut Workbench| wb.ui(ui), wb)
}

/// Steps frames until `done` holds (the app's work happens on other threads), at most 180 s.
fn step_until(h: &mut Harness<'_, Workbench>, what: &str, done: impl Fn(&Workbench) -> bool) {
    let start = Instant::now();
    while !done(h.state()) {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "timed out waiting for {what}"
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    h.step();
}

/// A workbench on a channel backend, once the backend is attached and the image loaded.
fn ready_workbench() -> (Harness<'static, Workbench>, TestEnd) {
    let (link, end) = ChannelBackend::pair("test backend");
    let mut h = harness(workbench(vec![link], AppState::default()));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    (h, end)
}

/// The next request other than `Status`.
fn next_request(end: &TestEnd) -> Request {
    loop {
        match end
            .requests
            .recv_timeout(Duration::from_secs(10))
            .expect("a request")
        {
            Request::Status => continue,
            r => return r,
        }
    }
}

/// Clicks Run, checks that the preset was submitted, and accepts it as job `job`.
fn submit(h: &mut Harness<'_, Workbench>, end: &TestEnd, job: u64) {
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    assert!(matches!(next_request(end), Request::Submit { .. }));
    send(end, Event::Accepted { job });
}

fn send(end: &TestEnd, e: Event) {
    end.events.send(Incoming::Event(e)).unwrap();
}

fn log_of(wb: &Workbench) -> Vec<String> {
    wb.session.log.iter().map(|l| l.text.clone()).collect()
}

/// Steps until the current job has ended (finished or failed).
fn until_ended(h: &mut Harness<'_, Workbench>, what: &str) {
    step_until(h, what, |wb| {
        matches!(
            wb.session.state(),
            JobState::Finished { .. } | JobState::Failed { .. }
        )
    });
}

/// Clicks Run and steps until that job ends.
fn run_to_end(h: &mut Harness<'_, Workbench>) {
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    // (A job refused by serve's precheck may already have failed.)
    assert!(
        h.state().session.state() != &JobState::Idle,
        "Run submitted a job: {:?} {:#?}",
        h.state().run_blocker(),
        log_of(h.state())
    );
    until_ended(h, "the run to end");
}

/// Clicks Run, checks that the job finished, and waits for its reconstruction on screen (the
/// preview may trail the Finished event by a frame or two).
fn run_to_a_reconstruction(h: &mut Harness<'_, Workbench>) {
    run_to_end(h);
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Finished { .. }),
        "{log:#?}"
    );
    step_until(h, "the reconstruction", |wb| {
        wb.shown_reconstruction().is_some()
    });
}

/// A workbench on `ranks` real local ranks with the quick preset picked and its sample loaded.
fn quick_on_local_backend(out: &Path, ranks: usize) -> Harness<'static, Workbench> {
    let mut h = with_local_backend(out, ranks);
    h.get_by_role_and_label(Role::Button, "quick").click();
    h.run_steps(2);
    step_until(&mut h, "the sample to load", |wb| !wb.data_loading());
    h
}

/// The workbench on a real `tessera serve` with `ranks` local ranks (the binary this test suite
/// builds), once the backend has said hello.
fn with_local_backend(out: &Path, ranks: usize) -> Harness<'static, Workbench> {
    let mut local = LocalOptions::new(ranks, out.to_path_buf());
    local.exe = Some(env!("CARGO_BIN_EXE_tessera").into());
    let mut h = harness(Workbench::new(WorkbenchOptions {
        starter: local_starter(local),
        start_backend: true,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: None,
    }));
    step_until(&mut h, "the backend's welcome", |wb| {
        wb.session.backend.is_some()
    });
    h
}

fn iteration(job: u64, k: usize, psnr: f64) -> Event {
    Event::Iteration {
        job,
        report: IterationReport {
            iteration: k,
            iterations: 3,
            psnr_db: Some(psnr),
            ssim: None,
            objective: Some(10.0 / k as f64),
            relative_change: 0.01,
            times: ComponentTimes::default(),
        },
        ranks: (0..2)
            .map(|rank| RankIteration {
                rank,
                gradient_secs: 0.01 * (rank + 1) as f64,
                denoiser_secs: 0.02,
                communication_secs: 0.001,
            })
            .collect(),
    }
}

fn preview(job: u64, iteration: usize, what: PreviewKind, side: u32) -> Event {
    preview_of(job, iteration, what, side, |x, y| {
        ((y * side + x) % 97) as f32 / 97.0
    })
}

#[test]
fn quick_preset_runs_and_shows_psnr_and_timing() {
    let (mut h, end) = ready_workbench();

    h.get_by_role_and_label(Role::Button, "multiblur").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.name, "multiblur");
    h.get_by_role_and_label(Role::Button, "quick").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.name, "quick");
    step_until(&mut h, "the sample to load", |wb| !wb.data_loading());

    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    let Request::Submit { preset_toml, .. } = next_request(&end) else {
        panic!("Run must submit the preset");
    };
    // What is sent is the preset the CLI would run.
    let sent = tessera::preset::Preset::from_toml(&preset_toml, "sent", &[]).unwrap();
    assert_eq!(
        sent,
        tessera::preset::Preset::load("quick", &[]).unwrap().preset
    );
    assert_eq!(h.state().session.state(), &JobState::Submitted);

    send(&end, Event::Accepted { job: 1 });
    send(
        &end,
        Event::Started {
            job: 1,
            name: "quick".into(),
            world_size: 2,
            devices: (0..2)
                .map(|rank| tessera::protocol::RankDevice {
                    rank,
                    host: "node".into(),
                    cpu_threads: 2,
                })
                .collect(),
            image_shape: vec![1, 3, 128, 128],
            operators: vec![OperatorInfo {
                name: "blur".into(),
                rank: 0,
            }],
            iterations: 3,
            patch_map: None,
        },
    );
    for k in 1..=3 {
        send(&end, iteration(1, k, 20.0 + k as f64));
        send(&end, preview(1, k, PreviewKind::Reconstruction, 64));
    }
    send(&end, preview(1, 0, PreviewKind::Measurement(0), 64));
    // A late preview of another job must not be drawn.
    send(&end, preview(7, 99, PreviewKind::Reconstruction, 32));
    send(
        &end,
        Event::Finished {
            job: 1,
            run_dir: "/tmp/out/quick".into(),
            outputs: vec!["reconstruction.png".into()],
            summary_json: "{}".into(),
        },
    );
    step_until(&mut h, "the job to finish", |wb| {
        wb.session.state() == &JobState::Finished { job: 1 }
            && wb.shown_reconstruction().map(|s| s.0) == Some(3)
    });
    assert_eq!(h.state().shown_reconstruction(), Some((3, [64, 64])));
    assert!(h.query_by_label("PSNR 23.00 dB").is_some(), "PSNR label");
    assert!(h.query_by_label("Timing per rank").is_some());
    assert!(
        h.query_by_label("no iterations yet").is_none(),
        "the timing plot replaces the placeholder"
    );
    assert!(
        h.query_by_label("s / iteration").is_some(),
        "the summary table"
    );
    assert_eq!(h.state().session.rank_totals().len(), 2);
}

/// An iteration's report with times from `world` ranks.
fn iteration_on(job: u64, k: usize, world: usize) -> Event {
    let Event::Iteration { report, .. } = iteration(job, k, 20.0 + k as f64) else {
        unreachable!()
    };
    Event::Iteration {
        job,
        report,
        ranks: (0..world)
            .map(|rank| RankIteration {
                rank,
                gradient_secs: 0.01,
                denoiser_secs: 0.02,
                communication_secs: 0.001,
            })
            .collect(),
    }
}

/// A strip of `owners.len()` tiles of 8×8, tile `i` owned by `owners[i]`.
fn tile_strip(owners: &[usize]) -> tessera::protocol::PatchMap {
    tessera::protocol::PatchMap {
        spatial: vec![8, 8 * owners.len()],
        tiles: owners
            .iter()
            .enumerate()
            .map(|(i, &rank)| tessera::protocol::PatchTile {
                window: vec![(0, 8), (8 * i as i64, 8)],
                region: vec![(0, 8), (8 * i, 8)],
                rank,
            })
            .collect(),
    }
}

/// An elastic job that loses a rank: the log says who was lost and where the run goes on, the
/// patch map's legend shows the lost rank's tiles greyed until the next iteration reassigns them,
/// and the timing plot keeps the lost rank's line (greyed) and its row, marked lost, beside the
/// survivors, which keep their numbers.
#[test]
fn a_lost_rank_is_greyed_then_reassigned_and_the_run_goes_on() {
    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "multiblur").click();
    h.run_steps(2);
    step_until(&mut h, "the sample to load", |wb| !wb.data_loading());
    submit(&mut h, &end, 1);
    send(
        &end,
        Event::Started {
            job: 1,
            name: "multiblur".into(),
            world_size: 3,
            devices: Vec::new(),
            image_shape: vec![1, 1, 8, 24],
            operators: vec![OperatorInfo {
                name: "blur".into(),
                rank: 1,
            }],
            iterations: 4,
            patch_map: Some(tile_strip(&[0, 1, 2, 0, 1, 2])),
        },
    );
    send(&end, iteration_on(1, 1, 3));
    send(&end, iteration_on(1, 2, 3));
    step_until(&mut h, "two iterations", |wb| wb.session.history.len() == 2);
    assert!(h.query_by_label("■ rank 1: 2").is_some());
    send(
        &end,
        Event::Regrouped {
            job: 1,
            generation: 1,
            lost_ranks: vec![1],
            previous_ranks: vec![Some(0), Some(2)],
            resumed_from: 1,
            operators: vec![OperatorInfo {
                name: "blur".into(),
                rank: 1,
            }],
            patch_map: Some(tile_strip(&[0, 1, 0, 1, 0, 1])),
        },
    );
    step_until(&mut h, "the regroup", |wb| {
        !wb.session.ranks.lost.is_empty()
    });
    assert!(
        log_of(h.state()).iter().any(|l| l
            .contains("job 1 lost rank(s) [1]: 2 rank(s) go on after iteration 1 (generation 1")),
        "{:?}",
        log_of(h.state())
    );
    // Greyed: the map on screen is still the one the lost rank left.
    assert!(
        h.query_by_label("□ rank 1: 2 (lost: reassigned next iteration)")
            .is_some()
    );
    assert!(h.query_by_label("□ rank 1 (lost)").is_some());
    assert!(
        h.query_by_label("1 (lost; the rest went on after iteration 1)")
            .is_some()
    );
    // Reassigned: the iteration redone by the two ranks left brings their map; the survivor that
    // was rank 2 keeps its number and its colour.
    send(&end, iteration_on(1, 2, 2));
    step_until(&mut h, "the redone iteration", |wb| {
        wb.session.history.len() == 3
    });
    assert!(h.query_by_label_contains("(lost: reassigned").is_none());
    assert!(h.query_by_label("■ rank 0: 3").is_some());
    assert!(h.query_by_label("■ rank 2: 3").is_some());
    assert_eq!(h.state().session.operators[0].rank, 2);
    let totals: Vec<(usize, usize)> = (h.state().session.rank_totals().iter())
        .map(|t| (t.rank, t.iterations))
        .collect();
    assert_eq!(totals, vec![(0, 3), (1, 2), (2, 3)]);
    assert!(h.state().session.is_busy(), "the run goes on");
}

#[test]
fn stop_cancels_the_running_job() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 4);
    step_until(&mut h, "the job to run", |wb| wb.current_job() == Some(4));
    h.get_by_role_and_label(Role::Button, "Stop").click();
    h.run_steps(2);
    assert_eq!(next_request(&end), Request::Cancel { job: 4 });
    assert_eq!(h.state().session.state(), &JobState::Stopping { job: 4 });
    send(&end, iteration(4, 1, 20.0));
    send(
        &end,
        Event::Cancelled {
            job: 4,
            iterations: 1,
            run_dir: None,
            outputs: vec![],
            summary_json: Some(r#"{"stopped_early": true}"#.into()),
        },
    );
    step_until(&mut h, "the job to stop", |wb| {
        wb.session.state() == &JobState::Cancelled { job: 4 }
    });
    assert!(h.query_by_label("job 4 stopped: iteration 1").is_some());
}

/// Stop pressed near the end of a job that still ran to its last iteration: the window shows the
/// one true final state (finished 40/40), not "stopped 38/40" while iterations go on.
#[test]
fn stop_near_the_end_shows_the_one_final_state() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    send(
        &end,
        Event::Started {
            job: 1,
            name: "quick".into(),
            world_size: 2,
            devices: vec![],
            image_shape: vec![1, 3, 128, 128],
            operators: vec![],
            iterations: 40,
            patch_map: None,
        },
    );
    for k in 1..=38 {
        send(&end, iteration(1, k, 20.0));
    }
    step_until(&mut h, "iteration 38", |wb| wb.session.history.len() == 38);
    h.get_by_role_and_label(Role::Button, "Stop").click();
    h.run_steps(2);
    assert_eq!(next_request(&end), Request::Cancel { job: 1 });
    assert!(
        h.query_by_label_contains("stopped: iteration 38/40")
            .is_none(),
        "not stopped until the backend says so"
    );
    assert!(
        h.query_by_label_contains("job 1 stopping: iteration 38/40")
            .is_some()
    );
    // The cancel came too late: the job ran to its end.
    for k in 39..=40 {
        send(&end, iteration(1, k, 20.0));
    }
    send(
        &end,
        Event::Finished {
            job: 1,
            run_dir: "/tmp/out/run".into(),
            outputs: vec![],
            summary_json: r#"{"stopped_early": false}"#.into(),
        },
    );
    step_until(&mut h, "the final state", |wb| !wb.session.is_busy());
    assert_eq!(h.state().session.state(), &JobState::Finished { job: 1 });
    assert!(
        h.query_by_label("job 1 finished: iteration 40/40")
            .is_some()
    );
    let log = log_of(h.state());
    assert!(
        !log.iter().any(|l| l.contains("stopped")),
        "the log agrees: {log:#?}"
    );
}

#[test]
fn a_preset_from_the_recent_list_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.toml");
    let text = tessera::preset::BUNDLED[1]
        .1
        .replace("name = \"multiblur\"", "name = \"mine\"")
        .replace("iterations = 8", "iterations = 7");
    std::fs::write(&path, text).unwrap();
    let mut state = AppState::default();
    state.remember(&path);
    let (link, _end) = ChannelBackend::pair("test backend");
    let mut h = harness(workbench(vec![link], state));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    h.get_by_role_and_label(Role::Button, "mine.toml").click();
    h.run_steps(2);
    let wb = h.state();
    assert_eq!(wb.doc.preset.name, "mine");
    assert_eq!(wb.doc.preset.algorithm.iterations(), 7);
    assert_eq!(wb.doc.preset.physics.len(), 8);
    assert!(wb.session.error.is_none());
}

#[test]
fn saved_presets_run_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saved.toml");
    let (mut h, _end) = ready_workbench();
    h.state_mut().save_preset_path(&path);
    let loaded = tessera::preset::Preset::load(&path.to_string_lossy(), &[]).unwrap();
    assert_eq!(loaded.preset, h.state().doc.preset);
    assert_eq!(
        h.state().app_state.recent.first().map(|p| p.as_path()),
        Some(path.as_path())
    );
}

#[test]
fn bad_files_show_errors_and_the_app_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let bad_preset = dir.path().join("broken.toml");
    std::fs::write(
        &bad_preset,
        "version = 1\nname = \"x\"\n[image]\nsample = \"natural\"\n",
    )
    .unwrap();
    let mut state = AppState::default();
    state.remember(&bad_preset);
    let (link, _end) = ChannelBackend::pair("test backend");
    let mut h = harness(workbench(vec![link], state));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    h.get_by_role_and_label(Role::Button, "broken.toml").click();
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("Error: could not open the preset")
            .is_some(),
        "the error is shown"
    );
    assert_eq!(
        h.state().doc.preset.name,
        "quick",
        "the edited preset is kept"
    );

    let bad_image = dir.path().join("noise.png");
    std::fs::write(&bad_image, b"this is not a png").unwrap();
    h.state_mut().open_data_path(Path::new(&bad_image));
    step_until(&mut h, "the image load to fail", |wb| {
        wb.data_error().is_some()
    });
    assert!(
        h.query_by_label_contains("Error: could not load the image")
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "Dismiss").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("Error:").is_none());
}

#[test]
fn a_dead_backend_is_reported_and_a_new_one_starts() {
    let (first, first_end) = ChannelBackend::pair("first backend");
    let (second, second_end) = ChannelBackend::pair("second backend");
    let mut h = harness(workbench(vec![first, second], AppState::default()));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    send(&first_end, Event::Accepted { job: 1 });
    drop(first_end);
    step_until(&mut h, "the disconnection", |wb| !wb.has_backend());
    assert!(matches!(h.state().session.state(), JobState::Failed { .. }));
    assert!(
        h.query_by_label_contains("Error: backend disconnected")
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "Start a new backend")
        .click();
    step_until(&mut h, "the new backend", Workbench::has_backend);
    assert_eq!(
        second_end
            .requests
            .recv_timeout(Duration::from_secs(5))
            .unwrap(),
        Request::Status
    );
}

/// The quick preset on a real `tessera serve` with 2 local ranks (the binary this test suite
/// builds), driven from the window: pick the preset, Run, wait for the result.
#[test]
fn quick_preset_on_a_real_two_rank_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = quick_on_local_backend(&dir.path().join("out"), 2);
    assert_eq!(h.state().session.backend.as_ref().unwrap().world_size, 2);
    run_to_a_reconstruction(&mut h);
    let wb = h.state();
    assert_eq!(wb.session.history.len(), 8, "quick runs 8 iterations");
    let psnr = wb
        .session
        .latest_psnr()
        .expect("PSNR against the generated ground truth");
    assert!(psnr > 20.0, "{psnr}");
    assert_eq!(wb.session.rank_totals().len(), 2, "timings of both ranks");
    assert!(h.query_by_label(&format!("PSNR {psnr:.2} dB")).is_some());
    assert!(
        h.query_by_label("s / iteration").is_some(),
        "the timing table"
    );
    assert!(
        h.query_by_label("no iterations yet").is_none(),
        "the timing plot"
    );
}

/// Frame time while 2048×2048 previews stream at 10 Hz (a measurement, not a check: run with
/// `cargo test --release --test gui -- --ignored --nocapture frame_time`). Frames are stepped at
/// ~60 Hz on this thread while another thread plays a backend sending one preview (and one
/// iteration) every 100 ms; each frame's CPU time is `Harness::step`.
#[test]
#[ignore = "a measurement; run it in release with --ignored --nocapture"]
fn frame_time_while_previews_stream() {
    const SIDE: u32 = 2048;
    const SECS: f64 = 6.0;
    let (link, end) = ChannelBackend::pair("bench backend");
    let mut h = harness(workbench(vec![link], AppState::default()));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    submit(&mut h, &end, 1);
    let image: Vec<f32> = (0..SIDE * SIDE)
        .map(|i| ((i % SIDE) as f32 / SIDE as f32 + (i / SIDE) as f32 / SIDE as f32) * 0.5)
        .collect();
    let feeder = std::thread::spawn(move || {
        let start = Instant::now();
        let mut k = 0;
        while start.elapsed().as_secs_f64() < SECS {
            k += 1;
            send(&end, iteration(1, k, 20.0 + 0.01 * k as f64));
            send(
                &end,
                Event::Preview {
                    job: 1,
                    iteration: k,
                    what: PreviewKind::Reconstruction,
                    image: PreviewImage {
                        width: SIDE,
                        height: SIDE,
                        channels: 1,
                        slice: None,
                        pixels: image.clone(),
                    },
                },
            );
            let next = Duration::from_millis(100 * k as u64);
            if let Some(wait) = next.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        (k, end)
    });
    let frame = Duration::from_micros(16_667);
    let start = Instant::now();
    let mut times = Vec::new();
    while start.elapsed().as_secs_f64() < SECS + 0.5 {
        let t = Instant::now();
        h.step();
        let dt = t.elapsed();
        times.push(dt.as_secs_f64() * 1e3);
        if let Some(rest) = frame.checked_sub(dt) {
            std::thread::sleep(rest);
        }
    }
    let (sent, _end) = feeder.join().unwrap();
    let shown = h.state().shown_reconstruction();
    times.sort_by(f64::total_cmp);
    let q = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "frame CPU time over {} frames while {sent} previews of {SIDE}x{SIDE} streamed at 10 Hz: \
         p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms; last preview shown: iteration {:?}",
        times.len(),
        q(0.5),
        q(0.95),
        q(1.0),
        shown.map(|s| s.0)
    );
    assert!(shown.is_some_and(|(k, size)| k > 1 && size == [1024, 1024]));
}

/// Another client of the server at `addr` submits the quick preset on a 48×40 image for
/// `iterations` iterations; returns its connection (the job's events arrive there).
fn submit_from_another_client(
    addr: &tessera::protocol::BackendAddr,
    token: &str,
    iterations: usize,
) -> tessera::protocol::Client {
    let other = tessera::protocol::Client::connect(addr, Some(token.to_string())).unwrap();
    let preset = tessera::preset::Preset::load(
        "quick",
        &[
            format!("algorithm.iterations={iterations}"),
            "image.size=[48, 40]".into(),
        ],
    )
    .unwrap()
    .preset
    .to_toml()
    .unwrap();
    other
        .send(Request::Submit {
            preset_toml: preset,
            inline: Vec::new(),
            files: Vec::new(),
            preview_max_side: 32,
        })
        .unwrap();
    other
}

#[test]
fn attach_dialog_joins_a_running_remote_job_and_refuses_a_wrong_token() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let out = dir.path().join("out");
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let address = addr.to_string();
    // Someone else (a CLI client) starts a long job; the workbench attaches while it runs.
    let other = submit_from_another_client(&addr, &token, 100_000);

    let wb = Workbench::new(WorkbenchOptions {
        starter: starter(Vec::new()),
        start_backend: false,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: Some(dir.path().join("here")),
    });
    let mut h = harness(wb);
    // The address is typed once; the dialog remembers it, the token it forgets.
    let attach = |h: &mut Harness<'_, Workbench>, address: Option<&str>, token: &str| {
        h.get_by_role_and_label(Role::Button, "Attach…").click();
        h.run_steps(2);
        let fields = [
            (Role::TextInput, "address", address),
            (Role::PasswordInput, "token", Some(token)),
        ];
        for (role, label, text) in fields.into_iter().filter_map(|(r, l, t)| Some((r, l, t?))) {
            h.get_by_role_and_label(role, label).focus();
            h.run_steps(1);
            h.get_by_role_and_label(role, label).type_text(text);
            h.run_steps(1);
        }
        h.get_by_role_and_label(Role::Button, "Connect").click();
        h.run_steps(2);
        step_until(h, "the attach attempt", |wb| !wb.backend_starting());
    };
    attach(&mut h, Some(&address), "wrong");
    assert!(!h.state().has_backend());
    assert!(
        h.state()
            .session
            .log
            .iter()
            .any(|l| l.text.contains("could not attach") && l.text.contains("wrong token")),
        "the refusal is shown: {:#?}",
        h.state()
            .session
            .log
            .iter()
            .map(|l| &l.text)
            .collect::<Vec<_>>()
    );
    assert_eq!(h.state().app_state.attach_address, address);
    attach(&mut h, None, &token);
    assert!(h.state().has_backend());
    step_until(&mut h, "the running job's iterations", |wb| {
        wb.session.history.len() >= 3
    });
    assert_eq!(h.state().session.backend.as_ref().unwrap().world_size, 1);
    // The token is not kept once the dialog is closed, nor persisted.
    assert!(
        !serde_json::to_string(&h.state().app_state)
            .unwrap()
            .contains(&token)
    );

    // An image opened from a file on this machine travels inline to the remote backend.
    other.send(Request::Cancel { job: 1 }).unwrap();
    step_until(&mut h, "the other job to stop", |wb| !wb.session.is_busy());
    let image = dir.path().join("local_only.npy");
    let x = tessera::Tensor::from_fn(&[1, 1, 24, 20], |i| (i % 7) as f32 / 7.0);
    tessera::io::write_npy(&image, &x).unwrap();
    h.state_mut().open_data_path(&image);
    h.run_steps(2);
    step_until(&mut h, "the image to load", |wb| !wb.data_loading());
    // Gone from disk: only the array the workbench holds can reach the backend.
    std::fs::remove_file(&image).unwrap();
    h.state_mut().run();
    until_ended(&mut h, "the inline job to end");
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Finished { job: 2 }),
        "{log:#?}"
    );
    assert_eq!(h.state().session.image_shape, vec![1, 1, 24, 20]);
    // The run's files are on the server's machine: the workbench copies them here, where the
    // history lists the run and its reconstruction is reopened from the copy.
    // (Job 1, stopped while this window was attached, was copied the same way.)
    let served = h.state().session.outputs[0].parent().unwrap().to_path_buf();
    let copy = dir.path().join("here").join(served.file_name().unwrap());
    step_until(&mut h, "the run's files to arrive", |wb| {
        wb.runs.this_window.contains(&copy)
    });
    assert_ne!(copy, served);
    for name in ["reconstruction.npy", "metrics.json"] {
        assert!(
            std::fs::read(copy.join(name)).unwrap() == std::fs::read(served.join(name)).unwrap(),
            "{name} differs from the server's"
        );
    }
    step_until(&mut h, "the copied run on screen", |wb| {
        wb.runs.shown.as_deref() == Some(copy.as_path())
    });

    // So does a loaded measurement file (the quick preset's circular blur measures 24×20 here).
    let y = dir.path().join("measured_here.npy");
    let measured = tessera::Tensor::from_fn(&[1, 1, 24, 20], |i| (i % 5) as f32 / 5.0);
    tessera::io::write_npy(&y, &measured).unwrap();
    h.state_mut().set_measurements_loaded(true);
    h.state_mut().open_measurement_path(0, &y);
    step_until(&mut h, "the measurement to be read", |wb| {
        !wb.measurements_loading()
    });
    std::fs::remove_file(&y).unwrap();
    h.state_mut().run();
    until_ended(&mut h, "the measured-data job to end");
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Finished { job: 3 }),
        "{log:#?}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(h.state().session.summary_json.as_deref().unwrap()).unwrap();
    assert_eq!(summary["measurements_loaded"], true, "{summary}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Measured data: the Physics panel switches to loaded measurements, the file is read and shown
/// before the run, the Data panel declares the image unknown, a misfit file fails its job only, and
/// a real 2-rank backend reconstructs from the right file (no PSNR: there is no ground truth).
#[test]
fn loaded_measurements_run_on_a_real_backend_without_a_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    // The quick preset's measurement, simulated once, stands in for an instrument's data.
    let quick = tessera::preset::Preset::load("quick", &[]).unwrap().preset;
    let sim = dir.path().join("sim");
    tessera::job::run(&quick, sim.as_path(), &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let good = sim.join("measurement_0.npy");
    let misfit = dir.path().join("misfit.npy");
    tessera::io::write_npy(&misfit, &tessera::Tensor::zeros(&[1, 3, 64, 64])).unwrap();

    let mut h = with_local_backend(&dir.path().join("out"), 2);
    step_until(&mut h, "the sample to load", |wb| !wb.data_loading());

    h.get_by_role_and_label(Role::RadioButton, "loaded").click();
    h.run_steps(2);
    assert!(
        h.state().doc.preset.noise.is_none(),
        "noise is for simulation"
    );
    assert!(h.query_by_label("no file chosen").is_some());
    let problem = h.state().preset_problem().unwrap_or_default().to_string();
    assert!(problem.contains("measurements.paths[0]"), "{problem}");

    // The image nobody has seen: its shape comes from the sample shown so far.
    h.get_by_role_and_label(Role::ComboBox, "sample").click();
    h.run_steps(2);
    h.get_by_label("none (measured data)").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.image.shape, Some(vec![3, 128, 128]));

    h.state_mut().open_measurement_path(0, &misfit);
    step_until(&mut h, "the misfit file", |wb| !wb.measurements_loading());
    assert!(h.query_by_label("misfit.npy [1, 3, 64, 64]").is_some());
    assert_eq!(h.state().preset_problem(), None);
    run_to_end(&mut h);
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Failed { .. }),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("measurements.paths[0]") && l.contains("[1, 3, 128, 128]")),
        "{log:#?}"
    );
    assert!(
        h.state().has_backend(),
        "a misfit fails its job, not the backend"
    );

    h.state_mut().open_measurement_path(0, &good);
    step_until(&mut h, "the measurement on screen", |wb| {
        wb.shown_measurement(0).is_some()
    });
    assert_eq!(h.state().shown_measurement(0), Some([128, 128]));
    run_to_a_reconstruction(&mut h);
    assert_eq!(h.state().session.history.len(), 8);
    assert_eq!(h.state().session.latest_psnr(), None, "no ground truth");
    assert!(h.query_by_label("PSNR —").is_some());
}

/// Loaded files stay with their operators when the stack is reordered or shortened, and going back
/// to simulated measurements brings the noise model back.
#[test]
fn measurement_files_follow_their_operators() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography2d")
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "blur").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.physics.len(), 2);
    let noise = h.state().doc.preset.noise.clone();
    assert!(noise.is_some());
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("sino.npy"), dir.path().join("blurred.npy"));
    h.state_mut().open_measurement_path(0, &a);
    h.state_mut().open_measurement_path(1, &b);
    h.run_steps(2);
    let paths = |h: &Harness<'_, Workbench>| {
        h.state()
            .doc
            .preset
            .measurements
            .as_ref()
            .unwrap()
            .paths
            .clone()
    };
    assert_eq!(paths(&h), vec![a.clone(), b.clone()]);
    assert!(h.state().doc.preset.noise.is_none());
    // The missing files are reported where they are listed.
    step_until(&mut h, "the reads to fail", |wb| !wb.measurements_loading());
    assert!(h.query_by_label_contains("sino.npy: ").is_some());

    h.get_all_by_role_and_label(Role::Button, "down")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    assert_eq!(paths(&h), vec![b.clone(), a.clone()], "moved down with #0");
    h.get_all_by_role_and_label(Role::Button, "remove")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    assert_eq!(paths(&h), vec![a], "removed with its operator");
    h.get_by_role_and_label(Role::Button, "blur").click();
    h.run_steps(2);
    assert_eq!(paths(&h).len(), 2, "an added operator gets an empty slot");

    h.get_by_role_and_label(Role::RadioButton, "simulated")
        .click();
    h.run_steps(2);
    assert!(h.state().doc.preset.measurements.is_none());
    assert_eq!(h.state().doc.preset.noise, noise);
}

/// Sets the tiled denoiser's patch size (as an edit in the panel would) and checks again.
fn set_patch(h: &mut Harness<'_, Workbench>, patch: usize) {
    let wb = h.state_mut();
    wb.doc
        .preset
        .tiling
        .as_mut()
        .expect("a tiled preset")
        .patch_size = tessera::tiling::Extent::Uniform(patch);
    wb.edited();
    h.run_steps(2);
}

/// Typing "128" into the patch-size field applies 128 on Enter, never 1 or 12 on the way; a plan
/// of absurd size (patch 1: one tile per pixel of the 1024×683 image) is refused with its count
/// before anything is drawn, and Run is disabled with the reason.
#[test]
fn typed_patch_sizes_apply_on_enter_and_absurd_plans_are_refused() {
    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "multiblur").click();
    h.run_steps(2);
    step_until(&mut h, "the image", |wb| {
        !wb.data_loading() && wb.shown_data_size().is_some()
    });
    let patch = |h: &Harness<'_, Workbench>| {
        h.state()
            .doc
            .preset
            .tiling
            .as_ref()
            .unwrap()
            .patch_size
            .clone()
    };
    let before = patch(&h);
    h.get_by_role_and_label(Role::SpinButton, "patch size (px)")
        .focus();
    h.run_steps(2);
    for digit in ["1", "2", "8"] {
        h.get_by_role_and_label(Role::SpinButton, "patch size (px)")
            .type_text(digit);
        h.run_steps(1);
        assert_eq!(patch(&h), before, "no value applied while typing");
    }
    h.key_press(egui::Key::Enter);
    h.run_steps(2);
    assert_eq!(
        patch(&h),
        tessera::tiling::Extent::Uniform(128),
        "{:#?}",
        log_of(h.state())
    );

    set_patch(&mut h, 1);
    let problem = h.state().preset_problem().unwrap_or_default().to_string();
    assert!(
        problem.contains("tiling.patch_size") && problem.contains("699392 tiles"),
        "{problem}"
    );
    assert!(
        h.query_all_by_label_contains("699392 tiles").count() >= 1,
        "shown next to the field"
    );
    let blocker = h.state().run_blocker().unwrap_or_default();
    assert!(blocker.contains("699392 tiles"), "{blocker}");
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    assert!(
        !end.requests
            .try_iter()
            .any(|r| matches!(r, Request::Submit { .. })),
        "a refused plan is not sent"
    );
    // Patch 9 with overlap 32 is a plan (8,664 tiles): drawn within bounds, with a word of advice.
    set_patch(&mut h, 9);
    assert_eq!(h.state().preset_problem(), None);
    assert!(h.query_all_by_label_contains("pixels it keeps").count() >= 1);
    h.run_steps(3);
    // 8,664 tiles in view: not drawn one by one (a bounded number of shapes), and said so.
    assert!(
        h.query_by_label_contains("8664 tiles in view, too many to draw")
            .is_some()
    );
}

/// "even tiles" in the tiling panel: the preset says so, the patch map keeps the tile count and its
/// windows shrink to divide the image (quick's 128 px in patches of 40, halo 8: 4 tiles of 32).
#[test]
fn even_tiles_from_the_panel_keep_the_count_and_shrink_the_windows() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::CheckBox, "tiled denoiser")
        .click();
    h.run_steps(2);
    set_patch(&mut h, 40);
    let before = h.state_mut().patch_map().unwrap().unwrap();
    h.get_by_role_and_label(Role::CheckBox, "even tiles")
        .click();
    h.run_steps(2);
    assert!(h.state().doc.preset.tiling.as_ref().unwrap().even);
    assert_eq!(h.state().run_blocker(), None);
    let after = h.state_mut().patch_map().unwrap().unwrap();
    let area = |m: &tessera::protocol::PatchMap| -> usize {
        m.tiles
            .iter()
            .map(|t| t.window.iter().map(|s| s.1).product::<usize>())
            .sum()
    };
    assert_eq!(
        after.tiles.len(),
        before.tiles.len(),
        "the tile count is kept"
    );
    assert!(
        area(&after) < area(&before),
        "{} vs {}",
        area(&after),
        area(&before)
    );
}

/// An FWI preset whose true model is a file beside it: to a local backend it goes with the file's
/// absolute path and no files; to a remote one (which cannot read this machine's files) the file
/// travels with the job, under the name the sent preset uses for it.
#[test]
fn an_fwi_presets_files_travel_with_the_job_to_a_remote_backend() {
    let (mut h, end) = ready_workbench();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("models")).unwrap();
    let truth = tessera::Tensor::from_fn(&[20, 40], |i| 1500.0 + (i % 40) as f32);
    let npy = dir.path().join("models/true.npy");
    tessera::io::write_npy(&npy, &truth).unwrap();
    let (_, text) = tessera::fwi::BUNDLED_FWI[0];
    let text = text.replace(
        "[model.truth]\nkind = \"marmousi\"\nnz = 80\nnx = 240\nseed = 7",
        "[model.truth]\nkind = \"file\"\npath = \"models/true.npy\"",
    );
    let path = dir.path().join("fwi_file.toml");
    std::fs::write(&path, text).unwrap();
    h.state_mut().open_preset_path(&path);
    h.run_steps(2);
    assert_eq!(h.state().doc.name(), "fwi_marmousi");

    h.state_mut().run();
    let Request::Submit {
        preset_toml, files, ..
    } = next_request(&end)
    else {
        panic!("a submission")
    };
    assert!(files.is_empty(), "a local backend reads the file itself");
    assert!(
        preset_toml.contains(&npy.display().to_string()),
        "{preset_toml}"
    );

    h.state_mut().doc.remote = true;
    h.state_mut().run();
    let Request::Submit {
        preset_toml, files, ..
    } = next_request(&end)
    else {
        panic!("a submission")
    };
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].name, "0-true.npy");
    assert_eq!(files[0].bytes, std::fs::read(&npy).unwrap());
    assert!(
        preset_toml.contains("path = \"0-true.npy\""),
        "{preset_toml}"
    );
}

/// An edit that cannot run on the real image (patch larger than it) or names a file that is not
/// there (DRUNet weights) disables Run with the reason, and nothing is sent.
#[test]
fn an_invalid_edit_disables_run_with_the_reason() {
    let (mut h, end) = ready_workbench();
    assert_eq!(h.state().run_blocker(), None);
    h.get_by_role_and_label(Role::CheckBox, "tiled denoiser")
        .click();
    h.run_steps(2);
    set_patch(&mut h, 512);
    let problem = h.state().preset_problem().unwrap_or_default().to_string();
    assert!(
        problem.contains("tiling.patch_size") && problem.contains("larger than the image"),
        "{problem}"
    );
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    // The reason is where the user looks: Run's tooltip (and under the field).
    h.get_by_role_and_label(Role::Button, "Run").hover();
    h.run_steps(60);
    assert!(
        h.query_all_by_label_contains("larger than the image")
            .count()
            >= 3
    );
    set_patch(&mut h, 64);
    assert_eq!(h.state().run_blocker(), None);

    let missing = std::path::PathBuf::from("/nonexistent/drunet_color.pth");
    let wb = h.state_mut();
    wb.doc.preset.denoiser = Some(tessera::denoise::DenoiserConfig::Drunet(
        tessera::nn::DrunetConfig {
            weights: Some(missing.clone()),
            ..Default::default()
        },
    ));
    wb.edited();
    h.run_steps(2);
    let blocker = h.state().run_blocker().unwrap_or_default();
    assert!(
        blocker.contains("denoiser.weights") && blocker.contains("/nonexistent/drunet_color.pth"),
        "{blocker}"
    );
    assert!(h.query_all_by_label_contains("no such file").count() >= 1);
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    assert!(
        !end.requests
            .try_iter()
            .any(|r| matches!(r, Request::Submit { .. })),
        "nothing was sent"
    );
}

/// The workbench's DnCNN runs the bundled weights and says so; "random" and "bundled" are names,
/// not files that Run would wait for.
#[test]
fn a_dncnn_without_weights_file_shows_the_bundled_weights_and_named_weights_do_not_block_run() {
    let (mut h, _end) = ready_workbench();
    let wb = h.state_mut();
    wb.doc.preset.denoiser = Some(tessera::denoise::DenoiserConfig::Dncnn(
        tessera::nn::DncnnConfig::bundled(3),
    ));
    wb.edited();
    h.run_steps(2);
    assert_eq!(h.state().run_blocker(), None);
    assert!(
        h.query_all_by_label_contains("bundled weights dncnn_colour")
            .count()
            >= 1
    );
    for name in ["random", "bundled"] {
        let wb = h.state_mut();
        wb.doc.preset.denoiser = Some(tessera::denoise::DenoiserConfig::Dncnn(
            tessera::nn::DncnnConfig {
                weights: Some(name.into()),
                ..tessera::nn::DncnnConfig::bundled(3)
            },
        ));
        wb.edited();
        h.run_steps(2);
        assert_eq!(h.state().run_blocker(), None, "weights = {name}");
    }
}

/// Opening another preset after a run clears the run's images, curves and patch map.
#[test]
fn switching_preset_clears_the_previous_run() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    send(&end, iteration(1, 1, 20.0));
    send(&end, preview(1, 1, PreviewKind::Reconstruction, 64));
    send(
        &end,
        Event::Finished {
            job: 1,
            run_dir: "/tmp/out/run".into(),
            outputs: vec![],
            summary_json: "{}".into(),
        },
    );
    step_until(&mut h, "the run on screen", |wb| {
        wb.shown_reconstruction().is_some() && !wb.session.is_busy()
    });
    h.get_by_role_and_label(Role::Button, "tomography2d")
        .click();
    h.run_steps(2);
    let wb = h.state();
    assert_eq!(wb.shown_reconstruction(), None);
    assert!(wb.session.history.is_empty() && wb.session.patch_map.is_none());
    assert!(h.query_by_label("PSNR —").is_some());
}

/// After a run of a volume on a local backend, the slice slider moves every pane — the
/// reconstruction and the ground truth too, not only the image before the run.
#[test]
fn volumes_are_sliced_on_every_pane_after_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("20250101-120000-tomography3d-1");
    std::fs::create_dir_all(&run).unwrap();
    // value = depth index (reconstruction) and 10 × depth index (ground truth).
    let volume =
        |scale: f32| tessera::Tensor::from_fn(&[1, 1, 8, 6, 5], move |i| (i / 30) as f32 * scale);
    tessera::io::write_npy(&run.join("reconstruction.npy"), &volume(1.0)).unwrap();
    tessera::io::write_npy(&run.join("ground_truth.npy"), &volume(10.0)).unwrap();
    std::fs::write(
        run.join("metrics.json"),
        r#"{"name": "tomography3d", "iterations": 1}"#,
    )
    .unwrap();

    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    h.run_steps(2);
    step_until(&mut h, "the volume", |wb| !wb.data_loading());
    submit(&mut h, &end, 1);
    send(
        &end,
        Event::Finished {
            job: 1,
            run_dir: run.clone(),
            outputs: vec!["reconstruction.npy".into(), "metrics.json".into()],
            summary_json: "{}".into(),
        },
    );
    let value = |wb: &Workbench, slot| wb.viewer().shown.get(&slot).map(|s| s.raw.pixels[0]);
    use tessera::gui::preview::Slot;
    step_until(&mut h, "the run's volumes on screen", |wb| {
        let r = value(wb, Slot::Reconstruction);
        r.is_some() && value(wb, Slot::GroundTruth) == r.map(|v| v * 10.0)
    });
    h.state_mut().set_slice(0, 2);
    step_until(&mut h, "slice 2 on both panes", |wb| {
        value(wb, Slot::Reconstruction) == Some(2.0) && value(wb, Slot::GroundTruth) == Some(20.0)
    });
    // Page Down: the previous slice, on every pane.
    h.key_press(egui::Key::PageDown);
    step_until(&mut h, "slice 1", |wb| {
        value(wb, Slot::Reconstruction) == Some(1.0) && value(wb, Slot::GroundTruth) == Some(10.0)
    });
    // Three orthogonal cuts of the reconstruction through one point; a click in the rows cut
    // moves the depth cut to the clicked depth.
    h.get_by_role_and_label(Role::CheckBox, "orthogonal views")
        .click();
    h.run_steps(2);
    let size = |wb: &Workbench, a| {
        wb.viewer()
            .shown
            .get(&Slot::Ortho(a))
            .map(|s| s.texture.size())
    };
    step_until(&mut h, "the orthogonal views", |wb| {
        size(wb, 0) == Some([5, 6]) && size(wb, 1) == Some([5, 8]) && size(wb, 2) == Some([6, 8])
    });
    assert_eq!(
        value(h.state(), Slot::Ortho(0)),
        Some(1.0),
        "the depth cut at slice 1"
    );
    h.state_mut().ortho_click(1, egui::pos2(0.5, 6.5 / 8.0));
    step_until(&mut h, "the depth cut to move", |wb| {
        value(wb, Slot::Ortho(0)) == Some(6.0)
    });
    // The run is in the history, marked as this window's.
    step_until(&mut h, "the history", |wb| {
        wb.runs.runs.iter().any(|r| r.folder == run)
    });
}

/// A failed attach (nothing listens there) leaves the working backend in place.
#[test]
fn a_failed_attach_keeps_the_working_backend() {
    let (mut h, _end) = ready_workbench();
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    h.state_mut()
        .attach_remote(&format!("127.0.0.1:{port}"), Some("token".into()));
    h.run_steps(1);
    step_until(&mut h, "the attach attempt", |wb| !wb.backend_starting());
    assert!(h.state().has_backend(), "the local backend is kept");
    assert_eq!(h.state().backend_label(), "test backend");
    let log = log_of(h.state());
    assert!(
        log.iter()
            .any(|l| l.contains("could not attach") && l.contains("still using test backend")),
        "{log:#?}"
    );
    assert_eq!(h.state().run_blocker(), None);
}

/// A dropped file for `egui::RawInput::dropped_files`.
#[derive(Debug)]
struct Dropped(std::path::PathBuf);

impl egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

/// Files are chosen by typing their path (the system file dialog may not exist) or by dropping
/// them onto the window.
#[test]
fn files_can_be_typed_or_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let typed = dir.path().join("typed.toml");
    let dropped = dir.path().join("dropped.toml");
    for (path, name) in [(&typed, "typed"), (&dropped, "dropped")] {
        let text = tessera::preset::BUNDLED[0]
            .1
            .replace("name = \"quick\"", &format!("name = \"{name}\""));
        std::fs::write(path, text).unwrap();
    }
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "Open preset…")
        .click();
    h.run_steps(2);
    assert!(h.state().dialog_open(), "the path window is open");
    h.run_steps(10);
    let field = h.get_by_role_and_label(Role::TextInput, "path");
    field.focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "path")
        .type_text(&format!("{}", dir.path().join("nosuch.toml").display()));
    h.run_steps(1);
    h.get_by_role_and_label(Role::Button, "Open").click();
    h.run_steps(2);
    assert!(h.query_by_label_contains("no such file").is_some());
    assert_eq!(h.state().doc.preset.name, "quick");
    h.state_mut()
        .open_dialog(tessera::gui::dialogs::DialogKind::OpenPreset);
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "path").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "path")
        .type_text(&typed.display().to_string());
    h.run_steps(1);
    h.get_by_role_and_label(Role::Button, "Open").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.name, "typed");

    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(dropped.clone())));
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.name, "dropped");
}

/// Writes a complete run folder (reconstruction and ground truth filled with constants).
/// A workbench on a channel backend whose output root (the runs it lists) is `root`.
fn with_runs_under(root: &Path) -> (Harness<'static, Workbench>, TestEnd) {
    let (link, end) = ChannelBackend::pair("test backend");
    let h = harness(Workbench::new(WorkbenchOptions {
        starter: starter(vec![link]),
        start_backend: true,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: Some(root.to_path_buf()),
    }));
    (h, end)
}

/// A run folder as a run leaves it: the `.npy` outputs, then `metrics.json` (written last, as runs do).
fn write_run_folder(
    root: &Path,
    name: &str,
    outputs: &[(&str, tessera::Tensor)],
    metrics: serde_json::Value,
) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, tensor) in outputs {
        tessera::io::write_npy(&dir.join(file), tensor).unwrap();
    }
    std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
    dir
}

/// An imaging run whose reconstruction and ground truth are flat at `recon` and `truth`.
fn run_folder(root: &Path, name: &str, recon: f32, truth: f32) -> std::path::PathBuf {
    let flat = |v| tessera::Tensor::full(&[1, 1, 16, 12], v);
    write_run_folder(
        root,
        name,
        &[
            ("reconstruction.npy", flat(recon)),
            ("ground_truth.npy", flat(truth)),
        ],
        serde_json::json!({"name": name, "iterations": 5, "stopped_early": false,
            "reconstruction": {"psnr_db": 30.5}}),
    )
}

/// The run history lists the complete runs under the output root (not a staging folder), reopens
/// one into the panes, compares another beside it and as a difference, and a pane exports as PNG.
#[test]
fn runs_are_listed_reopened_compared_and_exported() {
    use tessera::gui::preview::Slot;
    let root = tempfile::tempdir().unwrap();
    let a = run_folder(root.path(), "20250101-120000-quick-1", 0.75, 0.5);
    std::thread::sleep(Duration::from_millis(20));
    let b = run_folder(root.path(), "20250101-120500-quick-2", 0.25, 0.5);
    run_folder(root.path(), ".20250101-121000-quick-3.staging", 0.0, 0.0);
    let (mut h, _end) = with_runs_under(root.path());
    step_until(&mut h, "the runs", |wb| wb.runs.runs.len() == 2);
    let listed: Vec<_> = h
        .state()
        .runs
        .runs
        .iter()
        .map(|r| r.folder.clone())
        .collect();
    assert_eq!(
        listed,
        vec![b.clone(), a.clone()],
        "newest first, staging skipped"
    );
    h.get_by_role_and_label(Role::Button, "Runs").click();
    h.run_steps(2);
    assert!(h.query_all_by_label("30.50 dB").count() == 2);

    // Reopen the older run, compare with the newer: difference = 0.75 − 0.25.
    h.get_all_by_role_and_label(Role::Button, "reopen")
        .nth(1)
        .unwrap()
        .click();
    h.run_steps(2);
    let value = |wb: &Workbench, slot| wb.viewer().shown.get(&slot).map(|s| s.raw.pixels[0]);
    step_until(&mut h, "the reopened run", |wb| {
        value(wb, Slot::Reconstruction) == Some(0.75) && value(wb, Slot::GroundTruth) == Some(0.5)
    });
    h.get_all_by_role_and_label(Role::Button, "compare")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    step_until(&mut h, "the comparison", |wb| {
        value(wb, Slot::Compare) == Some(0.25) && value(wb, Slot::Difference) == Some(0.5)
    });
    assert!(
        h.query_all_by_label_contains("Compared: 20250101-120500-quick-2")
            .next()
            .is_some()
    );
    // The values under the mouse read from the panes' float images.
    let (at, v) = h
        .state()
        .viewer()
        .value_at(Slot::Difference, egui::pos2(0.5, 0.5))
        .unwrap();
    assert_eq!((at, v), ((6, 8), vec![0.5]));

    let png = root.path().join("recon.png");
    h.state_mut().export_png(Slot::Reconstruction, &png);
    let img = image::open(&png).unwrap();
    assert_eq!((img.width(), img.height()), (12, 16));
}

/// A typed value outside a field's range is brought into it, and the field says so.
#[test]
fn clamped_values_are_shown() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::SpinButton, "noise sigma")
        .focus();
    h.run_steps(2);
    h.get_by_role_and_label(Role::SpinButton, "noise sigma")
        .type_text("-0.5");
    h.key_press(egui::Key::Enter);
    h.run_steps(2);
    assert_eq!(
        h.state().doc.preset.noise,
        Some(tessera::physics::NoiseConfig::Gaussian { sigma: 0.0 })
    );
    assert!(h.query_by_label("-0.5 is out of range: set to 0").is_some());
}

/// Ctrl+R runs, Escape stops.
#[test]
fn shortcuts_run_and_stop() {
    let (mut h, end) = ready_workbench();
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::R);
    h.run_steps(2);
    assert!(matches!(next_request(&end), Request::Submit { .. }));
    send(&end, Event::Accepted { job: 3 });
    step_until(&mut h, "the job to run", |wb| wb.current_job() == Some(3));
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    assert_eq!(next_request(&end), Request::Cancel { job: 3 });
}

/// "spatial (exact)" chosen in the tiling panel on a real 2-rank backend: one block per rank in the
/// patch map, Run blocked with the reason while the denoiser cannot run on blocks (TV), and the
/// decomposed run's reconstruction equals the same preset run untiled.
#[test]
fn spatial_tiling_from_the_panel_equals_the_untiled_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = quick_on_local_backend(&dir.path().join("out"), 2);
    let wb = h.state_mut();
    wb.doc.preset.denoiser = Some(tessera::denoise::DenoiserConfig::Tv(Default::default()));
    wb.edited();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, "tiled denoiser")
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::ComboBox, "strategy").click();
    h.run_steps(2);
    h.get_by_label("spatial (exact)").click();
    h.run_steps(2);
    let tiling = h.state().doc.preset.tiling.clone().unwrap();
    assert_eq!(tiling.kind, tessera::tiling::TilingKind::Spatial);
    let blocker = h.state().run_blocker().unwrap_or_default();
    assert!(
        blocker.contains("native"),
        "TV cannot run on blocks: {blocker}"
    );

    let wb = h.state_mut();
    wb.doc.preset.denoiser = Some(tessera::denoise::DenoiserConfig::Drunet(
        tessera::nn::DrunetConfig {
            in_channels: 3,
            out_channels: 3,
            nc: vec![4, 6, 8, 10],
            nb: 1,
            ..Default::default()
        },
    ));
    let tessera::optim::AlgorithmConfig::Pnp(pnp) = &mut wb.doc.preset.algorithm else {
        panic!("quick is a PnP preset")
    };
    pnp.iterations = 2;
    wb.edited();
    h.run_steps(2);
    assert_eq!(h.state().run_blocker(), None);
    let map = h.state_mut().patch_map().unwrap().unwrap();
    assert_eq!(map.tiles_per_rank(), vec![1, 1], "one block per rank");
    assert!(h.query_by_label_contains("2 tiles:").is_some());

    let reconstruction = |h: &Harness<'_, Workbench>| {
        let path = h
            .state()
            .session
            .outputs
            .iter()
            .find(|p| p.ends_with("reconstruction.npy"))
            .cloned()
            .expect("a reconstruction among the outputs");
        tessera::io::read_array(&path).unwrap()
    };
    run_to_a_reconstruction(&mut h);
    let spatial = reconstruction(&h);

    h.get_by_role_and_label(Role::CheckBox, "tiled denoiser")
        .click();
    h.run_steps(2);
    assert!(h.state().doc.preset.tiling.is_none());
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    step_until(
        &mut h,
        "the untiled run",
        |wb| matches!(wb.session.state(), JobState::Finished { job } if *job == 2),
    );
    let untiled = reconstruction(&h);
    let err = spatial.max_abs_diff(&untiled);
    assert!(err <= 1e-5, "spatial vs untiled: {err}");
}

/// A tiny FWI preset on a real 2-rank `tessera serve`, from the window: the bundled button opens
/// the wave-inversion editor (its fields, the acquisition over an empty model), then a small
/// variant runs and its epochs stream in: the loss and model error of every epoch, which rank
/// modelled which shot, the inverted model, the true model and the gradient on screen, and the
/// imaging views hidden.
#[test]
fn a_tiny_fwi_preset_runs_on_a_real_two_rank_backend() {
    use tessera::gui::preview::Slot;
    let dir = tempfile::tempdir().unwrap();
    let mut h = with_local_backend(&dir.path().join("out"), 2);
    h.get_by_role_and_label(Role::Button, "fwi_marmousi")
        .click();
    h.run_steps(2);
    assert_eq!(h.state().doc.name(), "fwi_marmousi");
    for label in [
        "Wave inversion",
        "Ricker frequency (Hz)",
        "PML width (cells)",
        "shots per epoch",
        "learning rate (m/s)",
    ] {
        assert!(h.query_by_label(label).is_some(), "{label} is shown");
    }
    assert!(h.query_by_label("Denoiser and tiling").is_none());
    assert_eq!(h.state().run_blocker(), None);

    let sets: Vec<String> = [
        "fwi.epochs=3",
        "model.truth.nz=24",
        "model.truth.nx=48",
        "acquisition.shots=4",
        "acquisition.receivers_per_shot=24",
        "wave.nt=150",
        "fwi.batch_size=3",
        "fwi.stages=[]",
        "output.figures_every=0",
    ]
    .map(String::from)
    .to_vec();
    let (_, text) = tessera::fwi::BUNDLED_FWI[0];
    let tiny = tessera::fwi::FwiPreset::from_toml(text, "bundled", &sets).unwrap();
    let path = dir.path().join("tiny_fwi.toml");
    std::fs::write(&path, tiny.to_toml().unwrap()).unwrap();
    h.state_mut().open_preset_path(&path);
    h.run_steps(2);
    run_to_end(&mut h);
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Finished { .. }),
        "{log:#?}"
    );
    step_until(&mut h, "the last epoch's model and gradient", |wb| {
        wb.shown(Slot::Reconstruction).is_some_and(|s| s.0 == 3)
            && wb.shown(Slot::Gradient).is_some_and(|s| s.0 == 3)
            && wb.shown(Slot::GroundTruth).is_some()
    });
    let wb = h.state();
    let run = wb.session.fwi.as_ref().expect("the FWI job's events");
    assert_eq!(run.model_shape, [24, 48]);
    assert_eq!(run.shots.len(), 4);
    assert_eq!(run.history.len(), 3, "one report per epoch");
    for e in &run.history {
        assert!(e.loss.is_finite() && e.loss > 0.0);
        assert!(e.model_error.is_some());
        assert_eq!(e.ranks.len(), 2, "both ranks report");
        let mut shots: Vec<usize> = e.ranks.iter().flat_map(|r| r.shots.clone()).collect();
        shots.sort_unstable();
        let mut batch = e.batch.clone();
        batch.sort_unstable();
        assert_eq!(shots, batch, "every shot of the batch modelled by one rank");
    }
    assert_eq!(wb.shown(Slot::Reconstruction).unwrap().1, [48, 24]);
    let last = run.history.last().unwrap();
    assert!(
        h.query_by_label(&format!("loss {:.4e}", last.loss))
            .is_some()
    );
    assert!(h.query_by_label("epoch 3/3").is_some());
}

/// Steps frames until a widget labelled `label` is on screen, at most 180 s.
fn step_until_label(h: &mut Harness<'_, Workbench>, label: &str) {
    let start = Instant::now();
    while h.query_by_label(label).is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "timed out waiting for {label:?}"
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The Timing tab draws the finished run's figures (those of `tessera report`, off the UI thread)
/// and "Export report" writes the report into the run folder and says where.
#[test]
fn the_timing_tab_shows_the_runs_figures_and_exports_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = quick_on_local_backend(&dir.path().join("out"), 2);
    h.get_by_role_and_label(Role::Button, "Timing").click();
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("no finished run on screen")
            .is_some(),
        "before a run the tab says why it is empty"
    );
    run_to_a_reconstruction(&mut h);
    step_until(&mut h, "the run folder", |wb| wb.runs.shown.is_some());
    let folder = h.state().runs.shown.clone().unwrap();
    assert!(folder.starts_with(dir.path()), "{}", folder.display());
    // Breakdown, time per iteration, PSNR against time and iteration, peak memory.
    step_until_label(&mut h, "5 figures");
    for stem in ["breakdown", "iteration_times", "peak_memory"] {
        assert!(h.query_by_label(stem).is_some(), "{stem} on screen");
    }
    assert!(!folder.join("report.html").exists());
    h.get_by_role_and_label(Role::Button, "Export report")
        .click();
    let page = folder.join("report.html");
    step_until_label(&mut h, &format!("report written: {}", page.display()));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("data:image/png;base64,").count(), 5);
    assert!(folder.join("breakdown.png").is_file());
}

/// A bundled training preset (either kind) with overrides, written to `dir/<file>`.
fn training_preset_file(dir: &Path, name: &str, file: &str, sets: &[&str]) -> std::path::PathBuf {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let toml = match tessera::dsn::run::DsnPreset::load(name, &sets).unwrap() {
        Some((p, _)) => p.to_toml().unwrap(),
        None => tessera::train::TrainPreset::load(name, &sets)
            .unwrap()
            .0
            .to_toml()
            .unwrap(),
    };
    let path = dir.join(file);
    std::fs::write(&path, toml).unwrap();
    path
}

/// A Multi-DSN from the window on two real ranks: its editor replaces the imaging ones, the
/// curves stream per epoch, and once it ends the Training tab shows each rank's domains, times and
/// memory, the Reconstructions tab each domain's decodings, and Runs lists it by its accuracy.
#[test]
fn a_multi_dsn_trains_from_the_window_with_curves_ranks_and_reconstructions() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = with_local_backend(&dir.path().join("out"), 2);
    h.get_by_role_and_label(Role::Button, "dsn_shapes").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.name(), "dsn_shapes");
    for label in [
        "Training set-up",
        "similarity",
        "steps per epoch",
        "batch per domain",
    ] {
        assert!(h.query_by_label(label).is_some(), "{label} is shown");
    }
    assert!(h.query_by_label("Denoiser and tiling").is_none());
    assert!(
        h.query_by_label_contains("loss curve").is_some(),
        "before a run the main area says what will appear"
    );
    let path = training_preset_file(
        dir.path(),
        "dsn_shapes",
        "small_dsn.toml",
        &[
            "model.image_size=16",
            "train.epochs=2",
            "train.steps_per_epoch=3",
            "train.batch=4",
            "train.train_images=16",
            "train.test_images=8",
        ],
    );
    h.state_mut().open_preset_path(&path);
    h.run_steps(2);
    assert_eq!(h.state().run_blocker(), None);
    run_to_end(&mut h);
    let log = log_of(h.state());
    assert!(
        matches!(h.state().session.state(), JobState::Finished { .. }),
        "{log:#?}"
    );
    step_until(&mut h, "the run's train.json", |wb| {
        wb.session
            .training
            .as_ref()
            .is_some_and(|t| t.result.is_some())
    });
    let run = h.state().session.training.clone().unwrap();
    assert_eq!(run.epochs.len(), 2, "one report per epoch");
    assert_eq!(run.world_size, 2);
    let last = run.epochs.last().unwrap();
    assert!(
        h.query_by_label_contains(&format!(
            "epoch 2: target accuracy {:.1} %",
            100.0 * last.target_accuracy
        ))
        .is_some()
    );
    assert!(
        h.query_by_label_contains("epochs: 2 of 2 on 2 rank(s), done")
            .is_some()
    );

    h.get_by_role_and_label(Role::Button, "Training").click();
    h.run_steps(2);
    for label in ["exchange share", "peak memory", "[0, 2]", "[1, 3]"] {
        assert!(
            h.query_by_label(label).is_some(),
            "{label} in the rank table"
        );
    }

    h.get_by_role_and_label(Role::Button, "Reconstructions")
        .click();
    h.run_steps(3);
    for domain in ["source", "blurred", "noisy", "tomography"] {
        assert!(
            h.query_by_label(&format!("reconstructions of {domain}"))
                .is_some(),
            "{domain}'s reconstructions shown: {:#?}",
            log_of(h.state())
        );
    }

    h.get_by_role_and_label(Role::Button, "Runs").click();
    step_until(&mut h, "the run in the history", |wb| {
        wb.runs.runs.iter().any(|r| r.training)
    });
    h.run_steps(2);
    assert!(
        h.query_by_label(&format!(
            "target accuracy {:.1} %",
            100.0 * last.target_accuracy
        ))
        .is_some()
    );
    // The backend's log counts epochs from 1, as the window does.
    let logged: Vec<String> = log_of(h.state())
        .into_iter()
        .filter(|l| l.contains("dsn epoch"))
        .collect();
    let says = |field: &str| {
        logged
            .iter()
            .any(|l| l.split_whitespace().any(|w| w == field))
    };
    assert!(says("epoch=2") && !says("epoch=0"), "{logged:#?}");
}

/// Denoiser training from the window: Stop ends it at a reported step with its weights kept, and
/// the stopped run reopens from Runs with its loss curve and per-rank times.
#[test]
fn a_denoiser_training_run_stops_and_reopens_from_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = with_local_backend(&dir.path().join("out"), 2);
    let path = training_preset_file(
        dir.path(),
        "train-dncnn",
        "long.toml",
        &[
            "image.size=[96,80]",
            "train.steps=100000",
            "train.log_every=1",
            "train.crop=40",
            "train.batch=3",
        ],
    );
    h.state_mut().open_preset_path(&path);
    h.run_steps(2);
    for label in ["noise levels", "convolutions", "crop (0 = whole image)"] {
        assert!(h.query_by_label(label).is_some(), "{label} is shown");
    }
    h.get_by_role_and_label(Role::Button, "Run").click();
    step_until(&mut h, "three reported steps", |wb| {
        wb.session
            .training
            .as_ref()
            .is_some_and(|t| t.steps.len() >= 3)
    });
    assert!(h.query_by_label_contains("steps: ").is_some());
    h.get_by_role_and_label(Role::Button, "Stop").click();
    step_until(&mut h, "the stopped run", |wb| {
        matches!(wb.session.state(), JobState::Cancelled { .. })
            && wb
                .session
                .training
                .as_ref()
                .is_some_and(|t| t.result.is_some())
    });
    let run = h.state().session.training.clone().unwrap();
    let Some(tessera::gui::session::TrainResult::Denoiser(s)) = &run.result else {
        panic!("a denoiser's train.json: {:?}", run.result);
    };
    assert!(s.stopped_early);
    // train.json's curve, as the protocol's steps.
    let loss: Vec<tessera::protocol::LossPoint> = s.loss.iter().map(Into::into).collect();
    assert_eq!(s.compute_secs.len(), 2);
    let folder = run.run_dir.clone().unwrap();
    assert!(folder.join("dncnn_grey.safetensors").is_file());

    // Resume goes on from the checkpoint, in a new folder, the curve so far first.
    h.get_by_role_and_label(Role::Button, "Resume").click();
    step_until(&mut h, "steps after the resumed one", |wb| {
        wb.session
            .training
            .as_ref()
            .is_some_and(|t| t.steps.last().is_some_and(|p| p.step > s.steps + 1))
    });
    let resumed = h.state().session.training.clone().unwrap();
    assert_eq!(resumed.steps[..loss.len()], loss[..]);
    assert_eq!(resumed.steps[s.loss.len()].step, s.steps);
    h.get_by_role_and_label(Role::Button, "Stop").click();
    step_until(&mut h, "the resumed run stopped", |wb| {
        matches!(wb.session.state(), JobState::Cancelled { .. })
            && wb
                .session
                .training
                .as_ref()
                .is_some_and(|t| t.result.is_some())
    });
    let again = h.state().session.training.clone().unwrap();
    let Some(tessera::gui::session::TrainResult::Denoiser(r)) = &again.result else {
        panic!("a denoiser's train.json: {:?}", again.result);
    };
    assert_eq!(r.resumed_from, Some(s.steps));
    assert!(r.steps > s.steps);
    assert_ne!(again.run_dir.as_ref(), Some(&folder));

    // Another experiment, then the first stopped run again from Runs.
    h.get_by_role_and_label(Role::Button, "quick").click();
    h.run_steps(2);
    assert!(h.state().session.training.is_none());
    h.get_by_role_and_label(Role::Button, "Runs").click();
    step_until(&mut h, "the run in the history", |wb| {
        wb.runs.runs.iter().any(|r| r.folder == folder)
    });
    h.run_steps(2);
    assert!(
        h.query_by_label(&format!("{} steps (stopped)", s.steps))
            .is_some()
    );
    // Two stopped runs are listed (the resumed one too): reopen the first.
    let row = h
        .state()
        .runs
        .runs
        .iter()
        .position(|r| r.folder == folder)
        .unwrap();
    h.get_all_by_role_and_label(Role::Button, "reopen")
        .nth(row)
        .unwrap()
        .click();
    h.run_steps(2);
    let reopened = h.state().session.training.clone().expect("reopened");
    assert_eq!(reopened.steps, loss);
    assert!(
        h.query_by_label(&format!("steps: {} on 2 rank(s), stopped", s.steps))
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "Training").click();
    h.run_steps(2);
    assert!(h.query_by_label("exchange share").is_some());
}

/// On a remote backend the run's files (the reconstructions in their sub-folder included) are
/// copied here when it ends, and the views read them from the copy.
#[test]
fn a_remote_multi_dsn_run_is_fetched_with_its_reconstructions() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        dir.path().join("server").to_str().unwrap(),
    ]);
    let here = dir.path().join("here");
    let mut h = harness(Workbench::new(WorkbenchOptions {
        starter: starter(Vec::new()),
        start_backend: false,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: Some(here.clone()),
    }));
    h.get_by_role_and_label(Role::Button, "Attach…").click();
    h.run_steps(2);
    for (role, label, text) in [
        (Role::TextInput, "address", addr.to_string()),
        (Role::PasswordInput, "token", token),
    ] {
        h.get_by_role_and_label(role, label).focus();
        h.run_steps(1);
        h.get_by_role_and_label(role, label).type_text(&text);
        h.run_steps(1);
    }
    h.get_by_role_and_label(Role::Button, "Connect").click();
    step_until(&mut h, "the remote backend", |wb| {
        wb.has_backend() && wb.doc.remote
    });
    let path = training_preset_file(
        dir.path(),
        "dsn_shapes",
        "small_dsn.toml",
        &[
            "model.image_size=16",
            "train.epochs=1",
            "train.steps_per_epoch=2",
            "train.batch=4",
            "train.train_images=16",
            "train.test_images=8",
        ],
    );
    h.state_mut().open_preset_path(&path);
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Reconstructions")
        .click();
    run_to_end(&mut h);
    step_until(&mut h, "the fetched run", |wb| {
        wb.runs.shown.as_ref().is_some_and(|f| f.starts_with(&here))
    });
    let folder = h.state().runs.shown.clone().unwrap();
    assert!(folder.join("reconstructions/tomography.png").is_file());
    assert!(folder.join("dsn.safetensors").is_file());
    h.run_steps(3);
    assert!(
        h.query_by_label("reconstructions of tomography").is_some(),
        "{:#?}",
        log_of(h.state())
    );
    child.kill().unwrap();
    let _ = child.wait();
}

/// The distribution panel (closed until opened) cuts the stack by channel and says how many
/// operators that makes; more parts than the image has channels is refused before Run with the
/// field named. A training preset's image lists are shown entry by entry. A Multi-DSN's editor sets
/// its ranks per domain, and a bad count is shown there.
#[test]
fn the_distribution_panel_splits_operators_and_a_dsn_sets_its_ranks_per_domain() {
    let (mut h, _end) = ready_workbench();
    assert!(
        h.query_by_label("channel parts").is_none(),
        "closed by default"
    );
    // The algorithm section above is closed, so the distribution panel's controls are in view.
    h.get_by_label("Algorithm").click();
    h.run_steps(2);
    h.get_by_label("Distribution over ranks").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, "split operators by channel")
        .click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.distributed.split_by_channel, Some(2));
    assert!(h.query_by_label("channel parts").is_some());
    assert!(
        h.query_by_label_contains("2 operators after splitting 1 [[physics]] entries")
            .is_some()
    );
    assert_eq!(h.state().run_blocker(), None);
    let channels = h.state().doc.data.loaded.as_ref().unwrap().shape()[1];
    assert_eq!(channels, 3, "quick's image is in colour");
    let wb = h.state_mut();
    wb.doc.preset.distributed.split_by_channel = Some(4);
    wb.edited();
    h.run_steps(2);
    let blocker = h.state().run_blocker().unwrap_or_default();
    assert!(
        blocker.contains("distributed.split_by_channel") && blocker.contains("3 channel(s)"),
        "{blocker}"
    );
    h.get_by_role_and_label(Role::CheckBox, "split operators by channel")
        .click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.distributed.split_by_channel, None);
    assert_eq!(h.state().run_blocker(), None);

    // A denoiser training preset with lists of images shows every entry, not only their count.
    h.state_mut()
        .open_preset_path(Path::new("presets/train-dncnn-grey.toml"));
    h.run_steps(2);
    assert_eq!(h.state().doc.name(), "train-dncnn-grey");
    assert!(h.query_by_label("trained on (6):").is_some());
    assert!(
        h.query_by_label_contains("3. generated natural 1024×1024, seed 4, grey")
            .is_some()
    );
    assert!(
        h.query_by_label_contains("out/photos/train/colour, grey")
            .is_some()
    );
    assert!(
        h.query_by_label_contains("0. generated natural 256×256, seed 1000, grey")
            .is_some()
    );

    h.get_by_role_and_label(Role::Button, "dsn_shapes").click();
    h.run_steps(2);
    assert!(h.query_by_label("ranks per domain").is_some());
    assert!(h.query_by_label("Distribution over ranks").is_none());
    let Some(Training::Dsn(p)) = h.state_mut().doc.training.as_mut() else {
        panic!("dsn_shapes is a Multi-DSN")
    };
    // 8 ranks cannot split the 2×2 feature maps of 8×8 images.
    p.model.image_size = 8;
    p.distributed.ranks_per_domain = 8;
    h.state_mut().edited();
    h.run_steps(2);
    let problem = h.state().preset_problem().unwrap_or_default().to_string();
    assert!(
        problem.contains("distributed.ranks_per_domain"),
        "{problem}"
    );
    assert!(
        h.query_all_by_label_contains("distributed.ranks_per_domain")
            .count()
            >= 1,
        "the problem is shown in the editor"
    );
}

/// The view follows the document's dimensionality: orthogonal views chosen on a volume give way to
/// the ordinary panes when a 2-D preset is opened, and that preset's run is drawn there.
#[test]
fn orthogonal_views_do_not_stick_to_a_2d_document() {
    use tessera::gui::preview::Slot;
    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    h.run_steps(2);
    step_until(&mut h, "the volume", |wb| {
        !wb.data_loading() && wb.viewer().volume_dims().is_some()
    });
    h.get_by_role_and_label(Role::CheckBox, "orthogonal views")
        .click();
    step_until(&mut h, "the orthogonal views", |wb| {
        wb.viewer().shown.contains_key(&Slot::Ortho(0))
    });
    assert!(h.query_all_by_label_contains("depth cut").next().is_some());

    h.get_by_role_and_label(Role::Button, "quick").click();
    step_until(&mut h, "the 2-D sample", |wb| {
        wb.shown_data_size() == Some([128, 128])
    });
    assert_eq!(h.state().viewer().ortho, None);
    assert!(
        h.query_all_by_label_contains(" cut").next().is_none(),
        "no orthogonal cut on a 2-D document"
    );
    assert!(h.query_all_by_label("Reconstruction").next().is_some());

    submit(&mut h, &end, 1);
    send(&end, preview(1, 4, PreviewKind::Reconstruction, 64));
    finish(&end, 1);
    step_until(&mut h, "the reconstruction", |wb| {
        wb.shown_reconstruction().is_some() && !wb.session.is_busy()
    });
    assert!(h.query_by_label("Reconstruction (iteration 4)").is_some());

    // Back on a volume, the cuts are offered again, starting from the ordinary panes.
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    step_until(&mut h, "the volume", |wb| {
        !wb.data_loading() && wb.viewer().volume_dims().is_some()
    });
    assert!(h.query_all_by_label_contains(" cut").next().is_none());
    assert!(
        h.query_by_role_and_label(Role::CheckBox, "orthogonal views")
            .is_some()
    );
}

/// Restarting the backend during a run ends that run in the window: the job is failed (its backend
/// is gone), Stop no longer asks the new backend about it, and Run is possible again.
#[test]
fn restarting_the_backend_during_a_run_ends_the_run_in_the_window() {
    let (first, first_end) = ChannelBackend::pair("first backend");
    let (second, second_end) = ChannelBackend::pair("second backend");
    let mut h = harness(workbench(vec![first, second], AppState::default()));
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    submit(&mut h, &first_end, 3);
    send(&first_end, iteration(3, 1, 20.0));
    step_until(&mut h, "the job to run", |wb| wb.current_job() == Some(3));
    assert!(h.state().run_blocker().is_some());

    h.get_by_role_and_label(Role::Button, "Restart backend")
        .click();
    step_until(&mut h, "the new backend", |wb| {
        wb.has_backend() && wb.backend_label() == "second backend"
    });
    let wb = h.state();
    assert!(
        matches!(wb.session.state(), JobState::Failed { error } if error.contains("job 3")),
        "{:?}",
        wb.session.state()
    );
    assert!(!wb.session.is_busy());
    assert_eq!(wb.run_blocker(), None);
    assert!(
        h.query_all_by_label_contains("job 3 ended: the backend it ran on was replaced")
            .next()
            .is_some()
    );
    // Escape has nothing to stop: the new backend is asked for its status only.
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    assert_eq!(
        second_end
            .requests
            .recv_timeout(Duration::from_secs(5))
            .unwrap(),
        Request::Status
    );
    assert!(second_end.requests.try_recv().is_err(), "no Cancel");
    // And the preset runs on the new backend.
    submit(&mut h, &second_end, 1);
    step_until(&mut h, "the new job", |wb| wb.current_job() == Some(1));
}

/// A local backend restarted while it writes a run leaves no staging folder behind in the output
/// root (its ranks were killed mid-run; nobody could ever complete the folder).
#[test]
fn a_restarted_local_backend_leaves_no_unfinished_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut h = quick_on_local_backend(&out, 2);
    if let tessera::optim::AlgorithmConfig::Pnp(c) = &mut h.state_mut().doc.preset.algorithm {
        c.iterations = 100_000;
    }
    h.state_mut().edited();
    h.get_by_role_and_label(Role::Button, "Run").click();
    let staging = |out: &Path| -> Vec<String> {
        std::fs::read_dir(out)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".tessera-partial-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    step_until(&mut h, "iterations", |wb| wb.session.history.len() > 2);
    assert_eq!(staging(&out).len(), 1, "the run is being staged");
    h.get_by_role_and_label(Role::Button, "Restart backend")
        .click();
    step_until(&mut h, "the job to end", |wb| !wb.session.is_busy());
    step_until(&mut h, "the new backend", |wb| wb.session.backend.is_some());
    let start = Instant::now();
    while !staging(&out).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "left behind: {:?}",
            staging(&out)
        );
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The image of a one-channel preview of `side`² pixels with values `lo..hi` (a ramp).
fn ramp_preview(job: u64, what: PreviewKind, side: u32, lo: f32, hi: f32) -> Event {
    preview_of(job, 1, what, side, |x, _| {
        lo + (hi - lo) * x as f32 / (side - 1) as f32
    })
}

/// A workbench on a channel backend after job 1 ran and finished with these previews, each a
/// 32² ramp `(kind, low, high)`, all on screen.
fn after_a_run(previews: &[(PreviewKind, f32, f32)]) -> (Harness<'static, Workbench>, TestEnd) {
    use tessera::gui::preview::Slot;
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    for (what, lo, hi) in previews {
        send(&end, ramp_preview(1, what.clone(), 32, *lo, *hi));
    }
    finish(&end, 1);
    let slots: Vec<Slot> = previews
        .iter()
        .map(|(what, ..)| match what {
            PreviewKind::Reconstruction => Slot::Reconstruction,
            PreviewKind::GroundTruth => Slot::GroundTruth,
            PreviewKind::Measurement(i) => Slot::Measurement(*i),
            PreviewKind::Gradient => Slot::Gradient,
        })
        .collect();
    step_until(&mut h, "the run's previews", |wb| {
        !wb.session.is_busy() && slots.iter().all(|s| wb.shown(*s).is_some())
    });
    (h, end)
}

/// Ends job `job` as finished (in a folder that does not exist here, so nothing is read back).
fn finish(end: &TestEnd, job: u64) {
    send(
        end,
        Event::Finished {
            job,
            run_dir: "/nonexistent/run".into(),
            outputs: vec![],
            summary_json: "{}".into(),
        },
    );
}

/// An FWI job's start: a `side`² model of 10 m cells, no shots.
fn fwi_started(job: u64, side: usize) -> Event {
    Event::FwiStarted {
        job,
        name: "fwi_marmousi".into(),
        world_size: 2,
        devices: vec![],
        model_shape: [side, side],
        spacing_m: [10.0, 10.0],
        shots: vec![],
        epochs: 10,
        step_ratio: 1,
    }
}

/// Whether every pixel of `slot`'s texture is a colour of `map`.
fn drawn_with(
    wb: &Workbench,
    slot: tessera::gui::preview::Slot,
    map: tessera::plot::Colormap,
) -> bool {
    let lut = tessera::gui::preview::lut(map);
    wb.viewer().shown[&slot]
        .color
        .pixels
        .iter()
        .all(|p| lut.contains(p))
}

/// Opens the first pane's display menu, turns auto contrast off and types the window's low bound
/// (the menu stays open).
fn type_low_bound_in_first_pane(h: &mut Harness<'_, Workbench>, low: &str) {
    h.get_all_by_role_and_label(Role::Button, "display")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, "auto contrast (1–99 %)")
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::SpinButton, "low").focus();
    h.run_steps(2);
    h.get_by_role_and_label(Role::SpinButton, "low")
        .type_text(low);
    h.key_press(egui::Key::Enter);
    h.run_steps(2);
}

/// A pane's display menu stays open while it is used — colormap and channel are chosen, window
/// bounds typed — and what a pane does not set follows the window: a pane whose contrast was set
/// still takes the colormap chosen above the panes afterwards.
#[test]
fn the_display_menu_works_and_a_pane_follows_the_window_where_it_sets_nothing() {
    use tessera::gui::preview::{Contrast, Slot};
    use tessera::plot::Colormap;
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::Measurement(0), 0.0, 1.0),
    ]);
    let display = |wb: &Workbench, slot| wb.viewer().display_of(slot, wb.app_state.display);

    // The reconstruction's window, typed.
    type_low_bound_in_first_pane(&mut h, "0.25");
    assert!(
        matches!(display(h.state(), Slot::Reconstruction).contrast, Contrast::Range { lo, .. } if lo == 0.25),
        "{:?}",
        display(h.state(), Slot::Reconstruction)
    );
    assert!(
        h.query_by_label("auto contrast (1–99 %)").is_some(),
        "the menu stays open"
    );
    h.key_press(egui::Key::Escape);
    h.run_steps(2);

    // The window's colormap reaches that pane.
    h.get_by_role_and_label(Role::ComboBox, "colormap").click();
    h.run_steps(2);
    h.get_by_label("magma").click();
    step_until(&mut h, "the reconstruction in magma", |wb| {
        drawn_with(wb, Slot::Reconstruction, Colormap::Magma)
    });
    assert!(matches!(
        display(h.state(), Slot::Reconstruction).contrast,
        Contrast::Range { .. }
    ));

    // A colormap of its own, picked in the menu (a row of choices, not a combo box that the menu
    // would close on), stays when the window's changes.
    h.get_all_by_role_and_label(Role::Button, "display")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    h.get_by_label("viridis").click();
    h.run_steps(2);
    assert!(h.query_by_label("auto contrast (1–99 %)").is_some());
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    h.get_by_role_and_label(Role::ComboBox, "colormap").click();
    h.run_steps(2);
    h.get_by_label("gray").click();
    step_until(&mut h, "the measurement pane in gray", |wb| {
        drawn_with(wb, Slot::Measurement(0), Colormap::Gray)
    });
    assert!(drawn_with(
        h.state(),
        Slot::Reconstruction,
        Colormap::Viridis
    ));

    // One channel of the colour sample (the third pane), with a colormap.
    h.get_all_by_role_and_label(Role::Button, "display")
        .nth(2)
        .unwrap()
        .click();
    h.run_steps(2);
    assert!(
        h.query_by_label("colormaps apply to one channel: choose one below")
            .is_some()
    );
    h.get_by_label("red").click();
    h.run_steps(2);
    h.get_by_label("magma").click();
    step_until(&mut h, "the red channel in magma", |wb| {
        drawn_with(wb, Slot::Data, Colormap::Magma)
    });
    assert_eq!(display(h.state(), Slot::Data).channel, Some(0));
}

/// A pane's display belongs to its document: the reconstruction's manual window does not follow
/// it into an FWI document, whose model (in m/s) is drawn with auto contrast, and the FWI panes
/// have a display menu of their own.
#[test]
fn a_panes_display_does_not_leak_into_another_document() {
    use tessera::gui::preview::{Contrast, Slot};
    let (mut h, end) = after_a_run(&[(PreviewKind::Reconstruction, 0.0, 1.0)]);
    // A manual window on the reconstruction.
    h.get_all_by_role_and_label(Role::Button, "display")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, "auto contrast (1–99 %)")
        .click();
    h.run_steps(2);
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    let wb = h.state();
    assert!(matches!(
        wb.viewer()
            .display_of(Slot::Reconstruction, wb.app_state.display)
            .contrast,
        Contrast::Range { .. }
    ));
    h.get_by_role_and_label(Role::Button, "fwi_marmousi")
        .click();
    h.run_steps(2);
    submit(&mut h, &end, 2);
    send(&end, fwi_started(2, 32));
    send(
        &end,
        ramp_preview(2, PreviewKind::Reconstruction, 32, 1500.0, 4500.0),
    );
    step_until(&mut h, "the inverted model", |wb| {
        wb.shown_reconstruction().is_some()
    });
    let wb = h.state();
    assert_eq!(
        wb.viewer()
            .display_of(Slot::Reconstruction, wb.app_state.display)
            .contrast,
        Contrast::Auto
    );
    let colours: std::collections::HashSet<_> = wb.viewer().shown[&Slot::Reconstruction]
        .color
        .pixels
        .iter()
        .copied()
        .collect();
    assert!(colours.len() > 10, "not a solid pane: {colours:?}");
    assert!(
        h.query_all_by_role_and_label(Role::Button, "display")
            .next()
            .is_some(),
        "the FWI panes have a display menu"
    );
}

/// Shift+drag draws the line profile from the point pressed (not from where the drag was
/// recognised), and the Profile tab has one curve per pane on screen, named as the pane: the
/// measurement's too, and the ground truth once (not again as the image it was loaded from).
#[test]
fn the_line_profile_starts_at_the_press_and_has_a_curve_per_pane() {
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 0.5),
        (PreviewKind::Measurement(0), 0.0, 10.0),
    ]);
    let pane = h
        .get_by_role_and_label(Role::Image, "Reconstruction")
        .rect();
    let side = pane.width().min(pane.height());
    let image = egui::Rect::from_center_size(pane.center(), egui::Vec2::splat(side));
    let at = |u: f32, v: f32| image.min + egui::vec2(u * side, v * side);
    let shift = egui::Modifiers::SHIFT;
    h.event(egui::Event::ModifiersChanged(shift));
    h.event(egui::Event::PointerMoved(at(0.25, 0.5)));
    h.run_steps(1);
    h.event(egui::Event::PointerButton {
        pos: at(0.25, 0.5),
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: shift,
    });
    h.run_steps(1);
    for k in 1..=10 {
        h.event(egui::Event::PointerMoved(at(0.25 + 0.05 * k as f32, 0.5)));
        h.run_steps(1);
    }
    h.event(egui::Event::PointerButton {
        pos: at(0.75, 0.5),
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: shift,
    });
    h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
    h.run_steps(2);
    let (a, b) = h.state().viewer().profile.expect("a profile");
    assert!(
        (a - egui::pos2(0.25, 0.5)).length() < 0.01,
        "starts at the press: {a:?}"
    );
    assert!((b - egui::pos2(0.75, 0.5)).length() < 0.01, "{b:?}");

    let curves = h.state().profile_curves();
    let names: Vec<&str> = curves.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Reconstruction", "Measurement", "Ground truth"]);
    // The reconstruction's ramp 0..1 sampled from x = 0.25 to 0.75: values from ~0.25 to ~0.75.
    let recon = &curves[0].1;
    assert!((recon[0][1] - 0.25).abs() < 0.05, "{recon:?}");
    assert!((recon.last().unwrap()[1] - 0.75).abs() < 0.05, "{recon:?}");
    let truth = &curves[2].1;
    assert!(
        (truth[0][1] - 0.125).abs() < 0.03,
        "the ground truth's own values: {truth:?}"
    );
    let measurement = &curves[1].1;
    assert!((measurement[0][1] - 2.5).abs() < 0.5, "{measurement:?}");
}

/// Writes a complete FWI run folder: `epochs` epochs of falling loss and model error, the bundled
/// FWI preset as the one that ran, and 2-D true and inverted models in m/s.
fn fwi_run_folder(root: &Path, name: &str, epochs: usize) -> std::path::PathBuf {
    let model = |v: f32| tessera::Tensor::from_fn(&[20, 30], move |i| v + (i % 30) as f32 * 10.0);
    let preset = tessera::fwi::FwiPreset::from_toml(tessera::fwi::BUNDLED_FWI[0].1, "test", &[])
        .unwrap()
        .to_toml()
        .unwrap();
    let history: Vec<_> = (1..=epochs)
        .map(|e| {
            serde_json::json!({"epoch": e, "epochs": epochs, "loss": 1.0 / e as f64,
                "model_error": 0.5 / e as f64, "batch": [], "ranks": [], "secs": 1.0})
        })
        .collect();
    write_run_folder(
        root,
        name,
        &[
            ("inverted_model.npy", model(2000.0)),
            ("true_model.npy", model(1500.0)),
        ],
        serde_json::json!({
            "name": "fwi_marmousi", "model_shape": [20, 30], "epochs": epochs,
            "stopped_early": false, "final_model_error": 0.125, "history": history,
            "preset": preset,
        }),
    )
}

/// The Runs tab shows an FWI run's epochs and final model error, and reopening a run restores the
/// preset it ran — its kind of document included — so the panes show that run alone and Run runs
/// it again; the log says so.
#[test]
fn reopening_a_run_restores_its_preset_and_document() {
    use tessera::gui::preview::Slot;
    let root = tempfile::tempdir().unwrap();
    let fwi = fwi_run_folder(root.path(), "20250101-110000-fwi_marmousi-1", 3);
    std::thread::sleep(Duration::from_millis(20));
    let imaging = run_folder(root.path(), "20250101-120000-tomography2d-1", 0.75, 0.5);
    let seven = tessera::preset::Preset::load("tomography2d", &["algorithm.iterations=7".into()])
        .unwrap()
        .preset;
    let mut metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(imaging.join("metrics.json")).unwrap())
            .unwrap();
    metrics["preset"] = seven.to_toml().unwrap().into();
    std::fs::write(imaging.join("metrics.json"), metrics.to_string()).unwrap();

    let (mut h, _end) = with_runs_under(root.path());
    step_until(&mut h, "the runs", |wb| wb.runs.runs.len() == 2);
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    step_until(&mut h, "the volume", |wb| {
        !wb.data_loading() && wb.viewer().volume_dims().is_some()
    });
    h.get_by_role_and_label(Role::Button, "Runs").click();
    h.run_steps(2);
    assert!(h.query_by_label("3 epochs").is_some());
    assert!(h.query_by_label("model error 12.50 %").is_some());
    assert!(h.query_by_label("5 iterations").is_some());

    // The FWI run (listed second: older).
    h.get_all_by_role_and_label(Role::Button, "reopen")
        .nth(1)
        .unwrap()
        .click();
    step_until(&mut h, "the FWI run's models", |wb| {
        wb.doc.fwi.is_some()
            && wb
                .viewer()
                .shown
                .get(&Slot::Reconstruction)
                .map(|s| s.raw.pixels[0])
                == Some(2000.0)
    });
    let wb = h.state();
    assert_eq!(wb.doc.name(), "fwi_marmousi");
    assert!(
        wb.viewer().volume_dims().is_none() && !wb.viewer().shown.contains_key(&Slot::Data),
        "nothing of the tomography3d document stays"
    );
    assert!(
        log_of(wb)
            .iter()
            .any(|l| l.contains("its preset \"fwi_marmousi\" is in the editor")),
        "{:#?}",
        log_of(wb)
    );
    assert_eq!(wb.runs.shown.as_deref(), Some(fwi.as_path()));

    // The imaging run: its preset, as it ran (7 iterations), is the one Run would send.
    h.get_all_by_role_and_label(Role::Button, "reopen")
        .next()
        .unwrap()
        .click();
    step_until(&mut h, "the imaging run", |wb| {
        wb.doc.is_imaging()
            && wb
                .viewer()
                .shown
                .get(&Slot::Reconstruction)
                .map(|s| s.raw.pixels[0])
                == Some(0.75)
    });
    assert_eq!(h.state().doc.preset, seven);
}

/// A dropped (or opened) image replaces what the last run showed: the panes do not keep a
/// reconstruction and ground truth of another image beside it.
#[test]
fn an_opened_image_replaces_the_last_runs_panes() {
    use tessera::gui::preview::Slot;
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 1.0),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("photo.png");
    image::RgbImage::from_fn(40, 24, |x, y| image::Rgb([x as u8 * 6, y as u8 * 10, 128]))
        .save(&png)
        .unwrap();
    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(png.clone())));
    step_until(&mut h, "the dropped image", |wb| {
        wb.shown_data_size() == Some([40, 24])
    });
    let wb = h.state();
    assert_eq!(wb.shown_reconstruction(), None);
    assert_eq!(wb.shown(Slot::GroundTruth), None);
    assert!(h.query_by_label("Ground truth 40×24").is_some());
}

/// A NIfTI file states its voxel size: its panes get a scale bar in that unit (64 voxels of 1 mm:
/// a 10 mm bar, the round length nearest a fifth), on the image; a PNG, which states none, gets
/// none.
#[test]
fn a_nifti_images_panes_have_a_scale_bar_in_its_voxels_unit() {
    let (mut h, _end) = ready_workbench();
    let dir = tempfile::tempdir().unwrap();
    let nifti = dir.path().join("slice.nii.gz");
    let ramp = tessera::Tensor::from_fn(&[1, 1, 48, 64], |i| (i % 64) as f32 / 64.0);
    tessera::io::write_nifti(&nifti, &ramp).unwrap();
    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(nifti)));
    step_until(&mut h, "the dropped volume", |wb| {
        wb.shown_data_size() == Some([64, 48])
    });
    h.run_steps(2);
    let bar = h.get_by_label("10 mm").rect();
    assert!(
        h.query_all_by_role(Role::Image)
            .any(|pane| pane.rect().contains_rect(bar)),
        "the scale bar {bar:?} lies on a pane"
    );
    let png = dir.path().join("photo.png");
    image::GrayImage::from_fn(40, 24, |x, _| image::Luma([x as u8 * 6]))
        .save(&png)
        .unwrap();
    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(png)));
    step_until(&mut h, "the dropped image", |wb| {
        wb.shown_data_size() == Some([40, 24])
    });
    h.run_steps(2);
    assert!(h.query_by_label_contains(" mm").is_none());
}

/// Attaching to a server whose last job has ended does not bring that job back (it would be copied
/// here again and drawn into the document on screen); the window says the server is idle.
#[test]
fn attaching_to_an_idle_server_does_not_replay_its_finished_job() {
    let dir = tempfile::tempdir().unwrap();
    let (token_file, token) = serve_tcp::token_file(dir.path());
    let out = dir.path().join("out");
    let (mut child, addr) = serve_tcp(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let other = submit_from_another_client(&addr, &token, 3);
    let start = Instant::now();
    loop {
        match other.try_recv() {
            Some(tessera::protocol::ClientEvent::Event(Event::Finished { .. })) => break,
            Some(_) => {}
            None => std::thread::sleep(Duration::from_millis(20)),
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the job to finish"
        );
    }

    let here = dir.path().join("here");
    let mut h = harness(Workbench::new(WorkbenchOptions {
        starter: starter(Vec::new()),
        start_backend: false,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: Some(here.clone()),
    }));
    h.state_mut()
        .attach_remote(&addr.to_string(), Some(token.clone()));
    step_until(&mut h, "the attach", |wb| {
        wb.has_backend() && log_of(wb).iter().any(|l| l.contains("runs no job now"))
    });
    for _ in 0..50 {
        h.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    let wb = h.state();
    assert_eq!(wb.current_job(), None, "{:#?}", log_of(wb));
    assert!(wb.session.history.is_empty());
    assert!(!here.exists(), "nothing copied here");
    let _ = child.kill();
    let _ = child.wait();
}

/// Page Up / Page Down presses that arrive in one frame (a slow frame under load) each move the
/// slice: five presses, five slices.
#[test]
fn every_page_down_press_moves_a_slice() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    step_until(&mut h, "the volume", |wb| {
        !wb.data_loading() && wb.viewer().volume_dims().is_some()
    });
    let before = h.state().viewer().cursor;
    for _ in 0..5 {
        h.key_press(egui::Key::PageDown);
    }
    h.run_steps(1);
    let after = h.state().viewer().cursor;
    assert_eq!(after.axis, before.axis);
    assert_eq!(after.index[after.axis] + 5, before.index[before.axis]);
}

/// A difference of two images of different sizes says why it is empty.
#[test]
fn a_difference_of_mismatched_sizes_says_why() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    send(
        &end,
        ramp_preview(1, PreviewKind::Reconstruction, 32, 0.0, 1.0),
    );
    send(
        &end,
        ramp_preview(1, PreviewKind::GroundTruth, 16, 0.0, 1.0),
    );
    step_until(&mut h, "both sides", |wb| {
        wb.shown(tessera::gui::preview::Slot::GroundTruth).is_some()
            && wb.shown_reconstruction().is_some()
    });
    h.get_by_role_and_label(Role::CheckBox, "difference")
        .click();
    h.run_steps(3);
    assert!(
        h.query_by_label("no difference: the reconstruction is 32×32 and the ground truth 16×16")
            .is_some()
    );
}

/// Trying another denoiser and coming back keeps the parameters the first one had (quick's
/// DRUNet is the bundled one: nc 16–128 on opponent colour channels, not the default 64–512 on
/// RGB).
#[test]
fn switching_denoiser_kind_keeps_each_kinds_values() {
    use tessera::denoise::DenoiserConfig;
    let (mut h, _end) = ready_workbench();
    let drunet = |wb: &Workbench| match &wb.doc.preset.denoiser {
        Some(DenoiserConfig::Drunet(c)) => Some((c.nc.clone(), c.opponent_colour)),
        _ => None,
    };
    let bundled = Some((vec![16, 32, 64, 128], true));
    assert_eq!(drunet(h.state()), bundled);
    // No weights file on the bundled architecture: the bundled weights, not a random network.
    assert!(
        h.query_by_label_contains("no weights file: bundled weights drunet_grey")
            .is_some()
    );
    assert!(h.query_by_label_contains("random network").is_none());
    for kind in ["tv", "drunet"] {
        h.get_by_role_and_label(Role::ComboBox, "denoiser").click();
        h.run_steps(2);
        h.get_by_label(kind).click();
        h.run_steps(2);
    }
    assert_eq!(drunet(h.state()), bundled);
}

/// The algorithm panel's splitting combo switches quick (deepinv's DPIR rule for its noise level
/// σ_n 0.03) to PGD, whose step controls show; the "DPIR rule" button sets the rule again from
/// the noise level, keeping the clamp, and hides them; and the submitted preset carries what the
/// panel shows.
#[test]
fn the_dpir_rule_button_sets_hqs_from_the_noise_level() {
    use tessera::optim::{AlgorithmConfig, PnpConfig, Splitting};
    let (mut h, end) = ready_workbench();
    let rule = PnpConfig {
        clamp: Some([0.0, 1.0]),
        ..PnpConfig::dpir(0.03)
    };
    let pnp = |wb: &Workbench| match &wb.doc.preset.algorithm {
        AlgorithmConfig::Pnp(pnp) => pnp.clone(),
        other => panic!("quick is a PnP preset, not {other:?}"),
    };
    assert_eq!(pnp(h.state()), rule);
    assert!(
        h.query_by_role_and_label(Role::CheckBox, "step 0.99/L")
            .is_none()
    );
    h.get_by_role_and_label(Role::ComboBox, "splitting").click();
    h.run_steps(2);
    h.get_by_label("gradient step (PGD)").click();
    h.run_steps(2);
    assert_eq!(pnp(h.state()).splitting, Splitting::Pgd);
    assert!(
        h.query_by_role_and_label(Role::CheckBox, "step 0.99/L")
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "DPIR rule (σ_n 0.03)")
        .click();
    h.run_steps(2);
    assert_eq!(pnp(h.state()), rule);
    assert!(
        h.query_by_role_and_label(Role::CheckBox, "step 0.99/L")
            .is_none()
    );
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    let Request::Submit { preset_toml, .. } = next_request(&end) else {
        panic!("Run submits the preset")
    };
    let sent = tessera::preset::Preset::from_toml(&preset_toml, "sent", &[]).unwrap();
    assert_eq!(sent.algorithm, AlgorithmConfig::Pnp(rule));
    send(&end, Event::Accepted { job: 1 });
}

/// A training document opens on its own tab (not on the imaging views' Profile tab, which it has
/// no use for), and an FWI document on its Inversion tab.
#[test]
fn a_document_opens_on_its_own_tab() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "train-dncnn").click();
    h.run_steps(3);
    assert!(h.query_by_role_and_label(Role::Button, "Profile").is_none());
    assert!(
        h.query_by_label("per-rank compute and exchange times arrive when the run ends")
            .is_some(),
        "the Training tab is shown"
    );
    h.get_by_role_and_label(Role::Button, "fwi_marmousi")
        .click();
    h.run_steps(3);
    assert!(h.query_by_label("Loss and model error").is_some());
}

/// Ctrl+Z undoes an edit and Ctrl+Shift+Z applies it again; the Presets panel marks the preset
/// modified until it is saved, and a preset saved under another file name takes that name (its
/// runs' folders are named after it).
#[test]
fn edits_undo_redo_and_mark_the_preset_modified_until_saved() {
    use tessera::physics::NoiseConfig;
    let (mut h, _end) = ready_workbench();
    let sigma = |wb: &Workbench| match wb.doc.preset.noise {
        Some(NoiseConfig::Gaussian { sigma }) => sigma,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(sigma(h.state()), 0.03);
    assert!(h.query_by_label("● modified").is_none());
    h.get_by_role_and_label(Role::SpinButton, "noise sigma")
        .focus();
    h.run_steps(2);
    h.get_by_role_and_label(Role::SpinButton, "noise sigma")
        .type_text("0.1");
    h.key_press(egui::Key::Enter);
    h.run_steps(2);
    assert_eq!(sigma(h.state()), 0.1);
    assert!(h.query_by_label("● modified").is_some());
    // Off the field, Ctrl+Z is the workbench's.
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    h.run_steps(2);
    assert_eq!(sigma(h.state()), 0.03);
    assert!(h.query_by_label("● modified").is_none());
    h.key_press_modifiers(
        egui::Modifiers::COMMAND | egui::Modifiers::SHIFT,
        egui::Key::Z,
    );
    h.run_steps(2);
    assert_eq!(sigma(h.state()), 0.1);
    assert!(h.query_by_label("● modified").is_some());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my_spatial.toml");
    h.state_mut().save_preset_path(&file);
    h.run_steps(2);
    assert!(h.query_by_label("● modified").is_none());
    assert_eq!(h.state().doc.preset.name, "my_spatial");
    let saved = tessera::preset::Preset::load(file.to_str().unwrap(), &[]).unwrap();
    assert_eq!(saved.preset.name, "my_spatial");
}

/// Every pane with an image has a colour bar with its unit (intensity; m/s for an FWI model), and
/// an FWI model a scale bar in metres.
#[test]
fn panes_have_colour_bars_with_units_and_fwi_models_a_scale_bar() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    send(
        &end,
        ramp_preview(1, PreviewKind::Reconstruction, 32, 0.0, 1.0),
    );
    step_until(&mut h, "the reconstruction", |wb| {
        wb.shown_reconstruction().is_some()
    });
    h.run_steps(2);
    // The reconstruction's auto window on a 0..1 ramp (1st to 99th percentile), and the colour
    // sample's bar (its channels, no colormap).
    assert!(h.query_by_label("1.000 intensity").is_some());
    assert!(h.query_all_by_label_contains("R, G, B ").next().is_some());
    finish(&end, 1);
    step_until(&mut h, "the end", |wb| !wb.session.is_busy());
    h.get_by_role_and_label(Role::Button, "fwi_marmousi")
        .click();
    h.run_steps(2);
    assert!(
        h.query_all_by_label("the model shows here once the run starts (Run, Ctrl+R)")
            .next()
            .is_some()
    );
    submit(&mut h, &end, 2);
    send(&end, fwi_started(2, 32));
    send(
        &end,
        ramp_preview(2, PreviewKind::Reconstruction, 32, 1500.0, 4500.0),
    );
    step_until(&mut h, "the inverted model", |wb| {
        wb.shown_reconstruction().is_some()
    });
    h.run_steps(2);
    // 32 cells of 10 m: a 50 m bar (the round length nearest a fifth of 320 m), on the model.
    let pane = h
        .get_by_role_and_label(Role::Image, "inverted model")
        .rect();
    let scale = h.get_by_label("50 m").rect();
    assert!(pane.contains_rect(scale), "{scale:?} on {pane:?}");
    // The colour bar under the model, not pulled up over it by the scale bar's label.
    let high = h.get_by_label_contains(" m/s").rect();
    assert!(
        high.top() >= pane.bottom(),
        "the colour bar's {high:?} is under the model {pane:?}"
    );
}

/// A training job counts steps (a Multi-DSN and FWI, epochs) in the top bar and the log, not
/// iterations.
#[test]
fn training_progress_is_counted_in_steps() {
    use tessera::protocol::{LossPoint, TrainPlan};
    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "train-dncnn").click();
    h.run_steps(2);
    submit(&mut h, &end, 1);
    send(
        &end,
        Event::TrainStarted {
            job: 1,
            name: "train-dncnn".into(),
            world_size: 2,
            devices: vec![],
            plan: TrainPlan::Denoiser {
                network: "dncnn".into(),
                steps: 40,
                sigmas: vec![0.1],
            },
        },
    );
    for step in [9, 19] {
        send(
            &end,
            Event::TrainStep {
                job: 1,
                point: LossPoint { step, loss: 0.01 },
            },
        );
    }
    step_until(&mut h, "two steps", |wb| {
        wb.session
            .training
            .as_ref()
            .is_some_and(|t| t.steps.len() == 2)
    });
    assert!(h.query_by_label("job 1 running: step 20/40").is_some());
    send(
        &end,
        Event::Cancelled {
            job: 1,
            iterations: 20,
            run_dir: None,
            outputs: vec![],
            summary_json: None,
        },
    );
    step_until(&mut h, "the end", |wb| !wb.session.is_busy());
    assert!(
        log_of(h.state())
            .iter()
            .any(|l| l == "job 1 cancelled after 20 step(s)"),
        "{:#?}",
        log_of(h.state())
    );
}

/// Latencies on a real 2-rank backend (a measurement, printed, not asserted: run with
/// `cargo test --release --test gui -- --ignored --nocapture latencies`): from Run to the first
/// preview on screen, the frame time (`Harness::step`, CPU) while the run's previews stream, and
/// from a mouse move over a pane to the readout naming the new pixel.
#[test]
#[ignore = "a measurement; run it in release with --ignored --nocapture"]
fn latencies_on_a_real_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = quick_on_local_backend(&dir.path().join("out"), 2);
    if let tessera::optim::AlgorithmConfig::Pnp(c) = &mut h.state_mut().doc.preset.algorithm {
        c.iterations = 400;
    }
    h.state_mut().doc.preset.image.size = Some(vec![512, 512]);
    h.state_mut().edited();
    step_until(&mut h, "the 512² sample", |wb| {
        !wb.data_loading() && wb.shown_data_size() == Some([512, 512])
    });
    let q = |times: &mut Vec<f64>, p: f64| {
        times.sort_by(f64::total_cmp);
        times[((times.len() - 1) as f64 * p).round() as usize]
    };
    let click = Instant::now();
    h.get_by_role_and_label(Role::Button, "Run").click();
    let mut frames = Vec::new();
    while h.state().shown_reconstruction().is_none_or(|(k, _)| k == 0) {
        assert!(click.elapsed() < Duration::from_secs(120), "a preview");
        let t = Instant::now();
        h.step();
        frames.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(2));
    }
    let first_preview = click.elapsed();
    // Previews stream until the run ends.
    let frame = Duration::from_micros(16_667);
    let mut streaming = Vec::new();
    let mut shown = std::collections::HashSet::new();
    while h.state().session.is_busy() && streaming.len() < 2000 {
        let t = Instant::now();
        h.step();
        let dt = t.elapsed();
        streaming.push(dt.as_secs_f64() * 1e3);
        if let Some((k, _)) = h.state().shown_reconstruction() {
            shown.insert(k);
        }
        if let Some(rest) = frame.checked_sub(dt) {
            std::thread::sleep(rest);
        }
    }
    // Hover: move over the reconstruction pane, then step until the readout names the pixel.
    let pane = h
        .get_by_role_and_label(Role::Image, "Reconstruction")
        .rect();
    let mut hover = Vec::new();
    for k in 0..20 {
        let at = pane.center() + egui::vec2(k as f32 * 3.0 - 30.0, 0.0);
        let before = h.state().viewer().hover;
        let t = Instant::now();
        h.event(egui::Event::PointerMoved(at));
        for _ in 0..10 {
            h.step();
            if h.state().viewer().hover != before {
                break;
            }
        }
        hover.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "Run → first preview on screen: {:.0} ms ({} frames, frame p95 {:.1} ms)",
        first_preview.as_secs_f64() * 1e3,
        frames.len(),
        q(&mut frames, 0.95)
    );
    println!(
        "frame CPU time while {} previews of 512x512x3 streamed: {} frames, p50 {:.2} ms, p95 \
         {:.2} ms, max {:.2} ms",
        shown.len(),
        streaming.len(),
        q(&mut streaming, 0.5),
        q(&mut streaming, 0.95),
        q(&mut streaming, 1.0)
    );
    println!(
        "mouse move → readout updated: p50 {:.2} ms, p95 {:.2} ms (one frame each)",
        q(&mut hover, 0.5),
        q(&mut hover, 0.95)
    );
}

/// The menu bar's Help lists the shortcuts, and its Edit menu undoes like Ctrl+Z.
#[test]
fn the_menu_bar_lists_the_shortcuts_and_undoes() {
    let (mut h, _end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography2d")
        .click();
    h.run_steps(2);
    h.state_mut().doc.preset.seed = 7;
    h.state_mut().edited();
    h.get_by_role_and_label(Role::Button, "Edit").click();
    h.run_steps(2);
    h.get_by_label_contains("Undo").click();
    h.run_steps(2);
    assert_eq!(h.state().doc.preset.seed, 0);

    h.get_by_role_and_label(Role::Button, "Help").click();
    h.run_steps(2);
    h.get_by_label("Keyboard shortcuts…").click();
    h.run_steps(2);
    assert!(h.query_by_label("Page Up / Page Down").is_some());
    assert!(
        h.query_by_label("undo the last edit of the experiment")
            .is_some()
    );
}

/// Opening another preset over unsaved edits asks first: Cancel keeps the edited experiment,
/// Discard changes opens the other one.
#[test]
fn opening_another_preset_over_unsaved_edits_asks_first() {
    let (mut h, _end) = ready_workbench();
    h.state_mut().doc.preset.seed = 7;
    h.state_mut().edited();
    assert!(h.state().doc.is_modified());
    h.get_by_role_and_label(Role::Button, "tomography2d")
        .click();
    // The click is taken in one frame, the question asked in the next.
    h.run_steps(3);
    assert!(h.query_by_label("Discard the unsaved changes?").is_some());
    assert_eq!(h.state().doc.preset.name, "quick");
    h.get_by_role_and_label(Role::Button, "Cancel").click();
    h.run_steps(2);
    assert!(h.query_by_label("Discard the unsaved changes?").is_none());
    assert_eq!(
        (
            h.state().doc.preset.name.as_str(),
            h.state().doc.preset.seed
        ),
        ("quick", 7)
    );
    h.get_by_role_and_label(Role::Button, "tomography2d")
        .click();
    // The click is taken in one frame, the question asked in the next.
    h.run_steps(3);
    h.get_by_role_and_label(Role::Button, "Discard changes")
        .click();
    // The click is taken in one frame, the question asked in the next.
    h.run_steps(3);
    assert_eq!(h.state().doc.preset.name, "tomography2d");
    assert!(h.query_by_label("● modified").is_none());
}

/// Orthogonal views of the reconstruction come back by themselves when the next run's volume is
/// read back (they are not left empty until the slice moves).
#[test]
fn orthogonal_views_return_with_the_next_runs_volume() {
    use tessera::gui::preview::Slot;
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("20250101-120000-tomography3d-1");
    std::fs::create_dir_all(&run).unwrap();
    let volume = tessera::Tensor::from_fn(&[1, 1, 8, 6, 5], |i| (i / 30) as f32);
    tessera::io::write_npy(&run.join("reconstruction.npy"), &volume).unwrap();
    std::fs::write(
        run.join("metrics.json"),
        r#"{"name": "tomography3d", "iterations": 1}"#,
    )
    .unwrap();
    let (mut h, end) = ready_workbench();
    h.get_by_role_and_label(Role::Button, "tomography3d")
        .click();
    h.run_steps(2);
    step_until(&mut h, "the volume", |wb| !wb.data_loading());
    for job in [1, 2] {
        submit(&mut h, &end, job);
        send(
            &end,
            Event::Finished {
                job,
                run_dir: run.clone(),
                outputs: vec!["reconstruction.npy".into(), "metrics.json".into()],
                summary_json: "{}".into(),
            },
        );
        step_until(&mut h, "the run's volume", |wb| {
            wb.viewer()
                .arrays
                .get(&Slot::Reconstruction)
                .is_some_and(|t| t.shape().len() == 5)
        });
        if job == 1 {
            h.state_mut().set_orthogonal(Some(Slot::Reconstruction));
        }
        step_until(&mut h, "the cuts of the reconstruction", |wb| {
            (0..3).all(|a| wb.viewer().shown.contains_key(&Slot::Ortho(a)))
        });
    }
}

/// A reopened Multi-DSN run's Reconstructions tab draws each domain's grid whole, scaled to the
/// tab: a wide grid is not cut off at the window's edge nor under the log, and the domains sit
/// side by side.
#[test]
fn dsn_reconstructions_fit_the_tab() {
    use tessera::gui::history::Purpose;
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("20250101-120000-dsn_shapes-1");
    std::fs::create_dir_all(run.join("reconstructions")).unwrap();
    // 4 rows of 32 held-out 16² images (a wide grid), and 4 rows of 2 (a small one).
    for (domain, images) in [("source", 32u32), ("tomography", 2)] {
        image::RgbImage::from_fn(16 * images, 64, |x, y| {
            image::Rgb([(x % 16 * 16) as u8, (y * 4) as u8, 99])
        })
        .save(run.join(format!("reconstructions/{domain}.png")))
        .unwrap();
    }
    let summary = serde_json::json!({
        "name": "dsn_shapes",
        "ranks": 2,
        "domains": ["source", "tomography"],
        "similarity": "dann",
        "source_only": false,
        "shared_parameters": 100,
        "private_parameters_per_domain": 50,
        "epochs": [],
        "per_rank": [],
        "weights": "dsn.safetensors",
        "reconstructions": ["reconstructions/source.png", "reconstructions/tomography.png"],
    });
    std::fs::write(run.join("train.json"), summary.to_string()).unwrap();

    let (mut h, _end) = ready_workbench();
    h.state_mut().open_run(&run, Purpose::Reopen);
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Reconstructions")
        .click();
    h.run_steps(3);
    let log_top = h.get_by_label("Log").rect().top();
    let wide = h.get_by_label("reconstructions of source").rect();
    let small = h.get_by_label("reconstructions of tomography").rect();
    for (name, r, aspect) in [("source", wide, 8.0), ("tomography", small, 0.5)] {
        assert!(
            r.right() <= 1400.0 && r.bottom() <= log_top,
            "{name}'s grid {r:?} is cut off (window 1400 wide, log at {log_top})"
        );
        assert!(
            (r.width() / r.height() - aspect).abs() < 0.05,
            "{name}'s grid keeps its shape: {r:?}"
        );
    }
    assert!(
        small.left() > wide.right(),
        "side by side: {wide:?}, {small:?}"
    );
}

/// The quality plots name their curves in a legend (a converged run's PSNR is a flat line that
/// said nothing of what it was).
#[test]
fn the_quality_plots_name_their_curves() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    for k in 1..=3 {
        send(&end, iteration(1, k, 30.0));
    }
    step_until(&mut h, "the iterations", |wb| wb.session.history.len() == 3);
    h.run_steps(2);
    for name in [
        "PSNR of the reconstruction against the ground truth",
        "data fidelity (the objective reported)",
    ] {
        assert!(
            h.query_by_role_and_label(Role::CheckBox, name).is_some(),
            "{name} in a legend"
        );
    }
}

/// A preview of the reconstruction at `iteration` whose every pixel is `iteration / 100`.
fn flat_preview(job: u64, iteration: usize, side: u32) -> Event {
    preview_of(job, iteration, PreviewKind::Reconstruction, side, |_, _| {
        iteration as f32 / 100.0
    })
}

/// The reconstruction pane's iteration and its value in the middle.
fn reconstruction_at_centre(wb: &Workbench) -> Option<(usize, f32)> {
    let (iteration, _) = wb.shown_reconstruction()?;
    let (_, v) = wb.viewer().value_at(
        tessera::gui::preview::Slot::Reconstruction,
        egui::pos2(0.5, 0.5),
    )?;
    Some((iteration, v[0]))
}

/// The timeline under the panes: "earlier" steps back through the run's previews (pane, readout
/// and caption), new previews leave the chosen one on screen, "live" follows them again.
#[test]
fn the_timeline_steps_back_through_previews_and_live_follows_new_ones() {
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    for k in 1..=5 {
        send(&end, iteration(1, k, 20.0));
        send(&end, flat_preview(1, k, 32));
        // One preview per frame, as a job streams them (the pump maps only the newest of a batch).
        step_until(&mut h, "the preview", |wb| {
            wb.shown_reconstruction().map(|s| s.0) == Some(k)
        });
    }
    assert_eq!(h.state().viewer().timeline.frames().len(), 5);
    h.get_by_role_and_label(Role::Button, "earlier").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "earlier").click();
    step_until(&mut h, "iteration 3 on screen", |wb| {
        reconstruction_at_centre(wb) == Some((3, 0.03))
    });
    assert!(
        h.query_by_label_contains("Reconstruction (iteration 3)")
            .is_some()
    );
    assert!(h.query_by_label_contains("iteration 3 (held").is_some());

    // The run goes on: the pane stays on iteration 3, the timeline grows.
    for k in 6..=7 {
        send(&end, iteration(1, k, 20.0));
        send(&end, flat_preview(1, k, 32));
        step_until(&mut h, "the preview kept", |wb| {
            wb.viewer().timeline.frames().len() == k
        });
    }
    h.run_steps(3);
    assert_eq!(reconstruction_at_centre(h.state()), Some((3, 0.03)));

    h.get_by_role_and_label(Role::Button, "live").click();
    step_until(&mut h, "the newest preview", |wb| {
        reconstruction_at_centre(wb) == Some((7, 0.07))
    });
    send(&end, iteration(1, 8, 20.0));
    send(&end, flat_preview(1, 8, 32));
    step_until(&mut h, "live follows", |wb| {
        reconstruction_at_centre(wb) == Some((8, 0.08))
    });
}

/// A preview of `what` at `iteration` (one channel, `side`²) whose value is `f(x, y)`.
fn preview_of(
    job: u64,
    iteration: usize,
    what: PreviewKind,
    side: u32,
    f: impl Fn(u32, u32) -> f32,
) -> Event {
    Event::Preview {
        job,
        iteration,
        what,
        image: PreviewImage {
            width: side,
            height: side,
            channels: 1,
            slice: None,
            pixels: (0..side * side).map(|i| f(i % side, i / side)).collect(),
        },
    }
}

/// Ctrl+drag over a pane draws a box: the Profile tab shows each pane's statistics in it and
/// PSNR/SSIM against the ground truth there; the box's statistics and the line profile export as
/// CSV through the save dialog's typed path.
#[test]
fn a_box_shows_its_statistics_and_the_profile_and_box_export_as_csv() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, end) = ready_workbench();
    submit(&mut h, &end, 1);
    // Ground truth 0.5 everywhere; the reconstruction 0.5 on the left half and 0.6 on the right.
    send(
        &end,
        preview_of(1, 1, PreviewKind::GroundTruth, 40, |_, _| 0.5),
    );
    send(
        &end,
        preview_of(1, 1, PreviewKind::Reconstruction, 40, |x, _| {
            if x < 20 { 0.5 } else { 0.6 }
        }),
    );
    step_until(&mut h, "both panes", |wb| {
        wb.shown_reconstruction().is_some()
            && wb.shown(tessera::gui::preview::Slot::GroundTruth).is_some()
    });
    h.get_by_role_and_label(Role::Button, "Profile").click();
    h.run_steps(2);

    // Ctrl+drag over the reconstruction pane, from its centre down to the right.
    let pane = h
        .get_by_role_and_label(Role::Image, "Reconstruction")
        .rect();
    let (from, to) = (
        pane.center(),
        pane.center() + egui::vec2(pane.width() * 0.3, pane.height() * 0.3),
    );
    let ctrl = egui::Modifiers::COMMAND;
    h.event(egui::Event::ModifiersChanged(ctrl));
    h.event(egui::Event::PointerMoved(from));
    h.run_steps(1);
    h.event(egui::Event::PointerButton {
        pos: from,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: ctrl,
    });
    h.run_steps(1);
    for k in 1..=10 {
        h.event(egui::Event::PointerMoved(
            from + (to - from) * (k as f32 / 10.0),
        ));
        h.run_steps(1);
    }
    h.event(egui::Event::PointerButton {
        pos: to,
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: ctrl,
    });
    h.event(egui::Event::ModifiersChanged(egui::Modifiers::NONE));
    h.run_steps(3);
    assert!(h.state().viewer().profile.is_none(), "a box, not a line");
    let report = h.state().roi_report().expect("a box is drawn");
    let [x0, x1, _, _] = report.box_px.unwrap();
    assert!((19..=21).contains(&x0) && x1 > 28, "{report:?}");
    let recon = &report.panes[0];
    assert_eq!(recon.0, "Reconstruction");
    assert!((recon.1[0].max - 0.6).abs() < 1e-6, "{report:?}");
    // PSNR in the box: the share of 0.1 errors sets it, not the whole image's.
    let Some(Ok((psnr, ssim))) = report.fidelity.clone() else {
        panic!("{report:?}")
    };
    assert!((19.5..40.0).contains(&psnr), "{psnr}");
    assert!(ssim.is_some(), "the box is larger than the SSIM window");
    assert!(
        h.query_by_label_contains("in the box, reconstruction vs ground truth: PSNR")
            .is_some()
    );

    // The box's statistics as CSV, through the save dialog (its suggested path: Save).
    h.state_mut().app_state.last_folder = Some(dir.path().to_path_buf());
    h.get_by_role_and_label(Role::Button, "Export box statistics as CSV…")
        .click();
    h.run_steps(2);
    assert!(h.state().dialog_open(), "the save dialog is open");
    h.run_steps(10);
    h.get_by_role_and_label(Role::Button, "Save").click();
    h.run_steps(2);
    let csv = dir.path().join("quick-box.csv");
    let text = std::fs::read_to_string(&csv).expect("the CSV file");
    assert!(
        text.contains("pane,channel,pixels,mean,std,min,max"),
        "{text}"
    );
    assert!(text.contains("\"Reconstruction\",0,"), "{text}");
    assert!(text.contains("reconstruction vs ground truth,"), "{text}");

    // A line profile, exported the same way: a column per pane.
    h.state_mut()
        .set_profile(Some((egui::pos2(0.1, 0.5), egui::pos2(0.9, 0.5))));
    h.run_steps(2);
    let profile = dir.path().join("profile.csv");
    h.state_mut()
        .export_csv(tessera::gui::dialogs::CsvExport::Profile, &profile);
    let text = std::fs::read_to_string(&profile).expect("the profile CSV");
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("distance_px,\"Reconstruction\""),
        "{header}"
    );
    assert!(header.contains("Ground truth"), "{header}");
    let last: Vec<&str> = lines.last().unwrap().split(',').collect();
    assert_eq!(last[1], "0.6", "the reconstruction's right half: {text}");
    assert_eq!(last[last.len() - 1], "0.5", "the ground truth: {text}");
}

/// Four panes in a tall window make a 2×2 grid (each image larger than in one row, none off the
/// window); F over a pane shows it alone, F again every pane; 1:1 shows one image pixel per
/// screen pixel and "fit" the whole image again.
#[test]
fn panes_fit_the_window_one_goes_full_size_and_zoom_goes_1_to_1() {
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 0.5),
        (PreviewKind::Measurement(0), 0.0, 10.0),
    ]);
    h.get_by_role_and_label(Role::CheckBox, "difference")
        .click();
    // The click lands in this window's layout: the header wraps, so resizing first could move
    // the checkbox from under it.
    h.run_steps(1);
    h.set_size(egui::vec2(1000.0, 1600.0));
    h.run_steps(4);
    let pane = |h: &Harness<'_, Workbench>, title: &str| {
        h.get_by_role_and_label(Role::Image, title).rect()
    };
    let recon = pane(&h, "Reconstruction");
    let measurement = pane(&h, "Measurement");
    let truth = pane(&h, "Ground truth");
    let difference = pane(&h, "Reconstruction − ground truth");
    assert!(
        truth.top() > recon.bottom() && (truth.left() - recon.left()).abs() < 1.0,
        "a second row: {recon:?} {truth:?}"
    );
    assert!(
        measurement.left() > recon.right(),
        "{recon:?} {measurement:?}"
    );
    assert!(
        difference.right() <= 1000.0,
        "inside the window: {difference:?}"
    );
    assert!(
        recon.width() > 250.0,
        "larger than a quarter of the row: {recon:?}"
    );

    // F over the measurement pane: it alone, larger; F again: every pane.
    h.event(egui::Event::PointerMoved(measurement.center()));
    h.run_steps(2);
    h.key_press(egui::Key::F);
    h.run_steps(3);
    assert!(
        h.query_by_role_and_label(Role::Image, "Reconstruction")
            .is_none()
    );
    assert!(pane(&h, "Measurement").width() > measurement.width() * 1.5);
    h.key_press(egui::Key::F);
    h.run_steps(3);
    assert!(
        h.query_by_role_and_label(Role::Image, "Reconstruction")
            .is_some()
    );

    // The 32² images are enlarged to fit; 1:1 draws them at their size, fit enlarges again.
    assert!(h.query_by_label_contains("zoom 100 %").is_none());
    h.get_by_role_and_label(Role::Button, "1:1").click();
    h.run_steps(3);
    assert!(h.query_by_label("zoom 100 %").is_some());
    let px = h.state().viewer().view.zoom;
    assert!(px < 1.0, "zoomed out below the fit: {px}");
    h.get_by_role_and_label(Role::Button, "fit").click();
    h.run_steps(3);
    assert_eq!(h.state().viewer().view.zoom, 1.0);
}

/// Escape right after Ctrl+R, before the backend has accepted the job (the window shows
/// "submitted…"; on a loaded machine that lasts a while), stops the job the moment it is accepted.
/// The press used to be dropped: the job ran on until a second press, iterations later than a
/// Stop clicked once it was running.
#[test]
fn escape_before_the_job_is_accepted_stops_it_once_accepted() {
    let (mut h, end) = ready_workbench();
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::R);
    h.run_steps(2);
    assert!(matches!(next_request(&end), Request::Submit { .. }));
    assert_eq!(h.state().session.state(), &JobState::Submitted);
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("submitted, stopping once accepted")
            .is_some()
    );
    send(&end, Event::Accepted { job: 5 });
    step_until(&mut h, "the job accepted", |wb| {
        wb.session.state() != &JobState::Submitted
    });
    assert_eq!(h.state().session.state(), &JobState::Stopping { job: 5 });
    assert_eq!(next_request(&end), Request::Cancel { job: 5 });

    // The Stop was used up: the next job runs.
    h.state_mut().session.apply(Event::Cancelled {
        job: 5,
        iterations: 0,
        run_dir: None,
        outputs: vec![],
        summary_json: None,
    });
    submit(&mut h, &end, 6);
    step_until(&mut h, "the job accepted", |wb| {
        wb.session.state() != &JobState::Submitted
    });
    assert_eq!(h.state().session.state(), &JobState::Running { job: 6 });
}

/// The yellow line segments drawn last frame (the line profile) and the alpha of each.
fn profile_strokes(h: &Harness<'_, Workbench>) -> Vec<u8> {
    h.output()
        .shapes
        .iter()
        .filter_map(|c| match &c.shape {
            egui::Shape::LineSegment { stroke, .. } => {
                let [r, g, b, a] = stroke.color.to_array();
                (r > 0 && r == g && b == 0).then_some(a)
            }
            _ => None,
        })
        .collect()
}

/// The Layers menu holds each overlay's visibility and opacity: the line profile drawn over the
/// panes fades with its opacity and goes with its checkbox, and the crosshair, box and patch map
/// are listed beside it.
#[test]
fn the_layers_menu_hides_and_fades_the_overlays() {
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::Measurement(0), 0.0, 1.0),
    ]);
    h.state_mut()
        .set_profile(Some((egui::pos2(0.2, 0.5), egui::pos2(0.8, 0.5))));
    h.run_steps(2);
    let opaque = profile_strokes(&h);
    assert!(
        !opaque.is_empty() && opaque.iter().all(|a| *a == 255),
        "{opaque:?}"
    );

    h.get_by_role_and_label(Role::Button, "layers").click();
    h.run_steps(2);
    for name in ["patch map", "line profile", "box", "crosshair"] {
        assert!(
            h.query_by_role_and_label(Role::CheckBox, name).is_some(),
            "{name}"
        );
    }
    // The profile's opacity, two keyboard steps down (0.05 each).
    h.get_all_by_role_and_label(Role::Slider, "opacity")
        .nth(1)
        .unwrap()
        .focus();
    // Two frames, as between a user's focusing and typing: egui lets a focused slider keep the
    // arrow keys only from its second focused frame; pressed sooner, an arrow moves the focus to
    // the checkbox beside it (one step, then the second press goes to the checkbox).
    h.run_steps(2);
    for _ in 0..2 {
        h.key_press(egui::Key::ArrowLeft);
        h.run_steps(1);
    }
    h.run_steps(1);
    let layers = h.state().viewer().layers;
    assert!(
        (layers.profile.opacity - 0.9).abs() < 1e-4,
        "{:?}",
        layers.profile
    );
    let faded = profile_strokes(&h);
    assert!(
        !faded.is_empty() && faded.iter().all(|a| (228..=231).contains(a)),
        "{faded:?}"
    );
    h.get_by_role_and_label(Role::CheckBox, "line profile")
        .click();
    h.run_steps(2);
    assert!(!h.state().viewer().layers.profile.visible);
    assert_eq!(profile_strokes(&h), Vec::<u8>::new(), "hidden");
    // Hidden is not cleared: the profile and its curves stay.
    assert!(h.state().viewer().profile.is_some());
    assert!(!h.state().profile_curves().is_empty());
}

/// Linked contrast: the panes of one quantity (reconstruction and ground truth) are drawn with
/// one window — in auto, spanning both images' own windows; a window typed in one pane applies to
/// the other — while a measurement keeps its own; reset returns every pane to auto contrast, and
/// unlinking gives each pane its own auto window again.
#[test]
fn linked_contrast_shares_a_window_per_quantity_and_reset_returns_to_auto() {
    use tessera::gui::preview::{Contrast, Slot};
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 0.5),
        (PreviewKind::Measurement(0), 0.0, 10.0),
    ]);
    let drawn = |wb: &Workbench, slot| wb.viewer().shown[&slot].range;
    let unlinked_truth = drawn(h.state(), Slot::GroundTruth);
    assert!(unlinked_truth.1 <= 0.5, "{unlinked_truth:?}");

    h.get_by_role_and_label(Role::CheckBox, "link contrast")
        .click();
    step_until(&mut h, "one window for both images", |wb| {
        let (r, t) = (
            drawn(wb, Slot::Reconstruction),
            drawn(wb, Slot::GroundTruth),
        );
        r == t && r.1 > 0.9
    });
    let window = drawn(h.state(), Slot::Reconstruction);
    assert!(window.0 < 0.02, "{window:?}");
    let measurement = drawn(h.state(), Slot::Measurement(0));
    assert!(
        measurement.1 > 9.0,
        "the measurement keeps its own: {measurement:?}"
    );
    // The panes' menus still say auto contrast: the shared window is the auto one.
    let chosen = |wb: &Workbench, slot| {
        wb.viewer()
            .chosen_display_of(slot, wb.app_state.display)
            .contrast
    };
    assert_eq!(chosen(h.state(), Slot::GroundTruth), Contrast::Auto);

    // A window typed in the reconstruction's menu goes to the ground truth too.
    type_low_bound_in_first_pane(&mut h, "0.25");
    h.key_press(egui::Key::Escape);
    step_until(&mut h, "the typed window on both", |wb| {
        drawn(wb, Slot::GroundTruth).0 == 0.25 && drawn(wb, Slot::Reconstruction).0 == 0.25
    });
    assert!(matches!(
        chosen(h.state(), Slot::GroundTruth),
        Contrast::Range { lo, .. } if lo == 0.25
    ));
    assert!(drawn(h.state(), Slot::Measurement(0)).1 > 9.0);

    // Reset: auto again, the shared one while linked.
    h.get_by_role_and_label(Role::Button, "reset contrast")
        .click();
    step_until(&mut h, "auto contrast, linked", |wb| {
        drawn(wb, Slot::GroundTruth) == window && drawn(wb, Slot::Reconstruction) == window
    });
    assert_eq!(chosen(h.state(), Slot::Reconstruction), Contrast::Auto);
    // Unlinked: each its own.
    h.get_by_role_and_label(Role::CheckBox, "link contrast")
        .click();
    step_until(&mut h, "each pane's own window", |wb| {
        drawn(wb, Slot::GroundTruth) == unlinked_truth
    });
}

/// With five panes (reconstruction, measurement, ground truth, difference, a compared run) each
/// pane's name shows whole: its display and full-size controls are icons over the pane, and
/// what is cut first is the caption's detail (size, folder), which shows whole on hover.
#[test]
fn pane_names_are_whole_with_five_panes() {
    use egui_kittest::kittest::NodeT;
    use tessera::gui::history::Purpose;
    use tessera::gui::preview::Slot;
    let (mut h, _end) = after_a_run(&[
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 0.5),
        (PreviewKind::Measurement(0), 0.0, 1.0),
    ]);
    let root = tempfile::tempdir().unwrap();
    let other = root.path().join("20261123-110000-quick-1");
    std::fs::create_dir_all(&other).unwrap();
    tessera::io::write_npy(
        &other.join("reconstruction.npy"),
        &tessera::Tensor::full(&[1, 1, 32, 32], 0.5),
    )
    .unwrap();
    std::fs::write(
        other.join("metrics.json"),
        r#"{"name": "quick", "iterations": 10}"#,
    )
    .unwrap();
    h.get_by_role_and_label(Role::CheckBox, "difference")
        .click();
    h.run_steps(2);
    h.state_mut().open_run(&other, Purpose::Compare);
    step_until(&mut h, "five panes", |wb| {
        wb.shown(Slot::Difference).is_some()
    });
    h.run_steps(2);
    let font = egui::TextStyle::Body.resolve(&h.ctx.global_style());
    let names = [
        "Reconstruction",
        "Measurement",
        "Ground truth",
        "Reconstruction − compared run",
        "Compared:",
    ];
    // The compared run's captions come a frame or more after its difference image (its folder
    // is read off the UI thread): wait for every one before measuring.
    let start = Instant::now();
    while !names.iter().all(|name| {
        h.query_all_by_label_contains(name)
            .any(|n| n.accesskit_node().role() == Role::Label)
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "timed out waiting for the five panes' captions"
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    for name in names {
        let width = h.ctx.fonts_mut(|f| {
            f.layout_no_wrap(name.to_string(), font.clone(), egui::Color32::WHITE)
                .size()
                .x
        });
        let caption = h
            .query_all_by_label_contains(name)
            .filter(|n| n.accesskit_node().role() == Role::Label)
            .min_by(|a, b| a.rect().min.y.total_cmp(&b.rect().min.y))
            .unwrap_or_else(|| panic!("a caption starting {name}"));
        assert!(
            caption.rect().width() + 0.5 >= width,
            "{name}: {} of {width} points shown",
            caption.rect().width()
        );
    }
    assert_eq!(h.get_all_by_role_and_label(Role::Button, "full").count(), 5);
    assert_eq!(
        h.get_all_by_role_and_label(Role::Button, "display").count(),
        5
    );
}

/// A `quick` run whose `metrics.json` records `preset` (TOML).
fn run_folder_with_preset(
    root: &Path,
    name: &str,
    preset: &str,
    stopped: bool,
) -> std::path::PathBuf {
    let ramp = tessera::Tensor::from_fn(&[1, 1, 16, 24], |i| (i % 24) as f32);
    write_run_folder(
        root,
        name,
        &[("reconstruction.npy", ramp)],
        serde_json::json!({"name": "quick", "iterations": 5, "stopped_early": stopped,
            "reconstruction": {"psnr_db": 30.5}, "preset": preset}),
    )
}

/// The run browser: each run with a thumbnail and its input's name; notes typed on a run are
/// kept in its folder's notes.txt and leave its outputs as they were; the list filters by text
/// and status; delete asks first, removes that run's folder and nothing else, and a failed delete
/// says why.
#[test]
fn the_run_browser_shows_thumbnails_inputs_notes_filters_and_deletes_one_run() {
    let root = tempfile::tempdir().unwrap();
    let cells = run_folder_with_preset(
        root.path(),
        "20250101-120000-quick-1",
        "[image]\npath = \"photos/cells.png\"\n",
        false,
    );
    std::thread::sleep(Duration::from_millis(20));
    let sample = run_folder_with_preset(
        root.path(),
        "20250101-120500-quick-2",
        "[image]\nsample = \"natural\"\n",
        true,
    );
    std::thread::sleep(Duration::from_millis(20));
    let third = run_folder_with_preset(
        root.path(),
        "20250101-121000-quick-3",
        "[image]\nsample = \"natural\"\n",
        false,
    );
    std::fs::write(root.path().join("keep.txt"), "not a run").unwrap();
    let outputs_before: Vec<Vec<u8>> = ["reconstruction.npy", "metrics.json"]
        .iter()
        .map(|f| std::fs::read(cells.join(f)).unwrap())
        .collect();
    let (mut h, _end) = with_runs_under(root.path());
    step_until(&mut h, "the runs", |wb| wb.runs.runs.len() == 3);
    h.get_by_role_and_label(Role::Button, "Runs").click();
    h.run_steps(2);
    for run in ["20250101-120000-quick-1", "20250101-120500-quick-2"] {
        assert!(
            h.query_by_label(&format!("thumbnail of {run}")).is_some(),
            "{run}"
        );
    }
    assert!(h.query_by_label("cells.png").is_some());
    assert_eq!(h.query_all_by_label("sample natural").count(), 2);

    // Notes, committed with Enter.
    let notes = h.get_by_label("notes of 20250101-120000-quick-1");
    notes.focus();
    h.run_steps(1);
    h.get_by_label("notes of 20250101-120000-quick-1")
        .type_text("sharp edges");
    h.key_press(egui::Key::Enter);
    h.run_steps(2);
    assert_eq!(
        std::fs::read_to_string(cells.join("notes.txt")).unwrap(),
        "sharp edges"
    );
    let outputs_after: Vec<Vec<u8>> = ["reconstruction.npy", "metrics.json"]
        .iter()
        .map(|f| std::fs::read(cells.join(f)).unwrap())
        .collect();
    assert!(outputs_after == outputs_before, "the outputs are untouched");
    assert_eq!(h.state().runs.runs[2].notes, "sharp edges");

    // Filter by the notes' words, then by status.
    h.get_by_role_and_label(Role::TextInput, "filter").focus();
    h.run_steps(1);
    h.get_by_role_and_label(Role::TextInput, "filter")
        .type_text("SHARP");
    h.run_steps(2);
    assert!(h.query_by_label("1 of 3 runs match").is_some());
    assert!(
        h.query_by_label("notes of 20250101-120500-quick-2")
            .is_none()
    );
    h.get_by_role_and_label(Role::Button, "clear filter")
        .click();
    h.run_steps(2);
    h.get_by_label("status filter").click();
    h.run_steps(2);
    h.get_by_label("stopped").click();
    h.run_steps(2);
    assert!(h.query_by_label("1 of 3 runs match").is_some());
    assert!(
        h.query_by_label("notes of 20250101-120500-quick-2")
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "clear filter")
        .click();
    h.run_steps(2);

    // Delete the middle run: asked first, then only its folder goes.
    h.get_all_by_role_and_label(Role::Button, "delete")
        .nth(1)
        .unwrap()
        .click();
    h.run_steps(2);
    h.run_steps(1);
    assert!(sample.exists(), "not before the confirmation");
    h.get_by_role_and_label(Role::Button, "Delete the run")
        .click();
    h.run_steps(2);
    assert!(!sample.exists());
    assert!(cells.join("notes.txt").is_file() && third.is_dir());
    assert!(root.path().join("keep.txt").is_file());
    assert_eq!(h.state().runs.runs.len(), 2);

    // A run gone from the disk meanwhile: the deletion fails and says why; the list keeps it.
    std::fs::remove_dir_all(&third).unwrap();
    // The mouse reaches the button before it clicks, as a user's does: a click sent in one
    // event with the pointer's jump from where the confirmation was, two frames after it
    // closed, never reached the button (egui saw no click on it).
    h.get_all_by_role_and_label(Role::Button, "delete")
        .next()
        .unwrap()
        .hover();
    h.run_steps(2);
    h.get_all_by_role_and_label(Role::Button, "delete")
        .next()
        .unwrap()
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Delete the run")
        .click();
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("could not delete it: reading the run folder failed")
            .is_some()
    );
    h.get_by_role_and_label(Role::Button, "Cancel").click();
    h.run_steps(2);
    assert!(cells.is_dir() && root.path().join("keep.txt").is_file());
}
