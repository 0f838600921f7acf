//! The reference scaling study's three workloads as bundled presets, each run through `tessera bench scaling`
//! on 1 and 2 real rank processes at a tiny size: it loads, runs, and both rank counts compute the
//! same reconstruction (the tomography ones with their sinograms split by angle over the ranks).

#[path = "support/cli.rs"]
mod support;

use support::{read_json, run_ok};

/// A tiny DRUNet of the reference study's architecture (4 scales), so a test run takes seconds.
const TINY_DRUNET: [&str; 4] = ["--set", "denoiser.nc=[4,6,8,10]", "--set", "denoiser.nb=1"];

fn study(preset: &str, size: &str, extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "bench", "scaling", preset, "--ranks", "1,2", "--sizes", size, "--out", "study",
    ];
    args.extend(TINY_DRUNET);
    args.extend(["--set", "algorithm.iterations=2"]);
    args.extend(extra);
    run_ok(&args, dir.path(), preset);
    let runs = dir.path().join("study/runs");
    let recon = |n: usize| {
        std::fs::read(runs.join(format!("s{size}-n{n}/reconstruction.npy")))
            .unwrap_or_else(|e| panic!("{preset}, {n} rank(s): {e}"))
    };
    assert_eq!(recon(1), recon(2), "{preset}: 1 and 2 ranks differ");
    dir
}

/// Operator names recorded in a run's metrics.
fn operators(dir: &tempfile::TempDir, slug: &str) -> Vec<String> {
    let path = dir
        .path()
        .join("study/runs")
        .join(slug)
        .join("metrics.json");
    let m = read_json(&path);
    m["operators"]
        .as_array()
        .unwrap_or_else(|| panic!("metrics.json has no operators list: {m}"))
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_colour_workload_runs_tiny_on_one_and_two_ranks() {
    let dir = study(
        "scaling_colour",
        "48",
        &["--set", "tiling.patch_size=24", "--set", "tiling.overlap=4"],
    );
    assert_eq!(operators(&dir, "s48-n2").len(), 8);
}

#[test]
fn the_2d_tomography_workload_splits_its_sinogram_into_eight_operators() {
    let dir = study(
        "scaling_tomo2d",
        "32",
        &["--set", "tiling.patch_size=16", "--set", "tiling.overlap=4"],
    );
    let ops = operators(&dir, "s32-n2");
    assert_eq!(ops.len(), 8, "{ops:?}");
    // The one [[physics]] entry would leave rank 1 idle in the gradient step; split, it owns half.
    let path = dir.path().join("study/runs/s32-n2/metrics.json");
    let m = read_json(&path);
    assert_eq!(m["ranks"][1]["operators"], serde_json::json!([1, 3, 5, 7]));
}

#[test]
fn the_3d_tomography_workload_runs_tiny_on_one_and_two_ranks() {
    let dir = study(
        "scaling_tomo3d",
        "16",
        &[
            "--set",
            "tiling.patch_size=[4,8,8]",
            "--set",
            "tiling.overlap=[1,2,2]",
        ],
    );
    assert_eq!(operators(&dir, "s16-n2").len(), 2);
}
