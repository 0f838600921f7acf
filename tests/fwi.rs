//! The FWI loop: torch semantics of the seed (Adam with eps 1e-22, tensor_split) replayed from
//! fixtures made by torch (`scripts/make_fwi_fixtures.py`), and the data-parallel inversion on 1, 2
//! and 3 ranks over real sockets giving the same model bit for bit.

use std::path::PathBuf;

use tessera::fwi::batch::tensor_split;
use tessera::io::read_npy_f64;
use tessera::optim::adam::TorchAdam;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fwi")
}

#[test]
fn adam_matches_torch_bit_for_bit() {
    let (_, p0) = read_npy_f64(&fixtures().join("adam_params0.npy")).unwrap();
    let (gs, grads) = read_npy_f64(&fixtures().join("adam_grads.npy")).unwrap();
    let (_, want) = read_npy_f64(&fixtures().join("adam_params.npy")).unwrap();
    let n = gs[1];
    let mut p: Vec<f32> = p0.iter().map(|&v| v as f32).collect();
    let mut adam = TorchAdam::<f32>::new(n, 5.0, (0.9, 0.999), 1e-22);
    for k in 0..gs[0] {
        let g: Vec<f32> = grads[k * n..(k + 1) * n]
            .iter()
            .map(|&v| v as f32)
            .collect();
        adam.step(&mut p, &g);
        let w: Vec<f32> = want[k * n..(k + 1) * n].iter().map(|&v| v as f32).collect();
        let differ = p
            .iter()
            .zip(&w)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ,
            0,
            "step {}: {differ} of {n} parameters differ from torch",
            k + 1
        );
    }
}

#[test]
fn tensor_split_matches_torch() {
    let cases: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tensor_split.json")).unwrap(),
    )
    .unwrap();
    for c in cases.as_array().unwrap() {
        let (n, k) = (
            c["n"].as_u64().unwrap() as usize,
            c["k"].as_u64().unwrap() as usize,
        );
        for (part, want) in c["parts"].as_array().unwrap().iter().enumerate() {
            let want: Vec<usize> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(
                tensor_split(n, k, part).collect::<Vec<_>>(),
                want,
                "n {n}, k {k}, part {part}"
            );
        }
    }
}

/// The inversion on 1, 2 and 3 local rank processes (real sockets) ends with the same model bytes.
#[test]
fn one_two_and_three_ranks_give_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut models = Vec::new();
    for n in ["1", "2", "3"] {
        let out = dir.path().join(format!("r{n}"));
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["run", "fwi_marmousi", "-q", "--ranks", n, "--out"])
            .arg(&out)
            .args([
                "--set",
                "fwi.epochs=3",
                "--set",
                "model.truth.nz=30",
                "--set",
                "model.truth.nx=60",
            ])
            .args([
                "--set",
                "acquisition.shots=4",
                "--set",
                "acquisition.receivers_per_shot=30",
            ])
            .args([
                "--set",
                "wave.nt=200",
                "--set",
                "fwi.batch_size=3",
                "--set",
                "fwi.stages=[]",
            ])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "{n} rank(s)");
        models.push(std::fs::read(out.join("inverted_model.npy")).unwrap());
    }
    assert_eq!(models[0], models[1]);
    assert_eq!(models[0], models[2]);
}

