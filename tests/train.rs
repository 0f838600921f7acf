//! `tessera train` end to end: real rank processes, weights that `tessera denoise` loads back.

#[path = "support/cli.rs"]
mod cli;

use std::path::Path;

use cli::{read_json, run, run_ok};

const SMALL: &[&str] = &[
    "--quiet",
    "--set",
    "image.size=[96,80]",
    "--set",
    "train.steps=8",
    "--set",
    "train.log_every=1",
    "--set",
    "train.crop=40",
    "--set",
    "train.batch=3",
];

fn losses(dir: &Path) -> Vec<f64> {
    let json = read_json(&dir.join("train.json"));
    json["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn training_on_one_two_and_three_ranks_follows_the_same_loss_curve_and_the_weights_denoise() {
    let dir = tempfile::tempdir().unwrap();
    let mut curves = Vec::new();
    for n in ["1", "2", "3"] {
        let out = format!("o{n}");
        let mut args = vec!["train", "train-dncnn", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        run_ok(&args, dir.path(), &format!("{n} ranks"));
        curves.push(losses(&dir.path().join(&out)));
    }
    let one = &curves[0];
    assert_eq!(one.len(), 8);
    assert!(one[7] < one[0], "the loss does not fall: {one:?}");
    for (n, c) in curves.iter().enumerate().skip(1) {
        for (a, b) in one.iter().zip(c) {
            assert!((a - b).abs() <= 1e-5 * a, "{} ranks: {a} vs {b}", n + 1);
        }
    }
    // The written denoiser file runs the trained weights.
    let x = tessera::Tensor::from_fn(&[1, 1, 24, 30], |i| ((i * 7) % 13) as f32 / 13.0);
    tessera::io::write_array(&dir.path().join("x.npy"), &x).unwrap();
    let o = run(
        &[
            "denoise",
            "--denoiser",
            "o1/denoiser.toml",
            "--sigma",
            "0.1",
            "x.npy",
            "y.npy",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let y = tessera::io::read_array(&dir.path().join("y.npy")).unwrap();
    assert_eq!(y.shape(), x.shape());
    assert!(y.max_abs_diff(&x) > 0.0);
}

#[test]
fn bad_training_presets_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (set, want) in [
        ("train.sigma=[0.1, -1]", "train.sigma"),
        ("train.crop=4000", "train.crop"),
        ("train.bogus=1", "bogus"),
        ("denoiser={kind=\"tv\"}", "dncnn"),
        ("train.weights=\"../w.safetensors\"", "train.weights"),
        ("train.grid=[2,2]", "grid"),
        ("train.augment.scales=[0]", "train.augment.scales"),
        ("train.augment.scales=[1,3]", "largest augmentation scale"),
        ("train.augment.colour_jitter=1", "colour_jitter"),
    ] {
        let o = run(
            &[
                "train",
                "train-dncnn",
                "--quiet",
                "--set",
                "image.size=[64,64]",
                "--set",
                set,
            ],
            dir.path(),
        );
        assert!(!o.status.success(), "{set} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{set}: {err}");
    }
}

/// Every denoiser-training preset file in `presets/` (most are not embedded in the binary, so
/// `tessera presets` does not see them) loads and validates, and a preset that starts from
/// another network's weights names them where a fresh clone's run of that network puts them:
/// `../out/PRESET/FILE`, PRESET a training preset here whose `train.weights` is FILE. Following
/// that chain back from the bundled DRUNet's preset ends at a preset trained from scratch.
#[test]
fn training_preset_files_validate_and_chain_to_their_starting_weights() {
    let presets = Path::new(env!("CARGO_MANIFEST_DIR")).join("presets");
    let mut train = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&presets).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if !tessera::train::TrainPreset::is_train(&text) {
            continue;
        }
        let (preset, _) = tessera::train::TrainPreset::load(path.to_str().unwrap(), &[])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        assert_eq!(preset.name, stem, "{}", path.display());
        let table: toml::Table = toml::from_str(&text).unwrap();
        let start = table["denoiser"]
            .get("weights")
            .map(|w| w.as_str().unwrap().to_string());
        train.insert(stem, (preset.train.weights.clone(), start));
    }
    for (name, (_, start)) in &train {
        let Some(start) = start else { continue };
        if tessera::nn::bundled::is_named(Path::new(start)) {
            continue;
        }
        let parts: Vec<&str> = start.split('/').collect();
        let [dotdot, out, from, file] = parts[..] else {
            panic!("{name}: weights `{start}` is not ../out/PRESET/FILE");
        };
        assert_eq!((dotdot, out), ("..", "out"), "{name}: weights `{start}`");
        let made = train.get(from).map(|(w, _)| w.as_str());
        assert_eq!(
            made,
            Some(file),
            "{name}: `{start}` is not what {from} makes"
        );
    }
    let bundled = tessera::nn::bundled::DRUNET[0].preset;
    let mut name = Path::new(bundled).file_stem().unwrap().to_str().unwrap();
    for _ in 0..train.len() {
        let (_, start) = train
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not here"));
        match start {
            Some(start) if !tessera::nn::bundled::is_named(Path::new(start)) => {
                name = start.split('/').nth(2).unwrap()
            }
            _ => return,
        }
    }
    panic!("the chain of starting weights from {bundled} does not end");
}

#[test]
fn augmented_crops_train_the_same_on_one_and_two_ranks_and_differ_from_plain_crops() {
    let dir = tempfile::tempdir().unwrap();
    let augment = "train.augment={flips=true, scales=[1,2], colour_jitter=0.2}";
    let mut curves = Vec::new();
    for (n, out, aug) in [
        ("1", "plain", false),
        ("1", "aug1", true),
        ("2", "aug2", true),
    ] {
        let mut args = vec!["train", "train-dncnn", "--ranks", n, "--out", out];
        args.extend_from_slice(SMALL);
        if aug {
            args.extend_from_slice(&["--set", augment]);
        }
        run_ok(&args, dir.path(), out);
        curves.push(losses(&dir.path().join(out)));
    }
    for (a, b) in curves[1].iter().zip(&curves[2]) {
        assert!((a - b).abs() <= 1e-5 * a, "1 vs 2 ranks: {a} vs {b}");
    }
    assert_ne!(
        curves[0][0], curves[1][0],
        "the augmented batch is the plain one"
    );
}

#[test]
fn stopping_and_resuming_equals_an_uninterrupted_run_bit_for_bit_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["1", "2"] {
        let whole = format!("whole{n}");
        let parts = format!("parts{n}");
        let mut args = vec!["train", "train-dncnn", "--ranks", n, "--out", &whole];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--set", "train.checkpoint_every=3"]);
        run_ok(&args, dir.path(), &format!("{n} ranks, uninterrupted"));
        // The periodic checkpoints were written (the last one at step 6 of 8).
        let ck = read_json(&dir.path().join(&whole).join("checkpoint/checkpoint.json"));
        assert_eq!(ck["step"], 6);

        let mut args = vec!["train", "train-dncnn", "--ranks", n, "--out", &parts];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--stop-after", "5"]);
        run_ok(&args, dir.path(), &format!("{n} ranks, first part"));
        let stopped = read_json(&dir.path().join(&parts).join("train.json"));
        assert_eq!(stopped["steps"], 5);
        assert_eq!(stopped["stopped_early"], true);
        let mut args = vec!["train", "train-dncnn", "--ranks", n, "--resume", &parts];
        args.extend_from_slice(SMALL);
        run_ok(&args, dir.path(), &format!("{n} ranks, resumed"));

        let read =
            |d: &str| std::fs::read(dir.path().join(d).join("dncnn_grey.safetensors")).unwrap();
        assert!(
            read(&whole) == read(&parts),
            "{n} ranks: the weights differ"
        );
        let (a, b) = (
            losses(&dir.path().join(&whole)),
            losses(&dir.path().join(&parts)),
        );
        assert_eq!(a.len(), 8);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{n} ranks: the loss curves differ"
        );
        let resumed = read_json(&dir.path().join(&parts).join("train.json"));
        assert_eq!(resumed["resumed_from"], 5);
        assert_eq!(resumed["steps"], 8);
        assert_eq!(resumed["stopped_early"], false);
    }
}

