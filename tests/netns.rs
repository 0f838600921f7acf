//! Multi-host rehearsal: the quick preset on 3 "hosts" (network namespaces joined by shaped
//! virtual ethernet, scripts/netns-hosts.sh), rendezvous and collectives over TCP, equals the
//! single-process run byte for byte. Where the machine cannot make namespaces (not root, no
//! iproute2, no veth/bridge/tbf) the test prints `skipped: …` with the reason and returns without
//! running; libtest counts it as passed, so .ci/run runs it apart with `--show-output` and counts
//! it as skipped.

#[path = "support/cli.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use support::run;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/netns-hosts.sh")
}

#[test]
fn the_quick_preset_on_three_namespace_hosts_equals_one_process() {
    let check = Command::new("bash")
        .arg(script())
        .args(["--check", "--hosts", "3", "--rate", "1gbit"])
        .output()
        .expect("bash runs");
    if !check.status.success() {
        // On stdout, at the start of a line: .ci/run counts the lines that begin with `skipped: `.
        println!(
            "skipped: this machine cannot make network-namespace hosts: {}",
            String::from_utf8_lossy(&check.stderr).trim()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let one = run(&["run", "quick", "--quiet", "--out", "one"], dir.path());
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let hosts = Command::new("bash")
        .arg(script())
        .args(["--hosts", "3", "--rate", "1gbit", "--binary"])
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(["--", "run", "quick", "--quiet", "--out", "hosts"])
        .current_dir(dir.path())
        .output()
        .expect("bash runs");
    assert!(
        hosts.status.success(),
        "{}{}",
        String::from_utf8_lossy(&hosts.stdout),
        String::from_utf8_lossy(&hosts.stderr)
    );
    let read = |d: &str| std::fs::read(dir.path().join(d).join("reconstruction.npy")).unwrap();
    assert_eq!(read("one"), read("hosts"), "3 hosts differ from 1 process");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("hosts/metrics.json")).unwrap())
            .unwrap();
    assert_eq!(metrics["world_size"], 3, "{metrics}");
}
