//! Screenshots of the workbench rendered with wgpu, compared with the PNGs in tests/snapshots/
//! (`UPDATE_SNAPSHOTS=1` rewrites them). Needs the `snapshots` feature and a Vulkan driver (on
//! headless machines mesa's lavapipe, installed by .ci/run).
#![cfg(feature = "snapshots")]

use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use tessera::gui::session::JobState;
use tessera::gui::{AppState, ChannelBackend, Incoming, Workbench, WorkbenchOptions};
use tessera::protocol::{ComponentTimes, IterationReport};
use tessera::protocol::{Event, OperatorInfo, PreviewImage, PreviewKind, RankIteration, Request};

fn step_until(h: &mut Harness<'_, Workbench>, what: &str, done: impl Fn(&Workbench) -> bool) {
    let start = Instant::now();
    while !done(h.state()) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    h.step();
}

/// The workbench at the snapshots' size on a channel backend the test plays.
fn on_a_test_backend() -> (Harness<'static, Workbench>, tessera::gui::TestEnd) {
    let (link, end) = ChannelBackend::pair("test backend");
    let mut link = Some(link);
    let wb = Workbench::new(WorkbenchOptions {
        starter: Box::new(move |_| {
            link.take()
                .ok_or_else(|| tessera::Error::Unsupported("one backend only".into()))
        }),
        start_backend: true,
        preset: None,
        state_path: None,
        state: AppState::default(),
        output_root: None,
    });
    let h = Harness::builder()
        .with_size([1400.0, 1000.0])
        .build_ui_state(|ui, wb: &mut Workbench| wb.ui(ui), wb);
    (h, end)
}

#[test]
fn workbench_after_a_run() {
    let (mut h, end) = on_a_test_backend();
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    // multiblur has a tiled denoiser: its patch map is drawn over the ground truth.
    h.get_by_role_and_label(Role::Button, "multiblur").click();
    h.run_steps(2);
    step_until(&mut h, "the sample on screen", |wb| {
        wb.shown_data_size() == Some([1024, 683])
    });
    h.run_steps(4);
    h.snapshot("workbench_patch_map");

    h.get_by_role_and_label(Role::Button, "quick").click();
    h.run_steps(2);
    step_until(&mut h, "the sample on screen", |wb| {
        wb.shown_data_size() == Some([128, 128])
    });
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    while end.requests.recv_timeout(Duration::from_secs(5)).unwrap() == Request::Status {}
    let send = |e| end.events.send(Incoming::Event(e)).unwrap();
    send(Event::Accepted { job: 1 });
    send(Event::Started {
        job: 1,
        name: "quick".into(),
        world_size: 2,
        devices: vec![],
        image_shape: vec![1, 3, 128, 128],
        operators: vec![OperatorInfo {
            name: "blur".into(),
            rank: 0,
        }],
        iterations: 10,
        patch_map: None,
    });
    let side = 128u32;
    for k in 1..=10usize {
        send(Event::Iteration {
            job: 1,
            report: IterationReport {
                iteration: k,
                iterations: 10,
                psnr_db: Some(20.0 + 5.0 * (1.0 - (-(k as f64) / 3.0).exp())),
                ssim: None,
                objective: None,
                relative_change: 0.01,
                times: ComponentTimes::default(),
            },
            ranks: (0..2)
                .map(|rank| RankIteration {
                    rank,
                    gradient_secs: 0.010 + 0.004 * rank as f64,
                    denoiser_secs: 0.020 - 0.002 * rank as f64,
                    communication_secs: 0.002,
                })
                .collect(),
        });
    }
    send(Event::Preview {
        job: 1,
        iteration: 10,
        what: PreviewKind::Reconstruction,
        image: PreviewImage {
            width: side,
            height: side,
            channels: 1,
            slice: None,
            pixels: (0..side * side)
                .map(|i| (((i % side) / 16 + (i / side) / 16) % 2) as f32)
                .collect(),
        },
    });
    send(Event::Finished {
        job: 1,
        run_dir: "/runs/20261123-120000-quick-1".into(),
        outputs: vec![],
        summary_json: "{}".into(),
    });
    step_until(&mut h, "the run", |wb| {
        wb.session.state() == &JobState::Finished { job: 1 } && wb.shown_reconstruction().is_some()
    });
    h.run_steps(4);
    h.snapshot("workbench_after_run");

    // Measured data: a loaded file per operator (shown before any run) and an unknown image.
    let dir = tempfile::tempdir().unwrap();
    let y = dir.path().join("blurred.npy");
    let stripes = tessera::Tensor::from_fn(&[1, 3, 128, 128], |i| ((i / 8) % 2) as f32 * 0.8);
    tessera::io::write_npy(&y, &stripes).unwrap();
    h.get_by_role_and_label(Role::RadioButton, "loaded").click();
    h.run_steps(2);
    h.state_mut().open_measurement_path(0, &y);
    step_until(&mut h, "the measurement on screen", |wb| {
        wb.shown_measurement(0).is_some()
    });
    h.get_by_role_and_label(Role::ComboBox, "sample").click();
    h.run_steps(2);
    h.get_by_label("none (measured data)").click();
    h.run_steps(4);
    h.snapshot("workbench_measured_data");
}

