//! Memory estimates: weights counted exactly as deepinv lays them out (checked against deepinv's
//! own state dicts), and jobs that cannot fit refused before they start — by `tessera run` and by
//! `tessera serve`, which then takes the next job — with the estimate and the available memory.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::memory;
use tessera::nn::{DncnnConfig, DrunetConfig, StateDict};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deepinv")
}

fn stored_parameters(name: &str) -> u64 {
    StateDict::load(&fixtures().join(name))
        .unwrap()
        .iter()
        .map(|(_, t)| t.numel() as u64)
        .sum()
}

#[test]
fn weights_are_counted_exactly_as_deepinv_lays_them_out() {
    let drunet = |c: usize, nc: [usize; 4], nb: usize| DrunetConfig {
        in_channels: c,
        out_channels: c,
        nc: nc.to_vec(),
        nb,
        ..DrunetConfig::default()
    };
    for (file, cfg, d) in [
        ("drunet2d_color.pth", drunet(3, [16, 32, 64, 128], 2), 2),
        ("drunet2d_gray.pth", drunet(1, [8, 16, 32, 64], 1), 2),
        ("drunet3d_gray.pth", drunet(1, [8, 16, 32, 64], 1), 3),
    ] {
        assert_eq!(memory::drunet(&cfg, d).0, stored_parameters(file), "{file}");
    }
    let dncnn = |c: usize, depth: usize, nf: usize, bias: bool| DncnnConfig {
        in_channels: c,
        out_channels: c,
        depth,
        nf,
        bias,
        ..DncnnConfig::default()
    };
    for (file, cfg, d) in [
        ("dncnn2d_color.pth", dncnn(3, 5, 16, true), 2),
        ("dncnn2d_gray_nobias.pth", dncnn(1, 4, 8, false), 2),
        ("dncnn3d_gray.pth", dncnn(1, 3, 8, true), 3),
    ] {
        assert_eq!(memory::dncnn(&cfg, d).0, stored_parameters(file), "{file}");
    }
}

/// The quick preset with a DnCNN of 1000 layers of 4096 channels (≈ 600 GB of weights).
fn absurd_preset(dir: &Path) -> PathBuf {
    let quick = tessera::preset::BUNDLED[0].1;
    let denoiser = quick.find("[denoiser]").unwrap();
    let algorithm = quick.find("[algorithm]").unwrap();
    let text = format!(
        "{}[denoiser]\nkind = \"dncnn\"\ndepth = 1000\nnf = 4096\n\n{}",
        &quick[..denoiser],
        &quick[algorithm..]
    );
    let path = dir.join("absurd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_job_that_cannot_fit_is_refused_before_its_ranks_start() {
    let dir = tempfile::tempdir().unwrap();
    let preset = absurd_preset(dir.path());
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "run",
            preset.to_str().unwrap(),
            "--ranks",
            "2",
            "--out",
            "o",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("not enough memory") && e.contains("available") && e.contains("weights"),
        "{e}"
    );
    // Refused in the launcher: no rank was started.
    assert!(!e.contains("[launcher] rank"), "{e}");
    assert!(!dir.path().join("o").exists());
}

/// A backend of two local ranks writing under `dir`, and its client.
fn backend(dir: &Path) -> (tessera::protocol::LocalBackend, tessera::protocol::Client) {
    let mut opts = tessera::protocol::LocalOptions::new(2, dir.join("out"));
    opts.exe = Some(env!("CARGO_BIN_EXE_tessera").into());
    tessera::protocol::LocalBackend::spawn_with(opts).unwrap()
}

/// Submits each preset in turn and returns how each ended (`Finished` or `Failed`).
fn run_each(
    client: &tessera::protocol::Client,
    presets: Vec<String>,
) -> Vec<tessera::protocol::Event> {
    use tessera::protocol::{ClientEvent, Event, Request};
    let mut ends = Vec::new();
    for preset_toml in presets {
        client
            .send(Request::Submit {
                preset_toml,
                inline: Vec::new(),
                files: Vec::new(),
                preview_max_side: 32,
            })
            .unwrap();
        loop {
            match client
                .events()
                .recv_timeout(std::time::Duration::from_secs(120))
                .unwrap()
            {
                ClientEvent::Event(e @ (Event::Finished { .. } | Event::Failed { .. })) => {
                    ends.push(e);
                    break;
                }
                ClientEvent::Event(_) => {}
                ClientEvent::Disconnected(why) => panic!("{why}"),
            }
        }
    }
    ends
}