/// A tiny inversion writes every figure: the wavelet, the shot gathers, the loss curve and one panel
/// per saved epoch, as PNGs that decode to the expected sizes (three 560-pixel panels per row for
/// the gathers and the epoch panels with truth and illumination), listed in the summary.
/// The bundled inversion made tiny (2 epochs of 3 shots on a 20×40 model), with `extra` overrides.
fn tiny(extra: &[&str]) -> (tessera::fwi::FwiPreset, PathBuf) {
    let sets: Vec<String> = [
        "fwi.epochs=2",
        "model.truth.nz=20",
        "model.truth.nx=40",
        "acquisition.shots=3",
        "acquisition.receivers_per_shot=20",
        "wave.nt=150",
        "fwi.batch_size=3",
        "fwi.stages=[]",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    let (preset, base, _) = tessera::fwi::FwiPreset::load("fwi_marmousi", &sets)
        .unwrap()
        .unwrap();
    (preset, base)
}

#[test]
fn a_tiny_run_writes_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (preset, base) = tiny(&["output.figures_every=1"]);
    let summary = tessera::fwi::run(&preset, &base, out.as_path(), &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(summary.run_dir.as_deref(), Some(out.as_path()));
    let size = |name: &str| {
        let t = tessera::io::read_image(&out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let s = t.shape();
        (s[s.len() - 1], s[s.len() - 2])
    };
    assert_eq!(size("ricker.png"), (800, 500));
    assert_eq!(
        size("loss.png"),
        (1600, 500),
        "loss and model error side by side"
    );
    assert_eq!(
        size("observed_data.png").0,
        3 * 560,
        "first, middle and last gather"
    );
    for name in ["epoch_0001.png", "epoch_0002.png"] {
        let (w, h) = size(name);
        assert_eq!(w, 3 * 560, "{name}: five panels in rows of three");
        assert!(h > 2 * 160, "{name}: two rows of panels, height {h}");
    }
    for name in [
        "ricker.png",
        "observed_data.png",
        "loss.png",
        "epoch_0001.png",
        "epoch_0002.png",
        "metrics.json",
    ] {
        assert!(
            summary.outputs.iter().any(|p| p.as_os_str() == name),
            "{name} not listed in {:?}",
            summary.outputs
        );
    }
}

/// A step that takes the model out of the floats stops the run with an error naming the epoch and
/// the learning rate; no non-finite model is written.
#[test]
fn a_diverging_step_stops_the_run_instead_of_writing_a_nan_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (preset, base) = tiny(&["fwi.learning_rate=1e308"]);
    let err = tessera::fwi::run(&preset, &base, out.as_path(), &mut |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("non-finite") && err.contains("epoch 1") && err.contains("1e308"),
        "{err}"
    );
    assert!(!out.exists());
}

/// The shipped preset's schedule converges steadily: on a smaller survey of the same kind of model,
/// cells, wavelet, step and batch, the model error never rises by more than a hair from one epoch
/// to the next, and ends clearly below the starting model's.
#[test]
fn the_bundled_schedule_lowers_the_model_error_steadily() {
    let dir = tempfile::tempdir().unwrap();
    let sets: Vec<String> = [
        "model.truth.nz=40",
        "model.truth.nx=120",
        "acquisition.shots=12",
        "acquisition.receivers_per_shot=60",
        "fwi.epochs=10",
        "output.figures_every=0",
    ]
    .map(String::from)
    .to_vec();
    let (preset, base, _) = tessera::fwi::FwiPreset::load("fwi_marmousi", &sets)
        .unwrap()
        .unwrap();
    let summary = tessera::fwi::run(
        &preset,
        &base,
        dir.path().join("run").as_path(),
        &mut |_| std::ops::ControlFlow::Continue(()),
    )
    .unwrap();
    let initial = summary.initial_model_error.unwrap();
    let errors: Vec<f64> = summary
        .history
        .iter()
        .map(|e| e.model_error.unwrap())
        .collect();
    let mut previous = initial;
    for (k, &e) in errors.iter().enumerate() {
        assert!(
            e <= previous * (1.0 + 1e-3),
            "epoch {}: model error rose from {previous} to {e} ({errors:?})",
            k + 1
        );
        previous = e;
    }
    let last = *errors.last().unwrap();
    assert!(
        last < 0.98 * initial,
        "model error {initial} -> {last}: not a clear improvement ({errors:?})"
    );
}

/// A frequency stage may set its own learning rate and gradient smoothing; epochs after the last
/// stage use `[fwi]`'s, and bad per-stage values are refused by name.
#[test]
fn stages_set_their_own_step_and_smoothing() {
    let load = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        tessera::fwi::FwiPreset::from_toml(tessera::fwi::BUNDLED_FWI[0].1, "bundled", &sets)
    };
    let base = load(&[]).unwrap();
    let (lr, smooth) = (base.fwi.learning_rate, base.fwi.smooth_gradient_cells);
    let p = load(&[
        "fwi.stages=[{cutoff_hz=4.0,epochs=2,learning_rate=5.0,smooth_gradient_cells=4.0},{cutoff_hz=6.0,epochs=1}]",
    ])
    .unwrap();
    assert_eq!(p.step_at(0), (5.0, 4.0));
    assert_eq!(p.step_at(1), (5.0, 4.0));
    assert_eq!(p.cutoff_at(1), Some(4.0));
    assert_eq!(p.step_at(2), (lr, smooth), "the second stage keeps [fwi]'s");
    assert_eq!(p.cutoff_at(2), Some(6.0));
    assert_eq!(p.step_at(3), (lr, smooth));
    assert_eq!(p.cutoff_at(3), None);
    let round = tessera::fwi::FwiPreset::from_toml(&p.to_toml().unwrap(), "saved", &[]).unwrap();
    assert_eq!(round, p, "saved and read back unchanged");
    for (set, field) in [
        (
            "fwi.stages=[{cutoff_hz=4.0,epochs=2,learning_rate=0.0}]",
            "fwi.stages[0].learning_rate",
        ),
        (
            "fwi.stages=[{cutoff_hz=4.0,epochs=2,smooth_gradient_cells=-1.0}]",
            "fwi.stages[0].smooth_gradient_cells",
        ),
    ] {
        let e = load(&[set]).unwrap_err().to_string();
        assert!(e.contains(field), "{set}: {e}");
    }
}
