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
    for name in [
        "quick",
        "multiblur",
        "tomography2d",
        "tomography3d",
        "photo_deblur",
    ] {
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

/// `photo_deblur` is bundled with its photograph: it runs from an empty folder, on the pixels of
/// `presets/photos/astronaut_256.png`, and the preset file runs the same problem.
#[test]
fn photo_deblur_runs_from_any_folder_on_the_embedded_photograph() {
    let dir = tempfile::tempdir().unwrap();
    fn args<'a>(preset: &'a str, out: &'a str) -> [&'a str; 7] {
        [
            "run",
            preset,
            "--quiet",
            "--set",
            "algorithm.iterations=2",
            "--out",
            out,
        ]
    }
    let o = tessera(&args("photo_deblur", "bundled"), dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let photo = tessera::io::read_array(&here.join("presets/photos/astronaut_256.png")).unwrap();
    let truth = read_npy(&dir.path().join("bundled/ground_truth.npy")).unwrap();
    assert_eq!(truth.shape(), &[1, 3, 256, 256]);
    assert_eq!(photo.shape(), truth.shape());
    assert_eq!(truth.data(), photo.data());

    let file = here.join("presets/photo_deblur.toml");
    let o = tessera(&args(file.to_str().unwrap(), "file"), dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let from_file = read_npy(&dir.path().join("file/reconstruction.npy")).unwrap();
    let bundled = read_npy(&dir.path().join("bundled/reconstruction.npy")).unwrap();
    assert_eq!(from_file.data(), bundled.data());
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

/// Exit code 101 is a Rust panic; every failure here must be a reported error (1, or 2 from the
/// argument parser) naming what was wrong.
fn fails_cleanly(o: &Output) -> String {
    let code = o.status.code();
    let e = stderr(o);
    assert!(matches!(code, Some(1 | 2)), "exit {code:?}: {e}");
    assert!(!e.contains("panicked"), "{e}");
    e
}

/// A headless build (`--no-default-features`) has no workbench: `tessera` alone says so and what to
/// type instead.
#[cfg(not(feature = "gui"))]
#[test]
fn a_headless_build_without_a_subcommand_says_it_has_no_workbench() {
    let dir = tempfile::tempdir().unwrap();
    let e = fails_cleanly(&tessera(&[], dir.path()));
    assert!(
        e.contains("without the workbench") && e.contains("tessera run quick"),
        "{e}"
    );
}

#[test]
fn counts_and_durations_out_of_range_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    for (args, names) in [
        (&["--ranks", "0"][..], "0 is not in 1 ..= 256"),
        (&["--ranks", "10000"][..], "10000 is not in 1 ..= 256"),
        (
            &[
                "--ranks",
                "2",
                "--rendezvous-timeout",
                "18446744073709551615",
            ][..],
            "18446744073709551615",
        ),
        (&["--op-timeout", "99999999999"][..], "99999999999"),
        (&["--liveness-timeout", "-1"][..], "-1"),
    ] {
        let mut all = vec!["run", "quick", "--quiet"];
        all.extend_from_slice(args);
        let e = fails_cleanly(&tessera(&all, dir.path()));
        assert!(e.contains(names), "{args:?}: {e}");
    }
}

#[test]
fn a_full_or_closed_output_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    // stdout on a full device: the run completes and is kept; the summary that could not be
    // printed is reported.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "run",
            "quick",
            "-q",
            "--set",
            "algorithm.iterations=2",
            "--out",
            "o",
        ])
        .current_dir(dir.path())
        .stdout(full)
        .output()
        .unwrap();
    let e = fails_cleanly(&o);
    assert!(
        e.contains("writing to standard output") && e.contains("kept"),
        "{e}"
    );
    assert!(dir.path().join("o/metrics.json").exists());
    // `--help` on a full device fails the same way (it exited 0 with nothing printed).
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("--help")
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    assert!(
        fails_cleanly(&o).contains("writing to standard output"),
        "{o:?}"
    );
    // stderr closed before the error is printed (as in `tessera run nosuch 2>&1 | true`).
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "nosuch"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    // A listing cut short by its reader (`tessera presets | head -1`) is not an error.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["presets"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn empty_arrays_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_npy(&dir.path().join("empty.npy"), &Tensor::zeros(&[1, 3, 0, 0])).unwrap();
    std::fs::write(dir.path().join("tv.toml"), "kind = \"tv\"\n").unwrap();
    let o = tessera(
        &[
            "denoise",
            "--denoiser",
            "tv.toml",
            "--sigma",
            "0.1",
            "empty.npy",
            "out.npy",
        ],
        dir.path(),
    );
    let e = fails_cleanly(&o);
    assert!(e.contains("no elements") && e.contains("empty.npy"), "{e}");
    assert!(!dir.path().join("out.npy").exists());
}