#[test]
fn a_checkpoint_is_only_resumed_by_the_preset_that_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "train-dncnn", "--out", "r", "--stop-after", "2"];
    args.extend_from_slice(SMALL);
    run_ok(&args, dir.path(), "first part");
    for (extra, want) in [
        (&["--set", "train.batch=4"][..], "train.batch"),
        (&["--set", "denoiser.nf=16"][..], "denoiser.nf"),
        (&["--stop-after", "2"][..], "stop after a later step"),
    ] {
        let mut args = vec!["train", "train-dncnn", "--resume", "r"];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(extra);
        let o = run(&args, dir.path());
        assert!(!o.status.success(), "{extra:?} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let mut args = vec!["train", "train-dncnn", "--resume", "nowhere"];
    args.extend_from_slice(SMALL);
    let o = run(&args, dir.path());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("checkpoint.json"));
}

/// A damaged checkpoint is refused, naming its file, instead of resuming into NaN weights.
#[test]
fn a_corrupted_checkpoint_is_refused_not_resumed_into_nan_weights() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["train", "train-dncnn", "--out", "r", "--stop-after", "2"];
    args.extend_from_slice(SMALL);
    run_ok(&args, dir.path(), "first part");
    let state = dir.path().join("r/checkpoint/state.bin");
    let good = std::fs::read(&state).unwrap();
    let mut every_997th = good.clone();
    for b in every_997th.iter_mut().step_by(997) {
        *b ^= 0xff;
    }
    let mut first_16 = good.clone();
    first_16[..16].fill(0xff);
    for damaged in [every_997th, first_16] {
        std::fs::write(&state, &damaged).unwrap();
        let mut args = vec!["train", "train-dncnn", "--resume", "r"];
        args.extend_from_slice(SMALL);
        let o = run(&args, dir.path());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("damaged") && err.contains("state.bin"),
            "{err}"
        );
    }
    // The intact checkpoint still resumes.
    std::fs::write(&state, &good).unwrap();
    let mut args = vec!["train", "train-dncnn", "--resume", "r"];
    args.extend_from_slice(SMALL);
    run_ok(&args, dir.path(), "resumed");
}

