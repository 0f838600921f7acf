//! An elastic imaging run on one rank: run a generation of the group; when a peer is lost, check in
//! with the launcher ([`crate::dist::elastic::Member`]), rewind to the iteration the survivors
//! agree on, join the next generation and go on, until the run completes (`docs/ELASTIC.md`).
//! Its checkpoints ([`Checkpoints`], written by the group's rank 0 every K iterations and by a
//! survivor when the group stops) are what `tessera run --resume DIR` continues from.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::denoise::Denoiser;
use crate::dist::Collective;
use crate::dist::elastic::{Assignment, Plan, WorkUnit, is_loss};
pub(super) use crate::dist::elastic::{DieAt, DiePoint};
pub use crate::dist::elastic::{Elastic, Recovery};
use crate::dist::launch::launched_die_hook;
use crate::error::{Error, Result};
use crate::io::RunDir;
pub use crate::io::checkpoint::Checkpoints;
use crate::io::checkpoint::{RunKind, Writer};
use crate::optim::space::HostView;
use crate::optim::{AlgorithmConfig, IterationReport};
use crate::preset::Preset;
use crate::tensor::Tensor;
use crate::tiling::Decomposition;

use serde::{Deserialize, Serialize};

use super::{Carried, InlineArrays, JobEvent, JobSummary, run_generation};

/// An imaging run's replicated state in its checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ImagingState {
    /// The reports of the completed iterations.
    history: Vec<IterationReport>,
    /// PnP's iterate after them, shape and values (`None`: nothing to resume from; CG and FBP
    /// start over).
    iterate: Option<(Vec<usize>, Vec<f32>)>,
    /// PnP's step, derived once.
    pnp_step: Option<f32>,
}

impl ImagingState {
    fn after(history: &[IterationReport], x: Option<&Tensor>, pnp_step: Option<f32>) -> Self {
        ImagingState {
            history: history.to_vec(),
            iterate: x.map(|x| (x.shape().to_vec(), x.data().to_vec())),
            pnp_step,
        }
    }
}

/// Whether the algorithm resumes from an iterate: PnP does; CG (whose Krylov state is not
/// carried) and FBP start over.
fn resumable(preset: &Preset) -> bool {
    matches!(preset.algorithm, AlgorithmConfig::Pnp(_))
}

/// Prepares `carried` to write checkpoints of `preset`'s run into `out`; when resuming, loads the
/// checkpoint (every rank reads it) and sets `carried` after its last iteration, else rank 0 writes
/// the first one (the preset and where the outputs go).
pub(super) fn start_checkpoints(
    plan: Checkpoints,
    preset: &Preset,
    out: &RunDir,
    carried: &mut Carried,
) -> Result<()> {
    let writer = Writer::new(plan, RunKind::Imaging, preset.to_toml()?, None, out)?;
    if writer.plan.resume {
        let found = writer.resumed::<ImagingState>(|c| {
            let (k, state) = (c.head.completed, &c.state);
            match state.history.len() == k {
                true => Ok(()),
                false => Err(format!(
                    "{} reports for {k} iterations",
                    state.history.len()
                )),
            }
        })?;
        let (k, state) = (found.head.completed, found.state);
        carried.resume = match state.iterate {
            Some((shape, values)) if k > 0 => {
                let x = Tensor::from_vec(&shape, values).map_err(|e| {
                    Error::format(writer.path(), format!("not a usable checkpoint: {e}"))
                })?;
                carried.iterates = vec![(k, x.clone())];
                Some((k, x))
            }
            _ => None,
        };
        if carried.resume.is_some() {
            carried.history = state.history;
        }
        carried.resumed_step = state.pnp_step;
        carried.resumed = Some(writer.resumed_record(carried.resume.as_ref().map_or(0, |r| r.0)));
    } else if carried.staging.is_some() {
        writer.write(0, ImagingState::after(&[], None, None))?;
    }
    carried.checkpoints = Some(writer);
    Ok(())
}

