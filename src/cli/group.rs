//! The process group a subcommand runs on, from its `GroupArgs`: this process's rank, its thread
//! placement, launching `--ranks N` local ranks of this very command, and joining the group.

use std::time::Duration;

use anyhow::{Context, Result};

use tessera::dist::elastic::{Member, Plan};
use tessera::dist::placement::{Placement, available_cores};
use tessera::dist::{self, RankFlags, RankInfo};

use super::args::GroupArgs;

pub(super) fn rank_flags(group: &GroupArgs) -> RankFlags {
    RankFlags {
        rank: group.rank,
        world_size: group.world_size,
        master_addr: group.master_addr.clone(),
        master_port: group.master_port,
    }
}

/// Sizes this process's thread pool (flag, else `preset_threads`, else the host's cores shared by
/// its ranks) before anything computes (the pool can be sized only once); logged.
pub(super) fn place_threads(group: &GroupArgs, preset_threads: Option<usize>) -> Result<Placement> {
    let local_ranks = match group.ranks {
        Some(n) => n,
        None => {
            RankInfo::discover(&rank_flags(group))
                .context("finding this process's rank")?
                .local_world_size
        }
    };
    let placement = Placement::choose(
        local_ranks,
        available_cores(),
        group.threads_per_rank,
        preset_threads,
    )?;
    placement.apply()?;
    tracing::info!("threads: {placement}");
    Ok(placement)
}

/// Discovers this process's rank and joins the group with the chosen transport.
/// With `--ranks N` (N > 1) in a process no launcher started: runs this very command as N local rank
/// processes, supervises them and returns true (the caller is done). Otherwise false: this process
/// is a rank (or the only one).
pub(super) fn launch_local_group(group: &GroupArgs) -> Result<bool> {
    let launched = std::env::var_os(dist::launch::LAUNCHED_ENV).is_some();
    match group.ranks.filter(|&n| n > 1 && !launched) {
        Some(n) => {
            let args = strip_option(std::env::args_os().skip(1), "--ranks");
            dist::launch::launch(n, &args).context("local process group")?;
            Ok(true)
        }
        None => Ok(false),
    }
}

pub(super) fn join_group(group: &GroupArgs) -> Result<Box<dyn dist::Collective>> {
    let info = RankInfo::discover(&rank_flags(group)).context("finding this process's rank")?;
    join_with(group, &info).with_context(|| {
        format!(
            "joining the process group as rank {} of {}",
            info.rank, info.world_size
        )
    })
}

/// Joins the group `info` describes with `group`'s transport and timeouts (also an elastic run's
/// later generations).
pub(super) fn join_with(
    group: &GroupArgs,
    info: &RankInfo,
) -> tessera::Result<Box<dyn dist::Collective>> {
    let comm = dist::init_backend(
        group.backend,
        info,
        Duration::from_secs(group.rendezvous_timeout as u64),
        Some(Duration::from_secs(group.liveness_timeout as u64)).filter(|t| !t.is_zero()),
    )?;
    comm.set_op_timeout(Some(Duration::from_secs(group.op_timeout as u64)))?;
    Ok(comm)
}

/// The arguments without `opt` and its value (`--opt V` or `--opt=V`).
pub(super) fn strip_option(
    args: impl Iterator<Item = std::ffi::OsString>,
    opt: &str,
) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        let text = a.to_string_lossy();
        if text == opt {
            skip_next = true;
        } else if !text.starts_with(&format!("{opt}=")) {
            out.push(a);
        }
    }
    out
}

/// This rank's collective: a replacement (`--respawn`) joins the generation the launcher started
/// it for, not the first, and returns that generation's plan.
pub(super) fn join_as_started(
    group: &GroupArgs,
    member: Option<&mut Member>,
) -> Result<(Box<dyn dist::Collective>, Option<Plan>)> {
    Ok(match member.and_then(|m| Some((m.replaces_into?, m))) {
        Some((generation, member)) => {
            let plan = member
                .join_as_replacement(generation)
                .context("joining the group as a replacement")?;
            let info = plan.rank_info(member.slot)?;
            let comm = join_with(group, &info).with_context(|| {
                format!(
                    "joining generation {generation} as rank {} of {}",
                    info.rank, info.world_size
                )
            })?;
            (comm, Some(plan))
        }
        None => (join_group(group)?, None),
    })
}