#[test]
fn serve_refuses_a_job_that_cannot_fit_and_takes_the_next() {
    use tessera::protocol::Event;
    let dir = tempfile::tempdir().unwrap();
    let (_backend, client) = backend(dir.path());
    let absurd = std::fs::read_to_string(absurd_preset(dir.path())).unwrap();
    let quick = tessera::preset::Preset::load("quick", &["algorithm.iterations=2".into()])
        .unwrap()
        .preset
        .to_toml()
        .unwrap();
    let ends = run_each(&client, vec![absurd, quick]);
    match &ends[0] {
        Event::Failed { error, .. } => {
            assert!(
                error.contains("not enough memory") && error.contains("× 2 ranks"),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ends[1], Event::Finished { .. }), "{:?}", ends[1]);
}

fn tessera(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// A PNG of a few hundred bytes whose header declares `side`² RGB pixels: a decoder would
/// allocate for all of them before finding the data missing.
fn lying_png(path: &Path, side: u32) {
    let chunk = |out: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = side.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&side.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &[0x78, 0x01, 0, 0, 0xff, 0xff]);
    chunk(&mut png, b"IEND", &[]);
    std::fs::write(path, png).unwrap();
}

/// Refused by name with the estimate and what is available, exit 1, no panic, nothing written.
fn refused(o: &std::process::Output, part: &str) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("not enough memory") && e.contains("available") && e.contains(part),
        "{part}: {e}"
    );
    assert!(
        !e.contains("panicked") && !e.contains("memory allocation"),
        "{e}"
    );
    e
}

#[test]
fn every_kind_of_job_that_cannot_fit_is_refused_with_its_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let train = |set: &[&str]| {
        let mut args = vec![
            "train",
            "train-dncnn",
            "--out",
            "t",
            "--set",
            "train.steps=2",
        ];
        for s in set {
            args.extend(["--set", s]);
        }
        tessera(&args, d)
    };
    // The training jobs: 100 000 crops of 64², and whole 2048² crops.
    refused(
        &train(&["train.batch=100000", "train.crop=64"]),
        "activations kept for the backward pass",
    );
    refused(&train(&["train.crop=2048"]), "denoiser training");
    // A Multi-DSN whose linear heads alone are terabytes.
    refused(
        &tessera(
            &[
                "train",
                "dsn_shapes",
                "--out",
                "m",
                "--set",
                "model.image_size=65536",
            ],
            d,
        ),
        "Multi-DSN training",
    );
    // An inversion recording 10⁷ samples per trace, sized before the data are modelled.
    refused(
        &tessera(
            &[
                "run",
                "fwi_marmousi",
                "--out",
                "f",
                "--set",
                "wave.nt=10000000",
                "--set",
                "wave.gradient=\"boundary_saving\"",
            ],
            d,
        ),
        "observed data",
    );
    // An image whose header declares 10⁶ × 10⁶ pixels: imaging, and `denoise`.
    lying_png(&d.join("huge.png"), 1_000_000);
    let preset = tessera::preset::BUNDLED[0]
        .1
        .replace("sample = \"natural\"", "path = \"huge.png\"")
        .replace("size = [128, 128]\n", "");
    assert!(preset.contains("huge.png"));
    std::fs::write(d.join("huge.toml"), preset).unwrap();
    refused(&tessera(&["run", "huge.toml", "--out", "i"], d), "image");
    std::fs::write(d.join("tv.toml"), "kind = \"tv\"\n").unwrap();
    refused(
        &tessera(
            &[
                "denoise",
                "--denoiser",
                "tv.toml",
                "--sigma",
                "0.1",
                "huge.png",
                "out.npy",
            ],
            d,
        ),
        "image",
    );
    for out in ["t", "m", "f", "i", "out.npy"] {
        assert!(!d.join(out).exists(), "{out} was written");
    }
}

/// `tessera serve` sizes training jobs before its ranks see them and inversions once rank 0 has
/// read their models: each is refused with its estimate, and the backend runs the next job.
#[test]
fn serve_refuses_training_and_inversions_that_cannot_fit_and_stays_up() {
    use tessera::protocol::Event;
    let dir = tempfile::tempdir().unwrap();
    let (_backend, client) = backend(dir.path());
    let set = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let train = tessera::train::TrainPreset::load(
        "train-dncnn",
        &set(&["train.steps=2", "train.batch=100000", "train.crop=64"]),
    )
    .unwrap()
    .0
    .to_toml()
    .unwrap();
    let fwi = tessera::fwi::FwiPreset::load("fwi_marmousi", &set(&["wave.nt=10000000"]))
        .unwrap()
        .unwrap()
        .0
        .to_toml()
        .unwrap();
    let quick = tessera::preset::Preset::load("quick", &set(&["algorithm.iterations=2"]))
        .unwrap()
        .preset
        .to_toml()
        .unwrap();
    let ends = run_each(&client, vec![train, fwi, quick]);
    for (end, part) in ends.iter().zip(["activations kept", "observed data"]) {
        match end {
            Event::Failed { error, .. } => assert!(
                error.contains("not enough memory") && error.contains(part),
                "{error}"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(ends[2], Event::Finished { .. }), "{:?}", ends[2]);
}
