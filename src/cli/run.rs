//! `tessera run` here (imaging and full-waveform inversion presets): the run folder, a progress bar,
//! and the summary a finished run prints (also for `--attach`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tessera::device::Device;
use tessera::dist::elastic::{Member, WorkUnit};
use tessera::dist::{self, Backend, Collective, RankInfo, RankSource};
use tessera::io::RunDir;
use tessera::io::checkpoint::{self, RunKind};
use tessera::io::run_dir::local_timestamp;
use tessera::job::{self, JobEvent};
use tessera::preset::{DEFAULT_CHECKPOINT_EVERY, LoadedPreset, Preset};

use super::args::GroupArgs;
use super::group::{join_as_started, join_with, place_threads, rank_flags, strip_option};
use super::output::say;

/// How a run continues from a checkpoint: the user's `--resume DIR`, or the folder the launcher
/// chose for the checkpoints of an elastic run (`--checkpoint-dir`, its ranks' hidden flag).
pub(super) struct Continuation {
    pub(super) resume: Option<PathBuf>,
    pub(super) checkpoint_dir: Option<PathBuf>,
}

impl Continuation {
    /// The checkpoints this rank (or single process) keeps, one every `every` iterations.
    fn checkpoints(self, every: usize) -> Option<job::Checkpoints> {
        match (self.resume, self.checkpoint_dir) {
            (Some(dir), _) => Some((dir, true)),
            (None, Some(dir)) => Some((dir, false)),
            (None, None) => None,
        }
        .map(|(dir, resume)| job::Checkpoints { dir, every, resume })
    }
}

/// A preset's run as the launcher of its rank processes sees it.
struct Launch<'a> {
    /// Where the outputs go and the preset's name (the checkpoint folder is named after them).
    out_dir: &'a RunDir,
    name: &'a str,
    /// Iterations (epochs) between checkpoints.
    every: usize,
    /// Elastic runs stop below this many ranks.
    min_ranks: usize,
    unit: WorkUnit,
    /// Elastic runs replace each lost rank (`--respawn`).
    respawn: bool,
    /// Elastic runs: whether a re-formed group can hold the job (imaging runs check its memory).
    admit: Option<dist::elastic::Admit>,
}

