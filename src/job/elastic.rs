//! An elastic imaging run on one rank: run a generation of the group; when a peer is lost, check in
//! with the launcher ([`crate::dist::elastic::Member`]), rewind to the iteration the survivors
//! agree on, join the next generation and go on, until the run completes (`docs/ELASTIC.md`).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::denoise::Denoiser;
use crate::dist::Collective;
use crate::dist::elastic::{Assignment, Plan, is_loss};
pub(super) use crate::dist::elastic::{DieAt, DiePoint};
pub use crate::dist::elastic::{Elastic, Recovery};
use crate::dist::launch::launched_die_hook;
use crate::error::{Error, Result};
use crate::io::RunDir;
use crate::optim::AlgorithmConfig;
use crate::preset::Preset;
use crate::tensor::Tensor;
use crate::tiling::Decomposition;

use super::{Carried, InlineArrays, JobEvent, JobSummary, run_generation};

/// [`super::run_in_group_with`] for a rank of an elastic group: survives lost peers while the
/// launcher lets the group go on.
pub fn run_elastic(
    preset: &Preset,
    out: &RunDir,
    mut comm: Box<dyn Collective>,
    inline: &InlineArrays,
    elastic: Elastic<'_>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    preset.validate()?;
    let Elastic { mut member, join } = elastic;
    let mut carried = Carried::new(out, comm.rank(), true)?;
    carried.die_at = launched_die_hook(member.slot)?;
    loop {
        let (world_size, first) = (comm.world_size(), carried.history.len());
        let failure = match run_generation(preset, out, comm, inline, on_event, &mut carried) {
            Err(e) if is_loss(&e) => e,
            done => return done,
        };
        if carried.generations.len() == carried.recoveries.len() {
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
        let plan = member.rejoin(completed, &failure)?;
        carried.die_at = None;
        rewind(&mut carried, preset, &plan)?;
        let info = plan.rank_info(member.slot)?;
        let assignment = assignment(preset, &carried, plan.members.len())?;
        tracing::warn!(
            "generation {}: lost rank(s) {:?} (slots {:?}); {} rank(s) resume after iteration {}; \
             this is rank {} of {}; operators by rank {:?}, tiles by rank {:?}",
            plan.generation,
            plan.lost_ranks,
            plan.lost_slots,
            plan.members.len(),
            plan.resume_from,
            info.rank,
            info.world_size,
            assignment.operators,
            assignment.tiles
        );
        carried.recoveries.push(Recovery {
            generation: plan.generation,
            failed_at_secs: failed_at.duration_since(carried.t_start).as_secs_f64(),
            failure: failure.to_string(),
            lost_ranks: plan.lost_ranks.clone(),
            lost_slots: plan.lost_slots.clone(),
            resumed_from: carried.history.len(),
            members: plan.members.clone(),
            assignment,
            recovery_secs: None,
        });
        carried.failed_at = Some(failed_at);
        comm = join(&info)?;
    }
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
