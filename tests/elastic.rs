//! Elastic runs end to end (`--elastic`, docs/ELASTIC.md): real rank processes, one killed by the
//! `TESSERA_TEST_DIE_AT` hook at a seeded iteration, the survivors re-forming the group; the outputs
//! compared byte for byte with an uninterrupted run's.

use std::path::Path;
use std::process::Output;

#[path = "support/cli.rs"]
mod support;

use support::{read_json, tessera};

const ITERATIONS: usize = 6;

/// multiblur at a test's size: 8 operators, 6 tiles, PnP.
fn small(iterations: usize) -> Vec<String> {
    [
        "--quiet",
        "--set",
        "image.size=[48,64]",
        "--set",
        &format!("algorithm.iterations={iterations}"),
        "--set",
        "tiling.patch_size=24",
        "--set",
        "tiling.overlap=4",
        "--set",
        "output.save_measurements=true",
    ]
    .map(String::from)
    .to_vec()
}

fn run_with(args: &[&str], extra: &[String], die_at: Option<&str>, cwd: &Path) -> Output {
    let mut c = tessera();
    c.args(args).args(extra).current_dir(cwd);
    if let Some(d) = die_at {
        c.env("TESSERA_TEST_DIE_AT", d);
    }
    c.output().unwrap()
}

/// Every file of a run but `metrics.json` (timings differ), by name.
fn outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "metrics.json")
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// A recovery's times: from this rank's failure (`failed_at_secs`, `recovery_secs`) and from the
/// launcher's sight of the loss (`lost_at_secs`, `since_loss_secs`), both to the end of the first
/// iteration (epoch) after it, the same instant on the same clock.
fn assert_timed_from_the_loss(r: &serde_json::Value) {
    let secs = |f: &str| {
        r[f].as_f64()
            .unwrap_or_else(|| panic!("no {f} in the recovery: {r}"))
    };
    let (failed_at, recovery) = (secs("failed_at_secs"), secs("recovery_secs"));
    let (lost_at, since_loss) = (secs("lost_at_secs"), secs("since_loss_secs"));
    assert!(recovery > 0.0 && since_loss > 0.0 && lost_at > 0.0, "{r}");
    let (end, end_from_loss) = (failed_at + recovery, lost_at + since_loss);
    assert!(
        (end - end_from_loss).abs() < 1e-3,
        "{end} vs {end_from_loss}: {r}"
    );
}

/// A seeded iteration in 2..=ITERATIONS-1 (never the first or last, so work is redone and left).
fn seeded_iteration(seed: u64) -> usize {
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    2 + (mixed as usize) % (ITERATIONS - 2)
}