impl<'a> Launch<'a> {
    /// The run of preset `name` into `out_dir`, with its `[distributed]` `checkpoint_every` and
    /// `min_ranks` (`keys`: imaging and inversion presets have their own sections, with these keys
    /// alike), counting its progress in `unit`.
    fn new(
        out_dir: &'a RunDir,
        name: &'a str,
        (every, min_ranks): (Option<usize>, Option<usize>),
        unit: WorkUnit,
    ) -> Launch<'a> {
        Launch {
            out_dir,
            name,
            every: every.unwrap_or(DEFAULT_CHECKPOINT_EVERY),
            min_ranks: min_ranks.unwrap_or(1),
            unit,
            respawn: false,
            admit: None,
        }
    }

    /// This process's part of the run. The process that launches `--ranks N` starts them, waits
    /// for them and returns `None` (the run is over); a rank, or a single process, gets the
    /// checkpoints' interval and, in an elastic run a launcher started, its link to that launcher.
    fn start(
        &self,
        group: &GroupArgs,
        (elastic, quiet): (bool, bool),
        continuation: &Continuation,
    ) -> Result<Option<(usize, Option<Member>)>> {
        let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
        if !launched && group.ranks.is_some_and(|n| n > 1) {
            let resume = continuation.resume.as_deref();
            self.launch_ranks(group, elastic, quiet, resume)?;
            return Ok(None);
        }
        let member = match launched && elastic {
            true => Member::from_env(Duration::from_secs(2 * group.rendezvous_timeout as u64))
                .context("reaching the elastic launcher")?,
            false => None,
        };
        Ok(Some((self.every, member)))
    }

    /// Starts `--ranks N` local rank processes of this command (`elastic` or not) and waits for
    /// them. An elastic run keeps a checkpoint in a new folder beside its outputs (one resumed from
    /// `resume` keeps that one); when the run stops or fails with a checkpoint in place, prints the
    /// command that continues it.
    fn launch_ranks(
        &self,
        group: &GroupArgs,
        elastic: bool,
        quiet: bool,
        resume: Option<&Path>,
    ) -> Result<()> {
        let (every, unit) = (self.every, self.unit);
        let n = group.ranks.unwrap_or(1);
        let elastic = elastic.then(|| dist::launch::ElasticOptions {
            min_ranks: self.min_ranks,
            checkin_timeout: Duration::from_secs(group.rendezvous_timeout as u64),
            unit,
            slot0_essential: None,
            respawn: self.respawn,
            admit: self.admit.clone(),
        });
        let mut args = strip_option(std::env::args_os().skip(1), "--ranks");
        let checkpoints = match (resume, elastic.is_some()) {
            (Some(dir), _) => Some(dir.to_path_buf()),
            (None, true) => {
                let dir = checkpoint::folder_for(self.out_dir, self.name, &local_timestamp());
                if dir.join(checkpoint::CHECKPOINT_FILE).exists() {
                    bail!(
                        "an earlier run's checkpoint is in {}: continue it with `{}`, or remove \
                         that folder",
                        dir.display(),
                        resume_command(&dir, n)
                    );
                }
                args.extend(["--checkpoint-dir".into(), dir.clone().into_os_string()]);
                Some(dir)
            }
            (None, false) => None,
        };
        if let Some(dir) = checkpoints.as_ref().filter(|_| !quiet) {
            eprintln!("checkpoints every {every} {unit}(s) in {}", dir.display());
        }
        let launched = match elastic {
            Some(options) => {
                dist::launch::launch_elastic(n, &args, options).context("elastic process group")
            }
            None => dist::launch::launch(n, &args).context("local process group"),
        };
        if launched.is_err()
            && let Some(dir) = checkpoints
                .as_ref()
                .filter(|d| d.join(checkpoint::CHECKPOINT_FILE).exists())
        {
            eprintln!(
                "the run stopped; {}",
                where_to_continue(dir, &resume_command(dir, n))
            );
        }
        launched
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    name: Option<&str>,
    set: &[String],
    continuation: Continuation,
    out: Option<PathBuf>,
    replace: bool,
    quiet: bool,
    (elastic, respawn): (bool, bool),
    device: Option<&str>,
    group: &GroupArgs,
) -> Result<()> {
    let resumed =
        match &continuation.resume {
            Some(dir) => Some(checkpoint::read_head(dir).with_context(|| {
                format!("reading the checkpoint to resume in {}", dir.display())
            })?),
            None => None,
        };
    let fwi = match (&resumed, name) {
        (Some(head), name) if head.kind == RunKind::Inversion => Some(resumed_fwi_preset(
            head,
            name,
            set,
            continuation.resume.as_deref(),
        )?),
        (None, Some(name)) => tessera::fwi::FwiPreset::load(name, set)
            .with_context(|| format!("loading preset `{name}`"))?,
        _ => None,
    };
    if let Some(fwi) = fwi {
        let chosen = Device::chosen(device.map(|d| Device::parse("--device", d)).transpose()?)?;
        tessera::device::coverage::check_fwi(chosen)?;
        let out_dir = match &resumed {
            Some(head) => head.destination.run_dir(),
            None => run_dir(
                out.or_else(|| fwi.0.output.dir.clone()),
                replace,
                &fwi.0.name,
            )?,
        };
        return run_fwi(fwi, out_dir, continuation, quiet, (elastic, respawn), group);
    }
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    let mut loaded = match (&resumed, name) {
        (Some(head), name) => resumed_preset(head, name, set, continuation.resume.as_deref())?,
        (None, Some(name)) => {
            Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?
        }
        (None, None) => bail!("give a preset, or --resume DIR"),
    };
    // The job opens the device its preset names: `--device` (or TESSERA_DEVICE) goes there.
    let flag = device.map(|d| Device::parse("--device", d)).transpose()?;
    let chosen = tessera::device::coverage::place(flag, &mut loaded.preset)?;
    let preset = &loaded.preset;
    let elastic = elastic || preset.distributed.elastic;
    if respawn && !elastic {
        bail!(
            "--respawn needs --elastic (or [distributed] elastic): a replacement joins the group \
             that the survivors of a loss re-form, which only an elastic run does"
        );
    }
    // Before any thread starts (a checkpointed run blocks SIGTERM in every thread but one).
    let mode = match elastic && !launched {
        true => {
            let mode = check_elastic(group, respawn)?;
            if chosen.is_cuda() {
                // `[distributed] elastic` is named by the device check; this is `--elastic`.
                bail!(
                    "--device {chosen}: not on the GPU yet: elastic runs (docs/GPU.md); run on \
                     the CPU (--device cpu) meanwhile"
                );
            }
            Some(mode)
        }
        false => None,
    };
    let sigterm = sigterm_for(mode.as_ref())?;
    let placement = place_threads(group, preset.distributed.threads_per_rank)?;
    let out_dir = match &resumed {
        Some(head) => head.destination.run_dir(),
        None => run_dir(
            out.or_else(|| preset.output.dir.clone()),
            replace,
            &preset.name,
        )?,
    };
    // Checked before any rank starts computing (rank 0 checks again when it stages the run): the
    // output folder, and the inputs against the real image, memory included.
    out_dir.check()?;
    if !launched {
        let (world, here) = match group.ranks {
            Some(n) => (n, n),
            None => {
                let info = RankInfo::discover(&rank_flags(group))?;
                (info.world_size, info.local_world_size)
            }
        };
        job::check_inputs(preset, &[], world, here)
            .with_context(|| format!("checking preset {}", loaded.origin))?;
        tessera::device::coverage::check_run(chosen, preset)?;
    }
    let keys = (
        preset.distributed.checkpoint_every,
        preset.distributed.min_ranks,
    );
    let mut launch = Launch::new(&out_dir, &preset.name, keys, WorkUnit::Iteration);
    launch.respawn = respawn;
    // The survivors of a loss re-shard the job: a group whose shares would not fit in memory
    // stops with its checkpoint instead.
    launch.admit = Some(job::regroup_admission(preset.clone()));
    let Some((every, mut member)) = launch.start(group, (elastic, quiet), &continuation)? else {
        return Ok(());
    };
    let (comm, joined) = join_as_started(group, member.as_mut())?;
    let rank = comm.rank();
    if rank == 0 && !quiet {
        eprintln!("threads: {placement}");
    }
    let mut continuation = continuation;
    let run = (&out_dir, preset.name.as_str(), every, WorkUnit::Iteration);
    let stop = checkpointed(mode, comm.as_ref(), run, &mut continuation, sigterm)?;
    let quiet = quiet || rank != 0;
    let progress = super::attach::Progress::new(&preset.name, preset.algorithm.iterations(), quiet);
    let mut on_event = |event: JobEvent<'_>| {
        match event {
            JobEvent::Started {
                image_shape,
                operators,
                world_size,
                ..
            } => progress.started(operators, image_shape, world_size),
            JobEvent::Iteration { report, .. } => progress.iteration(&report.into()),
            // The recovery's own log line says it.
            JobEvent::Regrouped { .. } => {}
        }
        ControlFlow::Continue(())
    };
    let checkpoints = continuation.checkpoints(every);
    let summary = match member {
        Some(mut member) => {
            let mut join = |info: &RankInfo| join_with(group, info);
            let elastic = job::Elastic {
                member: &mut member,
                join: &mut join,
                joined,
                prelude: None,
            };
            job::run_elastic(
                preset,
                &out_dir,
                comm,
                &[],
                elastic,
                checkpoints,
                &mut on_event,
            )
        }
        None => job::run_in_group_from(preset, &out_dir, comm, &[], checkpoints, &mut on_event),
    }
    .map_err(|e| stopped(stop.as_deref(), e.into()))
    .with_context(|| format!("running preset {}", loaded.origin))?;
    progress.finish();
    if rank != 0 {
        return Ok(());
    }
    super::summary::print_summary(&summary);
    if let Some(dir) = &summary.run_dir {
        say!("  outputs in {}", dir.display());
    }
    Ok(())
}

