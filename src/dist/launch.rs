//! `--ranks N`: start N rank processes of this binary on this machine, wire them into one group
//! (torchrun-style environment: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, …), prefix their
//! output with their rank, and supervise them.
//!
//! Supervision: if a rank exits with an error or is killed, the others are terminated (SIGTERM, then
//! SIGKILL after a grace period) and the launcher returns an error naming the rank and how it ended.
//! Rank processes are started with `PR_SET_PDEATHSIG`, so they cannot outlive a killed launcher.
//!
//! Elastic runs ([`launch_elastic`]): a rank killed by a signal is a *loss*, not a failure: the
//! others are left running, check in with the launcher's [`Coordinator`] and go on as the next
//! generation of the group (`docs/ELASTIC.md`). A rank that exits with an error status still stops
//! everything, as does a group that shrinks below `min_ranks`. With `respawn`, each lost rank is
//! replaced by a fresh process in a new slot that joins the next generation (at most N per run).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::elastic::{self, Coordinator, DieAt, Verdict, WorkUnit};
use crate::error::{Error, Result};

/// Environment variable set in rank processes started by the launcher.
pub const LAUNCHED_ENV: &str = "TESSERA_LAUNCHED";

/// How long ranks get to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

/// How long the survivors of an elastic group that cannot go on get to write its checkpoint and
/// exit before they are stopped.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// How an elastic launcher treats lost ranks.
#[derive(Clone)]
pub struct ElasticOptions {
    /// The fewest ranks the run may shrink to.
    pub min_ranks: usize,
    /// How long the survivors of a loss get to check in; a live rank process that has not checked
    /// in by then (stopped, hung) is killed and counted as lost.
    pub checkin_timeout: Duration,
    /// What the run's progress is counted in (the launcher's messages name it).
    pub unit: WorkUnit,
    /// Why the group cannot go on without slot 0 (`tessera serve`: it holds the control socket,
    /// the clients' connections and the job queue, which no other rank can take over): its loss
    /// then stops every rank and the launcher's error names it and this reason. `None`: slot 0 is
    /// survived like any other (the lowest survivor takes its role).
    pub slot0_essential: Option<&'static str>,
    /// Start a replacement for each lost rank (`--respawn`): a process in the next unused slot
    /// that joins the next generation ([`elastic::JOIN_ENV`]); at most as many as the run started
    /// with, those that die before they join included, so a rank that crashes at start-up cannot
    /// loop. Once they are spent the group goes on shrinking.
    pub respawn: bool,
    /// Whether a re-formed group can hold the job (`None`: every group that `min_ranks` allows);
    /// a refused group stops the run as one below `min_ranks` does.
    pub admit: Option<elastic::Admit>,
}

/// The test hook [`DieAt`] for `rank`, in rank processes a launcher started only (this one, or
/// mpirun, srun, torchrun: [`super::env::outside_launcher`]).
pub fn launched_die_hook(rank: usize) -> Result<Option<DieAt>> {
    match std::env::var_os(LAUNCHED_ENV).is_some() || super::env::outside_launcher().is_some() {
        true => DieAt::from_env(rank),
        false => Ok(None),
    }
}

/// Runs `args` (this binary's arguments, without `--ranks`) as `world` rank processes and waits.
pub fn launch(world: usize, args: &[OsString]) -> Result<()> {
    launch_with(world, args, None)
}

/// [`launch`] for an elastic run: a rank's loss is survived while `min_ranks` remain.
pub fn launch_elastic(world: usize, args: &[OsString], options: ElasticOptions) -> Result<()> {
    launch_with(world, args, Some(options))
}

