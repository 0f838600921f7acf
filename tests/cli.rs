//! End-to-end tests of the `tessera` binary: real processes, real files.

use std::path::Path;
use std::process::{Command, Output};

use tessera::Tensor;
use tessera::io::{read_npy, write_npy};

fn tessera(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the tessera binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn presets_lists_and_validates_the_bundled_presets() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(&["presets"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for name in ["quick", "multiblur", "tomography2d", "tomography3d"] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
    assert!(!out.contains("INVALID"), "{out}");
}

#[test]
fn run_writes_outputs_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        &[
            "run",
            "quick",
            "--quiet",
            "--set",
            "algorithm.iterations=3",
            "--out",
            "res",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let res = dir.path().join("res");
    for f in [
        "reconstruction.npy",
        "reconstruction.png",
        "ground_truth.npy",
        "measurement_0.npy",
        "metrics.json",
    ] {
        assert!(res.join(f).exists(), "{f} not written");
    }
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(res.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["iterations"], 3);
    assert_eq!(metrics["history"].as_array().unwrap().len(), 3);
    assert!(metrics["reconstruction"]["psnr_db"].as_f64().unwrap() > 10.0);
    let x = read_npy(&res.join("reconstruction.npy")).unwrap();
    assert_eq!(x.shape(), &[1, 3, 128, 128]);
}

#[test]
fn a_preset_with_an_unknown_field_fails_naming_field_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = tessera::preset::BUNDLED[0]
        .1
        .replace("[algorithm]", "[algorithm]\nitrations = 4");
    std::fs::write(dir.path().join("bad.toml"), text).unwrap();
    let o = tessera(&["run", "bad.toml", "--quiet"], dir.path());
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("itrations") && e.contains("bad.toml"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn a_bad_override_fails_with_the_allowed_range() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        &["run", "quick", "--quiet", "--set", "noise.sigma=-1"],
        dir.path(),
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("noise.sigma") && e.contains("≥ 0"), "{e}");
}

#[test]
fn apply_matches_the_library_and_its_adjoint() {
    let dir = tempfile::tempdir().unwrap();
    let physics = "kind = \"blur\"\nsigma = [1.5, 0.7]\nangle_deg = 20\npadding = \"reflect\"\n";
    std::fs::write(dir.path().join("blur.toml"), physics).unwrap();
    let x = Tensor::from_fn(&[1, 2, 21, 17], |i| ((i * 7919) % 101) as f32 / 101.0);
    write_npy(&dir.path().join("x.npy"), &x).unwrap();
    let o = tessera(
        &["apply", "--physics", "blur.toml", "x.npy", "y.npy"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let y = read_npy(&dir.path().join("y.npy")).unwrap();
    let cfg: tessera::physics::PhysicsConfig = toml::from_str(physics).unwrap();
    let op = cfg.build(x.shape(), None).unwrap();
    assert_eq!(y, op.forward(&x).unwrap());
    let o = tessera(
        &[
            "apply",
            "--physics",
            "blur.toml",
            "--adjoint",
            "y.npy",
            "z.npy",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        read_npy(&dir.path().join("z.npy")).unwrap(),
        op.adjoint(&y).unwrap()
    );
}

#[test]
fn bad_inputs_fail_cleanly_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("blur.toml"),
        "kind = \"blur\"\nsigma = [1.0, 1.0]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("corrupt.npy"), b"\x93NUMPY garbage").unwrap();
    let o = tessera(
        &["apply", "--physics", "blur.toml", "corrupt.npy", "y.npy"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("corrupt.npy"), "{}", stderr(&o));

    let mut x = Tensor::full(&[1, 1, 16, 16], 0.5);
    x.data_mut()[5] = f32::NAN;
    write_npy(&dir.path().join("nan.npy"), &x).unwrap();
    let o = tessera(
        &["apply", "--physics", "blur.toml", "nan.npy", "y.npy"],
        dir.path(),
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("nan.npy") && e.contains("non-finite"), "{e}");

    // An unwritable output is an error naming it, and no partial file is left behind.
    write_npy(
        &dir.path().join("ok.npy"),
        &Tensor::full(&[1, 1, 16, 16], 0.5),
    )
    .unwrap();
    let o = tessera(
        &[
            "apply",
            "--physics",
            "blur.toml",
            "ok.npy",
            "missing/dir/y.npy",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing/dir/y.npy"), "{}", stderr(&o));
    assert!(!dir.path().join("missing").exists());

    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn denoise_applies_a_configured_denoiser() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d.toml"), "kind = \"identity\"\n").unwrap();
    let x = Tensor::from_fn(&[1, 1, 9, 11], |i| i as f32 / 99.0);
    write_npy(&dir.path().join("x.npy"), &x).unwrap();
    let o = tessera(
        &[
            "denoise",
            "--denoiser",
            "d.toml",
            "--sigma",
            "0.1",
            "x.npy",
            "y.npy",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_npy(&dir.path().join("y.npy")).unwrap(), x);
    let o = tessera(
        &[
            "denoise",
            "--denoiser",
            "d.toml",
            "--sigma",
            "-1",
            "x.npy",
            "y.npy",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--sigma"));
}

/// Runs `tessera denoise --denoiser models/CONFIG --sigma 0.1` on a deepinv DRUNet fixture input
/// in a fresh folder, with `model` copied next to the config as `name` (relative paths in a config
/// resolve against its own folder, not the working directory).
fn denoise_next_to_config(
    model: &str,
    name: &str,
    config: &str,
) -> (tempfile::TempDir, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::copy(fixtures.join(model), models.join(name)).unwrap();
    std::fs::write(models.join("config.toml"), config).unwrap();
    let x = fixtures.join("deepinv/drunet2d_gray_x.npy");
    let o = tessera(
        &[
            "denoise",
            "--denoiser",
            "models/config.toml",
            "--sigma",
            "0.1",
            x.to_str().unwrap(),
            "y.npy",
        ],
        dir.path(),
    );
    (dir, o)
}

/// Max |y − deepinv's DRUNet output| for the `y.npy` written in `dir`.
fn error_against_deepinv_drunet(dir: &Path) -> f32 {
    let got = read_npy(&dir.join("y.npy")).unwrap();
    let want = read_npy(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deepinv/drunet2d_gray_y.npy"),
    )
    .unwrap();
    got.data()
        .iter()
        .zip(want.data())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max)
}

#[test]
fn denoise_runs_a_drunet_from_pytorch_weights_next_to_its_config() {
    let (dir, o) = denoise_next_to_config(
        "deepinv/drunet2d_gray.pth",
        "drunet_gray.pth",
        "kind = \"drunet\"\nweights = \"drunet_gray.pth\"\nin_channels = 1\nout_channels = 1\n\
         nc = [8, 16, 32, 64]\nnb = 1\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = error_against_deepinv_drunet(dir.path());
    assert!(err <= 1e-4, "max abs error {err} against deepinv");
}

/// `[denoiser] kind = "torchscript"`: a traced deepinv DRUNet named relative to its config. With the
/// torch feature it reproduces deepinv; without, the error says how to get the engine.
#[test]
fn denoise_runs_a_torchscript_model_or_says_how_to_get_libtorch() {
    let (dir, o) = denoise_next_to_config(
        "torch/drunet2d_gray_traced.pt",
        "traced.pt",
        "kind = \"torchscript\"\nmodel = \"traced.pt\"\ndevice = \"cpu\"\n",
    );
    if cfg!(feature = "torch") {
        assert!(o.status.success(), "{}", stderr(&o));
        let err = error_against_deepinv_drunet(dir.path());
        assert!(err <= 1e-4, "max abs error {err} against deepinv");
    } else {
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("--features torch") && e.contains("TorchScript"),
            "{e}"
        );
        assert!(!dir.path().join("y.npy").exists());
    }
}
