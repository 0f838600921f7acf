//! Exact spatial decomposition end to end: `tessera run --ranks N` with `[tiling] kind = "spatial"`
//! (real rank processes over real sockets) gives the untiled single-process reconstruction.

#[path = "support/cli.rs"]
mod cli;

use cli::run;
use tessera::io::read_array;

/// PnP with a small random-weight DRUNet on a 70×90 colour image: not a multiple of 8, so DRUNet's
/// four-corner-crop size handling runs decomposed too.
const PRESET: &str = r#"
version = 1
name = "spatial-test"
seed = 0

[image]
sample = "natural"
size = [70, 90]

[[physics]]
kind = "blur"
sigma = [1.5, 1.0]
padding = "circular"

[noise]
kind = "gaussian"
sigma = 0.02

[denoiser]
kind = "drunet"
in_channels = 3
out_channels = 3
nc = [4, 6, 8, 10]
nb = 1

[algorithm]
kind = "pnp"
iterations = 2
denoiser_sigma = 0.05
init = "adjoint"
"#;

/// `tessera run p.toml` in `dir` with "spatial" tiling on `ranks` rank processes (and a `grid`, if
/// given) into `out_dir`, with `extra` arguments.
fn run_spatial(
    dir: &std::path::Path,
    ranks: &str,
    grid: Option<&str>,
    out_dir: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "run",
        "p.toml",
        "--ranks",
        ranks,
        "--out",
        out_dir,
        "--set",
        "tiling.kind=\"spatial\"",
    ];
    args.extend(extra);
    let grid_set = grid.map(|g| format!("tiling.grid={g}"));
    if let Some(g) = &grid_set {
        args.extend(["--set", g]);
    }
    run(&args, dir)
}

#[test]
fn spatial_tiling_on_two_three_and_four_rank_processes_equals_the_untiled_network() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PRESET).unwrap();
    let reference = {
        let out = run(
            &["run", "p.toml", "--quiet", "--out", "untiled"],
            dir.path(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        read_array(&dir.path().join("untiled/reconstruction.npy")).unwrap()
    };
    for (ranks, grid) in [("1", None), ("2", None), ("3", None), ("4", Some("[2,2]"))] {
        let out_dir = format!("spatial{ranks}");
        let out = run_spatial(dir.path(), ranks, grid, &out_dir, &["--quiet"]);
        assert!(
            out.status.success(),
            "{ranks} ranks: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = read_array(&dir.path().join(&out_dir).join("reconstruction.npy")).unwrap();
        let err = got.max_abs_diff(&reference);
        assert!(err <= 1e-5, "{ranks} ranks: max difference {err}");
    }
}

#[test]
fn spatial_tiling_of_a_denoiser_that_cannot_run_on_blocks_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PRESET).unwrap();
    let out = run(
        &[
            "run",
            "p.toml",
            "--quiet",
            "--set",
            "tiling.kind=\"spatial\"",
            "--set",
            "denoiser={kind=\"tv\"}",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("native dncnn and drunet"), "{err}");
}

/// `metrics.json` of a spatial run holds the bytes each layer's halo exchange moved over the
/// sockets, summed over the rank processes: on a size DRUNet runs unpadded, each equals the halo
/// volume the network's layers predict, on a 1×2 and a 2×2 grid; on a size it crops into corners
/// the exchanges are counted but not predicted.
#[test]
fn the_bytes_every_layer_exchanges_are_in_the_metrics_and_equal_the_predicted_halo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PRESET).unwrap();
    for (ranks, grid, size, predicted) in [
        ("2", None, "[64,96]", true),
        ("4", Some("[2,2]"), "[64,96]", true),
        ("2", None, "[70,90]", false),
    ] {
        let out_dir = format!("halo{ranks}{size}");
        let size_set = format!("image.size={size}");
        let out = run_spatial(dir.path(), ranks, grid, &out_dir, &["--set", &size_set]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{ranks} ranks: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let metrics = cli::read_json(&dir.path().join(&out_dir).join("metrics.json"));
        let halo = &metrics["halo_exchange"];
        let want_grid = match grid {
            Some(_) => [1, 2, 2],
            None => [1, 1, 2],
        };
        assert_eq!(halo["grid"], serde_json::json!(want_grid), "{halo}");
        let layers = halo["layers"].as_array().unwrap();
        // DRUNet: head, 4 × (nb residual blocks of 2 convs + the down-sampling), body, the ups.
        assert!(layers.len() >= 10, "{} exchanges", layers.len());
        let sent: Vec<u64> = layers
            .iter()
            .map(|l| l["sent_bytes"].as_u64().unwrap())
            .collect();
        assert!(sent.iter().any(|&b| b > 0), "no halo sent: {sent:?}");
        if predicted {
            for l in layers {
                assert!(l["layer"].is_string(), "{l}");
                assert_eq!(l["sent_bytes"], l["predicted_bytes"], "{ranks} ranks: {l}");
            }
            assert!(
                stdout.contains("each equal to its predicted halo volume"),
                "{stdout}"
            );
        } else {
            assert!(layers.iter().all(|l| l["predicted_bytes"].is_null()));
            assert!(stdout.contains("no prediction for this size"), "{stdout}");
        }
    }
}

/// A one-channel DRUNet on the colour image in the opponent colour space (how the bundled colour
/// denoiser runs) decomposes like the network itself: 2 and 2×2 rank processes give the untiled
/// reconstruction, and every layer's exchange moves the predicted halo — three one-channel items
/// per colour image.
#[test]
fn spatial_tiling_of_a_grey_network_in_the_opponent_colour_space_equals_the_untiled_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), PRESET).unwrap();
    let opponent = [
        "--set",
        "denoiser.in_channels=1",
        "--set",
        "denoiser.out_channels=1",
        "--set",
        "denoiser.opponent_colour=true",
        "--set",
        "image.size=[64,96]",
    ];
    let mut untiled = vec!["run", "p.toml", "--quiet", "--out", "untiled"];
    untiled.extend(opponent);
    let out = run(&untiled, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = read_array(&dir.path().join("untiled/reconstruction.npy")).unwrap();
    assert_eq!(reference.shape(), &[1, 3, 64, 96]);
    for (ranks, grid) in [("2", None), ("4", Some("[2,2]"))] {
        let out_dir = format!("opponent{ranks}");
        let out = run_spatial(dir.path(), ranks, grid, &out_dir, &opponent);
        assert!(
            out.status.success(),
            "{ranks} ranks: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = read_array(&dir.path().join(&out_dir).join("reconstruction.npy")).unwrap();
        let err = got.max_abs_diff(&reference);
        assert!(err <= 1e-5, "{ranks} ranks: max difference {err}");
        let metrics = cli::read_json(&dir.path().join(&out_dir).join("metrics.json"));
        let layers = metrics["halo_exchange"]["layers"]
            .as_array()
            .unwrap()
            .clone();
        assert!(layers.len() >= 10, "{} exchanges", layers.len());
        for l in &layers {
            assert_eq!(l["sent_bytes"], l["predicted_bytes"], "{ranks} ranks: {l}");
        }
    }
}