fn launch_with(world: usize, args: &[OsString], elastic: Option<ElasticOptions>) -> Result<()> {
    if world == 0 {
        return Err(Error::config("--ranks", "must be at least 1"));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("finding this executable", "current_exe", e))?;
    let port = free_port()?;
    let coordinator = match &elastic {
        Some(options) => {
            let mut coordinator = Coordinator::start(world, options.min_ranks)?;
            let run = joinable_run(world, args, options)?;
            coordinator.advertise(&run)?;
            if run.refuses.is_none() {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[launcher] elastic run: add a rank with `tessera join {}`",
                    coordinator.addr()
                );
            }
            Some(coordinator)
        }
        None => None,
    };
    let mut children: Vec<Child> = Vec::with_capacity(world);
    let mut pipes = Vec::new();
    let store = coordinator.as_ref().map(Coordinator::addr);
    // Starts the process of `slot` (a replacement joins generation `join`) and forwards its output.
    // A replacement's `RANK`/`LOCAL_RANK` are those the rank it replaces started with (its place on
    // this host, its share of the cores); its rank in the group comes from its generation's plan.
    let mut start =
        |slot: usize, join: Option<(u32, usize)>, children: &mut Vec<Child>| -> Result<()> {
            let place = join.map_or(slot, |(_, place)| place);
            let mut cmd = Command::new(&exe);
            cmd.args(args)
                .env("RANK", place.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", place.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env(LAUNCHED_ENV, "1")
                .env_remove(elastic::STORE_ENV)
                .env_remove(elastic::SLOT_ENV)
                .env_remove(elastic::JOIN_ENV)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(addr) = &store {
                cmd.env(elastic::STORE_ENV, addr)
                    .env(elastic::SLOT_ENV, slot.to_string());
            }
            if let Some((generation, _)) = join {
                cmd.env(elastic::JOIN_ENV, generation.to_string());
            }
            die_with_parent(&mut cmd);
            let mut child = cmd
                .spawn()
                .map_err(|e| Error::io("starting rank process (process limit?)", &exe, e))?;
            {
                let mut e = std::io::stderr().lock();
                let _ = writeln!(e, "[launcher] rank {slot}: pid {}", child.id());
            }
            let out = child.stdout.take().expect("piped");
            let err = child.stderr.take().expect("piped");
            children.push(child);
            for forwarded in [forward(out, slot, false), forward(err, slot, true)] {
                pipes.push(forwarded.map_err(|e| {
                    Error::io(
                        "starting a thread to forward a rank's output (process or thread limit?)",
                        format!("rank {slot}"),
                        e,
                    )
                })?);
            }
            Ok(())
        };
    for rank in 0..world {
        if let Err(e) = start(rank, None, &mut children) {
            terminate(&mut children);
            return Err(e);
        }
    }
    let result = match (coordinator, elastic) {
        (Some(coordinator), Some(options)) => {
            let mut replace = |slot: usize, join: (u32, usize), children: &mut Vec<Child>| {
                start(slot, Some(join), children)
            };
            supervise_elastic(&mut children, coordinator, options, &mut replace)
        }
        _ => supervise(&mut children),
    };
    for p in pipes {
        let _ = p.join();
    }
    result
}

/// The record `tessera join ADDR` reads: the rank processes' command line, and why the run takes
/// no joining rank, if it does not.
fn joinable_run(
    world: usize,
    args: &[OsString],
    options: &ElasticOptions,
) -> Result<elastic::JoinableRun> {
    let cwd =
        std::env::current_dir().map_err(|e| Error::io("reading the working folder", ".", e))?;
    let texts: Vec<Option<String>> = args.iter().map(|a| a.clone().into_string().ok()).collect();
    let refuses = if let Some(why) = options.slot0_essential {
        Some(format!("rank 0 is essential to it ({why})"))
    } else if texts.iter().any(Option::is_none) || cwd.to_str().is_none() {
        Some("its command line or working folder is not UTF-8".to_string())
    } else {
        None
    };
    Ok(elastic::JoinableRun {
        args: texts.into_iter().flatten().collect(),
        cwd: cwd.to_string_lossy().into_owned(),
        world,
        // The launcher's own slots: its ranks, then at most `world` replacements.
        first_join_slot: 2 * world,
        unit: options.unit,
        refuses,
    })
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
        for (rank, done) in done.iter_mut().enumerate() {
            if !*done {
                *done = !matches!(reap(children, rank, false)?, Reaped::Running);
            }
        }
        if done.iter().all(|&d| d) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How a rank process stands after [`reap`].
enum Reaped {
    Running,
    Succeeded,
    /// Ended by a signal, in an elastic run (a loss the others survive).
    Lost(ExitStatus),
}

/// Polls rank `rank`; a failure (any in a plain run; an error status in an elastic one, where a
/// signal is a loss) stops every rank and is returned naming the root cause.
fn reap(children: &mut [Child], rank: usize, signal_is_loss: bool) -> Result<Reaped> {
    match children[rank].try_wait() {
        Ok(None) => Ok(Reaped::Running),
        Ok(Some(status)) if status.success() => Ok(Reaped::Succeeded),
        Ok(Some(status)) if signal_is_loss && status.signal().is_some() => Ok(Reaped::Lost(status)),
        Ok(Some(status)) => {
            let failure = first_failure(children, rank, status);
            terminate(children);
            Err(failure)
        }
        Err(e) => {
            terminate(children);
            Err(Error::io(
                "waiting for rank process",
                format!("rank {rank}"),
                e,
            ))
        }
    }
}

/// A free local port for a group's rendezvous store.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Comm {
            context: "choosing a rendezvous port".into(),
            source: e,
        })?
        .port())
}

