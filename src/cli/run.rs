//! `tessera run` here (imaging and full-waveform inversion presets): the run folder, a progress bar,
//! and the summary a finished run prints (also for `--attach`).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tessera::device::Device;
use tessera::dist::{self, RankInfo};
use tessera::io::RunDir;
use tessera::job::{self, JobEvent};
use tessera::preset::Preset;

use super::args::GroupArgs;
use super::group::{
    join_group, join_with, launch_local_group, place_threads, rank_flags, strip_option,
};
use super::output::say;

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    name: &str,
    set: &[String],
    out: Option<PathBuf>,
    replace: bool,
    quiet: bool,
    elastic: bool,
    device: Option<&str>,
    group: &GroupArgs,
) -> Result<()> {
    if let Some(fwi) = tessera::fwi::FwiPreset::load(name, set)
        .with_context(|| format!("loading preset `{name}`"))?
    {
        let chosen = Device::chosen(device.map(|d| Device::parse("--device", d)).transpose()?)?;
        if chosen.is_cuda() {
            bail!(
                "--device {chosen}: not on the GPU yet: fwi (the wave kernels); run on the CPU (--device cpu) meanwhile"
            );
        }
        return run_fwi(name, fwi, out, replace, quiet, elastic, group);
    }
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    let mut loaded = Preset::load(name, set).with_context(|| format!("loading preset `{name}`"))?;
    let configured = match (device, &loaded.preset.distributed.device) {
        (Some(text), _) => Some(Device::parse("--device", text)?),
        (None, Some(text)) => Some(Device::parse("distributed.device", text)?),
        (None, None) => None,
    };
    let chosen = Device::chosen(configured)?;
    // The job opens the device its preset names: `--device` (or TESSERA_DEVICE) goes there. A CPU
    // run that named no device keeps its preset as it was.
    if chosen.is_cuda() || loaded.preset.distributed.device.is_some() {
        loaded.preset.distributed.device = Some(chosen.to_string());
    }
    let preset = &loaded.preset;
    let placement = place_threads(group, preset.distributed.threads_per_rank)?;
    let out_dir = run_dir(
        out.or_else(|| preset.output.dir.clone()),
        replace,
        &preset.name,
    )?;
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
    let elastic = elastic || preset.distributed.elastic;
    if elastic && !launched {
        check_elastic(group)?;
        if chosen.is_cuda() {
            // `[distributed] elastic` is named by the device check; this is `--elastic`.
            bail!(
                "--device {chosen}: not on the GPU yet: elastic runs (docs/GPU.md); run on the \
                 CPU (--device cpu) meanwhile"
            );
        }
    }
    if let Some(n) = group.ranks.filter(|&n| n > 1 && !launched) {
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        if elastic {
            let options = dist::launch::ElasticOptions {
                min_ranks: preset.distributed.min_ranks.unwrap_or(1),
                checkin_timeout: Duration::from_secs(group.rendezvous_timeout as u64),
            };
            dist::launch::launch_elastic(n, &args, options).context("elastic process group")?;
        } else {
            dist::launch::launch(n, &args).context("local process group")?;
        }
        return Ok(());
    }
    let member = match launched && elastic {
        true => dist::elastic::Member::from_env(Duration::from_secs(
            2 * group.rendezvous_timeout as u64,
        ))
        .context("reaching the elastic launcher")?,
        false => None,
    };
    let comm = join_group(group)?;
    let rank = comm.rank();
    if rank == 0 && !quiet {
        eprintln!("threads: {placement}");
    }
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
        }
        ControlFlow::Continue(())
    };
    let summary = match member {
        Some(member) => {
            let mut join = |info: &RankInfo| join_with(group, info);
            let elastic = job::Elastic {
                member,
                join: &mut join,
            };
            job::run_elastic(preset, &out_dir, comm, &[], elastic, &mut on_event)
        }
        None => job::run_in_group(preset, out_dir, comm, &mut on_event),
    }
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

/// Elastic runs need the local launcher (it decides who is left) and a transport whose groups can
/// be formed again: `--ranks N` on sockets.
fn check_elastic(group: &GroupArgs) -> Result<()> {
    if group.ranks.is_none_or(|n| n < 2) {
        bail!(
            "--elastic (or [distributed] elastic) needs --ranks N with N ≥ 2: the local launcher \
             leads the survivors of a lost rank; runs under torchrun, srun or mpirun are not \
             elastic yet (docs/ELASTIC.md)"
        );
    }
    if group.backend != dist::Backend::Sockets {
        bail!(
            "--elastic needs the sockets backend: MPI communicators cannot shrink without ULFM, \
             and NCCL groups are not re-formed yet (docs/ELASTIC.md)"
        );
    }
    Ok(())
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
    name: &str,
    (preset, base_dir, origin): (tessera::fwi::FwiPreset, PathBuf, String),
    out: Option<PathBuf>,
    replace: bool,
    quiet: bool,
    elastic: bool,
    group: &GroupArgs,
) -> Result<()> {
    use tessera::fwi::FwiEvent;
    let out_dir = run_dir(
        out.or_else(|| preset.output.dir.clone()),
        replace,
        &preset.name,
    )?;
    out_dir.check()?;
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    if elastic && !launched {
        check_elastic(group)?;
        tessera::fwi::check_elastic(&preset)
            .with_context(|| format!("checking preset {origin}"))?;
        let n = group.ranks.unwrap_or(1);
        let args = strip_option(std::env::args_os().skip(1), "--ranks");
        let options = dist::launch::ElasticOptions {
            min_ranks: 1,
            checkin_timeout: Duration::from_secs(group.rendezvous_timeout as u64),
        };
        dist::launch::launch_elastic(n, &args, options).context("elastic process group")?;
        return Ok(());
    }
    if launch_local_group(group)? {
        return Ok(());
    }
    let member = match launched && elastic {
        true => dist::elastic::Member::from_env(Duration::from_secs(
            2 * group.rendezvous_timeout as u64,
        ))
        .context("reaching the elastic launcher")?,
        false => None,
    };
    // Before anything computes: N local ranks share the cores instead of each starting a thread
    // per core (the shots of one rank are modelled on its threads).
    place_threads(group, None)?;
    let comm = join_group(group)?;
    let rank = comm.rank();
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
        Some(member) => {
            let mut join = |info: &RankInfo| join_with(group, info);
            let elastic = dist::elastic::Elastic {
                member,
                join: &mut join,
            };
            tessera::fwi::run_elastic(&preset, &base_dir, out_dir, comm, elastic, &mut on_event)
        }
        None => tessera::fwi::run_in_group(&preset, &base_dir, out_dir, comm, &mut on_event),
    }
    .with_context(|| format!("running preset {origin} ({name})"))?;
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