/// After an iteration of a run with checkpoints (on the group's rank 0): writes the checkpoint when
/// one is due. A failed write is only logged: the run goes on, with the previous checkpoint.
pub(super) fn checkpoint_if_due(
    writer: &Writer,
    preset: &Preset,
    history: &[IterationReport],
    x: &dyn HostView,
    pnp_step: Option<f32>,
) -> Result<()> {
    let k = history.len();
    if !resumable(preset) || !writer.due(k, preset.algorithm.iterations()) {
        return Ok(());
    }
    // Downloaded (from a device) only when a checkpoint is due; a failed download is the run's
    // failure, a failed write only this checkpoint's.
    let x = x.to_host()?;
    if let Err(e) = writer.write(k, ImagingState::after(history, Some(&*x), pnp_step)) {
        tracing::warn!(
            "could not write the checkpoint after iteration {k} (the last one stays): {e}"
        );
    }
    Ok(())
}

/// [`super::run_in_group_with`] for a rank of an elastic group: survives lost peers while the
/// launcher lets the group go on, and keeps a checkpoint in `checkpoints.dir`.
pub fn run_elastic(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    elastic: Elastic<'_>,
    checkpoints: Option<Checkpoints>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    elastic_loop(
        preset,
        (out, inline),
        comm,
        (elastic, checkpoints),
        on_event,
        None,
    )
}

/// [`run_elastic`] on a group that outlives the job (`tessera serve --elastic` lends its group to
/// each job): also gives back the group the job ended on — the one it was given, or the last
/// generation's after a loss — unless the group cannot go on (`None`: it stopped, or was lost).
/// No checkpoints: a job that stops below the group's minimum ends with its error.
pub fn run_elastic_lent(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    elastic: Elastic<'_>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> (Result<JobSummary>, Option<Box<dyn Collective>>) {
    let mut group = None;
    let result = elastic_loop(
        preset,
        (out, inline),
        comm,
        (elastic, None),
        on_event,
        Some(&mut group),
    );
    (result, group)
}