/// Starts the replacement process of `slot`, which joins generation `.0` in the place (generation-0
/// rank) `.1` of the rank it replaces, into `children`.
type Replace<'a> = dyn FnMut(usize, (u32, usize), &mut Vec<Child>) -> Result<()> + 'a;

/// Waits for all ranks of an elastic run: a rank killed by a signal is lost and the survivors are
/// led into the next generation (with a replacement for it when `options.respawn`); a rank that
/// exits with an error stops everything. `children` is indexed by slot and grows by replacements.
fn supervise_elastic(
    children: &mut Vec<Child>,
    mut coordinator: Coordinator,
    options: ElasticOptions,
    replace: &mut Replace<'_>,
) -> Result<()> {
    let world = children.len();
    let mut exited = vec![false; children.len()];
    let mut done = vec![false; children.len()];
    // Replacements started and not yet in a generation, and how many were started in all.
    let mut pending: Vec<usize> = Vec::new();
    let mut started_replacements = 0;
    // Each slot's place: its generation-0 rank, or the place of the rank it replaced.
    let mut place: Vec<usize> = (0..world).collect();
    // Since when the survivors of a loss (or of a failed collective) are checking in.
    let mut recovering_since: Option<Instant> = None;
    // Ranks that joined with `tessera join` are not this launcher's children: it cannot reap or
    // kill them; one that does not check in when it should is counted as lost here.
    let mut joins_seen = 0;
    let mut joiners_gone: Vec<usize> = Vec::new();
    loop {
        for slot in 0..children.len() {
            if exited[slot] {
                continue;
            }
            match reap(children, slot, true)? {
                Reaped::Running => {}
                Reaped::Succeeded => (exited[slot], done[slot]) = (true, true),
                Reaped::Lost(status) if slot == 0 && options.slot0_essential.is_some() => {
                    let why = options.slot0_essential.unwrap_or_default();
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "[launcher] rank 0 {}: {why}; stopping every rank",
                        describe(status)
                    );
                    terminate(children);
                    return Err(Error::PeerLost {
                        rank: 0,
                        how: format!("{}: {why}", describe(status)),
                    });
                }
                Reaped::Lost(status) if pending.contains(&slot) => {
                    // A replacement that died before it joined: it was never a member, so nothing
                    // is recovered; it counts against the limit and is not replaced.
                    exited[slot] = true;
                    pending.retain(|&s| s != slot);
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "[launcher] replacement rank {slot} {} before it joined",
                        describe(status)
                    );
                }
                Reaped::Lost(status) => {
                    exited[slot] = true;
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "[launcher] rank {slot} {}: the others go on without it (--elastic)",
                        describe(status)
                    );
                    recovering_since.get_or_insert_with(Instant::now);
                    if options.respawn && started_replacements < world {
                        let new = children.len();
                        let generation = coordinator.next_generation();
                        if let Err(e) = replace(new, (generation, place[slot]), children) {
                            terminate(children);
                            return Err(e);
                        }
                        place.push(place[slot]);
                        started_replacements += 1;
                        exited.push(false);
                        done.push(false);
                        pending.push(new);
                        let _ = writeln!(
                            std::io::stderr().lock(),
                            "[launcher] rank {new} started to replace rank {slot} in generation \
                             {generation} (--respawn: replacement {started_replacements} of at \
                             most {world})"
                        );
                    } else if options.respawn {
                        let _ = writeln!(
                            std::io::stderr().lock(),
                            "[launcher] rank {slot} is not replaced: the run's {world} \
                             replacement(s) are spent (--respawn); the group shrinks"
                        );
                    }
                }
            }
        }
        for slot in coordinator.take_join_requests(&mut joins_seen)? {
            let _ = writeln!(
                std::io::stderr().lock(),
                "[launcher] rank {slot} asks to join (tessera join): it joins generation {} at \
                 the next {} boundary",
                coordinator.next_generation(),
                options.unit
            );
            pending.push(slot);
        }
        // A joiner's `tessera join` says when its rank ended by a signal: lost now, not after the
        // check-in timeout.
        let joined: Vec<usize> = (coordinator.members().iter())
            .chain(&pending)
            .copied()
            .filter(|&s| s >= children.len() && !joiners_gone.contains(&s))
            .collect();
        if !joined.is_empty() {
            for (slot, how) in coordinator.lost_joiners(&joined)? {
                let before = pending.contains(&slot);
                pending.retain(|&s| s != slot);
                joiners_gone.push(slot);
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[launcher] rank {slot} (tessera join) {how}{}",
                    match before {
                        true => " before it joined",
                        false => ": the others go on without it (--elastic)",
                    }
                );
                if !before {
                    recovering_since.get_or_insert_with(Instant::now);
                }
            }
        }
        if exited.iter().all(|&e| e) && recovering_since.is_none() {
            if pending.iter().any(|&s| s >= children.len()) {
                let _ = coordinator.refuse_joiners(&format!(
                    "the run completed before its next {} boundary",
                    options.unit
                ));
                // The joiners read the refusal from this store before it closes.
                std::thread::sleep(Duration::from_millis(300));
            }
            return Ok(());
        }
        let gone = |s: usize| exited.get(s).copied().unwrap_or(joiners_gone.contains(&s));
        let live: Vec<usize> = coordinator
            .members()
            .iter()
            .copied()
            .filter(|&s| !gone(s))
            .collect();
        let survivors = coordinator.checked_in(&live)?;
        if recovering_since.is_none() && !survivors.is_empty() {
            recovering_since = Some(Instant::now());
        }
        if let Some(since) = recovering_since {
            let late = since.elapsed() > options.checkin_timeout;
            let rank0_done = |s: &usize| done.get(*s).copied().unwrap_or(false);
            if live.is_empty() && coordinator.members().first().is_some_and(rank0_done) {
                // The group's rank 0 finished (its outputs are in place) before the loss.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[launcher] the run completed before the lost rank(s) ended"
                );
                terminate(children);
                return Ok(());
            }
            let joiners = coordinator.joining(&pending)?;
            if (survivors.len() == live.len() && joiners.len() == pending.len()) || late {
                let secs = options.checkin_timeout.as_secs_f64();
                for &slot in live.iter().filter(|s| !survivors.contains_key(s)) {
                    if slot >= children.len() {
                        let _ = writeln!(
                            std::io::stderr().lock(),
                            "[launcher] rank {slot} (joined with tessera join) did not check in \
                             within {secs:.0} s: counted as lost (it is not this launcher's \
                             process to kill)"
                        );
                        joiners_gone.push(slot);
                        continue;
                    }
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "[launcher] rank {slot} did not check in within {secs:.0} s: killed and \
                         counted as lost"
                    );
                    let _ = children[slot].kill();
                    let _ = children[slot].wait();
                    exited[slot] = true;
                }
                for &slot in pending.iter().filter(|s| !joiners.contains(s)) {
                    if slot >= children.len() {
                        let _ = writeln!(
                            std::io::stderr().lock(),
                            "[launcher] rank {slot} (tessera join) did not ask to join within \
                             {secs:.0} s: left out"
                        );
                        joiners_gone.push(slot);
                        continue;
                    }
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "[launcher] replacement rank {slot} did not ask to join within \
                         {secs:.0} s: killed"
                    );
                    let _ = children[slot].kill();
                    let _ = children[slot].wait();
                    exited[slot] = true;
                }
                pending.clear();
                let verdict = coordinator.publish(
                    &survivors,
                    &joiners,
                    (free_port()?, since.elapsed()),
                    options.admit.as_ref(),
                )?;
                match verdict {
                    Verdict::Continue(plan) => {
                        let what = match (plan.lost_slots.is_empty(), plan.joined.is_empty()) {
                            (true, _) => format!("rank(s) {:?} joined (tessera join)", plan.joined),
                            (false, true) => format!("rank(s) {:?} lost", plan.lost_slots),
                            (false, false) => format!(
                                "rank(s) {:?} lost, replacement(s) {:?} joined",
                                plan.lost_slots, plan.joined
                            ),
                        };
                        let _ = writeln!(
                            std::io::stderr().lock(),
                            "[launcher] generation {}: {what}, {} rank(s) resume after {} {}",
                            plan.generation,
                            plan.members.len(),
                            options.unit,
                            plan.resume_from
                        );
                        recovering_since = None;
                    }
                    Verdict::Stop { reason } => {
                        // The ranks end on the verdict themselves, once a survivor has written
                        // the run's checkpoint: give them time to, then stop the rest.
                        let deadline = Instant::now() + STOP_GRACE;
                        while Instant::now() < deadline
                            && children
                                .iter_mut()
                                .any(|c| matches!(c.try_wait(), Ok(None)))
                        {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        terminate(children);
                        let rank = (0..children.len())
                            .find(|&s| exited[s] && !done[s])
                            .unwrap_or(0);
                        return Err(Error::PeerLost {
                            rank,
                            how: format!("was lost and the run cannot go on: {reason}"),
                        });
                    }
                }
            }
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
