//! The process group end to end: real rank processes started by `--ranks`, real sockets.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[path = "support/cli.rs"]
mod support;

use support::{read_json, run, run_ok, tessera};

const SMALL: &[&str] = &[
    "--quiet",
    "--set",
    "image.size=[64,96]",
    "--set",
    "algorithm.iterations=3",
    "--set",
    "tiling.patch_size=32",
    "--set",
    "tiling.overlap=8",
];

/// With either PnP splitting: PGD, and HQS (DPIR's schedule), whose data step is the closed-form
/// inverse of the ranks' stack of 8 circular blurs (every rank holds the whole Gram kernel).
#[test]
fn one_two_and_three_ranks_give_identical_reconstructions() {
    let hqs: &[&str] = &[
        "--set",
        "algorithm.splitting=\"hqs\"",
        "--set",
        "algorithm.sigma_schedule=\"dpir\"",
    ];
    for splitting in [&[][..], hqs] {
        ranks_agree(splitting);
    }
}

fn ranks_agree(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for n in ["1", "2", "3"] {
        let out = format!("o{n}");
        let mut args = vec!["run", "multiblur", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(extra);
        run_ok(&args, dir.path(), &format!("{n} ranks {extra:?}"));
        outputs.push(std::fs::read(dir.path().join(&out).join("reconstruction.npy")).unwrap());
        let metrics = read_json(&dir.path().join(&out).join("metrics.json"));
        assert_eq!(metrics["world_size"], n.parse::<u64>().unwrap());
        assert_eq!(
            metrics["ranks"].as_array().unwrap().len(),
            n.parse::<usize>().unwrap()
        );
    }
    assert_eq!(outputs[0], outputs[1], "2 ranks differ from 1 {extra:?}");
    assert_eq!(outputs[0], outputs[2], "3 ranks differ from 1 {extra:?}");
}

/// metrics.json profiles every rank's every iteration (phases, communication, idle, peak memory)
/// and records the threads each rank ran; `--threads-per-rank` sets them and does not change the
/// reconstruction.
#[test]
fn every_rank_profiles_every_iteration_and_threads_are_placed() {
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for (n, threads) in [("1", None), ("2", Some("1"))] {
        let out = format!("o{n}");
        let mut args = vec!["run", "multiblur", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        if let Some(t) = threads {
            args.extend_from_slice(&["--threads-per-rank", t]);
        }
        run_ok(&args, dir.path(), &format!("{n} ranks"));
        outputs.push(std::fs::read(dir.path().join(&out).join("reconstruction.npy")).unwrap());
        let metrics = read_json(&dir.path().join(&out).join("metrics.json"));
        let ranks = metrics["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), n.parse::<usize>().unwrap());
        for (r, rank) in ranks.iter().enumerate() {
            let threads_run = rank["threads"].as_u64().unwrap();
            match threads {
                Some(t) => assert_eq!(threads_run, t.parse::<u64>().unwrap(), "rank {r}"),
                None => assert!(threads_run >= 1),
            }
            assert!(rank["peak_rss_bytes"].as_u64().unwrap() > 0, "rank {r}");
            let its = rank["iterations"].as_array().unwrap();
            assert_eq!(its.len(), 3, "rank {r}: one profile per iteration");
            let f = |v: &serde_json::Value| v.as_f64().unwrap();
            let mut summed = 0.0;
            for (k, it) in its.iter().enumerate() {
                assert_eq!(it["iteration"].as_u64().unwrap(), k as u64 + 1);
                let mut total = 0.0;
                for phase in ["gradient", "denoiser", "other", "setup"] {
                    let p = &it[phase];
                    let (secs, comm, idle) = (
                        f(&p["secs"]),
                        f(&p["communication_secs"]),
                        f(&p["idle_secs"]),
                    );
                    assert!(
                        secs >= 0.0 && comm >= 0.0 && idle >= 0.0,
                        "rank {r} it {k} {phase}: {p}"
                    );
                    // Communication and waiting happen inside the phase (clock granularity aside).
                    assert!(comm + idle <= secs + 1e-3, "rank {r} it {k} {phase}: {p}");
                    total += secs;
                }
                assert!(f(&it["gradient"]["secs"]) > 0.0 && f(&it["denoiser"]["secs"]) > 0.0);
                if n == "2" {
                    // Two ranks gather tiles in every iteration; HQS's data step of a circular
                    // blur stack is closed-form on every rank (the whole Gram kernel is on each):
                    // no bytes.
                    assert_eq!(
                        it["gradient"]["bytes"].as_u64().unwrap(),
                        0,
                        "rank {r} it {k}: {it}"
                    );
                    assert!(
                        it["denoiser"]["bytes"].as_u64().unwrap() > 0,
                        "rank {r} it {k}: {it}"
                    );
                }
                assert!(it["peak_rss_bytes"].as_u64().unwrap() > 0);
                if k > 0 {
                    assert_eq!(
                        f(&it["setup"]["secs"]),
                        0.0,
                        "only the first iteration has a set-up"
                    );
                }
                summed += total;
                assert!(
                    (summed - f(&it["elapsed_secs"])).abs() < 1e-3,
                    "rank {r} it {k}: {it}"
                );
            }
            assert!(summed <= f(&rank["total_secs"]), "rank {r}: {rank}");
            let idle: f64 = its
                .iter()
                .flat_map(|it| {
                    ["gradient", "denoiser", "other", "setup"].map(|p| f(&it[p]["idle_secs"]))
                })
                .sum();
            assert!((idle - f(&rank["idle_secs"])).abs() < 1e-9);
        }
    }
    assert_eq!(
        outputs[0], outputs[1],
        "2 ranks × 1 thread differ from 1 rank"
    );
}

/// metrics.json lists every tile of the plan once, with the rank the patch map assigns it, its
/// window and its measured denoiser time (one call per iteration).
#[test]
fn every_tile_is_timed_once_on_the_rank_the_patch_map_names() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "multiblur", "--ranks", "2", "--out", "o"];
    args.extend_from_slice(SMALL);
    let assignment = "distributed.tile_assignment=\"cost_aware\"";
    args.extend_from_slice(&["--set", assignment]);
    let o = run(&args, dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("o/metrics.json")).unwrap()).unwrap();
    let overrides: Vec<String> = SMALL
        .iter()
        .chain(&[assignment])
        .filter(|a| a.contains('='))
        .map(|a| a.to_string())
        .collect();
    let preset = tessera::preset::Preset::load("multiblur", &overrides)
        .unwrap()
        .preset;
    let spatial: Vec<usize> = metrics["image_shape"].as_array().unwrap()[2..]
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let map = tessera::dist::patch_map::PatchMap::plan(
        preset.tiling.as_ref().unwrap(),
        &spatial,
        2,
        preset.distributed.tile_assignment,
    )
    .unwrap();
    let tiles: Vec<tessera::dist::patch_map::TileCost> =
        serde_json::from_value(metrics["tiles"].clone()).unwrap();
    assert!(map.tiles.len() > 2, "{} tiles", map.tiles.len());
    assert_eq!(tiles.len(), map.tiles.len(), "{:?}", metrics["tiles"]);
    for (i, (t, planned)) in tiles.iter().zip(&map.tiles).enumerate() {
        assert_eq!(t.index, i, "each tile once, by index");
        assert_eq!(t.rank, planned.rank, "tile {i}");
        assert_eq!(t.window, planned.window, "tile {i}");
        assert_eq!(t.region, planned.region, "tile {i}");
        assert_eq!(t.calls, 3, "tile {i}: one denoiser call per iteration");
        assert!(t.secs > 0.0, "tile {i}: {t:?}");
    }
    assert_eq!(
        tessera::protocol::PatchMap::from(&map)
            .tiles_per_rank()
            .len(),
        2,
        "both ranks denoise"
    );
}

