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
