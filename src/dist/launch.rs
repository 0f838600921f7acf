//! `--ranks N`: start N rank processes of this binary on this machine, wire them into one group
//! (torchrun-style environment: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, …), prefix their
//! output with their rank, and supervise them.
//!
//! Supervision: if a rank exits with an error or is killed, the others are terminated (SIGTERM, then
//! SIGKILL after a grace period) and the launcher returns an error naming the rank and how it ended.
//! Rank processes are started with `PR_SET_PDEATHSIG`, so they cannot outlive a killed launcher.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Environment variable set in rank processes started by the launcher.
pub const LAUNCHED_ENV: &str = "TESSERA_LAUNCHED";

/// How long ranks get to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

/// Runs `args` (this binary's arguments, without `--ranks`) as `world` rank processes and waits.
pub fn launch(world: usize, args: &[OsString]) -> Result<()> {
    if world == 0 {
        return Err(Error::config("--ranks", "must be at least 1"));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("finding this executable", "current_exe", e))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Comm {
            context: "choosing a rendezvous port".into(),
            source: e,
        })?
        .port();
    let mut children: Vec<Child> = Vec::with_capacity(world);
    let mut pipes = Vec::new();
    for rank in 0..world {
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env(LAUNCHED_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                terminate(&mut children);
                return Err(Error::io("starting rank process (process limit?)", &exe, e));
            }
        };
        {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "[launcher] rank {rank}: pid {}", child.id());
        }
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        children.push(child);
        for forwarded in [forward(out, rank, false), forward(err, rank, true)] {
            match forwarded {
                Ok(p) => pipes.push(p),
                Err(e) => {
                    terminate(&mut children);
                    return Err(Error::io(
                        "starting a thread to forward a rank's output (process or thread limit?)",
                        format!("rank {rank}"),
                        e,
                    ));
                }
            }
        }
    }
    let result = supervise(&mut children);
    for p in pipes {
        let _ = p.join();
    }
    result
}

/// Makes the child that `cmd` starts receive SIGKILL when the thread that starts it ends
/// (`PR_SET_PDEATHSIG`), so it never outlives a killed parent.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches only the child process.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Copies a child's output line by line with a rank prefix.
fn forward(
    stream: impl Read + Send + 'static,
    rank: usize,
    is_err: bool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().spawn(move || {
        let reader = BufReader::new(stream);
        for line in reader.split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            if is_err {
                let mut e = std::io::stderr().lock();
                let _ = writeln!(e, "[rank {rank}] {text}");
            } else {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "[rank {rank}] {text}");
            }
        }
    })
}

/// Waits for all ranks; on the first failure stops the others and reports it.
fn supervise(children: &mut [Child]) -> Result<()> {
    let mut done = vec![false; children.len()];
    loop {
        for (rank, child) in children.iter_mut().enumerate() {
            if done[rank] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) if status.success() => done[rank] = true,
                Ok(Some(status)) => {
                    done[rank] = true;
                    let failure = first_failure(children, rank, status);
                    terminate(children);
                    return Err(failure);
                }
                Ok(None) => {}
                Err(e) => {
                    terminate(children);
                    return Err(Error::io(
                        "waiting for rank process",
                        format!("rank {rank}"),
                        e,
                    ));
                }
            }
        }
        if done.iter().all(|&d| d) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// When one rank fails, others often fail right after because they lost it; give them a moment and
/// report the root cause first (a rank killed by a signal, else the first rank that failed).
fn first_failure(children: &mut [Child], rank: usize, status: ExitStatus) -> Error {
    std::thread::sleep(Duration::from_millis(200));
    let mut failed = vec![(rank, status)];
    for (r, c) in children.iter_mut().enumerate() {
        if r != rank
            && let Ok(Some(st)) = c.try_wait()
            && !st.success()
        {
            failed.push((r, st));
        }
    }
    failed.sort_by_key(|(r, st)| (st.signal().is_none(), *r));
    let (rank, status) = failed[0];
    let mut how = describe(status);
    let others: Vec<String> = failed[1..]
        .iter()
        .map(|(r, st)| format!("rank {r} {}", describe(*st)))
        .collect();
    if !others.is_empty() {
        how.push_str(&format!("; then {}", others.join(", ")));
    }
    Error::PeerLost { rank, how }
}

/// SIGTERM to every live child, SIGKILL to those still alive after the grace period, then reap.
fn terminate(children: &mut [Child]) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: plain kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
    }
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

/// "exited with status 1" / "was killed by signal 9 (SIGKILL)".
pub fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => format!("was killed by signal {sig} ({})", signal_name(sig)),
        None => "ended in an unknown way".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}