#[test]
fn absurd_thread_counts_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["run", "multiblur", "--threads-per-rank", "0", "--quiet"],
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--threads-per-rank"), "{err}");
    let o = run(
        &[
            "run",
            "multiblur",
            "--set",
            "distributed.threads_per_rank=0",
            "--quiet",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("distributed.threads_per_rank"), "{err}");
}

/// One colour blur and two ranks: split by channel, rank 1 takes a share of the gradient instead of
/// waiting, and the reconstruction keeps every bit — on 1 rank, on 2 ranks, and against the whole
/// (unsplit) operator, since each part's adjoint adds exact zeros outside its channels.
#[test]
fn a_colour_blur_split_by_channel_shares_the_gradient_and_keeps_every_bit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("one_blur.toml"),
        r#"version = 1
name = "one_blur"
seed = 3
[image]
sample = "natural"
size = [40, 56]
[[physics]]
kind = "blur"
sigma = [2.0, 1.0]
angle_deg = 30.0
padding = "reflect"
[denoiser]
kind = "wavelet"
wavelet = "haar"
levels = 2
[algorithm]
kind = "pnp"
iterations = 3
denoiser_sigma = 0.02
init = "zeros"
"#,
    )
    .unwrap();
    let run_with = |n: &str, split: Option<&str>| {
        let out = format!("o{n}{}", split.unwrap_or("whole"));
        let mut args = vec![
            "run",
            "one_blur.toml",
            "--ranks",
            n,
            "--out",
            &out,
            "--quiet",
        ];
        let set = split.map(|p| format!("distributed.split_by_channel={p}"));
        if let Some(set) = &set {
            args.extend_from_slice(&["--set", set]);
        }
        run_ok(&args, dir.path(), &out);
        let dir = dir.path().join(&out);
        (
            std::fs::read(dir.join("reconstruction.npy")).unwrap(),
            read_json(&dir.join("metrics.json")),
        )
    };
    let (whole, _) = run_with("1", None);
    let (one, _) = run_with("1", Some("3"));
    let (two, metrics) = run_with("2", Some("3"));
    assert_eq!(one, two, "2 ranks differ from 1");
    assert_eq!(
        whole, one,
        "the split stack differs from the whole operator"
    );
    assert_eq!(metrics["operators"].as_array().unwrap().len(), 3);
    let ranks = metrics["ranks"].as_array().unwrap();
    let owned = |r: usize| ranks[r]["operators"].clone();
    assert_eq!(owned(0), serde_json::json!([0, 2]));
    assert_eq!(owned(1), serde_json::json!([1]));
    assert!(
        metrics["operators"][1]
            .as_str()
            .unwrap()
            .contains("[channel 1]"),
        "{}",
        metrics["operators"]
    );
    // More parts than channels is named before any rank starts.
    let o = run(
        &[
            "run",
            "one_blur.toml",
            "--quiet",
            "--set",
            "distributed.split_by_channel=4",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("distributed.split_by_channel") && err.contains("3 channel"),
        "{err}"
    );
}