/// The preset a checkpoint continues (`head`, read from `dir`): the one it holds, with `set`
/// applied; a preset named on the command line must be that one.
fn resumed_preset(
    head: &checkpoint::Head,
    name: Option<&str>,
    set: &[String],
    dir: Option<&Path>,
) -> Result<LoadedPreset> {
    let dir = dir.map(|d| d.display().to_string()).unwrap_or_default();
    let origin = format!("checkpoint in {dir}");
    let preset = match name {
        Some(name) => {
            Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?
        }
        None => LoadedPreset {
            preset: Preset::from_toml(&head.preset_toml, &origin, set)?,
            origin: origin.clone(),
        },
    };
    same_experiment(head, &preset.preset.to_toml()?, &preset.origin, &dir)?;
    Ok(preset)
}

/// [`resumed_preset`] for an inversion: (preset, its folder for relative paths, origin).
fn resumed_fwi_preset(
    head: &checkpoint::Head,
    name: Option<&str>,
    set: &[String],
    dir: Option<&Path>,
) -> Result<(tessera::fwi::FwiPreset, PathBuf, String)> {
    let dir = dir.map(|d| d.display().to_string()).unwrap_or_default();
    let origin = format!("checkpoint in {dir}");
    let loaded = match name {
        Some(name) => tessera::fwi::FwiPreset::load(name, set)
            .with_context(|| format!("loading preset `{name}`"))?
            .with_context(|| format!("`{name}` is not an inversion preset, the checkpoint's is"))?,
        // The preset's relative paths resolve against the folder the first run resolved them
        // against (its preset file's), not this working folder.
        None => (
            tessera::fwi::FwiPreset::from_toml(&head.preset_toml, &origin, set)?,
            match &head.preset_dir {
                Some(folder) => folder.clone(),
                None => std::env::current_dir().context("finding the working folder")?,
            },
            origin.clone(),
        ),
    };
    same_experiment(head, &loaded.0.to_toml()?, &loaded.2, &dir)?;
    Ok(loaded)
}

