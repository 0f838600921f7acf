//! `tessera train` with Multi-DSN presets end to end: real rank processes over sockets train the same
//! weights as one process, and bad presets or folders are named.

#[path = "support/cli.rs"]
mod cli;

use cli::{read_json, run, run_ok};

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
    read_json(&dir.join("train.json"))["epochs"].clone()
}

#[test]
fn one_and_three_rank_processes_write_identical_weights_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["1", "3"] {
        let out = format!("o{n}");
        let mut args = vec!["train", "dsn_shapes", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        run_ok(&args, dir.path(), &format!("{n} ranks"));
    }
    let (a, b) = (dir.path().join("o1"), dir.path().join("o3"));
    let wa = std::fs::read(a.join("dsn.safetensors")).unwrap();
    assert_eq!(wa, std::fs::read(b.join("dsn.safetensors")).unwrap());
    assert_eq!(epochs(&a), epochs(&b));
    let json = read_json(&b.join("train.json"));
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
fn dann_with_its_ramp_trains_the_same_weights_on_one_and_two_rank_processes() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["1", "2"] {
        let out = format!("o{n}");
        let mut args = vec!["train", "dsn_shapes", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--set", "train.similarity=dann"]);
        run_ok(&args, dir.path(), &format!("{n} ranks"));
    }
    let (a, b) = (dir.path().join("o1"), dir.path().join("o2"));
    assert_eq!(
        std::fs::read(a.join("dsn.safetensors")).unwrap(),
        std::fs::read(b.join("dsn.safetensors")).unwrap()
    );
    let e = epochs(&a);
    assert_eq!(e, epochs(&b));
    // DANN ran: the source reports a domain-classifier loss (MMD reports its terms on targets only).
    assert!(e[0]["losses"][0]["similarity"].as_f64().unwrap() > 0.0);
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

/// Scale-invariant MSE of each image of `rows[row]` against the inputs (`rows[0]`), averaged.
fn reconstruction_error(t: &tessera::tensor::Tensor, row: usize) -> f64 {
    let s = t.shape();
    let (n, k) = (s[1], s[2] * s[3]);
    let v = t.data();
    (0..n)
        .map(|i| {
            let d: Vec<f64> = (0..k)
                .map(|j| (v[i * k + j] - v[(row * n + i) * k + j]) as f64)
                .collect();
            let mean = d.iter().sum::<f64>() / k as f64;
            d.iter().map(|x| x * x).sum::<f64>() / k as f64 - mean * mean
        })
        .sum::<f64>()
        / n as f64
}

#[test]
fn reconstructions_are_written_per_domain_and_agree_between_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["1", "2"] {
        let out = format!("o{n}");
        let mut args = vec!["train", "dsn_shapes", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&[
            "--set",
            "train.epochs=3",
            "--set",
            "train.steps_per_epoch=20",
            "--set",
            "train.reconstructions_every=1",
        ]);
        run_ok(&args, dir.path(), &format!("{n} ranks"));
    }
    let (a, b) = (dir.path().join("o1"), dir.path().join("o2"));
    let json = read_json(&b.join("train.json"));
    assert_eq!(json["reconstructions"].as_array().unwrap().len(), 4);
    let mut inputs = Vec::new();
    for domain in ["source", "blurred", "noisy", "tomography"] {
        for ext in ["png", "npy"] {
            let file = format!("reconstructions/{domain}.{ext}");
            let one = std::fs::read(a.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(
                one,
                std::fs::read(b.join(&file)).unwrap(),
                "{file} differs between 1 and 2 ranks"
            );
        }
        let t = tessera::io::read_npy(&a.join(format!("reconstructions/{domain}.npy"))).unwrap();
        // Rows: input, full, shared only, private only; 6 held-out images of 16².
        assert_eq!(t.shape(), [4, 6, 16, 16], "{domain}");
        inputs.push(t.data()[..6 * 256].to_vec());
        // Trained, the decoder uses the private part: dropping it makes the reconstruction worse
        // (rows swapped or mislabelled, this fails; `reconstruct_parts` has the exact checks).
        let (full, shared, private) = (
            reconstruction_error(&t, 1),
            reconstruction_error(&t, 2),
            reconstruction_error(&t, 3),
        );
        eprintln!("{domain}: errors full {full}, shared only {shared}, private only {private}");
        assert!(
            full < shared,
            "{domain}: errors full {full}, shared only {shared}, private only {private}"
        );
    }
    // Each file holds its own domain's images.
    for i in 1..inputs.len() {
        assert_ne!(inputs[0], inputs[i]);
    }
}

/// Every weight of `a` against `b` (same names): the largest absolute difference, skipping
/// `skip`.
fn max_weight_difference(a: &std::path::Path, b: &std::path::Path, skip: &[&str]) -> (f32, usize) {
    let sa = tessera::nn::StateDict::load(&a.join("dsn.safetensors")).unwrap();
    let sb = tessera::nn::StateDict::load(&b.join("dsn.safetensors")).unwrap();
    assert_eq!(
        sa.keys().collect::<Vec<_>>(),
        sb.keys().collect::<Vec<_>>(),
        "parameter names"
    );
    let mut worst = 0f32;
    let mut compared = 0;
    for ((name, ta), (_, tb)) in sa.iter().zip(sb.iter()) {
        if skip.contains(&name) {
            continue;
        }
        assert_eq!(ta.shape(), tb.shape(), "{name}");
        for (x, y) in ta.data().iter().zip(tb.data()) {
            worst = worst.max((x - y).abs() / y.abs().max(1.0));
            compared += 1;
        }
    }
    (worst, compared)
}

/// `[distributed] ranks_per_domain = 2`: each domain's conv trunks (encoders, decoder) split every
/// image over 2 rank processes (one group holding all four domains on 2 ranks, two groups on 4
/// ranks) and train the weights of one process to float rounding; the first epoch's losses agree,
/// the reconstructions and the private encoders of every domain are written.
#[test]
fn trunks_split_over_two_rank_processes_per_domain_train_the_weights_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    for (n, per_domain) in [("1", "1"), ("2", "2"), ("4", "2")] {
        let out = format!("o{n}");
        let set = format!("distributed.ranks_per_domain={per_domain}");
        let mut args = vec!["train", "dsn_shapes", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--set", &set]);
        run_ok(&args, dir.path(), &format!("{n} ranks"));
    }
    let one = dir.path().join("o1");
    for n in ["2", "4"] {
        let split = dir.path().join(format!("o{n}"));
        // The last decoder bias has a zero gradient up to rounding (the scale-invariant MSE
        // ignores offsets), so Adam moves it by rounding noise: it is left out.
        let (worst, compared) = max_weight_difference(&split, &one, &["decoder.3.bias"]);
        assert!(compared > 10_000, "{compared} weights compared");
        assert!(worst <= 1e-5, "{n} ranks: weights differ by {worst}");
        let (e, want) = (epochs(&split), epochs(&one));
        for d in 0..4 {
            for term in ["task", "reconstruction", "difference", "similarity"] {
                let (a, b) = (
                    e[0]["losses"][d][term].as_f64().unwrap(),
                    want[0]["losses"][d][term].as_f64().unwrap(),
                );
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
                    "{n} ranks, domain {d}, {term}: {a} vs {b}"
                );
            }
        }
        let json = read_json(&split.join("train.json"));
        assert_eq!(json["ranks_per_domain"], 2);
        assert_eq!(json["reconstructions"].as_array().unwrap().len(), 4);
        let ranks = json["per_rank"].as_array().unwrap();
        // Both ranks of a group work on its domains.
        if n == "4" {
            for (r, want) in [[0, 2], [0, 2], [1, 3], [1, 3]].iter().enumerate() {
                assert_eq!(ranks[r]["domains"], serde_json::json!(want), "rank {r}");
            }
        } else {
            assert_eq!(ranks[1]["domains"], serde_json::json!([0, 1, 2, 3]));
        }
    }
    // A rank count the groups do not divide is named.
    let mut args = vec!["train", "dsn_shapes", "--ranks", "3", "--out", "bad"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(&["--set", "distributed.ranks_per_domain=2"]);
    let o = run(&args, dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("distributed.ranks_per_domain"),
        "{err}"
    );
}