/// The generations of an elastic job; `keep` receives the group it ended on when the caller keeps
/// it ([`run_elastic_lent`]; filled unless the group cannot go on).
fn elastic_loop(
    preset: &Preset,
    (out, inline): (&RunDir, &InlineArrays),
    mut comm: Box<dyn Collective>,
    (elastic, checkpoints): (Elastic<'_>, Option<Checkpoints>),
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
    mut keep: Option<&mut Option<Box<dyn Collective>>>,
) -> Result<JobSummary> {
    let Elastic { member, join } = elastic;
    let prepared = preset.validate().and_then(|()| {
        let mut carried = Carried::new(out, comm.rank(), true)?;
        carried.die_at = launched_die_hook(member.slot)?;
        if let Some(plan) = checkpoints {
            start_checkpoints(plan, preset, out, &mut carried)?;
        }
        Ok(carried)
    });
    let mut carried = match prepared {
        Ok(carried) => carried,
        Err(e) => {
            // Nothing ran on the group: it is whole.
            if let Some(keep) = keep {
                *keep = Some(comm);
            }
            return Err(e);
        }
    };
    carried.keep_group = keep.is_some();
    loop {
        let (world_size, first) = (comm.world_size(), carried.history.len());
        let failure = match run_generation(preset, out, comm, inline, on_event, &mut carried) {
            Err(e) if is_loss(&e) => e,
            done => {
                if let Some(keep) = keep.as_deref_mut() {
                    *keep = carried.group.take();
                }
                return done;
            }
        };
        if carried.generations.len() == carried.recoveries.list().len() {
            // It failed before its first iteration began (in its setup or the profiler's start).
            carried.close_generation(world_size, first, 0.0, 0.0, Vec::new());
        }
        let failed_at = Instant::now();
        let completed = carried.history.len();
        tracing::warn!(
            "generation {} failed after iteration {completed}: {failure}; checking in with the \
             launcher",
            member.generation
        );
        let plan = match member.rejoin(completed, &failure) {
            Ok(plan) => plan,
            Err(stop) => {
                checkpoint_at_stop(preset, &carried);
                return Err(stop);
            }
        };
        carried.die_at = None;
        rewind(&mut carried, preset, &plan)?;
        let info = plan.rank_info(member.slot)?;
        let assignment = assignment(preset, &carried, plan.members.len())?;
        carried.recoveries.record(
            &plan,
            (failed_at, &failure),
            carried.history.len(),
            assignment,
            (WorkUnit::Iteration, info.rank),
        );
        comm = join(&info)?;
    }
}

/// When the group cannot go on: this survivor writes its last completed iterate as the checkpoint,
/// unless the one in place is as recent (every survivor may; each holds a valid state, and the
/// file is replaced atomically).
fn checkpoint_at_stop(preset: &Preset, carried: &Carried) {
    let Some(writer) = &carried.checkpoints else {
        return;
    };
    let step = carried.setup.as_ref().and_then(|s| s.pnp_step);
    let latest = carried.iterates.last().filter(|_| resumable(preset));
    let on_disk = writer.on_disk();
    let mut held = on_disk;
    if let Some((k, x)) = latest.filter(|(k, _)| *k > on_disk) {
        let state = ImagingState::after(&carried.history[..*k], Some(x), step);
        match writer.write(*k, state) {
            Ok(()) => held = *k,
            Err(e) => tracing::warn!("could not write the checkpoint after iteration {k}: {e}"),
        }
    }
    tracing::warn!(
        "the group stops: its checkpoint holds iteration {held}; this rank had completed {}, so \
         {} iteration(s) will be done again on resume: {}",
        carried.history.len(),
        carried.history.len().saturating_sub(held),
        writer.path().display()
    );
}

/// Goes back to the iteration the plan resumes after. PnP resumes from that iterate; CG (whose
/// Krylov state is not carried) and FBP start over. The setup is kept only when every survivor
/// completed an iteration, which proves every survivor finished it.
fn rewind(carried: &mut Carried, preset: &Preset, plan: &Plan) -> Result<()> {
    let k = plan.resume_from;
    if k == 0 {
        carried.setup = None;
    }
    let resumable = matches!(preset.algorithm, AlgorithmConfig::Pnp(_));
    let k = if resumable { k } else { 0 };
    carried.resume = match k {
        0 => None,
        k => {
            let Some((_, x)) = carried.iterates.iter().find(|(i, _)| *i == k) else {
                return Err(Error::Internal(format!(
                    "resuming after iteration {k}, but this rank holds iterations {:?}",
                    carried.iterates.iter().map(|(i, _)| i).collect::<Vec<_>>()
                )));
            };
            Some((k, x.clone()))
        }
    };
    carried.history.truncate(k);
    carried.iterates.retain(|(i, _)| *i <= k);
    Ok(())
}

/// The assignment of operators and tiles the next generation makes on `world` ranks.
fn assignment(preset: &Preset, carried: &Carried, world: usize) -> Result<Assignment> {
    let operators = preset.operators()?.len();
    let plan = match (&preset.tiling, &carried.setup) {
        (Some(t), Some(setup)) => match t.decomposition()? {
            Decomposition::Tiles(strategy) => Some(strategy.plan(&setup.x_shape[2..])?),
            // Blocks follow the ranks: the spatial decomposition has no tiles to re-plan.
            Decomposition::Spatial => None,
        },
        _ => None,
    };
    Ok(Assignment::over(
        world,
        operators,
        plan.as_ref()
            .map(|p| (p, preset.distributed.tile_assignment)),
    ))
}

/// `inner`, dying inside its call in the iteration [`DieAt`] names (the test hook).
pub(super) fn dying(
    inner: Box<dyn Denoiser>,
    die: DieAt,
    iteration: Arc<AtomicUsize>,
) -> Box<dyn Denoiser> {
    Box::new(Dying {
        inner,
        die,
        iteration,
    })
}

struct Dying {
    inner: Box<dyn Denoiser>,
    die: DieAt,
    iteration: Arc<AtomicUsize>,
}

impl Denoiser for Dying {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        self.die
            .check(self.iteration.load(Ordering::Relaxed), DiePoint::Denoiser);
        self.inner.denoise(x, sigma)
    }

    fn as_block_denoiser(&self) -> Option<&dyn crate::nn::BlockDenoiser> {
        self.inner.as_block_denoiser()
    }
}