/// Refuses a preset (`preset_toml`, from `origin`) that is not the one the checkpoint in `dir`
/// continues.
fn same_experiment(
    head: &checkpoint::Head,
    preset_toml: &str,
    origin: &str,
    dir: &str,
) -> Result<()> {
    let hash = checkpoint::preset_hash(preset_toml);
    if hash != head.preset_hash {
        bail!(
            "the checkpoint in {dir} continues another experiment than {origin} (its preset hash \
             is {:016x}, this one's {hash:016x}): resume it without a preset or --set values",
            head.preset_hash
        );
    }
    Ok(())
}

/// `dir` as a shell word (quoted when it holds anything but plain path characters).
fn shell_word(dir: &Path) -> String {
    let text = dir.display().to_string();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c));
    match plain {
        true => text,
        false => format!("'{}'", text.replace('\'', r"'\''")),
    }
}

/// The command that continues the run whose checkpoint is in `dir` on `ranks` elastic ranks.
fn resume_command(dir: &Path, ranks: usize) -> String {
    format!(
        "tessera run --resume {} --ranks {ranks} --elastic",
        shell_word(dir)
    )
}

/// Where a stopped run's checkpoint is, what it holds and `command`, which continues it:
/// "its checkpoint is in DIR (after iteration 3); continue it with:\n  COMMAND".
fn where_to_continue(dir: &Path, command: &str) -> String {
    let held = match checkpoint::read_head(dir) {
        Ok(head) => format!("after {} {}", head.kind.unit(), head.completed),
        Err(_) => "not readable from this process: it is on rank 0's host".into(),
    };
    format!(
        "its checkpoint is in {} ({held}); continue it with:\n  {command}",
        dir.display()
    )
}

/// How an elastic run outlives the loss of a rank.
pub(super) enum ElasticMode {
    /// `--ranks N` on sockets: the local launcher leads the survivors, who re-form the group.
    Recovered,
    /// Ranks that an outside launcher started (mpirun, srun, torchrun): the group cannot be
    /// re-formed, so a loss stops the run; rank 0 keeps a checkpoint to continue it from.
    Checkpointed(Outside),
}

/// The launcher of a checkpointed elastic run, and what its ranks run on.
pub(super) struct Outside {
    source: RankSource,
    world: usize,
    backend: Backend,
}

impl Outside {
    fn launcher(&self) -> &'static str {
        match self.source {
            RankSource::Torchrun => "torchrun",
            RankSource::Slurm => "srun",
            RankSource::Pmi => "mpiexec",
            _ => "mpirun",
        }
    }

    /// The command that continues the run from `dir` under the same launcher on as many ranks.
    fn resume_command(&self, dir: &Path) -> String {
        let n = self.world;
        let launcher = match self.source {
            RankSource::Torchrun => format!("torchrun --nproc-per-node {n} --no-python"),
            RankSource::Slurm => format!("srun --ntasks {n}"),
            RankSource::Pmi => format!("mpiexec -n {n}"),
            _ => format!("mpirun -np {n}"),
        };
        let backend = match self.backend {
            Backend::Mpi => " --backend mpi",
            _ => "",
        };
        let dir = shell_word(dir);
        format!("{launcher} tessera run --resume {dir}{backend} --elastic")
    }

    /// Why the group cannot go on without a lost rank.
    fn why(&self) -> String {
        match self.backend {
            Backend::Mpi => "MPI communicators cannot shrink without ULFM".into(),
            _ => format!(
                "a group that {} started cannot be re-formed (only tessera's own launcher, \
                 --ranks N, re-forms one)",
                self.launcher()
            ),
        }
    }
}

