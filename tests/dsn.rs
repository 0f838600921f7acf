//! `tessera train` with Multi-DSN presets end to end: real rank processes over sockets train the same
//! weights as one process, and bad presets or folders are named.

#[path = "support/cli.rs"]
mod cli;

use cli::run;

const SMALL: &[&str] = &[
    "--quiet",
    "--set",
    "model.image_size=16",
    "--set",
    "train.epochs=2",
    "--set",
    "train.steps_per_epoch=3",
    "--set",
    "train.batch=4",
    "--set",
    "train.train_images=16",
    "--set",
    "train.test_images=8",
];

fn epochs(dir: &std::path::Path) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("train.json")).unwrap()).unwrap();
    json["epochs"].clone()
}

#[test]
fn one_and_three_rank_processes_write_identical_weights_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["1", "3"] {
        let out = format!("o{n}");
        let mut args = vec!["train", "dsn_shapes", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        let o = run(&args, dir.path());
        assert!(
            o.status.success(),
            "{n} ranks: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let (a, b) = (dir.path().join("o1"), dir.path().join("o3"));
    let wa = std::fs::read(a.join("dsn.safetensors")).unwrap();
    assert_eq!(wa, std::fs::read(b.join("dsn.safetensors")).unwrap());
    assert_eq!(epochs(&a), epochs(&b));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("train.json")).unwrap()).unwrap();
    assert_eq!(json["per_rank"].as_array().unwrap().len(), 3);
    assert_eq!(json["per_rank"][1]["domains"], serde_json::json!([1]));
    // Every domain's private encoder is in the weights, with the shared parts.
    let text = String::from_utf8_lossy(&wa[..wa.len().min(20_000)]).to_string();
    for name in [
        "private_encoder.3.head.weight",
        "decoder.head.weight",
        "classifier.0.weight",
    ] {
        assert!(text.contains(name), "{name} missing from the weights");
    }
}

#[test]
fn bad_presets_and_folders_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let preset = include_str!("../presets/dsn_shapes.toml");
    std::fs::write(
        dir.path().join("typo.toml"),
        preset.replace("steps_per_epoch", "steps_per_epoc"),
    )
    .unwrap();
    let o = run(&["train", "typo.toml", "--quiet"], dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("steps_per_epoc"),
        "{err}"
    );

    std::fs::create_dir(dir.path().join("images")).unwrap();
    std::fs::write(
        dir.path().join("folder.toml"),
        preset.replace("name = \"noisy\"", "name = \"noisy\"\nfolder = \"images\""),
    )
    .unwrap();
    let mut args = vec!["train", "folder.toml", "--out", "o"];
    args.extend_from_slice(SMALL);
    let o = run(&args, dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("images") && err.contains("sub-folder"),
        "{err}"
    );
}