#[test]
fn crops_come_from_several_images_and_held_out_images_are_scored_not_trained_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("mine")).unwrap();
    for (name, seed) in [("a.npy", 3), ("b.npy", 4)] {
        let x = tessera::samples::natural_image(48, 56, seed);
        let x = tessera::Tensor::from_fn(&[48, 56], |i| x.data()[i]);
        tessera::io::write_array(&dir.path().join("mine").join(name), &x).unwrap();
    }
    let preset = r#"
version = 1
name = "several"
seed = 2
[[images]]
sample = "natural"
size = [64, 72]
grayscale = true
[[images]]
sample = "natural"
size = [40, 40]
seed = 9
grayscale = true
[[images]]
path = "mine"
[[held_out]]
path = "mine/b.npy"
[[held_out]]
sample = "natural"
size = [40, 48]
seed = 77
grayscale = true
[denoiser]
kind = "dncnn"
in_channels = 1
out_channels = 1
depth = 3
nf = 8
[train]
sigma = [0.1]
eval_sigma = [0.05, 0.2]
steps = 3
batch = 2
crop = 24
"#;
    std::fs::write(dir.path().join("several.toml"), preset).unwrap();
    run_ok(
        &["train", "several.toml", "--quiet", "--out", "o"],
        dir.path(),
        "several images",
    );
    let json = read_json(&dir.path().join("o/train.json"));
    let names: Vec<&str> = json["training_images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names[2].ends_with("a.npy"), "{names:?}");
    let scores = json["held_out"].as_array().unwrap();
    assert_eq!(scores.len(), 4);
    assert!(scores[0]["image"].as_str().unwrap().ends_with("b.npy"));
    let noisy = |i: usize| scores[i]["noisy_psnr_db"].as_f64().unwrap();
    // Unit-variance noise at σ = 0.05 and 0.2: about 26 and 14 dB.
    assert!((noisy(0) - 26.0).abs() < 0.5 && (noisy(1) - 14.0).abs() < 0.5);

    // A colour image among grey ones is named.
    let colour = preset.replace("seed = 9\ngrayscale = true", "seed = 9");
    std::fs::write(dir.path().join("colour.toml"), colour).unwrap();
    let o = run(&["train", "colour.toml", "--quiet"], dir.path());
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("seed 9"), "{err}");
}