/// Elastic runs need a launcher: tessera's own (`--ranks N` on sockets: it decides who is left and
/// the survivors re-form the group), or mpirun, srun, torchrun (the run is checkpointed: a lost
/// rank stops it, and `--resume` continues it). `respawn`: `--respawn` was asked for, which only
/// tessera's own launcher does.
pub(super) fn check_elastic(group: &GroupArgs, respawn: bool) -> Result<ElasticMode> {
    if let Some(n) = group.ranks {
        if n < 2 {
            bail!(
                "--elastic (or [distributed] elastic) needs --ranks N with N ≥ 2: the local \
                 launcher leads the survivors of a lost rank (docs/ELASTIC.md)"
            );
        }
        if group.backend != Backend::Sockets {
            bail!(
                "--elastic with --ranks N needs the sockets backend: MPI communicators cannot \
                 shrink without ULFM (under mpirun, --backend mpi --elastic keeps a checkpoint \
                 instead), and NCCL groups are not re-formed yet (docs/ELASTIC.md)"
            );
        }
        return Ok(ElasticMode::Recovered);
    }
    let Some(source) = dist::env::outside_launcher() else {
        bail!(
            "--elastic (or [distributed] elastic) needs --ranks N with N ≥ 2 (the local launcher \
             leads the survivors of a lost rank), or ranks started by mpirun, srun or torchrun (a \
             lost rank then stops the run, which continues from its checkpoint); this process has \
             neither (docs/ELASTIC.md)"
        );
    };
    let info = RankInfo::discover(&rank_flags(group)).context("finding this process's rank")?;
    let outside = Outside {
        source,
        world: info.world_size,
        backend: group.backend,
    };
    if group.backend == Backend::Nccl {
        bail!(
            "--elastic with --backend nccl: NCCL groups are not re-formed, and elastic runs are \
             not on the GPU yet (docs/ELASTIC.md)"
        );
    }
    if respawn {
        bail!(
            "--respawn needs tessera's own launcher (--ranks N): {} starts no replacement into a \
             running group, and {}; under {} a lost rank stops the run, which continues with \
             --resume (docs/ELASTIC.md)",
            outside.launcher(),
            outside.why(),
            outside.launcher()
        );
    }
    Ok(ElasticMode::Checkpointed(outside))
}

/// What a rank of a checkpointed run says when it stops because of a loss: one rank says it —
/// rank 0, or rank 1 when rank 0 is the one lost — the others only name the loss.
struct StopHint {
    rank: usize,
    dir: PathBuf,
    command: String,
    why: String,
}

impl StopHint {
    /// The note, if this rank is the one to say it: `cause` ("rank 1 was lost") and how to
    /// continue.
    fn says(&self, lost: Option<usize>, cause: &str) -> Option<String> {
        let speaker = match lost {
            Some(0) => 1,
            _ => 0,
        };
        (self.rank == speaker).then(|| {
            format!(
                "the run stopped: {cause}, and {}; {}",
                self.why,
                where_to_continue(&self.dir, &self.command)
            )
        })
    }
}

/// Blocks SIGTERM in this thread, and so in every thread it starts later, for a checkpointed run
/// (`mode`), whose own thread then says how to continue when the launcher stops it
/// ([`checkpointed`]); called before any thread starts. Returns the blocked set.
fn sigterm_for(mode: Option<&ElasticMode>) -> Result<Option<libc::sigset_t>> {
    if !matches!(mode, Some(ElasticMode::Checkpointed(_))) {
        return Ok(None);
    }
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises `set`; sigaddset and pthread_sigmask read it and change
    // this thread's mask only.
    let set = unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM);
        let set = set.assume_init();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            bail!("blocking SIGTERM for the run's stop note failed");
        }
        set
    };
    Ok(Some(set))
}