#[test]
fn seeds_offset_by_rank_change_the_noise_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let measurement = |n: &str, offset: bool| {
        let out = format!("o{n}{offset}");
        let set = format!("distributed.seed_offset_by_rank={offset}");
        let mut args = vec!["run", "multiblur", "--ranks", n, "--out", &out];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--set", &set, "--set", "algorithm.iterations=1"]);
        let o = run(&args, dir.path());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Operator 1 is owned by rank 1 on two ranks and by rank 0 on one.
        std::fs::read(dir.path().join(&out).join("measurement_1.npy")).unwrap()
    };
    assert_eq!(measurement("1", false), measurement("2", false));
    assert_ne!(measurement("1", true), measurement("2", true));
    // Rank 0 keeps the plain seed, so operator 0's noise is unchanged by the offset.
    let one = std::fs::read(dir.path().join("o1false/measurement_0.npy")).unwrap();
    let one_offset = std::fs::read(dir.path().join("o2true/measurement_0.npy")).unwrap();
    assert_eq!(one, one_offset);
}

#[test]
fn a_killed_rank_stops_the_whole_group_quickly() {
    let (_dir, mut child, pids, rest) = start_long_group(&[]);
    let t = Instant::now();
    // SAFETY: kill(2) on a process this test started (through the launcher).
    unsafe { libc::kill(pids[1], libc::SIGKILL) };
    let status = wait_until_stopped(&mut child, t, Duration::from_secs(10));
    assert!(!status.success());
    let stderr = rest.join().unwrap();
    assert!(
        stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
    assert_all_gone(&pids);
}

#[test]
fn a_stopped_rank_is_named_within_seconds_by_its_missing_heartbeats() {
    // The default operation timeout (600 s) would take ten minutes; heartbeats take seconds.
    let (_dir, mut child, pids, rest) = start_long_group(&["--liveness-timeout", "2"]);
    let t = Instant::now();
    // SAFETY: kill(2) on a process this test started. SIGSTOP freezes rank 1 with its sockets open.
    unsafe { libc::kill(pids[1], libc::SIGSTOP) };
    let status = wait_until_stopped(&mut child, t, Duration::from_secs(20));
    let took = t.elapsed();
    assert!(!status.success());
    let stderr = rest.join().unwrap();
    assert!(
        stderr.contains("rank 1 sent no heartbeat"),
        "after {took:?}: {stderr}"
    );
    eprintln!("a stopped rank was named after {took:?}");
    assert_all_gone(&pids);
}

#[test]
fn a_hung_rank_is_named_after_the_op_timeout() {
    // Heartbeats off: the operation timeout alone catches a silent peer.
    let (_dir, mut child, pids, rest) =
        start_long_group(&["--op-timeout", "2", "--liveness-timeout", "0"]);
    let t = Instant::now();
    // SAFETY: kill(2) on a process this test started. SIGSTOP freezes rank 1 with its sockets open:
    // nothing closes, so only the operation timeout can notice.
    unsafe { libc::kill(pids[1], libc::SIGSTOP) };
    let status = wait_until_stopped(&mut child, t, Duration::from_secs(30));
    assert!(!status.success());
    let stderr = rest.join().unwrap();
    assert!(
        stderr.contains("rank 1 did not answer within the operation timeout of 2 s"),
        "{stderr}"
    );
    assert_all_gone(&pids);
}

/// Starts a 3-rank multiblur run that would take hours, returns its folder, the launcher, the rank pids (read
/// from the launcher's log) and a thread collecting the rest of its stderr; waits 3 s so the ranks
/// are inside the iterations.
fn start_long_group(
    extra: &[&str],
) -> (
    tempfile::TempDir,
    std::process::Child,
    Vec<i32>,
    std::thread::JoinHandle<String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["run", "multiblur", "--ranks", "3", "--out", "o"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    let pos = args
        .iter()
        .position(|a| *a == "algorithm.iterations=3")
        .unwrap();
    args[pos] = "algorithm.iterations=100000";
    let mut child = tessera()
        .args(&args)
        .current_dir(dir.path())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut pids = Vec::new();
    while pids.len() < 3 {
        let line = lines.next().expect("launcher output").unwrap();
        if let Some(rest) = line.strip_prefix("[launcher] rank ") {
            pids.push(
                rest.split("pid ")
                    .nth(1)
                    .unwrap()
                    .trim()
                    .parse::<i32>()
                    .unwrap(),
            );
        }
    }
    let rest =
        std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    std::thread::sleep(Duration::from_secs(3));
    (dir, child, pids, rest)
}

/// Waits for the launcher to exit; fails the test if it is still running after `limit` (a hang).
fn wait_until_stopped(
    child: &mut std::process::Child,
    since: Instant,
    limit: Duration,
) -> std::process::ExitStatus {
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if since.elapsed() > limit {
            let _ = child.kill();
            panic!("the launcher did not stop within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_all_gone(pids: &[i32]) {
    for &pid in pids {
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "rank process {pid} survived");
    }
}

#[test]
fn a_rank_that_never_arrives_times_out_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let o = run(
        &[
            "run",
            "quick",
            "--quiet",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--master-port",
            &port,
            "--rendezvous-timeout",
            "2",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("rank(s) 1") && e.contains("never arrived"),
        "{e}"
    );
}

#[test]
fn inconsistent_launcher_variables_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (vars, expect) in [
        (
            vec![
                ("RANK", "3"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
            ],
            "rank 3 is not below the world size 2",
        ),
        (
            vec![
                ("RANK", "zero"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
            ],
            "RANK",
        ),
        (
            vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "0"),
                ("SLURM_JOB_NODELIST", "n[1-2]"),
            ],
            "world size",
        ),
    ] {
        let mut c = tessera();
        c.args(["run", "quick", "--quiet"]).current_dir(dir.path());
        for (k, v) in &vars {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{vars:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains(expect) && !e.contains("panicked"),
            "{vars:?}: {e}"
        );
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn the_mpi_backend_without_the_feature_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["run", "quick", "--quiet", "--backend", "mpi"], dir.path());
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--features mpi") && e.contains("libopenmpi-dev"),
        "{e}"
    );
}

/// `--backend nccl` never panics: a build without the `cuda` feature (which `nccl` implies) says
/// how to rebuild; a build with it (`--features cuda` compiles NCCL too) names what this machine
/// lacks (no driver, no libnccl, no GPU) and points to the sockets backend, or runs where a GPU
/// and NCCL are there.
#[test]
fn the_nccl_backend_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["run", "quick", "--quiet", "--backend", "nccl"],
        dir.path(),
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!e.contains("panicked"), "{e}");
    if cfg!(feature = "cuda") {
        if !o.status.success() {
            assert!(
                e.contains("the nccl backend needs an NVIDIA GPU")
                    && e.contains("--backend sockets"),
                "{e}"
            );
        }
    } else {
        assert!(!o.status.success());
        assert!(e.contains("--features nccl"), "{e}");
    }
}