/// A Multi-DSN on screen: the set-up panel, per-domain losses and accuracies, and the Training
/// tab's per-rank times (events played by the test, so the picture is the same on every run).
#[test]
fn workbench_training_a_multi_dsn() {
    use tessera::protocol::{DomainLosses, DsnEpochReport, TrainPlan};
    let (mut h, end) = on_a_test_backend();
    step_until(&mut h, "the backend", |wb| wb.has_backend());
    h.get_by_role_and_label(Role::Button, "dsn_shapes").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    while end.requests.recv_timeout(Duration::from_secs(5)).unwrap() == Request::Status {}
    let send = |e| end.events.send(Incoming::Event(e)).unwrap();
    let domains = ["source", "blurred", "noisy", "tomography"];
    send(Event::Accepted { job: 1 });
    send(Event::TrainStarted {
        job: 1,
        name: "dsn_shapes".into(),
        world_size: 2,
        devices: vec![],
        plan: TrainPlan::Dsn {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            epochs: 8,
            steps_per_epoch: 20,
            similarity: "mmd".into(),
        },
    });
    let mut epochs = Vec::new();
    for k in 0..8usize {
        let t = k as f64;
        let report = DsnEpochReport {
            epoch: k,
            losses: (0..4)
                .map(|d| DomainLosses {
                    task: if d == 0 { 1.2 * (-t / 3.0).exp() } else { 0.0 },
                    reconstruction: 0.4 * (-t / 4.0).exp() + 0.05 * d as f64,
                    difference: 0.02,
                    similarity: 0.1 * (-t / 5.0).exp(),
                })
                .collect(),
            accuracy: (0..4)
                .map(|d| 0.25 + (0.7 - 0.1 * d as f64) * (1.0 - (-t / 2.5).exp()))
                .collect(),
            target_accuracy: 0.25 + 0.5 * (1.0 - (-t / 2.5).exp()),
        };
        epochs.push(report.clone());
        send(Event::DsnEpoch { job: 1, report });
    }
    let summary = serde_json::json!({
        "name": "dsn_shapes",
        "ranks": 2,
        "domains": domains,
        "similarity": "mmd",
        "source_only": false,
        "stopped_early": false,
        "shared_parameters": 10000,
        "private_parameters_per_domain": 5000,
        "epochs": epochs,
        "per_rank": [
            {"rank": 0, "domains": [0, 2], "compute_secs": 12.5, "exchange_secs": 0.8,
             "peak_rss_bytes": 60_000_000u64, "received_bytes": 2_000_000u64},
            {"rank": 1, "domains": [1, 3], "compute_secs": 11.0, "exchange_secs": 2.1,
             "peak_rss_bytes": 58_000_000u64, "received_bytes": 3_500_000u64},
        ],
        "weights": "dsn.safetensors",
        "reconstructions": [],
    });
    send(Event::Finished {
        job: 1,
        run_dir: "/runs/20261123-120000-dsn_shapes-1".into(),
        outputs: vec![],
        summary_json: summary.to_string(),
    });
    step_until(&mut h, "the run's result", |wb| {
        wb.session
            .training
            .as_ref()
            .is_some_and(|t| t.result.is_some())
    });
    h.get_by_role_and_label(Role::Button, "Training").click();
    h.run_steps(4);
    h.snapshot("workbench_training");
}

/// A one-channel `side`² preview with values `lo..hi` along x and a checker on top.
fn preview(job: u64, what: PreviewKind, side: u32, lo: f32, hi: f32) -> Event {
    Event::Preview {
        job,
        iteration: 10,
        what,
        image: PreviewImage {
            width: side,
            height: side,
            channels: 1,
            slice: None,
            pixels: (0..side * side)
                .map(|i| {
                    let (x, y) = (i % side, i / side);
                    let t = x as f32 / (side - 1) as f32;
                    let checker = ((x / 16 + y / 16) % 2) as f32 * 0.1;
                    lo + (hi - lo) * (0.9 * t + checker)
                })
                .collect(),
        },
    }
}