/// A checkpointed elastic run (ranks `outside` started): rank 0 chooses the checkpoint's folder
/// (a unique run folder's checkpoint is named after the time, which the ranks must not each read)
/// and every rank learns it; rank 0 says once why a lost rank stops the run and where the
/// checkpoint goes; a rank that stops because of a loss (MPI: its heartbeats name the lost rank;
/// sockets: the run's error), or because the launcher stops it (SIGTERM, blocked in `sigterm`),
/// then says where the checkpoint is and the command that continues it. `None` for a run of
/// another `mode`.
fn checkpointed(
    mode: Option<ElasticMode>,
    comm: &dyn Collective,
    (out_dir, name, every, unit): (&RunDir, &str, usize, WorkUnit),
    continuation: &mut Continuation,
    sigterm: Option<libc::sigset_t>,
) -> Result<Option<Arc<StopHint>>> {
    use std::os::unix::ffi::OsStrExt;
    let Some(ElasticMode::Checkpointed(outside)) = mode else {
        return Ok(None);
    };
    let rank = comm.rank();
    let chosen = match rank {
        0 => match &continuation.resume {
            Some(dir) => Ok(dir.clone()),
            None => {
                let dir = checkpoint::folder_for(out_dir, name, &local_timestamp());
                match dir.join(checkpoint::CHECKPOINT_FILE).exists() {
                    true => Err(format!(
                        "an earlier run's checkpoint is in {}: continue it with `{}`, or remove \
                         that folder",
                        dir.display(),
                        outside.resume_command(&dir)
                    )),
                    false => Ok(dir),
                }
            }
        },
        _ => Ok(PathBuf::new()),
    };
    let mut bytes = match &chosen {
        Ok(dir) => [&[0u8][..], dir.as_os_str().as_bytes()].concat(),
        Err(why) => [&[1u8][..], why.as_bytes()].concat(),
    };
    comm.broadcast(&mut bytes, 0)
        .context("agreeing on the checkpoint's folder")?;
    let dir = match bytes.split_first() {
        Some((0, dir)) if !dir.is_empty() => PathBuf::from(std::ffi::OsStr::from_bytes(dir)),
        Some((1, why)) if rank == 0 => bail!("{}", String::from_utf8_lossy(why)),
        Some((1, why)) => bail!("rank 0 refused the run: {}", String::from_utf8_lossy(why)),
        _ => bail!("rank 0 sent no checkpoint folder (a bug)"),
    };
    if continuation.resume.is_none() {
        continuation.checkpoint_dir = Some(dir.clone());
    }
    let hint = Arc::new(StopHint {
        rank,
        command: outside.resume_command(&dir),
        why: outside.why(),
        dir: dir.clone(),
    });
    if rank == 0 {
        eprintln!(
            "elastic under {}: {}, so a lost rank stops this run; rank 0 keeps a checkpoint every \
             {every} {unit}(s) in {}, which `tessera run --resume` continues on any number of \
             ranks",
            outside.launcher(),
            outside.why(),
            dir.display()
        );
    }
    let note = hint.clone();
    dist::liveness::set_stop_note(Box::new(move |lost| {
        let cause = match lost {
            Some(r) => format!("rank {r} was lost"),
            None => "a rank was lost".into(),
        };
        note.says(lost, &cause)
    }));
    if let Some(set) = sigterm {
        let note = hint.clone();
        let launcher = outside.launcher();
        std::thread::Builder::new()
            .name("tessera-sigterm".into())
            .spawn(move || {
                let mut signal = 0;
                // SAFETY: `set` is an initialised signal set, blocked in every thread of this
                // process; sigwait stores the signal it took in `signal`.
                if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                    return;
                }
                let cause = format!(
                    "{launcher} stopped rank {rank} (SIGTERM: another rank was lost, or the job \
                     was cancelled)"
                );
                match note.says(None, &cause) {
                    Some(text) => eprintln!("{text}"),
                    None => eprintln!("error: {cause}"),
                }
                std::process::exit(128 + libc::SIGTERM);
            })
            .context("starting the thread that says how to continue a stopped run")?;
    }
    Ok(Some(hint))
}

/// A checkpointed run's error `e`: the rank that says so (see [`StopHint::says`]) adds where the
/// checkpoint is and the command that continues the run.
fn stopped(stop: Option<&StopHint>, e: anyhow::Error) -> anyhow::Error {
    let Some(stop) = stop else {
        return e;
    };
    let lost = e
        .chain()
        .find_map(|c| match c.downcast_ref::<tessera::Error>() {
            Some(tessera::Error::PeerLost { rank, .. }) => Some(*rank),
            _ => None,
        });
    let cause = match lost {
        Some(r) => format!("rank {r} was lost"),
        None => "a rank failed".into(),
    };
    if let Some(text) = stop.says(lost, &cause) {
        eprintln!("{text}");
    }
    e
}

