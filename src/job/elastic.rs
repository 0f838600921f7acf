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
use crate::io::checkpoint::{Checkpoint, RunKind, Writer, decode_handover, encode_handover};
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
    let Elastic {
        member,
        join,
        joined,
        prelude,
    } = elastic;
    let prepared = preset.validate().and_then(|()| {
        let mut carried = Carried::new(out, comm.rank(), true)?;
        carried.die_at = launched_die_hook(member.slot)?;
        if keep.is_none() {
            // A run of its own takes joining ranks (`tessera join`); a served job does not.
            carried.grow = Some((member.grow_probe()?, member.generation + 1));
        }
        if let Some(mut plan) = checkpoints {
            // A replacement takes the state its new rank 0 hands over, not the file's.
            plan.resume &= joined.is_none();
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
    // The plan of a generation that replacements join: its state is handed over first.
    let mut handing_over = joined;
    loop {
        let (world_size, first) = (comm.world_size(), carried.history.len());
        if let Some((_, next)) = carried.grow.as_mut() {
            *next = member.generation + 1;
        }
        let handed = match handing_over.take() {
            Some(plan) => plan
                .send_prelude(&*comm, prelude)
                .and_then(|()| hand_over(&*comm, preset, out, &plan, &mut carried)),
            None => Ok(()),
        };
        let generation = match handed {
            Ok(()) => run_generation(preset, out, comm, inline, on_event, &mut carried),
            Err(e) => Err(e),
        };
        let growing = std::mem::take(&mut carried.leaving_to_grow);
        let failure = match generation {
            Err(e) if growing || is_loss(&e) => e,
            done => {
                if let Some(keep) = keep.as_deref_mut() {
                    *keep = carried.group.take();
                }
                return done;
            }
        };
        let this_generation = carried.recoveries.generation();
        if carried.generations.last().map(|g| g.generation) != Some(this_generation) {
            // It failed before its first iteration began (in its setup or the profiler's start);
            // a replacement's first generation is the last of the recoveries it took over.
            carried.close_generation(world_size, first, 0.0, 0.0, Vec::new());
        }
        let failed_at = Instant::now();
        let completed = carried.history.len();
        let plan = match member.leave(growing, completed, &failure, WorkUnit::Iteration) {
            Ok(plan) => plan,
            Err(stop) => {
                checkpoint_at_stop(preset, &carried);
                return Err(stop);
            }
        };
        // A survivor keeps its own hook: the test list may name it for a later loss.
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
        if let Some(recovery) = carried.recoveries.list().last() {
            // Only a receiver's own state follows: the group goes on whatever it answers.
            let _ = on_event(JobEvent::Regrouped { recovery });
        }
        comm = join(&info)?;
        if !plan.joined.is_empty() {
            handing_over = Some(plan);
        }
    }
}

/// The start of a generation that replacements joined (`plan.joined`, after the survivors): its
/// rank 0 (a survivor) sends each of them the replicated state of the iteration the generation
/// resumes after, encoded as a checkpoint encodes it; a replacement decodes it as a peer's bytes.
/// Then every member prepares the run again as generation 0 does (the image, the measurements and
/// the ground truth, with the collectives that needs) — the replacements hold none of it — except
/// PnP's step, which is the one handed over: the same bits as the survivors'.
fn hand_over(
    comm: &dyn Collective,
    preset: &Preset,
    out: &RunDir,
    plan: &Plan,
    carried: &mut Carried,
) -> Result<()> {
    let rank = comm.rank();
    let joiners = plan.joiner_ranks();
    if joiners.contains(&rank) {
        let bytes = comm.recv(0)?;
        let state = receive_state(0, &bytes, preset, plan.resume_from)?;
        carried.history = state.history;
        (carried.resume, carried.iterates) = match state.iterate {
            Some((shape, values)) if plan.resume_from > 0 => {
                let x = Tensor::from_vec(&shape, values).map_err(|e| {
                    Error::bad_peer_data(0, format!("the iterate it handed over: {e}"))
                })?;
                (
                    Some((plan.resume_from, x.clone())),
                    vec![(plan.resume_from, x)],
                )
            }
            _ => (None, Vec::new()),
        };
        carried.resumed_step = state.pnp_step;
        carried.recoveries.take_over(comm, 0, plan)?;
        carried.started = true;
        tracing::info!(
            "joined generation {} as rank {rank} (a replacement): resuming after iteration {} \
             with the state rank 0 handed over",
            plan.generation,
            plan.resume_from
        );
    } else {
        let step = carried.setup.as_ref().and_then(|s| s.pnp_step);
        if rank == 0 {
            let k = carried.history.len();
            let x = carried.resume.as_ref().map(|(_, x)| x);
            let state = ImagingState::after(&carried.history, x, step);
            let bytes = encode_handover(RunKind::Imaging, preset.to_toml()?, out, k, state)?;
            for &to in &joiners {
                comm.send(to, &bytes)?;
            }
            carried.recoveries.hand_over(comm, &joiners)?;
            tracing::info!(
                "generation {}: handed the state after iteration {k} ({} bytes) to the \
                 replacement(s) {:?}",
                plan.generation,
                bytes.len(),
                plan.joined
            );
        }
        carried.resumed_step = step.or(carried.resumed_step);
    }
    carried.setup = None;
    Ok(())
}

/// Decodes the state rank `from` handed over for a generation that resumes after `resume_from`
/// (a peer's bytes: anything else is [`Error::BadPeerData`] naming it).
fn receive_state(
    from: usize,
    bytes: &[u8],
    preset: &Preset,
    resume_from: usize,
) -> Result<ImagingState> {
    let found: Checkpoint<ImagingState> =
        decode_handover(from, bytes, RunKind::Imaging, &preset.to_toml()?)?;
    let (k, state) = (found.head.completed, found.state);
    let expected = if resumable(preset) { resume_from } else { 0 };
    if k != expected || state.history.len() != k {
        return Err(Error::bad_peer_data(
            from,
            format!(
                "the state it handed over is after iteration {k} with {} reports; the \
                 generation resumes after iteration {expected}",
                state.history.len()
            ),
        ));
    }
    if let Some((shape, values)) = &state.iterate
        && shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(values.len())
    {
        return Err(Error::bad_peer_data(
            from,
            format!(
                "the iterate it handed over has shape {shape:?} and {} values",
                values.len()
            ),
        ));
    }
    Ok(state)
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

/// The launcher's check of a group it is about to re-form ([`crate::dist::elastic::Admit`]): the
/// survivors grow their shares to the new rank count while they hold the old ones, and joiners
/// start from nothing; what that adds, by the job's memory estimate, must fit in what this
/// machine has left (`TESSERA_TEST_REGROUP_AVAILABLE`, bytes, stands in for it in tests). An
/// estimate that cannot be made admits the group (it was made when the run started).
pub fn regroup_admission(preset: Preset) -> crate::dist::elastic::Admit {
    Arc::new(move |g| {
        let available = match std::env::var(REGROUP_AVAILABLE_ENV) {
            Ok(v) => v.trim().parse::<u64>().ok(),
            Err(_) => crate::memory::available_bytes(),
        };
        regroup_fits(&preset, g, available)
    })
}

/// [`regroup_admission`]'s check against `available` bytes (`None`: unknown, admitted).
fn regroup_fits(
    preset: &Preset,
    g: crate::dist::elastic::Regroup,
    available: Option<u64>,
) -> std::result::Result<(), String> {
    let Some(available) = available else {
        return Ok(());
    };
    let world = g.survivors + g.joiners;
    let per_rank = |sized: &super::JobSizes, n: usize| {
        sized.estimate(preset, n, n).map(|e| e.per_rank_bytes())
    };
    let sizes = super::JobSizes::of(preset, &[])
        .and_then(|s| Ok((per_rank(&s, g.previous)?, per_rank(&s, world)?)));
    let (before, after) = match sizes {
        Ok(sizes) => sizes,
        Err(e) => {
            tracing::warn!("no memory estimate for the re-formed group ({e}): it goes on");
            return Ok(());
        }
    };
    let needed = (g.survivors as u64)
        .saturating_mul(after.saturating_sub(before))
        .saturating_add((g.joiners as u64).saturating_mul(after));
    if needed <= available {
        return Ok(());
    }
    let human = crate::error::human_bytes;
    Err(format!(
        "re-sharded over {world} rank(s), each needs ≈ {} (≈ {} on {} ranks): {} more in all, \
         and this machine has {} left",
        human(after),
        human(before),
        g.previous,
        human(needed),
        human(available)
    ))
}

/// Test hook of [`regroup_admission`]: the bytes it sees as available.
pub const REGROUP_AVAILABLE_ENV: &str = "TESSERA_TEST_REGROUP_AVAILABLE";

#[cfg(test)]
mod tests {
    use super::*;

    fn pnp_preset() -> Preset {
        let preset = Preset::from_toml(crate::preset::BUNDLED[0].1, "quick", &[]).unwrap();
        assert!(resumable(&preset), "quick is a PnP preset");
        preset
    }

    fn state_bytes(preset: &Preset, k: usize, state: &ImagingState) -> Vec<u8> {
        let out = RunDir::Exact {
            path: "o".into(),
            replace: false,
        };
        encode_handover(RunKind::Imaging, preset.to_toml().unwrap(), &out, k, state).unwrap()
    }

    #[test]
    fn a_replacement_receives_the_state_of_the_resume_iteration_or_names_the_sender() {
        let preset = pnp_preset();
        let report = IterationReport {
            iteration: 1,
            iterations: 2,
            psnr_db: Some(20.0),
            ssim: None,
            objective: None,
            relative_change: 0.1,
            times: Default::default(),
        };
        let good = ImagingState {
            history: vec![report.clone(), report.clone()],
            iterate: Some((vec![1, 1, 2, 2], vec![0.5; 4])),
            pnp_step: Some(0.25),
        };
        let got = receive_state(0, &state_bytes(&preset, 2, &good), &preset, 2).unwrap();
        assert_eq!(got, good);
        let bad = |bytes: &[u8], resume_from| match receive_state(0, bytes, &preset, resume_from) {
            Err(Error::BadPeerData { rank: 0, what }) => what,
            other => panic!("not bad data from rank 0: {other:?}"),
        };
        // Another iteration than the generation resumes after.
        let what = bad(&state_bytes(&preset, 2, &good), 3);
        assert!(what.contains("resumes after iteration 3"), "{what}");
        // An iterate whose values do not fill its shape, even one whose size overflows.
        for shape in [vec![1, 1, 2, 3], vec![usize::MAX, 2]] {
            let mut wrong = good.clone();
            wrong.iterate = Some((shape, vec![0.5; 4]));
            let what = bad(&state_bytes(&preset, 2, &wrong), 2);
            assert!(what.contains("iterate"), "{what}");
        }
        // Truncated, corrupted and random bytes.
        let bytes = state_bytes(&preset, 2, &good);
        for n in [0, 5, 28, bytes.len() - 3] {
            bad(&bytes[..n], 2);
        }
        let mut flipped = bytes.clone();
        flipped[40] ^= 0x55;
        bad(&flipped, 2);
        bad(&[7u8; 300], 2);
    }

    #[test]
    fn a_regrouped_job_fits_when_the_survivors_extra_shares_fit_in_what_is_left() {
        use crate::dist::elastic::Regroup;
        // Eight blurs and tiles over the ranks: a survivor's share grows when the group shrinks.
        let preset = Preset::load("multiblur", &[]).unwrap().preset;
        let lost_one = Regroup {
            previous: 3,
            survivors: 2,
            joiners: 0,
        };
        let replaced = Regroup {
            joiners: 1,
            ..lost_one
        };
        // Unknown free memory admits; plenty admits.
        assert_eq!(regroup_fits(&preset, lost_one, None), Ok(()));
        assert_eq!(regroup_fits(&preset, replaced, Some(u64::MAX)), Ok(()));
        // A replacement starts from nothing: it needs a whole share, which 1 KiB does not hold;
        // the refusal names the rank counts and both sizes.
        let why = regroup_fits(&preset, replaced, Some(1024)).unwrap_err();
        assert!(
            why.contains("re-sharded over 3 rank(s)")
                && why.contains("on 3 ranks")
                && why.contains("1.0 KiB"),
            "{why}"
        );
        // The survivors' extra is what their shares grow by: exactly that much is enough, a byte
        // less is not.
        let sizes = super::super::JobSizes::of(&preset, &[]).unwrap();
        let per_rank = |n| sizes.estimate(&preset, n, n).unwrap().per_rank_bytes();
        let extra = 2 * per_rank(2).saturating_sub(per_rank(3));
        assert!(extra > 0, "a rank's share grows when the group shrinks");
        assert_eq!(regroup_fits(&preset, lost_one, Some(extra)), Ok(()));
        assert!(regroup_fits(&preset, lost_one, Some(extra - 1)).is_err());
    }
}