/// Five panes (reconstruction, measurement, ground truth, difference, a compared run) fit the
/// window with their colour bars, and the readout stays in it; then an FWI document: its models
/// with colour bars in m/s and a scale bar, the gradient pane without a box in a box.
#[test]
fn workbench_five_panes_and_an_fwi_model() {
    use tessera::gui::history::Purpose;
    let (mut h, end) = on_a_test_backend();
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("20261123-110000-quick-1");
    std::fs::create_dir_all(&other).unwrap();
    let recon = tessera::Tensor::from_fn(&[1, 1, 128, 128], |i| ((i % 128) as f32 / 127.0) * 0.8);
    tessera::io::write_npy(&other.join("reconstruction.npy"), &recon).unwrap();
    std::fs::write(
        other.join("metrics.json"),
        r#"{"name": "quick", "iterations": 10}"#,
    )
    .unwrap();

    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    while end.requests.recv_timeout(Duration::from_secs(5)).unwrap() == Request::Status {}
    let send = |e| end.events.send(Incoming::Event(e)).unwrap();
    send(Event::Accepted { job: 1 });
    for (what, lo, hi) in [
        (PreviewKind::Reconstruction, 0.0, 1.0),
        (PreviewKind::GroundTruth, 0.0, 0.9),
        (PreviewKind::Measurement(0), 0.1, 0.7),
    ] {
        send(preview(1, what, 128, lo, hi));
    }
    send(Event::Finished {
        job: 1,
        run_dir: "/runs/20261123-120000-quick-1".into(),
        outputs: vec![],
        summary_json: "{}".into(),
    });
    step_until(&mut h, "the run", |wb| {
        !wb.session.is_busy() && wb.shown_measurement(0).is_some()
    });
    h.state_mut().open_run(&other, Purpose::Compare);
    step_until(&mut h, "the comparison", |wb| {
        wb.shown(tessera::gui::preview::Slot::Difference).is_some()
    });
    h.hover_at(egui::pos2(560.0, 300.0));
    h.run_steps(4);
    h.snapshot("workbench_five_panes");

    h.get_by_role_and_label(Role::Button, "fwi_marmousi")
        .click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    while end.requests.recv_timeout(Duration::from_secs(5)).unwrap() == Request::Status {}
    send(Event::Accepted { job: 2 });
    send(Event::FwiStarted {
        job: 2,
        name: "fwi_marmousi".into(),
        world_size: 2,
        devices: vec![],
        model_shape: [128, 128],
        spacing_m: [10.0, 10.0],
        shots: vec![],
        epochs: 10,
        step_ratio: 1,
    });
    send(preview(2, PreviewKind::GroundTruth, 128, 1500.0, 4500.0));
    send(preview(2, PreviewKind::Reconstruction, 128, 1600.0, 4200.0));
    step_until(&mut h, "the models", |wb| {
        wb.shown(tessera::gui::preview::Slot::GroundTruth).is_some()
            && wb.shown_reconstruction().is_some()
    });
    h.remove_cursor();
    h.run_steps(4);
    h.snapshot("workbench_fwi");
}

/// Frame time with rendering (wgpu; on a headless machine mesa's lavapipe, a software renderer)
/// while 512² colour previews stream at 10 Hz: each frame is `Harness::step` plus `render`. A
/// measurement, printed, not asserted:
/// `cargo test --release --features snapshots --test gui_snapshots -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run it in release with --ignored --nocapture"]
fn rendered_frame_time_while_previews_stream() {
    const SIDE: u32 = 512;
    let (mut h, end) = on_a_test_backend();
    step_until(&mut h, "the backend and the image", |wb| {
        wb.has_backend() && !wb.data_loading()
    });
    h.get_by_role_and_label(Role::Button, "Run").click();
    h.run_steps(2);
    while end.requests.recv_timeout(Duration::from_secs(5)).unwrap() == Request::Status {}
    end.events
        .send(Incoming::Event(Event::Accepted { job: 1 }))
        .unwrap();
    let mut times = Vec::new();
    let mut hover = Vec::new();
    let start = Instant::now();
    let mut k = 0u32;
    while start.elapsed() < Duration::from_secs(6) {
        if start.elapsed() >= Duration::from_millis(100 * k as u64) {
            k += 1;
            let pixels = (0..SIDE * SIDE * 3)
                .map(|i| ((i / 3 + k * 7) % SIDE) as f32 / SIDE as f32)
                .collect();
            let image = PreviewImage {
                width: SIDE,
                height: SIDE,
                channels: 3,
                slice: None,
                pixels,
            };
            end.events
                .send(Incoming::Event(Event::Preview {
                    job: 1,
                    iteration: k as usize,
                    what: PreviewKind::Reconstruction,
                    image,
                }))
                .unwrap();
        }
        // Every tenth frame the mouse moves: the time from the move to the frame on screen that
        // shows its readout is that frame's.
        let moved = times.len() % 10 == 0;
        if moved {
            h.hover_at(egui::pos2(500.0 + (times.len() % 50) as f32, 300.0));
        }
        let t = Instant::now();
        h.step();
        h.render().unwrap();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        times.push(ms);
        if moved {
            hover.push(ms);
        }
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    println!(
        "rendered frames (step + wgpu render, 1400x1000) while {k} previews of {SIDE}x{SIDE}x3 \
         streamed at 10 Hz: {} frames, p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms; mouse move to \
         readout on screen: p50 {:.1} ms, p95 {:.1} ms",
        times.len(),
        q(&mut times.clone(), 0.5),
        q(&mut times.clone(), 0.95),
        q(&mut times, 1.0),
        q(&mut hover.clone(), 0.5),
        q(&mut hover, 0.95),
    );
}