/// The elastic run's outputs (`DIR/elastic`) are the reference's (`DIR/reference`) byte for
/// byte, metrics.json aside (`outputs`); `after` says what happened to the run.
fn same_outputs(dir: &Path, after: &str) {
    let want = outputs(&dir.join("reference"));
    let got = outputs(&dir.join("elastic"));
    assert!(
        want.len() >= 4,
        "{:?}",
        want.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(
        want.iter().map(|f| &f.0).collect::<Vec<_>>(),
        got.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for ((name, a), (_, b)) in want.iter().zip(&got) {
        assert!(a == b, "{name} differs after {after}");
    }
}

/// The uninterrupted reference (`preset` on 1 rank, into `reference`) and the same preset on 3
/// elastic ranks (also `--respawn` when `respawn`), into `elastic`, with the hook `die_at`; both
/// must succeed. Returns the folder holding both runs and the elastic run's log.
fn reference_and_elastic(
    preset: &str,
    extra: &[String],
    die_at: &str,
    respawn: bool,
) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let reference = ["run", preset, "--out", "reference"];
    let o = run_with(&reference, extra, None, dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut elastic = vec![
        "run",
        preset,
        "--ranks",
        "3",
        "--elastic",
        "--out",
        "elastic",
    ];
    if respawn {
        elastic.push("--respawn");
    }
    let o = run_with(&elastic, extra, Some(die_at), dir.path());
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "die at {die_at}: {stderr}");
    (dir, stderr)
}

/// Runs the uninterrupted reference (1 rank, no elastic) and the elastic run that loses `rank` at
/// `point`; checks the bytes and the recovery in metrics.json; returns that metrics.json.
fn lose_rank_and_compare(rank: usize, point: &str, seed: u64) -> serde_json::Value {
    let k = seeded_iteration(seed);
    let die = format!("{rank}:{k}:{point}");
    let (dir, stderr) = reference_and_elastic("multiblur", &small(ITERATIONS), &die, false);
    assert!(
        stderr.contains(&format!(
            "[launcher] rank {rank} was killed by signal 9 (SIGKILL)"
        )),
        "{stderr}"
    );
    // The ranks' warnings about the loss pass through a pipe: no terminal colour codes in them.
    assert!(
        stderr.contains("WARN") && !stderr.contains('\u{1b}'),
        "colour codes or no warning in piped logs: {stderr:?}"
    );
    same_outputs(dir.path(), &format!("losing rank {rank} at {die}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    assert_eq!(metrics["world_size"], 2);
    assert_eq!(metrics["iterations"], ITERATIONS);
    assert_eq!(metrics["history"].as_array().unwrap().len(), ITERATIONS);
    let recoveries = metrics["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let r = &recoveries[0];
    assert_eq!(r["lost_slots"], serde_json::json!([rank]));
    assert_eq!(r["generation"], 1);
    let resumed = r["resumed_from"].as_u64().unwrap() as usize;
    // Dying at the start of iteration k: everyone completed k-1; inside iteration k's denoiser
    // (before its collective): likewise.
    assert_eq!(resumed, k - 1, "{r}");
    assert_timed_from_the_loss(r);
    let operators: Vec<u64> = r["assignment"]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|o| o.as_array().unwrap().iter().map(|i| i.as_u64().unwrap()))
        .collect();
    assert_eq!(operators.len(), 8, "{r}");
    // The summary covers both generations: the solve time is their sum, and every rank's profile
    // lists the iterations of both (the survivors' own, from the generation that failed).
    let generations = metrics["generations"].as_array().unwrap();
    assert_eq!(generations.len(), 2, "{generations:?}");
    let field = |g: &serde_json::Value, f: &str| g[f].as_u64().unwrap() as usize;
    assert_eq!(
        [
            field(&generations[0], "world_size"),
            field(&generations[1], "world_size")
        ],
        [3, 2]
    );
    assert_eq!(field(&generations[0], "last_iteration"), resumed);
    assert_eq!(field(&generations[1], "first_iteration"), resumed);
    assert_eq!(field(&generations[1], "last_iteration"), ITERATIONS);
    let summed: f64 = generations
        .iter()
        .map(|g| g["solve_secs"].as_f64().unwrap())
        .sum();
    let solve_secs = metrics["solve_secs"].as_f64().unwrap();
    assert!(
        (solve_secs - summed).abs() < 1e-9,
        "{solve_secs} vs {summed}"
    );
    for r in metrics["ranks"].as_array().unwrap() {
        let listed: Vec<u64> = r["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["iteration"].as_u64().unwrap())
            .collect();
        assert_eq!(
            listed,
            (1..=ITERATIONS as u64).collect::<Vec<_>>(),
            "rank {}",
            r["rank"]
        );
    }
    metrics
}

#[test]
fn losing_rank_2_before_a_collective_keeps_every_byte() {
    lose_rank_and_compare(2, "start", 29);
}

#[test]
fn losing_rank_1_inside_the_denoiser_keeps_every_byte() {
    lose_rank_and_compare(1, "denoiser", 7);
}

#[test]
fn losing_rank_0_moves_its_role_and_keeps_every_byte() {
    let metrics = lose_rank_and_compare(0, "start", 3);
    assert_eq!(
        metrics["recoveries"][0]["members"],
        serde_json::json!([1, 2])
    );
}

/// `--respawn`: rank 1 of 3 is killed at the start of a seeded iteration; the launcher starts a
/// replacement (slot 3), which joins the next generation with the state rank 0 hands it, and the
/// run finishes on 3 ranks with every byte of an uninterrupted run.
fn replace_rank_1_and_compare(seed: u64) {
    let k = seeded_iteration(seed);
    let die = format!("1:{k}:start");
    let (dir, stderr) = reference_and_elastic("multiblur", &small(ITERATIONS), &die, true);
    assert_said(
        &stderr,
        &[
            "[launcher] rank 1 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 3 started to replace rank 1 in generation 1",
            "[launcher] generation 1: rank(s) [1] lost, replacement(s) [3] joined, 3 rank(s)",
        ],
    );
    same_outputs(dir.path(), &format!("replacing rank 1 at {die}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    let r = &the_one_recovery_on_3_ranks(&metrics, ITERATIONS);
    assert_eq!(r["lost_slots"], serde_json::json!([1]));
    assert_eq!(r["members"], serde_json::json!([0, 2, 3]));
    assert_eq!(r["joined"], serde_json::json!([3]));
    assert_eq!(r["resumed_from"].as_u64().unwrap() as usize, k - 1, "{r}");
    let generations = metrics["generations"].as_array().unwrap();
    let sizes: Vec<u64> = generations
        .iter()
        .map(|g| g["world_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [3, 3], "{generations:?}");
    assert_eq!(metrics["ranks"].as_array().unwrap().len(), 3);
}

#[test]
fn a_replacement_for_lost_rank_1_finishes_on_3_ranks_with_every_byte() {
    replace_rank_1_and_compare(29);
}

#[test]
fn a_replacement_after_the_first_iteration_gets_the_iterate_of_iteration_1() {
    // Seed 1 kills rank 1 at the start of iteration 2: the hand-over holds iteration 1's iterate.
    assert_eq!(
        seeded_iteration(1),
        2,
        "pick a seed that kills in iteration 2"
    );
    replace_rank_1_and_compare(1);
}

/// The run's log holds each of `lines`.
fn assert_said(stderr: &str, lines: &[&str]) {
    for said in lines {
        assert!(stderr.contains(said), "no `{said}` in: {stderr}");
    }
}

/// The run's only recovery, after checking that it ended on 3 ranks with every iteration.
fn the_one_recovery_on_3_ranks(metrics: &serde_json::Value, steps: usize) -> serde_json::Value {
    assert_eq!(metrics["world_size"], 3);
    assert_eq!(metrics["history"].as_array().unwrap().len(), steps);
    let recoveries = metrics["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    recoveries[0].clone()
}

/// Each recovery of an elastic run's metrics.json: (the iteration resumed after, the lost slots,
/// the members' slots of the generation it formed).
fn recoveries_of(metrics: &serde_json::Value) -> Vec<(u64, serde_json::Value, serde_json::Value)> {
    metrics["recoveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["resumed_from"].as_u64().unwrap(),
                r["lost_slots"].clone(),
                r["members"].clone(),
            )
        })
        .collect()
}

/// The small multiblur on 3 elastic ranks (`--respawn` when `respawn`) with the hook list `die`:
/// the log holds `said`, every output has the uninterrupted run's bytes; returns metrics.json.
fn lose_in_turn(die: &str, respawn: bool, said: &[&str]) -> serde_json::Value {
    let (dir, stderr) = reference_and_elastic("multiblur", &small(ITERATIONS), die, respawn);
    assert_said(&stderr, said);
    same_outputs(dir.path(), &format!("the losses {die}"));
    read_json(&dir.path().join("elastic/metrics.json"))
}

/// Two losses, one after the other: rank 1 at the start of iteration 2, then — in the group the
/// survivors re-formed — slot 2 inside iteration 4's denoiser. The last survivor (slot 0) finishes
/// alone with every byte of the uninterrupted run, and metrics.json records both recoveries.
#[test]
fn losing_a_second_rank_after_a_recovery_keeps_every_byte() {
    let metrics = lose_in_turn(
        "1:2:start,2:4:denoiser",
        false,
        &[
            "[launcher] rank 1 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 2 was killed by signal 9 (SIGKILL)",
        ],
    );
    assert_eq!(metrics["world_size"], 1);
    assert_eq!(metrics["history"].as_array().unwrap().len(), ITERATIONS);
    use serde_json::json;
    assert_eq!(
        recoveries_of(&metrics),
        [(1, json!([1]), json!([0, 2])), (3, json!([2]), json!([0])),]
    );
    let generations: Vec<u64> = metrics["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["world_size"].as_u64().unwrap())
        .collect();
    assert_eq!(generations, [3, 2, 1]);
}

/// `--respawn`, and the replacement dies too: rank 1 is killed at the start of iteration 2, its
/// replacement (slot 3) joins generation 1 and is killed inside iteration 4's denoiser; a second
/// replacement (slot 4) joins generation 2, and the run finishes on 3 ranks with every byte.
#[test]
fn a_replacement_that_dies_is_replaced_in_turn_and_keeps_every_byte() {
    let metrics = lose_in_turn(
        "1:2:start,3:4:denoiser",
        true,
        &[
            "[launcher] rank 3 started to replace rank 1 in generation 1",
            "[launcher] rank 3 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 4 started to replace rank 3 in generation 2",
        ],
    );
    assert_eq!(metrics["world_size"], 3);
    use serde_json::json;
    assert_eq!(
        recoveries_of(&metrics),
        [
            (1, json!([1]), json!([0, 2, 3])),
            (3, json!([3]), json!([0, 2, 4])),
        ]
    );
    assert_eq!(metrics["recoveries"][1]["joined"], json!([4]));
}

/// A replacement that ends as rank 0: slot 1 is replaced by slot 3 in iteration 2, then slots 0
/// and 2 die at the start of iteration 4, so slot 3 — which joined without state — hands the run
/// to their replacements (slots 4 and 5) and writes the outputs, with every byte of the
/// uninterrupted run.
#[test]
fn a_replacement_that_becomes_rank_0_finishes_with_every_byte() {
    let metrics = lose_in_turn(
        "1:2:start,0:4:start,2:4:start",
        true,
        &[
            "[launcher] rank 3 started to replace rank 1 in generation 1",
            "[launcher] rank 0 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 2 was killed by signal 9 (SIGKILL)",
        ],
    );
    assert_eq!(metrics["world_size"], 3);
    assert_eq!(metrics["history"].as_array().unwrap().len(), ITERATIONS);
    // Slot 3 took over rank 0's record of the recovery it joined in, so its metrics.json lists
    // both; its rank profile starts at the generation it joined (1), counted as such.
    use serde_json::json;
    assert_eq!(
        recoveries_of(&metrics),
        [
            (1, json!([1]), json!([0, 2, 3])),
            (3, json!([0, 2]), json!([3, 4, 5])),
        ]
    );
    let last = &metrics["recoveries"][1];
    assert_eq!(last["generation"], 2, "{last}");
    assert_eq!(last["joined"], json!([4, 5]));
    let generations: Vec<(u64, u64)> = metrics["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let n = |k: &str| g[k].as_u64().unwrap();
            (n("generation"), n("world_size"))
        })
        .collect();
    assert_eq!(generations, [(1, 3), (2, 3)]);
}

#[test]
fn respawn_without_elastic_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, extra) in [("quick", small(2)), ("fwi_marmousi", small_fwi())] {
        let o = run_with(
            &["run", preset, "--ranks", "2", "--respawn"],
            &extra,
            None,
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{preset}: {stderr}");
        assert!(
            stderr.contains("--respawn needs --elastic"),
            "{preset}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("out").exists(),
        "a refused run writes nothing"
    );
}

#[test]
fn below_min_ranks_the_run_stops_and_names_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = small(ITERATIONS);
    extra.extend(["--set".into(), "distributed.min_ranks=3".into()]);
    let args = elastic_3_into_o("multiblur");
    let stderr = failed_run(&args, &extra, "2:2", dir.path());
    assert!(stderr.contains("fewer than min_ranks = 3"), "{stderr}");
}

/// The uninterrupted reference run of `small(ITERATIONS)` in `cwd/reference`.
fn reference_run(cwd: &Path) {
    let o = run_with(
        &["run", "multiblur", "--out", "reference"],
        &small(ITERATIONS),
        None,
        cwd,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Asserts that run folder `dir` holds the reference run's bytes.
fn same_bytes_as_reference(cwd: &Path, dir: &str) {
    let want = outputs(&cwd.join("reference"));
    let got = outputs(&cwd.join(dir));
    assert!(want.len() >= 4);
    assert_eq!(
        want.iter().map(|f| &f.0).collect::<Vec<_>>(),
        got.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for ((name, a), (_, b)) in want.iter().zip(&got) {
        assert!(a == b, "{name} differs in {dir}");
    }
}

/// Asserts that `metrics` records a resume from the checkpoint in folder `o.checkpoint` after
/// `after` completed `unit`s.
fn assert_resumed(metrics: &serde_json::Value, unit: &str, after: usize) {
    let r = &metrics["resumed"];
    assert_eq!(r["unit"], unit, "{r}");
    assert_eq!(r["after"].as_u64(), Some(after as u64), "{r}");
    let checkpoint = Path::new(r["checkpoint"].as_str().unwrap());
    assert!(
        checkpoint.is_absolute() && checkpoint.ends_with("o.checkpoint/checkpoint.tessera"),
        "{r}"
    );
}

/// The `tessera run --resume …` line a stopped run printed.
fn resume_command(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("tessera run --resume"))
        .unwrap_or_else(|| panic!("no resume command in {stderr}"))
        .to_string()
}

/// `small(ITERATIONS)` with a checkpoint every 2 iterations and `more` settings.
fn checkpointed(more: &[&str]) -> Vec<String> {
    let mut extra = small(ITERATIONS);
    extra.extend(["--set".into(), "distributed.checkpoint_every=2".into()]);
    for m in more {
        extra.extend(["--set".into(), m.to_string()]);
    }
    extra
}

#[test]
fn below_min_ranks_the_run_stops_with_a_checkpoint_that_resume_finishes_with_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    reference_run(cwd);
    let extra = checkpointed(&["distributed.min_ranks=3"]);
    let args = elastic_3_into_o("multiblur");
    // Rank 2 dies as iteration 4 starts: the survivors completed 3, one past the periodic
    // checkpoint of iteration 2, and the group cannot go on with 2 ranks.
    let stderr = failed_run(&args, &extra, "2:4", cwd);
    assert!(stderr.contains("fewer than min_ranks = 3"), "{stderr}");
    assert!(
        stderr.contains("its checkpoint holds iteration 3"),
        "{stderr}"
    );
    let command = resume_command(&stderr);
    assert_eq!(
        command,
        "tessera run --resume o.checkpoint --ranks 3 --elastic"
    );
    let checkpoint = cwd.join("o.checkpoint/checkpoint.tessera");
    let bytes = std::fs::read(&checkpoint).unwrap();
    // Nothing else in the checkpoint's folder (no temporary file left by its atomic writes).
    assert_eq!(
        std::fs::read_dir(cwd.join("o.checkpoint")).unwrap().count(),
        1
    );

    // Bad checkpoints: an error naming the file, never a panic (exit status 1, not 101).
    std::fs::create_dir(cwd.join("bad")).unwrap();
    for (what, content) in [
        ("truncated", &bytes[..bytes.len() / 2]),
        (
            "tessera checkpoint header",
            &b"random bytes, not a checkpoint"[..],
        ),
    ] {
        std::fs::write(cwd.join("bad/checkpoint.tessera"), content).unwrap();
        let o = run_with(&["run", "--resume", "bad"], &[], None, cwd);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(what) && err.contains("bad/checkpoint.tessera"),
            "{err}"
        );
    }
    let o = run_with(
        &["run", "quick", "--resume", "o.checkpoint"],
        &[],
        None,
        cwd,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("another experiment"), "{err}");

    // The command printed, exactly: the same bytes as the uninterrupted run, and the checkpoint
    // gone with the run complete.
    let resume: Vec<&str> = command.split_whitespace().skip(1).collect();
    let o = run_with(&resume, &["--quiet".into()], None, cwd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("resuming after iteration 3 from the checkpoint"),
        "{err}"
    );
    same_bytes_as_reference(cwd, "o");
    assert!(!cwd.join("o.checkpoint").exists());
    let metrics = read_json(&cwd.join("o/metrics.json"));
    assert_eq!(metrics["history"].as_array().unwrap().len(), ITERATIONS);
    assert_resumed(&metrics, "iteration", 3);
    let reference = read_json(&cwd.join("reference/metrics.json"));
    assert!(reference.get("resumed").is_none(), "{reference}");
}

/// A loss whose survivors could not hold the re-sharded job (the launcher's memory check; the
/// machine's free memory is stood in for by `TESSERA_TEST_REGROUP_AVAILABLE`): the run stops with
/// its checkpoint, naming why and how to resume, and the resume finishes with every byte.
#[test]
fn when_the_survivors_cannot_hold_the_job_the_run_stops_with_a_checkpoint_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    reference_run(cwd);
    let o = tessera()
        .args(elastic_3_into_o("multiblur"))
        .args(checkpointed(&[]))
        .current_dir(cwd)
        .env("TESSERA_TEST_DIE_AT", "2:4")
        .env("TESSERA_TEST_REGROUP_AVAILABLE", "1024")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(!cwd.join("o").exists(), "a stopped run leaves no folder");
    assert!(
        stderr.contains(
            "the 2 rank(s) of generation 1 cannot hold the job: re-sharded over 2 \
             rank(s)"
        ) && stderr.contains("this machine has 1.0 KiB left"),
        "{stderr}"
    );
    assert!(
        stderr.contains("its checkpoint holds iteration 3"),
        "{stderr}"
    );
    let command = resume_command(&stderr);
    let resume: Vec<&str> = command.split_whitespace().skip(1).collect();
    let o = run_with(&resume, &["--quiet".into()], None, cwd);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    same_bytes_as_reference(cwd, "o");
}

#[test]
fn after_a_full_crash_resume_finishes_with_the_same_bytes() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    reference_run(cwd);
    // The launcher leads its own process group, so that the hook's crash (SIGKILL to the whole
    // group, launcher included, in iteration 4) reaches every process of the run and no other.
    let o = tessera()
        .args([
            "run",
            "multiblur",
            "--ranks",
            "2",
            "--elastic",
            "--out",
            "o",
        ])
        .args(checkpointed(&[]))
        .env("TESSERA_TEST_DIE_AT", "1:4:crash")
        .current_dir(cwd)
        .process_group(0)
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        Some(9),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!cwd.join("o").exists());
    // On 1 process, not elastic: the checkpoint of iteration 2 (iterations 3 are done again).
    let o = run_with(
        &["run", "--resume", "o.checkpoint"],
        &["-q".into()],
        None,
        cwd,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("resuming after iteration 2"), "{err}");
    same_bytes_as_reference(cwd, "o");
    assert!(!cwd.join("o.checkpoint").exists());
    assert_resumed(&read_json(&cwd.join("o/metrics.json")), "iteration", 2);
}

/// `tessera run PRESET --ranks 3 --elastic --out o`.
fn elastic_3_into_o(preset: &str) -> [&str; 7] {
    ["run", preset, "--ranks", "3", "--elastic", "--out", "o"]
}

/// Runs a group that loses a rank and must fail; checks that it left no run folder `o`; returns its
/// error output.
fn failed_run(args: &[&str], extra: &[String], die_at: &str, cwd: &Path) -> String {
    let o = run_with(args, extra, Some(die_at), cwd);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{stderr}");
    assert!(!cwd.join("o").exists(), "a failed run leaves no folder");
    stderr
}

#[test]
fn without_elastic_a_lost_rank_still_stops_the_group_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["run", "multiblur", "--ranks", "3", "--out", "o"];
    let stderr = failed_run(&args, &small(ITERATIONS), "2:2", dir.path());
    assert!(
        stderr.contains("rank 2 was killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
    assert!(!stderr.contains("--elastic"), "{stderr}");
}

#[test]
fn elastic_without_a_local_group_or_on_mpi_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_with(&["run", "quick", "--elastic"], &small(2), None, dir.path());
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("needs --ranks N"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run_with(
        &[
            "run",
            "quick",
            "--elastic",
            "--ranks",
            "2",
            "--backend",
            "mpi",
        ],
        &small(2),
        None,
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ULFM"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn an_elastic_run_without_a_loss_matches_and_records_no_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let extra = small(3);
    let o = run_with(
        &["run", "multiblur", "--out", "one"],
        &extra,
        None,
        dir.path(),
    );
    assert!(o.status.success());
    let o = run_with(
        &[
            "run",
            "multiblur",
            "--ranks",
            "2",
            "--elastic",
            "--out",
            "two",
        ],
        &extra,
        None,
        dir.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        outputs(&dir.path().join("one")),
        outputs(&dir.path().join("two"))
    );
    let metrics = read_json(&dir.path().join("two/metrics.json"));
    assert!(metrics.get("recoveries").is_none(), "{metrics}");
    assert!(metrics.get("resumed").is_none(), "{metrics}");
}

const EPOCHS: usize = 5;

/// The bundled inversion at a test's size: 5 epochs of 4 shots on a 20×40 model, a panel every 2
/// epochs (and the last).
fn small_fwi() -> Vec<String> {
    [
        "-q",
        "--set",
        &format!("fwi.epochs={EPOCHS}"),
        "--set",
        "model.truth.nz=20",
        "--set",
        "model.truth.nx=40",
        "--set",
        "acquisition.shots=4",
        "--set",
        "acquisition.receivers_per_shot=20",
        "--set",
        "wave.nt=150",
        "--set",
        "fwi.batch_size=4",
        "--set",
        "fwi.stages=[]",
        "--set",
        "output.figures_every=2",
    ]
    .map(String::from)
    .to_vec()
}

/// The inversion on 1 rank (no elastic) and on 3 elastic ranks that lose `rank` in epoch `epoch`
/// at `point`: every output file has the same bytes; the recovery is in metrics.json.
fn lose_fwi_rank_and_compare(rank: usize, epoch: usize, point: &str) -> serde_json::Value {
    let die = format!("{rank}:{epoch}:{point}");
    let (dir, stderr) = reference_and_elastic("fwi_marmousi", &small_fwi(), &die, false);
    assert!(
        stderr.contains(&format!(
            "[launcher] rank {rank} was killed by signal 9 (SIGKILL)"
        )),
        "{stderr}"
    );
    // The launcher and the survivors count an inversion's progress in epochs.
    assert!(
        stderr.contains(&format!("2 rank(s) resume after epoch {}", epoch - 1)),
        "{stderr}"
    );
    assert!(!stderr.contains("resume after iteration"), "{stderr}");
    same_fwi_outputs_in(dir.path(), &format!("losing rank {rank} at {die}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    assert_eq!(metrics["world_size"], 2);
    assert_eq!(metrics["history"].as_array().unwrap().len(), EPOCHS);
    let recoveries = metrics["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let r = &recoveries[0];
    assert_eq!(r["lost_slots"], serde_json::json!([rank]));
    assert_eq!(
        r["resumed_from"].as_u64().unwrap() as usize,
        epoch - 1,
        "{r}"
    );
    assert_timed_from_the_loss(r);
    // 4 shots over 2 ranks.
    assert_eq!(
        r["assignment"]["batch_positions"],
        serde_json::json!([[0, 1], [2, 3]]),
        "{r}"
    );
    // The epochs after the loss list the survivors' shares.
    let last = &metrics["history"][EPOCHS - 1]["ranks"];
    assert_eq!(last.as_array().unwrap().len(), 2, "{last}");
    metrics
}

#[test]
fn fwi_losing_rank_2_in_the_shot_gradients_collective_keeps_every_byte() {
    lose_fwi_rank_and_compare(2, seeded_epoch(11), "gradients");
}

#[test]
fn fwi_losing_rank_0_moves_its_role_and_its_panels_and_keeps_every_byte() {
    // After epoch 2's panel: the new rank 0 draws it again from what every rank kept.
    let metrics = lose_fwi_rank_and_compare(0, 3 + seeded_epoch(5) % 2, "start");
    assert_eq!(
        metrics["recoveries"][0]["members"],
        serde_json::json!([1, 2])
    );
}

#[test]
fn fwi_losing_rank_1_at_an_epoch_start_keeps_every_byte() {
    lose_fwi_rank_and_compare(1, seeded_epoch(23), "start");
}

/// An inversion loses slot 0 in epoch 2's shot gradients (slot 1 takes rank 0's role), then
/// slot 1 at the start of epoch 4: slot 2, rank 0 in its turn, finishes alone with every byte,
/// the epoch panels its two predecessors drew included.
#[test]
fn fwi_losing_a_second_rank_after_a_recovery_keeps_every_byte() {
    use serde_json::json;
    let die = "0:2:gradients,1:4:start";
    let (dir, stderr) = reference_and_elastic("fwi_marmousi", &small_fwi(), die, false);
    assert_said(
        &stderr,
        &[
            "[launcher] rank 0 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 1 was killed by signal 9 (SIGKILL)",
        ],
    );
    same_fwi_outputs_in(dir.path(), &format!("losing slots 0 and 1 at {die}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    assert_eq!(metrics["world_size"], 1);
    assert_eq!(metrics["history"].as_array().unwrap().len(), EPOCHS);
    assert_eq!(
        recoveries_of(&metrics),
        [(1, json!([0]), json!([1, 2])), (3, json!([1]), json!([2]))]
    );
}

/// `--respawn` for an inversion: rank 1 of 3 is killed at the start of `epoch`; the launcher starts
/// a replacement (slot 3), which joins the next generation with the model, Adam and reports rank 0
/// hands it, and the run finishes on 3 ranks with every byte of an uninterrupted run.
fn replace_fwi_rank_1_and_compare(epoch: usize) {
    let die = format!("1:{epoch}:start");
    let (dir, stderr) = reference_and_elastic("fwi_marmousi", &small_fwi(), &die, true);
    assert_said(
        &stderr,
        &[
            "[launcher] rank 1 was killed by signal 9 (SIGKILL)",
            "[launcher] rank 3 started to replace rank 1 in generation 1",
            "[launcher] generation 1: rank(s) [1] lost, replacement(s) [3] joined, 3 rank(s)",
        ],
    );
    same_fwi_outputs_in(dir.path(), &format!("replacing rank 1 at {die}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    assert_eq!(metrics["world_size"], 3);
    assert_eq!(metrics["history"].as_array().unwrap().len(), EPOCHS);
    let recoveries = metrics["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    let r = &recoveries[0];
    assert_eq!(r["lost_slots"], serde_json::json!([1]));
    assert_eq!(r["members"], serde_json::json!([0, 2, 3]));
    assert_eq!(r["joined"], serde_json::json!([3]));
    assert_eq!(
        r["resumed_from"].as_u64().unwrap() as usize,
        epoch - 1,
        "{r}"
    );
    // The epochs after the loss list the 3 ranks' shares.
    let last = &metrics["history"][EPOCHS - 1]["ranks"];
    assert_eq!(last.as_array().unwrap().len(), 3, "{last}");
}

#[test]
fn fwi_a_replacement_for_lost_rank_1_finishes_on_3_ranks_with_every_byte() {
    replace_fwi_rank_1_and_compare(seeded_epoch(35));
}

#[test]
fn fwi_a_replacement_before_the_first_epoch_completed_starts_from_the_start_model() {
    replace_fwi_rank_1_and_compare(1);
}

/// A seeded epoch in 2..=EPOCHS-1 (never the first or last).
fn seeded_epoch(seed: u64) -> usize {
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    2 + (mixed as usize) % (EPOCHS - 2)
}

#[test]
fn fwi_elastic_refuses_the_rank_count_dependent_all_reduce_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = small_fwi();
    extra.extend(["--set".into(), "fwi.sum_order=\"all_reduce\"".into()]);
    let o = run_with(
        &[
            "run",
            "fwi_marmousi",
            "--ranks",
            "3",
            "--elastic",
            "--out",
            "o",
        ],
        &extra,
        None,
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(
        stderr.contains("fwi.sum_order") && stderr.contains("exact"),
        "{stderr}"
    );
    assert!(!dir.path().join("o").exists());
}

#[test]
fn fwi_below_min_ranks_from_its_preset_stops_with_a_checkpoint_that_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let o = run_with(
        &["run", "fwi_marmousi", "--out", "reference"],
        &small_fwi(),
        None,
        cwd,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An inversion preset's own [distributed] sets min_ranks and the checkpoints' interval.
    let mut extra = small_fwi();
    for set in ["distributed.min_ranks=3", "distributed.checkpoint_every=2"] {
        extra.extend(["--set".into(), set.into()]);
    }
    let args = elastic_3_into_o("fwi_marmousi");
    // Rank 1 dies as epoch 4 starts: the survivors completed 3, one past the checkpoint of 2.
    let stderr = failed_run(&args, &extra, "1:4", cwd);
    assert!(stderr.contains("fewer than min_ranks = 3"), "{stderr}");
    assert!(stderr.contains("its checkpoint holds epoch 3"), "{stderr}");
    let command = resume_command(&stderr);
    assert_eq!(
        command,
        "tessera run --resume o.checkpoint --ranks 3 --elastic"
    );
    // On 2 ranks, not elastic: the panel of epoch 2 is drawn again from the checkpoint.
    let o = run_with(
        &["run", "--resume", "o.checkpoint", "--ranks", "2"],
        &["-q".into()],
        None,
        cwd,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("resuming after epoch 3 from the checkpoint"),
        "{err}"
    );
    same_fwi_outputs(&cwd.join("reference"), &cwd.join("o"), "the resume");
    assert!(!cwd.join("o.checkpoint").exists());
    let metrics = read_json(&cwd.join("o/metrics.json"));
    assert_eq!(metrics["history"].as_array().unwrap().len(), EPOCHS);
    assert_resumed(&metrics, "epoch", 3);
}

/// The inversion's files compared by name and bytes: `got` holds `want`'s outputs (the models, the
/// data and their figures, the loss curve and the panels) `after` what happened to it.
/// [`same_fwi_outputs`] of `DIR/reference` and `DIR/elastic` ([`reference_and_elastic`]'s runs).
fn same_fwi_outputs_in(dir: &Path, after: &str) {
    same_fwi_outputs(&dir.join("reference"), &dir.join("elastic"), after);
}

fn same_fwi_outputs(want: &Path, got: &Path, after: &str) {
    let want = outputs(want);
    let got = outputs(got);
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert!(want.len() >= 10, "{:?}", names(&want));
    assert_eq!(names(&want), names(&got));
    for ((name, a), (_, b)) in want.iter().zip(&got) {
        assert!(a == b, "{name} differs after {after}");
    }
}

#[test]
fn fwi_resume_reads_the_presets_files_from_its_folder_not_the_working_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    // A true model in a file beside an inversion preset that names it by a relative path: the
    // bundled inversion's model, written by a run of it.
    let o = run_with(
        &["run", "fwi_marmousi", "--out", "bundled"],
        &small_fwi(),
        None,
        cwd,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::create_dir(cwd.join("p")).unwrap();
    std::fs::copy(cwd.join("bundled/true_model.npy"), cwd.join("p/truth.npy")).unwrap();
    let bundled = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/presets/fwi_marmousi.toml"
    ))
    .unwrap();
    let start = bundled.find("[model.truth]").unwrap();
    let end = start + bundled[start..].find("\n\n").unwrap();
    let preset = format!(
        "{}[model.truth]\nkind = \"file\"\npath = \"truth.npy\"{}",
        &bundled[..start],
        &bundled[end..]
    );
    std::fs::write(cwd.join("p/inv.toml"), preset).unwrap();
    // small_fwi() without the bundled model's size (the file gives it).
    let sets = small_fwi();
    let mut extra: Vec<String> = vec![sets[0].clone()];
    for pair in sets[1..].chunks(2) {
        if !pair[1].starts_with("model.truth") {
            extra.extend_from_slice(pair);
        }
    }
    let o = run_with(
        &["run", "p/inv.toml", "--out", "reference"],
        &extra,
        None,
        cwd,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    for set in ["distributed.min_ranks=3", "distributed.checkpoint_every=2"] {
        extra.extend(["--set".into(), set.into()]);
    }
    let stderr = failed_run(&elastic_3_into_o("p/inv.toml"), &extra, "1:4", cwd);
    assert!(stderr.contains("its checkpoint holds epoch 3"), "{stderr}");
    // Resumed from another working folder, which has no `truth.npy`: the preset's file is read
    // from the preset's folder, the outputs go where the first run's would have.
    std::fs::create_dir(cwd.join("elsewhere")).unwrap();
    let o = run_with(
        &["run", "--resume", "../o.checkpoint"],
        &["-q".into()],
        None,
        &cwd.join("elsewhere"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    same_fwi_outputs(&cwd.join("reference"), &cwd.join("o"), "the resume");
    assert!(!cwd.join("o.checkpoint").exists());
    assert_resumed(&read_json(&cwd.join("o/metrics.json")), "epoch", 3);
}

/// A recovery as `metrics.json` held it before the launcher's moment of the loss was recorded (the
/// record of a 4-rank tomography2d run of commit 112c8e1) still reads, without those times.
#[test]
fn a_recovery_recorded_before_the_loss_times_still_reads() {
    let old = r#"{"generation":1,"failed_at_secs":26.591222087,
        "failure":"rank 3 closed its connection (it exited or was killed)","lost_ranks":[2],
        "lost_slots":[2],"resumed_from":2,"members":[0,1,3],
        "assignment":{"operators":[[0],[],[]],"tiles":[[],[],[]]},"recovery_secs":0.62083616}"#;
    let r: tessera::job::Recovery = serde_json::from_str(old).unwrap();
    assert_eq!((r.lost_at_secs, r.since_loss_secs), (None, None));
    assert_eq!((r.resumed_from, r.recovery_secs), (2, Some(0.62083616)));
    let again = serde_json::to_value(&r).unwrap();
    assert!(again["since_loss_secs"].is_null(), "{again}");
}

/// Growing without a loss (`tessera join ADDR`, docs/ELASTIC.md, "Growing"): multiblur on 2
/// elastic ranks; rank 0 waits at the boundary after a seeded iteration (`TESSERA_TEST_JOIN_AT`)
/// until a rank asks to join; the test reads ADDR from the launcher's log and starts
/// `tessera join ADDR`. The run finishes on 3 ranks, `metrics.json` records the growth (no lost
/// rank, the joined slot), and every other output has the bytes of an uninterrupted 1-rank run.
/// `preset` on 1 rank into `reference`, and on 2 elastic ranks into `elastic`, which `tessera
/// join` grows by one rank at the boundary after each of `ks` (iterations or epochs:
/// `TESSERA_TEST_JOIN_AT`), each join started once the one before was taken in. `die_at` is every
/// rank's `TESSERA_TEST_DIE_AT`, joiners' included. The reference and the elastic run succeed;
/// returns the launcher's log and each joiner's exit status and output.
fn join_mid_run(
    preset: &str,
    extra: &[String],
    ks: &[usize],
    die_at: Option<&str>,
    dir: &Path,
) -> (String, Vec<(bool, String)>) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    let o = run_with(&["run", preset, "--out", "reference"], extra, None, dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let with_hook = |c: &mut Command| {
        if let Some(d) = die_at {
            c.env("TESSERA_TEST_DIE_AT", d);
        }
    };
    let mut elastic = tessera();
    elastic
        .args(["run", preset, "--ranks", "2", "--elastic", "--out"])
        .arg("elastic")
        .args(extra)
        .current_dir(dir)
        .env(
            "TESSERA_TEST_JOIN_AT",
            ks.iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    with_hook(&mut elastic);
    let mut elastic = elastic.spawn().unwrap();
    let (lines, log) = mpsc::channel();
    let stderr = elastic.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let _ = lines.send(line);
        }
    });
    let mut said = Vec::new();
    let next_line = |said: &mut Vec<String>, waiting_for: &str| {
        let line = log
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("the launcher did not say {waiting_for} ({e}): {said:#?}"));
        said.push(line.clone());
        line
    };
    let addr = loop {
        let line = next_line(&mut said, "the join address");
        if let Some((_, rest)) = line.split_once("add a rank with `tessera join ") {
            break rest.trim_end_matches('`').to_string();
        }
    };
    let mut joiners = Vec::new();
    for n in 0..ks.len() {
        let mut join = tessera();
        join.args(["join", &addr, "--timeout", "60"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        with_hook(&mut join);
        joiners.push(join.spawn().unwrap());
        // Two ranks plus at most two replacements are the launcher's slots: joiners take 4, 5, …
        let taken = format!("rank(s) [{}] joined (tessera join)", 4 + n);
        while !next_line(&mut said, &taken).contains(&taken) {}
    }
    let joined: Vec<(bool, String)> = joiners
        .into_iter()
        .map(|j| {
            let o = j.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            (o.status.success(), text)
        })
        .collect();
    let status = elastic.wait().unwrap();
    reader.join().unwrap();
    said.extend(log.try_iter());
    let said = said.join("\n");
    assert!(status.success(), "{said}\n{joined:#?}");
    for (n, (_, text)) in joined.iter().enumerate() {
        let slot = 4 + n;
        assert!(
            text.contains(&format!("joining the elastic run at {addr} as rank {slot}")),
            "{text}"
        );
    }
    (said, joined)
}

/// [`join_mid_run`] with one join after `k`, which succeeds; returns the launcher's log.
fn join_once(preset: &str, extra: &[String], k: usize, dir: &Path) -> String {
    let (said, joined) = join_mid_run(preset, extra, &[k], None, dir);
    assert!(joined[0].0, "{}\n{said}", joined[0].1);
    said
}

/// The recovery a growth from 2 to 3 ranks after `k` records: no loss, the joiner (slot 4: two
/// ranks plus at most two replacements are the launcher's slots) in `joined`; `steps`: the run's
/// iterations (epochs).
fn the_growth_after(k: usize, steps: usize, metrics: &serde_json::Value) -> serde_json::Value {
    let r = the_one_recovery_on_3_ranks(metrics, steps);
    assert_eq!(r["lost_slots"], serde_json::json!([]));
    assert_eq!(r["members"], serde_json::json!([0, 1, 4]));
    assert_eq!(r["joined"], serde_json::json!([4]));
    assert_eq!(r["resumed_from"].as_u64().unwrap() as usize, k, "{r}");
    assert!(r["failure"].as_str().unwrap().starts_with("none"), "{r}");
    r
}

/// The group's size in each generation of an imaging run's metrics.json.
fn generation_sizes(metrics: &serde_json::Value) -> Vec<u64> {
    metrics["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["world_size"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_rank_that_joins_mid_run_takes_a_share_and_keeps_every_byte() {
    let k = seeded_iteration(37);
    let dir = tempfile::tempdir().unwrap();
    let said = join_once("multiblur", &small(ITERATIONS), k, dir.path());
    assert_said(
        &said,
        &[
            "[launcher] rank 4 asks to join (tessera join)",
            &format!(
                "[launcher] generation 1: rank(s) [4] joined (tessera join), 3 rank(s) resume \
                 after iteration {k}"
            ),
        ],
    );
    same_outputs(dir.path(), &format!("a rank joining after iteration {k}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    let r = the_growth_after(k, ITERATIONS, &metrics);
    assert_eq!(generation_sizes(&metrics), [2, 3]);
    // The joiner took a share: operators and tiles over 3 ranks, its own among them.
    let shares = r["assignment"]["operators"].as_array().unwrap();
    assert_eq!(shares.len(), 3, "{r}");
    assert!(!shares[2].as_array().unwrap().is_empty(), "{r}");
}

#[test]
fn a_rank_that_joins_an_inversion_at_an_epoch_boundary_keeps_every_byte() {
    let k = seeded_epoch(41);
    let dir = tempfile::tempdir().unwrap();
    let said = join_once("fwi_marmousi", &small_fwi(), k, dir.path());
    assert_said(
        &said,
        &[
            "[launcher] rank 4 asks to join (tessera join): it joins generation 1 at the next \
             epoch boundary",
            &format!(
                "[launcher] generation 1: rank(s) [4] joined (tessera join), 3 rank(s) resume \
                 after epoch {k}"
            ),
        ],
    );
    same_fwi_outputs_in(dir.path(), &format!("a rank joining after epoch {k}"));
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    let r = the_growth_after(k, EPOCHS, &metrics);
    // The joiner took a share of the shots: 4 over 3 ranks.
    assert_eq!(
        r["assignment"]["batch_positions"],
        serde_json::json!([[0, 1], [2], [3]]),
        "{r}"
    );
    // Each epoch's report lists the ranks that computed it: 2 up to the boundary, then 3.
    let ranks: Vec<usize> = metrics["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ranks"].as_array().unwrap().len())
        .collect();
    let want: Vec<usize> = (1..=EPOCHS).map(|e| if e <= k { 2 } else { 3 }).collect();
    assert_eq!(ranks, want);
}

/// Two joins in turn (2 → 3 → 4 ranks), then the first joiner dies: the survivors go on as 3, and
/// the run still has every byte of an uninterrupted one.
#[test]
fn two_joins_in_turn_then_a_joiner_lost_keep_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (said, joined) = join_mid_run(
        "multiblur",
        &small(ITERATIONS),
        &[2, 3],
        Some("4:5:denoiser"),
        dir.path(),
    );
    // The joiner of slot 4 was killed in iteration 5; the one of slot 5 finished with the run.
    assert!(
        !joined[0].0 && joined[0].1.contains("killed"),
        "{joined:#?}"
    );
    assert!(joined[1].0, "{joined:#?}");
    assert_said(
        &said,
        &[
            "[launcher] generation 1: rank(s) [4] joined (tessera join), 3 rank(s) resume after \
             iteration 2",
            "[launcher] generation 2: rank(s) [5] joined (tessera join), 4 rank(s) resume after \
             iteration 3",
            // Its `tessera join` said so: no wait for the check-in timeout.
            "[launcher] rank 4 (tessera join) was killed by signal 9 (SIGKILL): the others go on \
             without it",
            "[launcher] generation 3: rank(s) [4] lost, 3 rank(s) resume after iteration 4",
        ],
    );
    assert!(!said.contains("did not check in"), "{said}");
    same_outputs(dir.path(), "two joins, then the loss of the first joiner");
    let metrics = read_json(&dir.path().join("elastic/metrics.json"));
    assert_eq!(metrics["world_size"], 3);
    assert_eq!(
        recoveries_of(&metrics),
        [
            (2, serde_json::json!([]), serde_json::json!([0, 1, 4])),
            (3, serde_json::json!([]), serde_json::json!([0, 1, 4, 5])),
            (4, serde_json::json!([4]), serde_json::json!([0, 1, 5])),
        ]
    );
    assert_eq!(generation_sizes(&metrics), [2, 3, 4, 3]);
}

/// `tessera join` to an address that is not an elastic run's: garbage, a closed port, a store
/// without a run, a server that answers garbage. Each fails (no panic) within its timeout, with
/// an error naming the address.
#[test]
fn joining_what_is_not_an_elastic_run_fails_naming_the_address() {
    use std::io::Write;

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let store = tessera::dist::store::StoreServer::bind("127.0.0.1:0").unwrap();
    let junk = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let junk_addr = junk.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut s in junk.incoming().map_while(|s| s.ok()) {
            let _ = s.write_all(&[0xff; 64]);
        }
    });
    let store_addr = store.addr().to_string();
    for (addr, says) in [
        ("not-an-address", "not-an-address"),
        (closed.as_str(), "is rank 0 running"),
        (store_addr.as_str(), "not the launcher of an elastic run"),
        (junk_addr.as_str(), "joining the elastic run"),
    ] {
        let o = run_with(&["join", addr, "--timeout", "2"], &[], None, Path::new("."));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{addr}: {err}");
        assert!(
            err.contains(addr) && err.contains(says) && !err.contains("panicked"),
            "{addr}: {err}"
        );
    }
}