/// Where `tessera run` writes: the folder named (`--out` or the preset's), replaced only with
/// `--replace`, or a new folder under `out/NAME`.
fn run_dir(out: Option<PathBuf>, replace: bool, name: &str) -> Result<RunDir> {
    Ok(match out {
        Some(path) => RunDir::Exact { path, replace },
        None if replace => bail!("--replace needs --out (or the preset's output.dir)"),
        None => RunDir::Unique {
            root: PathBuf::from("out").join(name),
        },
    })
}

/// `tessera run` of a full-waveform inversion preset (the `[fwi]` kind): the same launcher and
/// process group as imaging runs, a progress bar of epochs.
fn run_fwi(
    (preset, base_dir, origin): (tessera::fwi::FwiPreset, PathBuf, String),
    out_dir: RunDir,
    continuation: Continuation,
    quiet: bool,
    (elastic, respawn): (bool, bool),
    group: &GroupArgs,
) -> Result<()> {
    use tessera::fwi::FwiEvent;
    out_dir.check()?;
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if respawn && !elastic {
        bail!(
            "--respawn needs --elastic: a replacement joins the group that the survivors of a \
             loss re-form, which only an elastic run does"
        );
    }
    let mode = match elastic && !launched {
        true => {
            let mode = check_elastic(group, respawn)?;
            tessera::fwi::check_elastic(&preset)
                .with_context(|| format!("checking preset {origin}"))?;
            Some(mode)
        }
        false => None,
    };
    let sigterm = sigterm_for(mode.as_ref())?;
    let keys = (
        preset.distributed.checkpoint_every,
        preset.distributed.min_ranks,
    );
    let mut launch = Launch::new(&out_dir, &preset.name, keys, WorkUnit::Epoch);
    launch.respawn = respawn;
    let Some((every, mut member)) = launch.start(group, (elastic, quiet), &continuation)? else {
        return Ok(());
    };
    // Before anything computes: N local ranks share the cores instead of each starting a thread
    // per core (the shots of one rank are modelled on its threads).
    place_threads(group, None)?;
    let (comm, joined) = join_as_started(group, member.as_mut())?;
    let rank = comm.rank();
    let mut continuation = continuation;
    let run = (&out_dir, preset.name.as_str(), every, WorkUnit::Epoch);
    let stop = checkpointed(mode, comm.as_ref(), run, &mut continuation, sigterm)?;
    let quiet = quiet || rank != 0;
    let progress =
        super::attach::Progress::counting(&preset.name, preset.fwi.epochs, "epochs", quiet);
    let mut on_event = |event: FwiEvent<'_>| {
        match event {
            FwiEvent::Started {
                nz,
                nx,
                shots,
                world_size,
                step_ratio,
                ..
            } => progress.set_message(format!(
                "{nz}×{nx} model, {shots} shots, {world_size} rank(s), {step_ratio} steps/sample"
            )),
            FwiEvent::Epoch { report, .. } => progress.epoch(&report.into()),
        }
        ControlFlow::Continue(())
    };
    let summary = match member {
        Some(mut member) => {
            let mut join = |info: &RankInfo| join_with(group, info);
            let elastic = dist::elastic::Elastic {
                member: &mut member,
                join: &mut join,
                joined,
                prelude: None,
            };
            let checkpoints = continuation.checkpoints(every);
            tessera::fwi::run_elastic(
                &preset,
                &base_dir,
                out_dir,
                comm,
                elastic,
                checkpoints,
                &mut on_event,
            )
        }
        None => {
            let checkpoints = continuation.checkpoints(every);
            tessera::fwi::run_in_group_from(
                &preset,
                &base_dir,
                &out_dir,
                comm,
                checkpoints,
                &mut on_event,
            )
        }
    }
    .map_err(|e| stopped(stop.as_deref(), e.into()))
    .with_context(|| format!("running preset {origin}"))?;
    progress.finish();
    if rank != 0 {
        return Ok(());
    }
    super::summary::print_fwi_summary(&summary);
    if let Some(dir) = &summary.run_dir {
        say!("  outputs in {}", dir.display());
    }
    Ok(())
}
