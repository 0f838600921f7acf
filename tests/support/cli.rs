//! The `tessera` binary this test suite builds, with no launcher environment of the test runner
//! leaking in, run to completion in a folder.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub fn tessera() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TESSERA_LAUNCHED",
    ] {
        c.env_remove(v);
    }
    c
}

pub fn run(args: &[&str], cwd: &Path) -> Output {
    tessera()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("tessera runs")
}

/// Runs tessera and fails the test with its stderr unless it succeeded; `what` names the run.
pub fn run_ok(args: &[&str], cwd: &Path, what: &str) -> Output {
    let o = run(args, cwd);
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A JSON file a run wrote (metrics.json, train.json).
pub fn read_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