#[test]
fn a_tiny_image_keeps_its_outputs_and_reports_ssim_as_absent() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        &[
            "run",
            "quick",
            "-q",
            "--set",
            "image.size=[8, 10]",
            "--set",
            "algorithm.iterations=3",
            "--out",
            "o",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("o/metrics.json")).unwrap()).unwrap();
    assert!(m["reconstruction"]["psnr_db"].as_f64().is_some(), "{m}");
    assert!(m["reconstruction"]["ssim"].is_null(), "{m}");
    assert!(dir.path().join("o/reconstruction.npy").exists());
}

#[test]
fn an_unwritable_output_folder_fails_before_the_solve() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    // A folder inside a regular file cannot be made (what a read-only mount does too).
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "run",
            "quick",
            "--set",
            "algorithm.iterations=100000",
            "--out",
            "file/o",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let e = fails_cleanly(&o);
    assert!(e.contains("file/o") || e.contains("file"), "{e}");
    // No iteration ran (a run without a terminal reports its progress on stderr).
    assert!(!e.contains("iteration "), "{e}");
}

#[test]
fn runs_never_mix_or_silently_replace_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "quick", "-q", "--set", "algorithm.iterations=2"];
        args.extend_from_slice(extra);
        tessera(&args, dir.path())
    };
    // Without --out every run gets a folder of its own under out/quick/.
    for _ in 0..2 {
        let o = run(&[]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("out/quick"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r.join("metrics.json").exists()));
    // An explicit folder is used once; a second run there is refused before it computes …
    assert!(run(&["--out", "mine"]).status.success());
    let first = std::fs::read(dir.path().join("mine/metrics.json")).unwrap();
    let e = fails_cleanly(&run(&["--out", "mine", "--set", "seed=5"]));
    assert!(e.contains("--replace"), "{e}");
    assert_eq!(
        std::fs::read(dir.path().join("mine/metrics.json")).unwrap(),
        first
    );
    // … unless asked to replace it, which happens once the new run is complete.
    let o = run(&["--out", "mine", "--replace", "--set", "seed=5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let second = std::fs::read(dir.path().join("mine/metrics.json")).unwrap();
    assert_ne!(second, first);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

/// `--replace` replaces a previous run, never a folder of the user's own files.
#[test]
fn replace_leaves_a_folder_that_holds_no_run_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mydir");
    std::fs::create_dir_all(mine.join("sub")).unwrap();
    std::fs::write(mine.join("notes.txt"), "notes").unwrap();
    std::fs::write(mine.join("sub/thesis.tex"), "thesis").unwrap();
    let o = tessera(
        &[
            "run",
            "quick",
            "-q",
            "--set",
            "algorithm.iterations=1",
            "--out",
            "mydir",
            "--replace",
        ],
        dir.path(),
    );
    let e = fails_cleanly(&o);
    assert!(
        e.contains("not a tessera run") && e.contains("notes.txt") && e.contains("sub/"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "notes"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("sub/thesis.tex")).unwrap(),
        "thesis"
    );
    assert!(!mine.join("metrics.json").exists());
}

/// `tessera report RUN_DIR` writes one run's report: the page with its figures embedded and the
/// figures as PNG files, the patch map among them when the denoiser was tiled. Folders that are
/// not finished runs, and runs by a tessera that did not profile its ranks, are errors naming the
/// file.
#[test]
fn report_draws_one_runs_figures_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        &[
            "run",
            "quick",
            "--quiet",
            "--ranks",
            "2",
            "--set",
            "algorithm.iterations=3",
            "--set",
            "tiling.patch_size=48",
            "--set",
            "tiling.overlap=8",
            "--out",
            "res",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tessera(&["report", "res", "--out", "rep"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let rep = dir.path().join("rep");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("report.html"),
        "says where the report is"
    );
    let figures = [
        "breakdown",
        "iteration_times",
        "psnr_time",
        "psnr_iteration",
        "peak_memory",
        "patch_map",
    ];
    for f in figures {
        let png = tessera::io::read_image(&rep.join(format!("{f}.png"))).unwrap();
        assert!(png.shape()[2] > 100, "{f}: {:?}", png.shape());
    }
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert_eq!(
        html.matches("data:image/png;base64,").count(),
        figures.len()
    );
    assert!(html.contains("Run report: quick"), "{html}");
    let rows = std::fs::read_to_string(rep.join("rank_iterations.csv")).unwrap();
    assert_eq!(rows.lines().count(), 1 + 2 * 3, "{rows}");
    // Without --out the report goes into the run folder.
    let o = tessera(&["report", "res"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("res/report.html").is_file());

    // A missing folder, a folder that is not a run, an old run without profiles.
    let o = tessera(&["report", "nowhere"], dir.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no such run folder: nowhere"),
        "{}",
        stderr(&o)
    );
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let o = tessera(&["report", "empty"], dir.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("not a finished run") && err.contains("empty/metrics.json"),
        "{err}"
    );
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    let mut metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("res/metrics.json")).unwrap())
            .unwrap();
    for r in metrics["ranks"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("iterations");
    }
    std::fs::write(old.join("metrics.json"), metrics.to_string()).unwrap();
    let o = tessera(&["report", "old"], dir.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("per-iteration profile") && err.contains("old/metrics.json"),
        "{err}"
    );
    assert!(!old.join("report.html").exists());
}

/// Mistakes a study would find only after its first configuration ran are found before any runs;
/// `--link` takes the form its help shows.
#[test]
fn bench_scaling_checks_every_configuration_before_the_first_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (args, names) in [
        (&["--ranks", "1,1,1"][..], "given twice"),
        (&["--ranks", "1,100000"][..], "100000"),
        (&["--sizes", "100000000"][..], "invalid value"),
        (&["--link", "5,1.2", "--ranks", "2,2"][..], "given twice"),
    ] {
        let mut all = vec!["bench", "scaling", "quick", "--out", "study"];
        all.extend_from_slice(args);
        let e = fails_cleanly(&tessera(&all, dir.path()));
        assert!(e.contains(names), "{args:?}: {e}");
        assert!(!dir.path().join("study/runs").exists(), "{args:?} ran");
    }
}

/// Training presets are listed with the others, and one given to `run` names the command.
#[test]
fn training_presets_are_listed_and_run_points_to_train() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(&["presets"], dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    for name in ["train-dncnn", "dsn_shapes"] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
    let preset = Path::new(env!("CARGO_MANIFEST_DIR")).join("presets/dsn_shapes.toml");
    let e = fails_cleanly(&tessera(&["run", preset.to_str().unwrap()], dir.path()));
    assert!(
        e.contains("Multi-DSN") && e.contains("tessera train"),
        "{e}"
    );
}

/// `tessera presets FILE…` validates training preset files as training presets (it called every
/// one INVALID, "run it with tessera train"), and a broken one is INVALID naming its field.
#[test]
fn presets_validates_training_preset_files() {
    let dir = tempfile::tempdir().unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("presets");
    let files = [
        "train-drunet-grey.toml",
        "train-drunet-grey-lowsigma.toml",
        "train-drunet-grey-lowsigma2.toml",
        "dsn_shapes.toml",
    ]
    .map(|f| here.join(f).to_str().unwrap().to_string());
    let mut args = vec!["presets"];
    args.extend(files.iter().map(String::as_str));
    let o = tessera(&args, dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    for name in ["train-drunet-grey-lowsigma2 ", "dsn_shapes "] {
        assert!(out.contains(&format!("ok       {name}")), "{name}:\n{out}");
    }
    let text = std::fs::read_to_string(&files[2]).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, text.replace("steps = 8000", "steps = 0")).unwrap();
    let o = tessera(&["presets", bad.to_str().unwrap()], dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("INVALID") && out.contains("train.steps") && out.contains("bad.toml"),
        "{out}"
    );
}

/// `tessera report` on an inversion and on a training run: their loss and per-rank times (it
/// said "missing field `iteration`").
#[test]
fn report_covers_inversions_and_training_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fwi = tessera(
        &[
            "run",
            "fwi_marmousi",
            "-q",
            "--out",
            "f",
            "--set",
            "fwi.epochs=2",
            "--set",
            "model.truth.nz=20",
            "--set",
            "model.truth.nx=40",
            "--set",
            "acquisition.shots=3",
            "--set",
            "acquisition.receivers_per_shot=20",
            "--set",
            "wave.nt=150",
            "--set",
            "fwi.batch_size=3",
            "--set",
            "fwi.stages=[]",
        ],
        dir.path(),
    );
    assert!(fwi.status.success(), "{}", stderr(&fwi));
    let train = tessera(
        &[
            "train",
            "train-dncnn",
            "-q",
            "--out",
            "t",
            "--set",
            "image.size=[96,80]",
            "--set",
            "train.steps=3",
            "--set",
            "train.crop=40",
            "--set",
            "train.batch=2",
        ],
        dir.path(),
    );
    assert!(train.status.success(), "{}", stderr(&train));
    for (run, kind) in [("f", "FWI report"), ("t", "Training report")] {
        let o = tessera(&["report", run], dir.path());
        assert!(o.status.success(), "{run}: {}", stderr(&o));
        let page = std::fs::read_to_string(dir.path().join(run).join("report.html")).unwrap();
        assert!(page.contains(kind) && page.contains("<table>"), "{run}");
        assert!(dir.path().join(run).join("loss.png").exists());
        assert!(dir.path().join(run).join("ranks.csv").exists());
    }
}

