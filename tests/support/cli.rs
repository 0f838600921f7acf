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
