//! `tessera serve --listen 127.0.0.1:0` as a child process, and the address it announces.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tessera::protocol::BackendAddr;

/// A token file in `dir` that `tessera serve` accepts (strong, readable by its owner only), and
/// its token.
pub fn token_file(dir: &Path) -> (PathBuf, String) {
    let token = "correct horse battery staple".to_string();
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, token)
}

/// Starts `tessera serve --listen 127.0.0.1:0 ARGS…` (the binary this test suite builds) and reads
/// the `tcp:` address from the first line it prints.
pub fn serve_tcp(args: &[&str]) -> (Child, BackendAddr) {
    serve_tcp_with(args, |_| {})
}

/// [`serve_tcp`] with the command adjusted first (its working directory, its environment).
pub fn serve_tcp_with(args: &[&str], setup: impl FnOnce(&mut Command)) -> (Child, BackendAddr) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    setup(&mut command);
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("tcp:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (child, addr.parse().unwrap())
}