/// `--device cuda` never runs a job on the CPU instead: a build without GPU support says how to
/// rebuild, a GPU build names every part of the preset that is not on the GPU yet; nothing is
/// written. A device that is not one is refused naming the flag.
#[test]
fn a_gpu_run_is_refused_by_name_and_never_run_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(&["run", "quick", "--quiet", "--device", "tpu"], dir.path());
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("--device") && e.contains("cuda:N"), "{e}");

    for args in [
        vec!["run", "quick", "--quiet", "--device", "cuda"],
        vec![
            "run",
            "quick",
            "--quiet",
            "--set",
            "distributed.device=\"cuda:0\"",
        ],
    ] {
        let o = tessera(&args, dir.path());
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{e}");
        if cfg!(feature = "cuda") {
            // Every part of `quick` (a circular blur, L2, TV, PnP) has a device twin, so the run
            // goes to the GPU: without one (this machine), opening it is the error.
            if o.status.success() {
                continue;
            }
            // The job itself got as far as opening the device (no refusal before it).
            assert!(
                e.contains("running preset") && (e.contains("NVIDIA") || e.contains("GPU")),
                "{e}"
            );
            assert!(!e.contains("not on the GPU yet"), "{e}");
        } else {
            assert!(!o.status.success(), "{args:?} ran");
            assert!(e.contains("--features cuda"), "{e}");
        }
        assert!(!dir.path().join("out").exists(), "{args:?} wrote outputs");
    }
    // A part that is not on the GPU is named before anything runs, in every build.
    let o = tessera(
        &[
            "run",
            "quick",
            "--quiet",
            "--device",
            "cuda",
            "--set",
            "fidelity.kind=\"l1\"",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    if cfg!(feature = "cuda") {
        assert!(e.contains("not on the GPU yet: fidelity l1"), "{e}");
    }
    assert!(!dir.path().join("out").exists());
    // The CPU, named, runs as before.
    let o = tessera(
        &[
            "run",
            "quick",
            "--quiet",
            "--device",
            "cpu",
            "--set",
            "algorithm.iterations=1",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `tessera train --device cuda` is refused before anything runs, in every build, naming what
/// training lacks on the GPU for the preset's network; a bad device name is refused naming the
/// flag, on `train` and on `serve` (before any group forms).
#[test]
fn training_on_a_gpu_is_refused_naming_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        &[
            "train",
            "train-dncnn",
            "--device",
            "cuda",
            "--out",
            "trained",
        ],
        dir.path(),
    );
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    for part in [
        "--device cuda: not on the GPU yet: training dncnn",
        "cuDNN",
        "the adam optimiser",
        "--device cpu",
    ] {
        assert!(e.contains(part), "{part} missing from: {e}");
    }
    assert!(!dir.path().join("trained").exists());
    for args in [
        vec!["train", "train-dncnn", "--device", "tpu"],
        vec!["serve", "--socket", "s.sock", "--device", "tpu"],
    ] {
        let o = tessera(&args, dir.path());
        let e = stderr(&o);
        assert!(!o.status.success(), "{args:?}: {e}");
        assert!(e.contains("--device") && e.contains("cuda:N"), "{e}");
    }
}

/// `tessera ARGS` in `cwd` as rank 0 of a one-rank group that mpirun started (its environment
/// only: a group of one needs no peer), with the test hook `die_at`.
fn under_mpirun(args: &[&str], die_at: Option<&str>, cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.args(args).current_dir(cwd);
    for (k, v) in [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "1"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    ] {
        c.env(k, v);
    }
    for k in [
        "RANK",
        "WORLD_SIZE",
        "TESSERA_LAUNCHED",
        "TESSERA_TEST_DIE_AT",
    ] {
        c.env_remove(k);
    }
    if let Some(d) = die_at {
        c.env("TESSERA_TEST_DIE_AT", d);
    }
    c
}

/// multiblur at a test's size, `iterations` long, a checkpoint after every iteration.
fn small_multiblur(iterations: usize) -> Vec<String> {
    [
        "run",
        "multiblur",
        "--quiet",
        "--set",
        "image.size=[64,96]",
        "--set",
        &format!("algorithm.iterations={iterations}"),
        "--set",
        "tiling.patch_size=32",
        "--set",
        "tiling.overlap=8",
        "--set",
        "distributed.checkpoint_every=1",
    ]
    .map(String::from)
    .to_vec()
}

/// Every file of run folder `a` but `metrics.json` has the bytes of `b`'s, and they hold the same
/// files.
fn same_outputs_but_metrics(a: &Path, b: &Path) {
    let names = |d: &Path| {
        let mut n: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(a), names(b));
    for name in names(a).into_iter().filter(|n| n != "metrics.json") {
        let same = std::fs::read(a.join(&name)).unwrap() == std::fs::read(b.join(&name)).unwrap();
        assert!(same, "{name:?} differs");
    }
}

/// Under mpirun (srun, torchrun) `--elastic` is no longer refused: the run keeps a checkpoint, says
/// once why a lost rank stops it and where the checkpoint goes, and `--resume` finishes a run that
/// was killed with the bytes of an uninterrupted one.
#[test]
fn elastic_under_mpirun_keeps_a_checkpoint_that_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let args = small_multiblur(4);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = tessera(&[&args[..], &["--out", "one"]].concat(), cwd);
    assert!(o.status.success(), "{}", stderr(&o));
    let elastic = [&args[..], &["--elastic", "--out", "o"]].concat();
    let o = under_mpirun(&elastic, Some("0:3"), cwd).output().unwrap();
    let e = stderr(&o);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(9), "killed by the hook: {e}");
    assert!(
        e.contains(
            "elastic under mpirun: a group that mpirun started cannot be re-formed (only \
             tessera's own launcher, --ranks N, re-forms one), so a lost rank stops this run; \
             rank 0 keeps a checkpoint every 1 iteration(s) in o.checkpoint"
        ),
        "{e}"
    );
    assert!(!cwd.join("o").exists());
    let o = tessera(&["run", "--resume", "o.checkpoint", "--quiet"], cwd);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("resuming after iteration 2"), "{e}");
    same_outputs_but_metrics(&cwd.join("one"), &cwd.join("o"));
    assert!(!cwd.join("o.checkpoint").exists());
}