/// `tessera bench denoisers` leaves BM3D's column out, saying why, without the benchmark
/// environment, and with one (here a stand-in "python" that returns each noisy input unchanged,
/// so that the test stays offline) it writes the noisy inputs, reads the outputs back and scores
/// them: the BM3D column then equals the noisy column, which shows the inputs went out bit for bit.
#[test]
fn bench_denoisers_scores_bm3d_from_the_environment_or_says_why_it_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let photo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/photos/camera_128.png");
    let photo = photo.to_str().unwrap();
    let bench = |venv: &Path| {
        let o = cli::tessera()
            .args(["bench", "denoisers", photo, "--sigma", "0.1"])
            .env("TESSERA_BENCH_VENV", venv)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let none = dir.path().join("no-venv");
    let out = bench(&none);
    assert!(
        out.contains("BM3D's column is left out: no benchmark environment at")
            && out.contains("no-venv"),
        "{out}"
    );
    assert!(!out.contains("| BM3D |"), "{out}");

    let venv = dir.path().join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    let python = venv.join("bin/python");
    std::fs::write(
        &python,
        "#!/bin/sh\ncd \"$2\" && for f in noisy_*.npy; do cp \"$f\" \"bm3d_${f#noisy_}\"; done\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = bench(&venv);
    assert!(out.contains("| BM3D |"), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| camera_128.png"))
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    let cells: Vec<&str> = rows[0].split('|').map(str::trim).collect();
    // | image | σ | noisy | TV | wavelet | BM3D | nets |
    assert_eq!(
        cells[3], cells[6],
        "BM3D of the unchanged input is the noisy PSNR: {}",
        rows[0]
    );
}

/// `tessera bench denoisers --drunet FILE` scores a σ-conditional DRUNet file (the kind read from
/// its keys; `--weights` and `--dncnn` are the same option) on the images of its channel count
/// (a grey one also on colour images, in the opponent colour space), beside the bundled networks;
/// a file that is neither kind is an error naming it.
#[test]
fn bench_denoisers_scores_a_drunet_weight_file() {
    let dir = tempfile::tempdir().unwrap();
    let arch = tessera::nn::DrunetArch {
        in_channels: 1,
        out_channels: 1,
        nc: tessera::nn::bundled::DRUNET_NC,
        nb: tessera::nn::bundled::DRUNET_NB,
        dim: 2,
    };
    let weights = dir.path().join("drunet_grey.safetensors");
    tessera::nn::Drunet::random(arch, 2)
        .unwrap()
        .network()
        .state_dict("drunet")
        .unwrap()
        .save_safetensors(&weights)
        .unwrap();
    let photo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/photos/camera_128.png");
    let bench = |option: &str, file: &Path| {
        cli::tessera()
            .args(["bench", "denoisers", "--no-bm3d", "--sigma", "0.1", option])
            .arg(file)
            .arg(&photo)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let o = bench("--drunet", &weights);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let row = out
        .lines()
        .find(|l| l.starts_with("| camera_128.png"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        row.contains("(dncnn_grey)")
            && row.contains("(drunet_grey)")
            && row.contains("(drunet_grey.safetensors)"),
        "{row}"
    );
    // The colour rows score the grey file (and the bundled grey DRUNet) in the opponent colour
    // space.
    let colour = out
        .lines()
        .find(|l| l.contains("seed 1000 |"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        colour.contains("(drunet_grey (opponent colour))")
            && colour.contains("(drunet_grey.safetensors (opponent colour))"),
        "{colour}"
    );
    let same = bench("--weights", &weights);
    assert_eq!(String::from_utf8_lossy(&same.stdout), out);

    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    let o = bench("--drunet", &junk);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("junk.safetensors"), "{err}");
}

/// deepinv's `DRUNet` loads the weights `tessera train` writes for the bundled DRUNet's layout (the
/// grey preset: σ-conditional, nc 16-32-64-128, two blocks per scale, no biases; a few steps, so
/// the weights are not the initial ones) and gives tessera's output to 1e-5.
#[test]
#[ignore = "needs the benchmark environment with deepinv (scripts/setup-deepinv.sh)"]
fn deepinv_loads_the_trained_drunet_weights_and_gives_our_output() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let preset = root.join("presets/train-drunet-grey.toml");
    run_ok(
        &[
            "train",
            preset.to_str().unwrap(),
            "--quiet",
            "--out",
            "grey",
            "--set",
            "images=[{sample=\"natural\", size=[160,160], seed=1, grayscale=true}]",
            "--set",
            "train.steps=3",
            "--set",
            "train.log_every=1",
        ],
        dir.path(),
        "training",
    );
    let x = tessera::Tensor::from_fn(&[1, 1, 48, 40], |i| ((i * 7) % 13) as f32 / 13.0);
    tessera::io::write_array(&dir.path().join("x.npy"), &x).unwrap();
    run_ok(
        &[
            "denoise",
            "--denoiser",
            "grey/denoiser.toml",
            "--sigma",
            "0.05",
            "x.npy",
            "y.npy",
        ],
        dir.path(),
        "denoising",
    );
    let venv = std::env::var_os("TESSERA_BENCH_VENV").map_or_else(
        || Path::new(&std::env::var_os("HOME").unwrap()).join(".cache/tessera/deepinv-venv"),
        std::path::PathBuf::from,
    );
    let o = std::process::Command::new(venv.join("bin/python"))
        .arg(root.join("scripts/check_trained_weights.py"))
        .args(["grey", "x.npy", "y.npy", "0.05", "1e-5"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    println!("{said}");
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