/// `tessera bench scaling` runs each rank count as a real process group and reports them.
#[test]
fn a_scaling_study_runs_each_configuration_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &[
            "bench",
            "scaling",
            "multiblur",
            "--ranks",
            "1,2",
            "--sizes",
            "96",
            "--set",
            "algorithm.iterations=2",
            "--set",
            "tiling.patch_size=32",
            "--set",
            "tiling.overlap=8",
            "--out",
            "study",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let study = dir.path().join("study");
    let runs = |slug: &str| {
        std::fs::read(study.join("runs").join(slug).join("reconstruction.npy")).unwrap()
    };
    assert_eq!(
        runs("s96-n1"),
        runs("s96-n2"),
        "the rank counts reconstruct the same image"
    );
    let csv = std::fs::read_to_string(study.join("rank_iterations.csv")).unwrap();
    // Header, then 1 rank × 2 iterations and 2 ranks × 2 iterations.
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 6, "{csv}");
    let mut seen: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[1], r[3], r[4])).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("1", "0", "1"),
            ("1", "0", "2"),
            ("2", "0", "1"),
            ("2", "0", "2"),
            ("2", "1", "1"),
            ("2", "1", "2")
        ]
    );
    let summary = std::fs::read_to_string(study.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 3, "{summary}");
    assert!(
        summary.lines().nth(1).unwrap().starts_with("96,1,"),
        "{summary}"
    );
    let html = std::fs::read_to_string(study.join("report.html")).unwrap();
    // Nine measured figures (the patch map of the 2-rank run with its measured tile costs) and
    // the model's efficiency beside the measurements.
    assert_eq!(html.matches("data:image/png;base64,").count(), 10);
    assert!(study.join("breakdown.png").is_file());
    assert!(study.join("patch_map.png").is_file());
    assert!(study.join("model_efficiency.png").is_file());

    // A size the preset's tiles do not fit is refused before any configuration runs, naming it.
    let o = run(
        &[
            "bench",
            "scaling",
            "multiblur",
            "--ranks",
            "1",
            "--sizes",
            "64",
            "--set",
            "algorithm.iterations=1",
            "--out",
            "bad",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("patch size 256") && err.contains("(size 64 on 1 rank(s))"),
        "{err}"
    );
    let bad = dir.path().join("bad");
    let runs = std::fs::read_dir(&bad).map_or(0, |d| d.count());
    assert_eq!(runs, 0, "nothing ran into {}", bad.display());
    let o = run(
        &["bench", "scaling", "multiblur", "--ranks", "0,2"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--ranks"));
}

/// The spatial memory study runs each configuration as its own process group and compares N ranks
/// with one: every row is there, the one-rank rows are their own ideal, and a bad model is named.
#[test]
fn the_spatial_memory_study_measures_every_configuration_in_its_own_group() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_ok(
        &[
            "bench",
            "spatial-memory",
            "--models",
            "fcn2d",
            "--sizes",
            "48,64",
            "--ranks",
            "1,2",
            "--forward-only",
            "--csv",
            "memory.csv",
        ],
        dir.path(),
        "spatial-memory",
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("largest side whose working memory fits"),
        "{table}"
    );
    let csv = std::fs::read_to_string(dir.path().join("memory.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for row in &rows {
        assert_eq!(row[0], "fcn2d");
        assert_eq!(row[1], "forward");
        let (ranks, grid, working) = (row[3], row[4], row[5].parse::<f64>().unwrap());
        assert_eq!(grid, if ranks == "1" { "1x1x1" } else { "1x1x2" }, "{csv}");
        assert!(working > 0.0, "{csv}");
        if ranks == "1" {
            assert_eq!(row[8], "1.000", "one rank is its own ideal: {csv}");
            assert_eq!(row[7], "0.000", "one rank exchanges no halo: {csv}");
        } else {
            assert!(row[7].parse::<f64>().unwrap() > 0.0, "{csv}");
        }
    }
    let o = run(
        &["bench", "spatial-memory", "--models", "resnet"],
        dir.path(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--models") && err.contains("resnet"), "{err}");
}