/// A rank of a checkpointed run that its launcher stops (SIGTERM) says where the checkpoint is and
/// the command that continues the run under the same launcher.
#[test]
fn a_checkpointed_rank_stopped_by_its_launcher_says_how_to_continue() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let args = small_multiblur(100_000);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let elastic = [&args[..], &["--elastic", "--out", "o"]].concat();
    let child = under_mpirun(&elastic, None, cwd)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let checkpoint = cwd.join("o.checkpoint/checkpoint.tessera");
    for _ in 0..1200 {
        if checkpoint.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(checkpoint.exists(), "no checkpoint appeared");
    // SAFETY: kill(2) of the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{e}");
    assert!(
        e.contains("the run stopped: mpirun stopped rank 0 (SIGTERM"),
        "{e}"
    );
    assert!(
        e.contains("continue it with:\n  mpirun -np 1 tessera run --resume o.checkpoint --elastic"),
        "{e}"
    );
    assert!(e.contains("(after iteration "), "{e}");
}

/// What `--elastic` still refuses, by name: no launcher at all, `--ranks N` on MPI, `--respawn` or
/// NCCL under mpirun, and `tessera serve --elastic` under mpirun.
#[test]
fn elastic_without_a_launcher_or_what_mpirun_cannot_do_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let args = small_multiblur(2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let e = fails_cleanly(&tessera(&[&args[..], &["--elastic"]].concat(), cwd));
    assert!(
        e.contains("needs --ranks N") && e.contains("or ranks started by mpirun"),
        "{e}"
    );
    let mpi = [
        &args[..],
        &["--elastic", "--ranks", "2", "--backend", "mpi"],
    ]
    .concat();
    let e = fails_cleanly(&tessera(&mpi, cwd));
    assert!(
        e.contains("cannot shrink without ULFM") && e.contains("keeps a checkpoint instead"),
        "{e}"
    );
    let respawn = [&args[..], &["--elastic", "--respawn"]].concat();
    let e = fails_cleanly(&under_mpirun(&respawn, None, cwd).output().unwrap());
    assert!(e.contains("--respawn needs tessera's own launcher"), "{e}");
    let nccl = [&args[..], &["--elastic", "--backend", "nccl"]].concat();
    let e = fails_cleanly(&under_mpirun(&nccl, None, cwd).output().unwrap());
    assert!(e.contains("--elastic with --backend nccl"), "{e}");
    let serve = ["serve", "--elastic", "--socket", "s.sock"];
    let e = fails_cleanly(&under_mpirun(&serve, None, cwd).output().unwrap());
    assert!(e.contains("tessera serve --elastic needs --ranks N"), "{e}");
    assert!(!cwd.join("o.checkpoint").exists());
}
