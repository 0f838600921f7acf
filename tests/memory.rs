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
    let text = tessera::preset::BUNDLED[0].1.replace(
        "kind = \"tv\"\nn_it_max = 20",
        "kind = \"dncnn\"\ndepth = 1000\nnf = 4096",
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

#[test]
fn serve_refuses_a_job_that_cannot_fit_and_takes_the_next() {
    use tessera::protocol::{ClientEvent, Event, LocalBackend, LocalOptions, Request};
    let dir = tempfile::tempdir().unwrap();
    let mut opts = LocalOptions::new(2, dir.path().join("out"));
    opts.exe = Some(env!("CARGO_BIN_EXE_tessera").into());
    let (_backend, client) = LocalBackend::spawn_with(opts).unwrap();
    let absurd = std::fs::read_to_string(absurd_preset(dir.path())).unwrap();
    let quick = tessera::preset::Preset::load("quick", &["algorithm.iterations=2".into()])
        .unwrap()
        .preset
        .to_toml()
        .unwrap();
    let mut ends = Vec::new();
    for preset_toml in [absurd, quick] {
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
