//! Reconstructing from loaded measurements (`[measurements]`) instead of simulated ones: the same
//! data gives the same reconstruction whether simulated, loaded with the ground truth, or loaded for
//! an unknown image, on 1 or 3 ranks; bad measurement files are clear errors.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::Tensor;
use tessera::io::{read_npy, write_npy};
use tessera::job;
use tessera::preset::{ImageSource, MeasurementSource, Preset};

fn tessera(args: &[&str], cwd: &Path) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    for v in ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"] {
        c.env_remove(v);
    }
    c.args(args)
        .current_dir(cwd)
        .output()
        .expect("tessera runs")
}

fn run_ok(args: &[&str], cwd: &Path) {
    let o = tessera(args, cwd);
    assert!(
        o.status.success(),
        "tessera {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn metrics(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap()
}

/// multiblur (8 operators) made small and quick.
fn small_multiblur() -> Preset {
    Preset::load(
        "multiblur",
        &[
            "image.size=[40,56]".into(),
            "algorithm.iterations=3".into(),
            "tiling.patch_size=24".into(),
            "tiling.overlap=4".into(),
        ],
    )
    .unwrap()
    .preset
}

/// `preset` reading `paths` as its measurements (no simulated noise).
fn loading(mut preset: Preset, paths: Vec<PathBuf>) -> Preset {
    preset.noise = None;
    preset.measurements = Some(MeasurementSource {
        paths,
        inline: Vec::new(),
    });
    preset
}

fn write_preset(dir: &Path, name: &str, preset: &Preset) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, preset.to_toml().unwrap()).unwrap();
    path
}

#[test]
fn loaded_measurements_reconstruct_exactly_like_simulated_ones_on_one_and_three_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let simulated = small_multiblur();
    let sim_path = write_preset(d, "simulated.toml", &simulated);
    run_ok(
        &["run", sim_path.to_str().unwrap(), "--quiet", "--out", "sim"],
        d,
    );
    let reference = std::fs::read(d.join("sim/reconstruction.npy")).unwrap();
    let paths: Vec<PathBuf> = (0..8)
        .map(|i| PathBuf::from(format!("sim/measurement_{i}.npy")))
        .collect();

    // With the ground truth: PSNR is reported and equals the simulated run's.
    let with_truth = loading(simulated.clone(), paths.clone());
    let p = write_preset(d, "with_truth.toml", &with_truth);
    run_ok(
        &["run", p.to_str().unwrap(), "--quiet", "--out", "truth"],
        d,
    );
    assert_eq!(
        std::fs::read(d.join("truth/reconstruction.npy")).unwrap(),
        reference
    );
    let (m_sim, m_truth) = (metrics(&d.join("sim")), metrics(&d.join("truth")));
    assert_eq!(m_truth["reconstruction"], m_sim["reconstruction"]);
    assert_eq!(m_truth["measurements_loaded"], true);
    assert_eq!(m_sim["measurements_loaded"], false);
    // The user's files are not copied into the outputs.
    assert!(!d.join("truth/measurement_0.npy").exists());

    // Unknown image (measured data): same reconstruction, no metrics, no ground truth written,
    // and the same on 3 ranks (operators 0, 3, 6 on rank 0 …).
    let mut unknown = loading(simulated, paths);
    unknown.image = ImageSource {
        shape: Some(vec![3, 40, 56]),
        ..ImageSource::default()
    };
    let p = write_preset(d, "unknown.toml", &unknown);
    for (ranks, out) in [("1", "u1"), ("3", "u3")] {
        run_ok(
            &[
                "run",
                p.to_str().unwrap(),
                "--quiet",
                "--ranks",
                ranks,
                "--out",
                out,
            ],
            d,
        );
        assert_eq!(
            std::fs::read(d.join(out).join("reconstruction.npy")).unwrap(),
            reference,
            "{ranks} rank(s) with loaded measurements"
        );
        let m = metrics(&d.join(out));
        assert!(m["reconstruction"].is_null(), "{m}");
        assert!(!d.join(out).join("ground_truth.npy").exists());
    }
}

