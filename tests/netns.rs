//! Multi-host rehearsal: the quick preset on 3 "hosts" (network namespaces joined by shaped
//! virtual ethernet, scripts/netns-hosts.sh), rendezvous and collectives over TCP, equals the
//! single-process run byte for byte; again with 1 ms between the hosts, every connection through
//! the delaying relay (`tessera relay`, src/dist/relay.rs). Where the machine cannot make
//! namespaces (not root, no iproute2, no veth/bridge/tbf) each test prints `skipped: …` with the
//! reason and returns without running; libtest counts it as passed, so .ci/run runs these tests
//! apart with `--show-output` and counts them as skipped.

#[path = "support/cli.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use support::run;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/netns-hosts.sh")
}

/// Whether this machine can make namespace hosts; when it cannot, prints the `skipped:` line.
fn can_make_hosts() -> bool {
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
    }
    check.status.success()
}

/// Runs the quick preset in one process and on 3 namespace hosts with the links `link` (the
/// script's options), checks the reconstructions are the same bytes and returns the script's
/// output.
fn quick_on_three_hosts_equals_one_process(link: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let one = run(&["run", "quick", "--quiet", "--out", "one"], dir.path());
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let hosts = Command::new("bash")
        .arg(script())
        .args(["--hosts", "3"])
        .args(link)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(["--", "run", "quick", "--quiet", "--out", "hosts"])
        .current_dir(dir.path())
        .output()
        .expect("bash runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&hosts.stdout),
        String::from_utf8_lossy(&hosts.stderr)
    );
    assert!(hosts.status.success(), "{output}");
    let read = |d: &str| std::fs::read(dir.path().join(d).join("reconstruction.npy")).unwrap();
    assert_eq!(read("one"), read("hosts"), "3 hosts differ from 1 process");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("hosts/metrics.json")).unwrap())
            .unwrap();
    assert_eq!(metrics["world_size"], 3, "{metrics}");
    output
}

#[test]
fn the_quick_preset_on_three_namespace_hosts_equals_one_process() {
    if can_make_hosts() {
        quick_on_three_hosts_equals_one_process(&["--rate", "1gbit"]);
    }
}

#[test]
fn the_quick_preset_on_three_namespace_hosts_1ms_apart_equals_one_process() {
    if !can_make_hosts() {
        return;
    }
    let output = quick_on_three_hosts_equals_one_process(&["--rate", "1gbit", "--delay", "1ms"]);
    // Every connection between two hosts went through the relay: hosts 1 and 2 to rank 0's
    // store, and the data and heartbeat links of the three pairs.
    let opened: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("[relay] relay: open "))
        .collect();
    assert!(opened.len() >= 8, "{output}");
    // Higher ranks dial lower ones: hosts 0 and 1 are dialled, hosts 1 and 2 dial.
    for host in ["10.213.0.1", "10.213.0.2"] {
        assert!(
            opened
                .iter()
                .any(|l| l.contains(&format!("(dialled {host}:"))),
            "no connection to {host} through the relay:\n{output}"
        );
    }
    for host in ["10.213.0.2", "10.213.0.3"] {
        assert!(
            opened
                .iter()
                .any(|l| l.contains(&format!("relay: open {host}:"))),
            "no connection from {host} through the relay:\n{output}"
        );
    }
}