/// Runs `preset` as if loaded from a file in `base` (its paths resolved there).
fn run_in_process(preset: &Preset, base: &Path) -> tessera::Result<job::JobSummary> {
    let out = tempfile::tempdir().unwrap();
    let mut preset = preset.clone();
    preset.resolve_paths(base)?;
    job::run(&preset, out.path(), &mut |_| ControlFlow::Continue(()))
}

fn quick(iterations: usize) -> Preset {
    Preset::load("quick", &[format!("algorithm.iterations={iterations}")])
        .unwrap()
        .preset
}

#[test]
fn a_measurement_without_leading_unit_axes_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let preset = quick(2);
    // Simulate into a folder we keep, then drop the batch axis of the measurement.
    let sim = job::run(&preset, dir.path().join("sim").as_path(), &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap();
    let y = read_npy(&dir.path().join("sim/measurement_0.npy")).unwrap();
    assert_eq!(y.shape(), [1, 3, 128, 128]);
    write_npy(
        &dir.path().join("y.npy"),
        &y.reshape(&[3, 128, 128]).unwrap(),
    )
    .unwrap();
    let loaded = run_in_process(&loading(preset, vec!["y.npy".into()]), dir.path()).unwrap();
    assert_eq!(
        loaded.reconstruction.unwrap().psnr_db,
        sim.reconstruction.unwrap().psnr_db
    );
}

#[test]
fn bad_measurements_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = |preset: &Preset| run_in_process(preset, d).unwrap_err().to_string();

    // Wrong shape: names the field, the file, both shapes and the operator.
    write_npy(&d.join("small.npy"), &Tensor::zeros(&[1, 3, 64, 64])).unwrap();
    let e = err(&loading(quick(1), vec!["small.npy".into()]));
    for part in [
        "measurements.paths[0]",
        "small.npy",
        "[1, 3, 64, 64]",
        "operator 0",
        "[1, 3, 128, 128]",
    ] {
        assert!(e.contains(part), "`{part}` missing from: {e}");
    }

    // A missing file names the file.
    let e = err(&loading(quick(1), vec!["nowhere.npy".into()]));
    assert!(e.contains("nowhere.npy"), "{e}");

    // Not finite.
    let mut y = Tensor::zeros(&[1, 3, 128, 128]);
    y.data_mut()[17] = f32::NAN;
    write_npy(&d.join("nan.npy"), &y).unwrap();
    let e = err(&loading(quick(1), vec!["nan.npy".into()]));
    assert!(e.contains("nan.npy"), "{e}");

    // Validation: one per operator, no noise, no shape without measurements.
    let toml = |p: &Preset| Preset::from_toml(&p.to_toml().unwrap(), "t", &[]);
    let e = toml(&loading(quick(1), vec!["a.npy".into(), "b.npy".into()]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 measurement(s) for 1 operator(s)"), "{e}");
    let mut noisy = loading(quick(1), vec!["a.npy".into()]);
    noisy.noise = quick(1).noise;
    let e = toml(&noisy).unwrap_err().to_string();
    assert!(e.contains("noise"), "{e}");
    let mut shape_only = quick(1);
    shape_only.image = ImageSource {
        shape: Some(vec![3, 128, 128]),
        ..ImageSource::default()
    };
    let e = toml(&shape_only).unwrap_err().to_string();
    assert!(
        e.contains("image.shape") && e.contains("[measurements]"),
        "{e}"
    );
    let mut bad_shape = loading(quick(1), vec!["a.npy".into()]);
    bad_shape.image = ImageSource {
        shape: Some(vec![128, 128]),
        ..ImageSource::default()
    };
    let e = toml(&bad_shape).unwrap_err().to_string();
    assert!(e.contains("C, H, W"), "{e}");

    // Unknown fields in the section are named.
    let text = loading(quick(1), vec!["a.npy".into()])
        .to_toml()
        .unwrap()
        .replace("[measurements]", "[measurements]\npath = \"x\"");
    let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
    assert!(e.contains("path"), "{e}");
}
