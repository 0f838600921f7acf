//! The reference data-parallel inversion loop on a process group: rank 0 makes (or loads) the observed
//! data once and broadcasts it; each epoch rank 0 draws the shot batch and broadcasts it, every rank
//! models its `tensor_split` part with the loss normalised by the batch size, the velocity gradients
//! are summed (in batch order: the same bits on any number of ranks, or by the reference loop's
//! float32 all-reduce), and every rank applies the same Adam step. A hash of the model is exchanged every
//! epoch; ranks that ever disagree stop the run with an error naming them.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::batch::{draw, tensor_split};
use super::config::{FwiPreset, ModelSource, StartModel};
use super::load;
use crate::dist::elastic::{
    Assignment, DieAt, DiePoint, Elastic, GrowProbe, Plan, Recoveries, Recovery, WorkUnit, is_loss,
};
use crate::dist::launch::launched_die_hook;
use crate::dist::physics::SumOrder;
use crate::dist::timed::TimedCollective;
use crate::dist::{Collective, ReduceOp, SingleProcess, wire};
use crate::error::{Error, Result};
use crate::float::Float;
use crate::io::checkpoint::{
    Checkpoint, Checkpoints, Resumed, RunKind, Writer, decode_handover, encode_handover,
};
use crate::io::{self, RunDir, Staging};
use crate::optim::adam::TorchAdam;
use crate::physics::wave::config::acquisition_from_cells;
use crate::physics::wave::{
    Acquisition, Gather, GradientOptions, L2Misfit, Precision, Shot, Solver, SolverSettings,
    VelocityModel,
};
use crate::samples::marmousi;

/// What a running inversion reports (every rank sees the same values).
#[derive(Debug)]
pub enum FwiEvent<'a> {
    /// The problem is set up; the observed data exist on every rank.
    Started {
        name: &'a str,
        nz: usize,
        nx: usize,
        shots: usize,
        epochs: usize,
        world_size: usize,
        step_ratio: usize,
        /// `[dz, dx]`, metres.
        spacing_m: [f64; 2],
        acquisition: &'a Acquisition,
        true_model: Option<&'a [f32]>,
        initial_model: &'a [f32],
    },
    /// One epoch finished: the updated model, the (summed, post-processed) gradient and, on figure
    /// epochs, the source and receiver illumination of the batch.
    Epoch {
        report: &'a EpochReport,
        model: &'a [f32],
        gradient: &'a [f32],
        illumination: Option<(&'a [f32], &'a [f32])>,
    },
}

/// One rank's part of an epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankEpoch {
    pub rank: usize,
    /// Survey indices of the shots this rank modelled.
    pub shots: Vec<usize>,
    /// Wall time of the forward and adjoint passes, split by the shots' own phase timings.
    pub forward_secs: f64,
    pub adjoint_secs: f64,
    pub communication_secs: f64,
}

/// Progress of one epoch (also a `metrics.json` entry and a protocol event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochReport {
    /// 1-based.
    pub epoch: usize,
    pub epochs: usize,
    /// `Σ ½‖F(d − d_obs)‖² / batch` over the batch.
    pub loss: f64,
    /// `‖v − v_true‖ / ‖v_true‖` after the step (with a true model).
    pub model_error: Option<f64>,
    /// Low-pass cut-off of the data this epoch (frequency continuation).
    pub cutoff_hz: Option<f64>,
    /// The batch, in draw order.
    pub batch: Vec<usize>,
    pub ranks: Vec<RankEpoch>,
    pub secs: f64,
}

/// A finished inversion; also written as `metrics.json` (and sent, as JSON, to attached clients).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FwiSummary {
    pub name: String,
    pub model_shape: [usize; 2],
    pub shots: usize,
    pub epochs: usize,
    pub stopped_early: bool,
    pub initial_model_error: Option<f64>,
    pub final_model_error: Option<f64>,
    pub step_ratio: usize,
    pub internal_dt_s: f64,
    pub max_vel: f64,
    pub precision: Precision,
    pub gradient_strategy: crate::physics::wave::GradientStrategy,
    /// Peak memory of one shot's gradient (bytes).
    pub peak_bytes_per_shot: usize,
    pub world_size: usize,
    /// Compute threads of each rank's pool (rank 0's; `tessera run` sizes every rank alike).
    pub threads_per_rank: usize,
    pub backend: String,
    pub setup_secs: f64,
    pub solve_secs: f64,
    pub history: Vec<EpochReport>,
    /// Elastic runs: each recovery from a lost rank (absent when there was none); `solve_secs`
    /// sums the generations' solve times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<Recovery>,
    /// Runs continued from a checkpoint (`tessera run --resume DIR`): which one, and after which
    /// epoch (absent for a run that started from the beginning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
    /// The files of the run, relative to its folder (`metrics.json` last).
    pub outputs: Vec<PathBuf>,
    /// The run's folder once complete (rank 0; not in `metrics.json`, which lives in it).
    #[serde(skip)]
    pub run_dir: Option<PathBuf>,
    /// The preset that ran, as TOML (after overrides).
    pub preset: String,
    /// The final model (row-major `nz × nx`), not serialised.
    #[serde(skip)]
    pub model: Vec<f32>,
}

/// Runs `preset` in this process alone, writing outputs into `out` (a folder path: it must not
/// hold files yet).
pub fn run(
    preset: &FwiPreset,
    base_dir: &Path,
    out: impl Into<RunDir>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    run_in_group(preset, base_dir, out, Box::new(SingleProcess), on_event)
}

/// Runs `preset` on every rank of a group (each rank calls this with its collective).
///
/// Rank 0 stages the run's files in a hidden folder made before anything is computed (an
/// unwritable destination fails at once), writes `metrics.json` last and moves the folder into
/// place when the run is complete; a failed run leaves nothing behind (as [`crate::job`] runs).
pub fn run_in_group(
    preset: &FwiPreset,
    base_dir: &Path,
    out: impl Into<RunDir>,
    comm: Box<dyn Collective>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    run_in_group_from(preset, base_dir, &out.into(), comm, None, on_event)
}

/// [`run_in_group`] that keeps a checkpoint (`tessera run --resume DIR` without `--elastic`
/// continues one, and keeps it up to date).
pub fn run_in_group_from(
    preset: &FwiPreset,
    base_dir: &Path,
    out: &RunDir,
    comm: Box<dyn Collective>,
    checkpoints: Option<Checkpoints>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    preset.validate()?;
    match preset.wave.precision {
        Precision::F32 => {
            let mut carried = Carried::<f32>::new(out, comm.rank(), false)?;
            carried.die_at = launched_die_hook(comm.rank())?;
            carried.start_checkpoints(checkpoints, preset, base_dir, out)?;
            run_generation(preset, base_dir, out, comm, &mut carried, on_event)
        }
        Precision::F64 => {
            let mut carried = Carried::<f64>::new(out, comm.rank(), false)?;
            carried.die_at = launched_die_hook(comm.rank())?;
            carried.start_checkpoints(checkpoints, preset, base_dir, out)?;
            run_generation(preset, base_dir, out, comm, &mut carried, on_event)
        }
    }
}

/// The reason of a config error about `field`, to report it under the preset's own name.
fn without_field(e: &Error, field: &str) -> String {
    match e {
        Error::InvalidConfig { field: f, reason } if f == field => reason.clone(),
        other => other.to_string(),
    }
}

/// Every size in cells that the preset gives fits the `nz × nx` model, checked before the first
/// epoch: rows kept or frozen (all of them would leave nothing to invert), and every epoch's
/// gradient smoothing (a stage's too-wide one would otherwise fail only when its epoch comes).
fn check_cells(preset: &FwiPreset, nz: usize, nx: usize) -> Result<()> {
    let kept = match &preset.model.start {
        StartModel::Smooth { keep_rows, .. } => Some(("model.start.keep_rows", *keep_rows)),
        StartModel::File(_) => None,
    };
    for (field, rows) in kept
        .into_iter()
        .chain([("fwi.freeze_rows", preset.fwi.freeze_rows)])
    {
        if rows >= nz {
            return Err(Error::config(
                field,
                format!("{rows} rows of a model of {nz} rows leave none to invert: give fewer"),
            ));
        }
    }
    let stages = preset.fwi.stages.iter().enumerate();
    let all = std::iter::once((
        "fwi.smooth_gradient_cells".to_string(),
        preset.fwi.smooth_gradient_cells,
    ))
    .chain(stages.filter_map(|(i, s)| {
        s.smooth_gradient_cells
            .map(|v| (format!("fwi.stages[{i}].smooth_gradient_cells"), v))
    }));
    for (field, sigma) in all {
        if sigma > nz.max(nx) as f64 {
            return Err(Error::config(
                field,
                format!(
                    "{sigma} cells is wider than the {nz}×{nx} model: give at most {}",
                    nz.max(nx)
                ),
            ));
        }
    }
    Ok(())
}

/// What rank 0 broadcasts before the first epoch ([`Setup`] on the wire).
#[derive(Serialize, Deserialize)]
struct SetupMsg {
    nz: u64,
    nx: u64,
    truth: Option<Vec<f64>>,
    start: Vec<f64>,
    wavelet: Vec<f64>,
    data: Option<Vec<f64>>,
    /// Per shot, its source and receiver cells.
    shots: Vec<(Cells, Cells)>,
}

/// Grid cells `[z, x]` on the wire.
type Cells = Vec<[u64; 2]>;

/// What rank 0 broadcasts at the start of each epoch.
#[derive(Serialize, Deserialize)]
struct EpochStart {
    stop: bool,
    /// The epoch's shots, by index into the acquisition.
    batch: Vec<u64>,
}

/// One shot's part of the batch sum, sent by the rank that propagated it (`sum_order = "exact"`).
#[derive(Deserialize)]
#[serde(bound = "T: Float")]
struct ShotPart<T> {
    /// The shot's position in the batch.
    position: u64,
    loss: f64,
    gradient: Vec<T>,
    /// The source and receiver illumination, on figure epochs.
    illumination: Option<(Vec<T>, Vec<T>)>,
}

/// [`ShotPart`] as its sender writes it, borrowing the results (the same bytes on the wire).
#[derive(Serialize)]
#[serde(bound = "T: Float")]
struct ShotPartRef<'a, T> {
    position: u64,
    loss: f64,
    gradient: &'a [T],
    illumination: Option<(&'a [T], &'a [T])>,
}

/// A message from rank `from` that does not hold what the inversion sends.
fn malformed(from: usize) -> Error {
    Error::bad_peer_data(from, "a malformed inversion message")
}

/// Rank 0's `result` on every rank: its payload, or its error (so all ranks fail together; rank 0
/// keeps its own error, the others learn what it was).
fn broadcast_result(comm: &dyn Collective, result: Option<Result<Vec<u8>>>) -> Result<Vec<u8>> {
    let mut own_error = None;
    let mut buf = match result {
        Some(Ok(mut b)) => {
            b.insert(0, 0);
            b
        }
        Some(Err(e)) => {
            let mut b = vec![1];
            b.extend_from_slice(e.to_string().as_bytes());
            own_error = Some(e);
            b
        }
        None => Vec::new(),
    };
    comm.broadcast(&mut buf, 0)?;
    if let Some(e) = own_error {
        return Err(e);
    }
    match buf.split_first() {
        Some((0, rest)) => Ok(rest.to_vec()),
        Some((_, msg)) => Err(Error::PeerFailed {
            rank: 0,
            reason: String::from_utf8_lossy(msg).into_owned(),
        }),
        None => Err(malformed(0)),
    }
}

/// Everything rank 0 reads or generates and broadcasts: models, acquisition, wavelet, loaded data.
struct Setup {
    nz: usize,
    nx: usize,
    truth: Option<Vec<f64>>,
    start: Vec<f64>,
    acquisition: Acquisition,
    wavelet: Vec<f64>,
    data: Option<Vec<f64>>,
}

fn load_setup(preset: &FwiPreset, base_dir: &Path) -> Result<Setup> {
    let truth = match &preset.model.truth {
        Some(ModelSource::Marmousi { nz, nx, seed }) => Some((
            *nz,
            *nx,
            marmousi::marmousi_like(*nz, *nx, *seed)
                .into_iter()
                .map(f64::from)
                .collect::<Vec<_>>(),
        )),
        Some(ModelSource::File(f)) => Some(load::read_model(f, base_dir)?),
        None => None,
    };
    let (nz, nx, start) = match (&preset.model.start, &truth) {
        (
            StartModel::Smooth {
                sigma_cells,
                keep_rows,
            },
            Some((nz, nx, t)),
        ) => {
            let s = marmousi::gaussian_smooth(t, *nz, *nx, *sigma_cells).map_err(|e| {
                Error::config("model.start.sigma_cells", without_field(&e, "sigma_cells"))
            })?;
            let s = s
                .iter()
                .enumerate()
                .map(|(i, &x)| if i / nx < *keep_rows { t[i] } else { x })
                .collect();
            (*nz, *nx, s)
        }
        (StartModel::File(f), _) => load::read_model(f, base_dir)?,
        (StartModel::Smooth { .. }, None) => {
            return Err(Error::config("model.start", "smoothing needs a true model"));
        }
    };
    if let Some((tz, tx, _)) = &truth
        && (*tz, *tx) != (nz, nx)
    {
        return Err(Error::config(
            "model.start",
            format!("the starting model is {nz}×{nx}, the true model {tz}×{tx}"),
        ));
    }
    let acquisition = match preset.acquisition.lines(nz, nx) {
        Some(a) => a?,
        None => {
            let crate::physics::wave::AcquisitionConfig::Files { sources, receivers } =
                &preset.acquisition
            else {
                unreachable!("lines() covers the other layout")
            };
            let file = |p: &PathBuf| super::config::ArrayFile {
                path: p.clone(),
                shape: None,
                transpose: false,
            };
            let (ss, s) = load::read_array(&file(sources), base_dir)?;
            let (rs, r) = load::read_array(&file(receivers), base_dir)?;
            let a = acquisition_from_cells((&ss, &s), (&rs, &r))?;
            a.validate(nz, nx)?;
            a
        }
    };
    let nt = preset.wave.nt;
    let wavelet = match preset.wavelet.ricker_samples(nt, preset.wave.dt_s) {
        Some(w) => w,
        None => {
            let crate::physics::wave::WaveletConfig::File { path, .. } = &preset.wavelet else {
                unreachable!("ricker handled")
            };
            let (shape, w) = load::read_array(
                &super::config::ArrayFile {
                    path: path.clone(),
                    shape: Some(vec![nt]),
                    transpose: false,
                },
                base_dir,
            )?;
            if shape.iter().product::<usize>() != nt {
                return Err(Error::config(
                    "wavelet.path",
                    format!("the wavelet has shape {shape:?}, wave.nt is {nt}"),
                ));
            }
            w
        }
    };
    let data = match &preset.data {
        Some(f) => {
            let nr = acquisition.max_receivers();
            if acquisition.shots.iter().any(|s| s.receivers.len() != nr) {
                return Err(Error::config(
                    "data",
                    "loaded data need the same number of receivers in every shot",
                ));
            }
            let (dnt, d) = load::read_data(f, base_dir, acquisition.len(), nr)?;
            if dnt != nt {
                return Err(Error::config(
                    "data",
                    format!("the data have {dnt} samples per trace, wave.nt is {nt}"),
                ));
            }
            Some(d)
        }
        None => None,
    };
    Ok(Setup {
        nz,
        nx,
        truth: truth.map(|t| t.2),
        start,
        acquisition,
        wavelet,
        data,
    })
}

fn encode_setup(s: &Setup) -> Result<Vec<u8>> {
    let cells = |c: &[[usize; 2]]| c.iter().map(|&[z, x]| [z as u64, x as u64]).collect();
    wire::encode(&SetupMsg {
        nz: s.nz as u64,
        nx: s.nx as u64,
        truth: s.truth.clone(),
        start: s.start.clone(),
        wavelet: s.wavelet.clone(),
        data: s.data.clone(),
        shots: s
            .acquisition
            .shots
            .iter()
            .map(|shot| (cells(&shot.sources), cells(&shot.receivers)))
            .collect(),
    })
}

fn decode_setup(bytes: &[u8]) -> Result<Setup> {
    let m: SetupMsg = wire::decode_from(0, "inversion setup", bytes)?;
    let size = |v: u64| usize::try_from(v).map_err(|_| malformed(0));
    let cells = |c: Cells| -> Result<Vec<[usize; 2]>> {
        c.into_iter()
            .map(|[z, x]| Ok([size(z)?, size(x)?]))
            .collect()
    };
    let shots = m
        .shots
        .into_iter()
        .map(|(sources, receivers)| {
            Ok(Shot {
                sources: cells(sources)?,
                receivers: cells(receivers)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Setup {
        nz: size(m.nz)?,
        nx: size(m.nx)?,
        truth: m.truth,
        start: m.start,
        acquisition: Acquisition { shots },
        wavelet: m.wavelet,
        data: m.data,
    })
}

/// FNV-1a of the model's bytes.
fn model_hash<T: Float>(model: &[T]) -> u64 {
    let mut bytes = Vec::with_capacity(model.len() * T::BYTES);
    for v in model {
        v.put_le(&mut bytes);
    }
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn rel_error<T: Float>(v: &[T], truth: &[f64]) -> f64 {
    let num: f64 = v
        .iter()
        .zip(truth)
        .map(|(a, b)| (a.to_f64() - b).powi(2))
        .sum();
    let den: f64 = truth.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

fn to_f32<T: Float>(v: &[T]) -> Vec<f32> {
    v.iter().map(|x| x.to_f64() as f32).collect()
}

/// What one rank reports each epoch (with its model hash).
#[derive(Serialize, Deserialize)]
struct Report {
    timing: RankEpoch,
    hash: u64,
}

/// Internal steps per sample from which a run is more likely a slip in `wave.dt_s` (seconds for
/// milliseconds) than a choice: the propagator would then spend that many steps per recorded sample.
const STEP_RATIO_WARNING: usize = 64;

/// A warning for a sample interval far above the stable time step, or `None`. Why: the run is
/// correct (deepwave subdivides the same way) but a mistyped `dt_s` multiplies the work by the
/// ratio, and the observed data are modelled before the first progress report.
fn step_ratio_warning(dt_s: f64, step_ratio: usize, nt: usize) -> Option<String> {
    (step_ratio >= STEP_RATIO_WARNING).then(|| {
        format!(
            "`wave.dt_s` = {dt_s} s is {step_ratio} times the stable time step: every one of the {nt} \
             samples runs {step_ratio} internal steps ({} per shot); record with a smaller `dt_s` \
             (and a larger `nt`) unless this sampling is what you want",
            step_ratio.saturating_mul(nt)
        )
    })
}

/// The numbers [`crate::memory::fwi`] sizes a run by, for this preset and its loaded `setup`.
fn memory_size<T: Float>(
    preset: &FwiPreset,
    setup: &Setup,
    solver: &Solver<T>,
    world: usize,
) -> crate::memory::FwiSize {
    let acq = &setup.acquisition;
    let most = |f: fn(&Shot) -> usize| acq.shots.iter().map(f).max().unwrap_or(0);
    let (receivers, sources) = (most(|s| s.receivers.len()), most(|s| s.sources.len()));
    let threads = rayon::current_num_threads() as u64;
    let batch = preset.fwi.batch_size.min(acq.len()) as u64;
    let shots_per_rank = batch.div_ceil(world.max(1) as u64);
    let opts = GradientOptions {
        strategy: preset.wave.gradient,
        checkpoint_every: preset.wave.checkpoint_every,
        illumination: true,
    };
    let samples = acq
        .shots
        .iter()
        .map(|s| (s.receivers.len() as u64).saturating_mul(preset.wave.nt as u64))
        .fold(0u64, u64::saturating_add);
    let (pz, px) = solver.padded_shape();
    crate::memory::FwiSize {
        cells: (setup.nz as u64).saturating_mul(setup.nx as u64),
        padded_cells: (pz as u64).saturating_mul(px as u64),
        samples,
        real_bytes: T::BYTES as u64,
        shots_per_rank,
        shots_at_once: shots_per_rank.min(threads),
        batch,
        shot_gradient_bytes: solver
            .gradient_bytes(receivers, sources, &opts)
            .saturating_add(solver.resampling_bytes(receivers, sources)),
        shot_forward_bytes: solver.forward_bytes(receivers, sources),
        modelled_at_once: match setup.data {
            Some(_) => 0,
            None => (acq.len() as u64).min(threads),
        },
    }
}

/// What every rank derives before the first epoch, the same on every rank (rank 0 loads or models
/// it and broadcasts it): the later generations of an elastic group start from it when every
/// survivor holds it.
struct Prepared<T> {
    setup: Setup,
    settings: SolverSettings,
    max_vel: f64,
    step_ratio: usize,
    wavelets: Vec<Vec<T>>,
    observed_flat: Vec<T>,
    observed: Vec<Gather<T>>,
    /// Cells the gradient may update (frozen rows and the source radius are out).
    mask: Vec<bool>,
    /// The velocity bounds the model is clamped to after each step.
    lo: T,
    hi: T,
    start: Vec<T>,
    truth_f32: Option<Vec<f32>>,
    initial_f32: Vec<f32>,
    initial_error: Option<f64>,
    secs: f64,
}

/// Loads (rank 0) and broadcasts the inversion's inputs, checks its memory, models the observed
/// data: every collective before the first epoch.
fn prepare<T: Float>(
    preset: &FwiPreset,
    base_dir: &Path,
    comm: &Arc<dyn Collective>,
) -> Result<Prepared<T>> {
    let t_start = Instant::now();
    let (rank, world) = (comm.rank(), comm.world_size());
    let setup = broadcast_result(
        comm.as_ref(),
        (rank == 0).then(|| load_setup(preset, base_dir).and_then(|s| encode_setup(&s))),
    )?;
    let setup = decode_setup(&setup)?;
    let (nz, nx) = (setup.nz, setup.nx);
    let (dz, dx) = (preset.model.dz_m, preset.model.dx_m);
    check_cells(preset, nz, nx)?;
    let cells = nz * nx;
    let start = VelocityModel::<T>::new(
        nz,
        nx,
        dz,
        dx,
        setup.start.iter().map(|&v| T::from_f64(v)).collect(),
    )?;
    let truth_max = setup
        .truth
        .as_ref()
        .map(|t| t.iter().cloned().fold(0.0, f64::max))
        .unwrap_or(0.0);
    // A fixed discretisation for the whole inversion (deepwave advises pinning max_vel): the model
    // is kept below it.
    let max_vel = preset
        .wave
        .max_vel
        .or(preset.fwi.max_velocity)
        .unwrap_or(1.25 * start.max_velocity().max(truth_max));
    let settings = SolverSettings {
        max_vel: Some(max_vel),
        ..preset.wave.settings(preset.wavelet.freq_hz())
    };
    let acq = &setup.acquisition;
    let n_shots = acq.len();
    let probe = Solver::new(&start, &settings)?;
    let step_ratio = probe.step_ratio();
    // Before the observed data are modelled and any shot's wavefield is kept: rank 0 decides, so
    // every rank fails together with its estimate.
    broadcast_result(
        comm.as_ref(),
        (rank == 0).then(|| {
            let size = memory_size(preset, &setup, &probe, world);
            crate::memory::fwi(&size, crate::memory::ranks_here(world))
                .check()
                .map(|()| Vec::new())
        }),
    )?;
    drop(probe);
    if rank == 0 {
        tracing::info!(
            "{n_shots} shots × {} samples × {step_ratio} internal steps per sample on {nz}×{nx} cells",
            preset.wave.nt
        );
        if let Some(w) = step_ratio_warning(preset.wave.dt_s, step_ratio, preset.wave.nt) {
            tracing::warn!("{w}");
        }
    }
    let wavelets: Vec<Vec<T>> = acq
        .shots
        .iter()
        .map(|s| {
            (0..s.sources.len())
                .flat_map(|_| setup.wavelet.iter().map(|&v| T::from_f64(v)))
                .collect()
        })
        .collect();
    let nt = preset.wave.nt;

    // Observed data: loaded (already broadcast), or modelled once by rank 0 and broadcast.
    let observed_flat: Vec<T> = match &setup.data {
        Some(d) => d.iter().map(|&v| T::from_f64(v)).collect(),
        None => {
            let made = (rank == 0).then(|| -> Result<Vec<u8>> {
                let truth = setup
                    .truth
                    .as_ref()
                    .ok_or_else(|| Error::config("model.truth", "needed to model the data"))?;
                let tm = VelocityModel::<T>::new(
                    nz,
                    nx,
                    dz,
                    dx,
                    truth.iter().map(|&v| T::from_f64(v)).collect(),
                )?;
                let d = Solver::new(&tm, &settings)?.forward(&acq.shots, &wavelets)?;
                wire::encode(&d.into_iter().flat_map(|g| g.data).collect::<Vec<T>>())
            });
            let bytes = broadcast_result(comm.as_ref(), made)?;
            wire::decode_from::<Vec<T>>(0, "modelled data", &bytes)?
        }
    };
    let mut observed = Vec::with_capacity(n_shots);
    let mut at = 0;
    for s in &acq.shots {
        let n = s.receivers.len() * nt;
        let data = observed_flat
            .get(at..at + n)
            .ok_or_else(|| malformed(0))?
            .to_vec();
        observed.push(Gather {
            receivers: s.receivers.len(),
            nt,
            data,
        });
        at += n;
    }

    // Gradient mask: frozen rows and a radius around every source.
    let mut mask = vec![true; cells];
    let r = preset.fwi.source_mask_cells;
    for (i, m) in mask.iter_mut().enumerate() {
        let (z, x) = (i / nx, i % nx);
        if z < preset.fwi.freeze_rows {
            *m = false;
        } else if r > 0.0 {
            *m = !acq.shots.iter().flat_map(|s| &s.sources).any(|c| {
                let (dz, dx) = (z as f64 - c[0] as f64, x as f64 - c[1] as f64);
                dz * dz + dx * dx <= r * r
            });
        }
    }
    let lo = T::from_f64(preset.fwi.min_velocity.unwrap_or(f64::MIN_POSITIVE));
    let hi = T::from_f64(preset.fwi.max_velocity.map_or(max_vel, |m| m.min(max_vel)));

    let truth_f32 = setup
        .truth
        .as_ref()
        .map(|t| t.iter().map(|&v| v as f32).collect::<Vec<_>>());
    let initial_f32 = to_f32(&start.v);
    let initial_error = setup.truth.as_ref().map(|t| rel_error(&start.v, t));
    Ok(Prepared {
        max_vel,
        settings,
        step_ratio,
        wavelets,
        observed_flat,
        observed,
        mask,
        lo,
        hi,
        start: start.v,
        initial_f32,
        initial_error,
        truth_f32,
        setup,
        secs: t_start.elapsed().as_secs_f64(),
    })
}

/// The model and Adam state after an epoch.
#[derive(Clone)]
struct EpochState<T> {
    model: Vec<T>,
    adam: TorchAdam<T>,
}

/// What one figure epoch's panel is drawn from. Elastic runs keep these on every rank, so that a
/// rank that takes over rank 0's role draws the panels its predecessor drew (and checkpoints hold
/// them, for a resumed run to draw them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FigureEpoch {
    epoch: usize,
    model_error: Option<f64>,
    model: Vec<f32>,
    gradient: Vec<f32>,
    illumination: Option<Vec<f32>>,
}

impl FigureEpoch {
    /// The illumination's source and receiver halves (it holds both, one after the other).
    fn illumination_pair(&self) -> Option<(&[f32], &[f32])> {
        self.illumination
            .as_ref()
            .map(|i| i.split_at(self.model.len()))
    }

    /// Draws this epoch's panel into `dir` (rank 0, or the rank that took over its role); returns
    /// the panel's file name.
    fn draw(
        &self,
        dir: &Path,
        layout: &super::figures::Layout,
        truth: Option<&[f32]>,
    ) -> Result<PathBuf> {
        super::figures::epoch_panel(
            dir,
            (self.epoch, self.model_error),
            layout,
            truth,
            &self.model,
            &self.gradient,
            self.illumination_pair(),
        )
    }
}

/// What a rank carries across the generations of its group (one generation unless elastic).
struct Carried<T> {
    staging: Option<Staging>,
    /// Elastic runs: keep the states of the last two epochs and the figure epochs' panel inputs.
    keep_states: bool,
    prepared: Option<Prepared<T>>,
    started: bool,
    /// Rank 0 asks every rank to stop at the next epoch (a client cancelled).
    stop: bool,
    stopped_early: bool,
    /// Reports of the completed epochs, in order.
    history: Vec<EpochReport>,
    /// Elastic runs: the state after the last completed epoch and after the one before it
    /// (survivors differ by at most one epoch: each completes an epoch only after the epoch's
    /// last collective, to which every rank contributed).
    state: Option<EpochState<T>>,
    previous: Option<EpochState<T>>,
    figure_epochs: Vec<FigureEpoch>,
    /// The panels this rank drew (rank 0), by epoch.
    panels: Vec<(usize, PathBuf)>,
    peak_bytes: usize,
    /// Solve time of the generations before this one, and when this one's began.
    solve_secs_before: f64,
    solving_since: Option<Instant>,
    recoveries: Recoveries,
    die_at: Option<DieAt>,
    /// Runs with checkpoints (elastic or resumed); the group's rank 0 writes them.
    checkpoints: Option<Writer>,
    /// The checkpoint resumed from, for `metrics.json`.
    resumed: Option<Resumed>,
    /// A replacement: the rank that handed it the state (named if the state does not fit).
    handed_by: Option<usize>,
    /// An elastic run takes joining ranks (`tessera join`): its look at each epoch boundary and
    /// the generation a joiner would join.
    grow: Option<(GrowProbe, u32)>,
    /// The generation ended after an epoch for joining ranks, not for a loss.
    leaving_to_grow: bool,
}

/// An inversion's replicated state in its checkpoint: the model and Adam after the last completed
/// epoch (as f64, exact for either precision), the epochs' reports and the figure epochs' panel
/// inputs (a resumed run draws those panels again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct InversionState {
    history: Vec<EpochReport>,
    model: Vec<f64>,
    adam_step: u32,
    exp_avg: Vec<f64>,
    exp_avg_sq: Vec<f64>,
    figure_epochs: Vec<FigureEpoch>,
}

impl<T: Float> Carried<T> {
    /// Prepares the checkpoints of a run (elastic or resumed) of `preset` (its relative paths
    /// against `base_dir`): when resuming, loads the state after the checkpoint's last epoch
    /// (every rank reads it), else rank 0 writes the first one.
    fn start_checkpoints(
        &mut self,
        plan: Option<Checkpoints>,
        preset: &FwiPreset,
        base_dir: &Path,
        out: &RunDir,
    ) -> Result<()> {
        let Some(plan) = plan else {
            return Ok(());
        };
        let toml = preset.to_toml()?;
        let writer = Writer::new(plan, RunKind::Inversion, toml, Some(base_dir), out)?;
        // The figure epochs' panel inputs go into every checkpoint.
        self.keep_states = true;
        if writer.plan.resume {
            let found = writer.resumed::<InversionState>(|c| {
                let s = &c.state;
                let cells = s.model.len();
                match (
                    s.history.len() == c.head.completed,
                    s.exp_avg.len() == cells && s.exp_avg_sq.len() == cells,
                ) {
                    (true, true) => Ok(()),
                    (false, _) => Err(format!(
                        "{} reports for {} epochs",
                        s.history.len(),
                        c.head.completed
                    )),
                    (_, false) => Err("Adam's moments and the model differ in size".into()),
                }
            })?;
            let s = found.state;
            self.resumed = Some(writer.resumed_record(s.history.len()));
            self.adopt(preset, s)?;
        } else if self.staging.is_some() {
            writer.write(0, self.checkpoint_state())?;
        }
        self.checkpoints = Some(writer);
        Ok(())
    }

    /// Continues from `s` (a checkpoint's or a hand-over's state, its sizes checked).
    fn adopt(&mut self, preset: &FwiPreset, s: InversionState) -> Result<()> {
        if s.history.is_empty() {
            return Ok(());
        }
        let [b1, b2] = preset.fwi.betas;
        let typed = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect::<Vec<T>>();
        let adam = TorchAdam::from_state(
            preset.fwi.learning_rate,
            (b1, b2),
            preset.fwi.eps,
            (s.adam_step, typed(s.exp_avg), typed(s.exp_avg_sq)),
        )
        .ok_or_else(|| Error::Internal("Adam's moments differ in length".into()))?;
        self.state = Some(EpochState {
            model: typed(s.model),
            adam,
        });
        self.history = s.history;
        self.figure_epochs = s.figure_epochs;
        Ok(())
    }

    /// The start of a generation that replacements joined (`plan.joined`): its rank 0 (a
    /// survivor) sends each of them the state after the epoch the generation resumes after,
    /// encoded as a checkpoint encodes it; a replacement decodes it as a peer's bytes. Then every
    /// member prepares the inversion again as generation 0 does (setup, acquisition, observed
    /// data, with the collectives that needs): the replacements hold none of it.
    fn hand_over(
        &mut self,
        comm: &dyn Collective,
        preset: &FwiPreset,
        out: &RunDir,
        plan: &Plan,
    ) -> Result<()> {
        let rank = comm.rank();
        let joiners = plan.joiner_ranks();
        if joiners.contains(&rank) {
            let bytes = comm.recv(0)?;
            let s = receive_state(0, &bytes, preset, plan.resume_from)?;
            self.adopt(preset, s)?;
            self.recoveries.take_over(comm, 0, plan)?;
            self.handed_by = Some(0);
            self.started = true;
            tracing::info!(
                "joined generation {} as rank {rank} (a replacement): resuming after epoch {} \
                 with the state rank 0 handed over",
                plan.generation,
                plan.resume_from
            );
        } else if rank == 0 {
            let k = self.history.len();
            let state = self.checkpoint_state();
            let bytes = encode_handover(RunKind::Inversion, preset.to_toml()?, out, k, state)?;
            for &to in &joiners {
                comm.send(to, &bytes)?;
            }
            self.recoveries.hand_over(comm, &joiners)?;
            tracing::info!(
                "generation {}: handed the state after epoch {k} ({} bytes) to the \
                 replacement(s) {:?}",
                plan.generation,
                bytes.len(),
                plan.joined
            );
        }
        self.prepared = None;
        Ok(())
    }

    /// The state after the last completed epoch, as a checkpoint holds it.
    fn checkpoint_state(&self) -> InversionState {
        let f64s = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
        let (model, (adam_step, m, v)) = match &self.state {
            Some(s) => (f64s(&s.model), s.adam.state()),
            None => (Vec::new(), (0, &[][..], &[][..])),
        };
        InversionState {
            history: self.history.clone(),
            model,
            adam_step,
            exp_avg: f64s(m),
            exp_avg_sq: f64s(v),
            figure_epochs: self.figure_epochs.clone(),
        }
    }

    /// After a completed epoch (on the group's rank 0): writes the checkpoint when one is due. A
    /// failed write is only logged: the run goes on, with the previous checkpoint.
    fn checkpoint_if_due(&self, epochs: usize) {
        let k = self.history.len();
        let Some(writer) = self.checkpoints.as_ref().filter(|w| w.due(k, epochs)) else {
            return;
        };
        if self.staging.is_some()
            && let Err(e) = writer.write(k, self.checkpoint_state())
        {
            tracing::warn!(
                "could not write the checkpoint after epoch {k} (the last one stays): {e}"
            );
        }
    }

    /// When the group cannot go on: this survivor writes its last completed epoch's state as the
    /// checkpoint, unless the one in place is as recent.
    fn checkpoint_at_stop(&self) {
        let Some(writer) = &self.checkpoints else {
            return;
        };
        let (k, on_disk) = (self.history.len(), writer.on_disk());
        let mut held = on_disk;
        if k > on_disk {
            match writer.write(k, self.checkpoint_state()) {
                Ok(()) => held = k,
                Err(e) => tracing::warn!("could not write the checkpoint after epoch {k}: {e}"),
            }
        }
        tracing::warn!(
            "the group stops: its checkpoint holds epoch {held}; this rank had completed {k}, so \
             {} epoch(s) will be done again on resume: {}",
            k.saturating_sub(held),
            writer.path().display()
        );
    }

    /// Rank 0 stages the run's files before anything is computed (an unwritable destination fails
    /// at once).
    fn new(out: &RunDir, rank: usize, keep_states: bool) -> Result<Carried<T>> {
        Ok(Carried {
            staging: match rank {
                0 => Some(Staging::create(out)?),
                _ => None,
            },
            keep_states,
            prepared: None,
            started: false,
            stop: false,
            stopped_early: false,
            history: Vec::new(),
            state: None,
            previous: None,
            figure_epochs: Vec::new(),
            panels: Vec::new(),
            peak_bytes: 0,
            solve_secs_before: 0.0,
            solving_since: None,
            recoveries: Recoveries::new(Instant::now()),
            die_at: None,
            checkpoints: None,
            resumed: None,
            handed_by: None,
            grow: None,
            leaving_to_grow: false,
        })
    }

    /// Records a completed epoch and the state after it.
    fn completed(&mut self, report: EpochReport, model: &[T], adam: &TorchAdam<T>) {
        self.history.push(report);
        if self.keep_states {
            // The older state kept is dropped: its buffers take the new one.
            let next = match self.previous.take() {
                Some(mut old) if old.model.len() == model.len() => {
                    old.model.copy_from_slice(model);
                    old.adam.clone_from(adam);
                    old
                }
                _ => EpochState {
                    model: model.to_vec(),
                    adam: adam.clone(),
                },
            };
            self.previous = self.state.replace(next);
        }
        self.recoveries.work_completed();
    }

    /// Goes back to the state after epoch `k` (the least that the survivors completed). Before
    /// the first epoch nothing is kept: not every survivor may hold the prepared inputs.
    fn rewind(&mut self, k: usize) -> Result<()> {
        let done = self.history.len();
        if k == 0 {
            self.prepared = None;
            self.state = None;
            self.previous = None;
        } else if k + 1 == done {
            self.state = Some(self.previous.take().ok_or_else(|| {
                Error::Internal(format!("resuming after epoch {k}, but its state is gone"))
            })?);
        } else if k != done {
            return Err(Error::Internal(format!(
                "resuming after epoch {k}, but this rank completed {done}"
            )));
        }
        self.history.truncate(k);
        self.figure_epochs.retain(|f| f.epoch <= k);
        self.panels.retain(|(epoch, _)| *epoch <= k);
        Ok(())
    }
}

/// One generation of the run (the whole run unless an elastic group loses a rank).
fn run_generation<T: Float>(
    preset: &FwiPreset,
    base_dir: &Path,
    out: &RunDir,
    comm: Box<dyn Collective>,
    carried: &mut Carried<T>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    if comm.rank() == 0 && carried.staging.is_none() {
        // The lowest surviving rank takes rank 0's role, staging folder included.
        carried.staging = Some(Staging::create(out)?);
    }
    let timed = Arc::new(TimedCollective::new(comm));
    let prepared = match carried.prepared.take() {
        Some(p) => p,
        None => {
            let comm: Arc<dyn Collective> = timed.clone();
            prepare(preset, base_dir, &comm)?
        }
    };
    let result = run_epochs(preset, &timed, &prepared, carried, on_event);
    carried.prepared = Some(prepared);
    result
}

/// [`run_in_group`] for a rank of an elastic group (`--elastic`): survives lost peers while the
/// launcher lets the group go on, and ends with the bytes of an uninterrupted run. Only
/// `sum_order = "exact"` sums in an order that does not depend on the number of ranks.
pub fn run_elastic(
    preset: &FwiPreset,
    base_dir: &Path,
    out: impl Into<RunDir>,
    comm: Box<dyn Collective>,
    elastic: Elastic<'_>,
    checkpoints: Option<Checkpoints>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    preset.validate()?;
    check_elastic(preset)?;
    let out = out.into();
    let run = (base_dir, &out, comm, elastic, checkpoints);
    match preset.wave.precision {
        Precision::F32 => elastic_typed::<f32>(preset, run, on_event),
        Precision::F64 => elastic_typed::<f64>(preset, run, on_event),
    }
}

/// Refuses an elastic run whose result depends on the number of ranks.
pub fn check_elastic(preset: &FwiPreset) -> Result<()> {
    match preset.fwi.sum_order {
        SumOrder::Exact => Ok(()),
        SumOrder::AllReduce => Err(Error::config(
            "fwi.sum_order",
            "an elastic run needs sum_order = \"exact\": the float32 all-reduce's bits depend on \
             the number of ranks, so the survivors of a loss would not finish with the bytes of an \
             uninterrupted run",
        )),
    }
}

/// What an elastic inversion runs with: the preset's folder, where the outputs go, the first
/// generation's group, how to join the next ones and where its checkpoint is kept.
type ElasticRun<'a, 'b> = (
    &'a Path,
    &'a RunDir,
    Box<dyn Collective>,
    Elastic<'b>,
    Option<Checkpoints>,
);

fn elastic_typed<T: Float>(
    preset: &FwiPreset,
    (base_dir, out, mut comm, elastic, checkpoints): ElasticRun<'_, '_>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    let Elastic {
        member,
        join,
        joined,
        prelude,
    } = elastic;
    let mut carried = Carried::<T>::new(out, comm.rank(), true)?;
    carried.die_at = launched_die_hook(member.slot)?;
    carried.grow = Some((member.grow_probe()?, member.generation + 1));
    // A replacement takes the state its new rank 0 hands over, not the checkpoint file's.
    let checkpoints = checkpoints.map(|mut c| {
        c.resume &= joined.is_none();
        c
    });
    carried.start_checkpoints(checkpoints, preset, base_dir, out)?;
    // The plan of a generation that replacements joined: its state is handed over first.
    let mut handing_over = joined;
    loop {
        if let Some((_, next)) = carried.grow.as_mut() {
            *next = member.generation + 1;
        }
        let generation = match handing_over.take() {
            Some(plan) => plan
                .send_prelude(&*comm, prelude)
                .and_then(|()| carried.hand_over(&*comm, preset, out, &plan)),
            None => Ok(()),
        }
        .and_then(|()| run_generation(preset, base_dir, out, comm, &mut carried, on_event));
        let growing = std::mem::take(&mut carried.leaving_to_grow);
        let failure = match generation {
            Err(e) if growing || is_loss(&e) => e,
            done => return done,
        };
        let failed_at = Instant::now();
        if let Some(t) = carried.solving_since.take() {
            carried.solve_secs_before += t.elapsed().as_secs_f64();
        }
        let completed = carried.history.len();
        let shots = carried
            .prepared
            .as_ref()
            .map_or(preset.fwi.batch_size, |p| p.setup.acquisition.len());
        let plan = match member.leave(growing, completed, &failure, WorkUnit::Epoch) {
            Ok(plan) => plan,
            Err(stop) => {
                carried.checkpoint_at_stop();
                return Err(stop);
            }
        };
        // A survivor keeps its own hook: the test list may name it for a later loss.
        carried.rewind(plan.resume_from)?;
        let info = plan.rank_info(member.slot)?;
        let batch = preset.fwi.batch_size.min(shots);
        let world = plan.members.len();
        let assignment = Assignment {
            operators: Vec::new(),
            tiles: Vec::new(),
            batch_positions: (0..world)
                .map(|r| tensor_split(batch, world, r).collect())
                .collect(),
        };
        carried.recoveries.record(
            &plan,
            (failed_at, &failure),
            carried.history.len(),
            assignment,
            (WorkUnit::Epoch, info.rank),
        );
        comm = join(&info)?;
        if !plan.joined.is_empty() {
            handing_over = Some(plan);
        }
    }
}

/// Decodes the inversion's state rank `from` handed over for a generation that resumes after
/// epoch `resume_from` (a peer's bytes: anything else is [`Error::BadPeerData`] naming it).
fn receive_state(
    from: usize,
    bytes: &[u8],
    preset: &FwiPreset,
    resume_from: usize,
) -> Result<InversionState> {
    let found: Checkpoint<InversionState> =
        decode_handover(from, bytes, RunKind::Inversion, &preset.to_toml()?)?;
    let (k, s) = (found.head.completed, found.state);
    let bad = |what: String| {
        Err(Error::bad_peer_data(
            from,
            format!("the state it handed over {what}"),
        ))
    };
    if k != resume_from || s.history.len() != k {
        return bad(format!(
            "is after epoch {k} with {} reports; the generation resumes after epoch {resume_from}",
            s.history.len()
        ));
    }
    let cells = s.model.len();
    if (k == 0) != (cells == 0) || s.exp_avg.len() != cells || s.exp_avg_sq.len() != cells {
        return bad(format!(
            "after epoch {k} has a model of {cells} cells and Adam moments of {} and {} values",
            s.exp_avg.len(),
            s.exp_avg_sq.len()
        ));
    }
    Ok(s)
}

/// The epochs of one generation from where `carried` left off, then (rank 0) the outputs.
#[allow(clippy::too_many_lines)]
fn run_epochs<T: Float>(
    preset: &FwiPreset,
    timed: &Arc<TimedCollective>,
    prepared: &Prepared<T>,
    carried: &mut Carried<T>,
    on_event: &mut dyn FnMut(FwiEvent<'_>) -> ControlFlow<()>,
) -> Result<FwiSummary> {
    let comm: Arc<dyn Collective> = timed.clone();
    let (rank, world) = (comm.rank(), comm.world_size());
    let Prepared {
        setup,
        settings,
        max_vel,
        step_ratio,
        wavelets,
        observed_flat,
        observed,
        mask,
        lo,
        hi,
        start,
        truth_f32,
        initial_f32,
        initial_error,
        secs: setup_secs,
    } = prepared;
    let (lo, hi, step_ratio, max_vel) = (*lo, *hi, *step_ratio, *max_vel);
    let (nz, nx) = (setup.nz, setup.nx);
    let (dz, dx) = (preset.model.dz_m, preset.model.dx_m);
    let cells = nz * nx;
    let acq = &setup.acquisition;
    let n_shots = acq.len();
    let nt = preset.wave.nt;
    let internal_dt = preset.wave.dt_s / step_ratio as f64;
    let epochs = preset.fwi.epochs;
    if !carried.started {
        carried.started = true;
        carried.stop = on_event(FwiEvent::Started {
            name: &preset.name,
            nz,
            nx,
            shots: n_shots,
            epochs,
            world_size: world,
            step_ratio,
            spacing_m: [dz, dx],
            acquisition: acq,
            true_model: truth_f32.as_deref(),
            initial_model: initial_f32,
        })
        .is_break();
    }
    let t_solve = Instant::now();
    carried.solving_since = Some(t_solve);
    let (mut model, mut adam) = match &carried.state {
        Some(s) if s.model.len() != cells => {
            let what = format!("a model of {} cells on a {nz}×{nx} grid", s.model.len());
            return Err(match carried.handed_by {
                Some(from) => {
                    Error::bad_peer_data(from, format!("the state it handed over is {what}"))
                }
                None => Error::Internal(format!("resuming {what}")),
            });
        }
        Some(s) => (s.model.clone(), s.adam.clone()),
        None => {
            let [b1, b2] = preset.fwi.betas;
            let adam =
                TorchAdam::<T>::new(cells, preset.fwi.learning_rate, (b1, b2), preset.fwi.eps);
            (start.clone(), adam)
        }
    };
    let layout = super::figures::Layout::new(nz, nx, dz, dx, acq);
    let die_at = carried.die_at;
    for epoch in carried.history.len()..epochs {
        if let Some(die) = die_at {
            die.check(epoch + 1, DiePoint::Start);
        }
        let t_epoch = Instant::now();
        let comm_mark = timed.secs();
        // Rank 0 draws the batch (and says whether to stop); everyone receives it.
        let mut buf = Vec::new();
        if rank == 0 {
            buf = wire::encode(&EpochStart {
                stop: carried.stop,
                batch: draw(n_shots, preset.fwi.batch_size, preset.seed, epoch)
                    .into_iter()
                    .map(|i| i as u64)
                    .collect(),
            })?;
        }
        comm.broadcast(&mut buf, 0)?;
        let start: EpochStart = wire::decode_from(0, "epoch start", &buf)?;
        if start.stop {
            carried.stopped_early = true;
            break;
        }
        let batch: Vec<usize> = start
            .batch
            .into_iter()
            .map(|i| usize::try_from(i).ok().filter(|&i| i < n_shots))
            .collect::<Option<_>>()
            .ok_or_else(|| malformed(0))?;
        let mine = tensor_split(batch.len(), world, rank);
        let my_shots: Vec<Shot> = batch[mine.clone()]
            .iter()
            .map(|&i| acq.shots[i].clone())
            .collect();
        let my_wavelets: Vec<Vec<T>> = batch[mine.clone()]
            .iter()
            .map(|&i| wavelets[i].clone())
            .collect();
        let my_observed: Vec<Gather<T>> = batch[mine.clone()]
            .iter()
            .map(|&i| observed[i].clone())
            .collect();
        let cutoff = preset.cutoff_at(epoch);
        let (learning_rate, smooth_cells) = preset.step_at(epoch);
        let figures = epoch + 1 == epochs
            || (preset.output.figures_every > 0 && (epoch + 1) % preset.output.figures_every == 0);
        let current = VelocityModel::new(nz, nx, dz, dx, model.clone())?;
        let solver = Solver::new(&current, settings)?;
        let misfit = L2Misfit {
            observed: &my_observed,
            weight: 1.0 / batch.len() as f64,
            low_pass: cutoff.map(|c| (preset.wave.dt_s, c)),
        };
        let opts = GradientOptions {
            strategy: preset.wave.gradient,
            checkpoint_every: preset.wave.checkpoint_every,
            illumination: figures,
        };
        let t_model = Instant::now();
        let results = if my_shots.is_empty() {
            Vec::new()
        } else {
            solver.gradient(&my_shots, &my_wavelets, &misfit, &opts)?
        };
        let model_secs = t_model.elapsed().as_secs_f64();
        let (f_sum, a_sum): (f64, f64) = results
            .iter()
            .map(|r| (r.forward_secs, r.adjoint_secs))
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
        let forward_secs = if f_sum + a_sum > 0.0 {
            model_secs * f_sum / (f_sum + a_sum)
        } else {
            0.0
        };
        carried.peak_bytes = carried
            .peak_bytes
            .max(results.iter().map(|r| r.peak_bytes).max().unwrap_or(0));
        if let Some(die) = die_at {
            die.check(epoch + 1, DiePoint::Gradients);
        }

        // Sum over the batch: gradient, loss, and on figure epochs the illumination.
        let width = cells * if figures { 3 } else { 1 };
        let mut grad = vec![T::ZERO; width];
        let mut loss = 0.0;
        match preset.fwi.sum_order {
            SumOrder::Exact => {
                let mine_parts: Vec<ShotPartRef<'_, T>> = results
                    .iter()
                    .enumerate()
                    .map(|(k, res)| ShotPartRef {
                        position: (mine.start + k) as u64,
                        loss: res.loss,
                        gradient: &res.gradient,
                        illumination: figures.then(|| {
                            (
                                res.source_illumination.as_deref().unwrap_or(&[]),
                                res.receiver_illumination.as_deref().unwrap_or(&[]),
                            )
                        }),
                    })
                    .collect();
                let gathered = comm.all_gather(&wire::encode(&mine_parts)?)?;
                drop(mine_parts);
                let mut parts: Vec<(u64, f64, Vec<T>)> = Vec::with_capacity(batch.len());
                for (from, bytes) in gathered.iter().enumerate() {
                    let theirs: Vec<ShotPart<T>> =
                        wire::decode_from(from, "shot gradients", bytes)?;
                    for part in theirs {
                        let mut g = part.gradient;
                        if let Some((source, receiver)) = part.illumination {
                            g.extend(source);
                            g.extend(receiver);
                        }
                        if g.len() != width {
                            return Err(malformed(from));
                        }
                        parts.push((part.position, part.loss, g));
                    }
                }
                parts.sort_by_key(|p| p.0);
                for (_, l, g) in &parts {
                    loss += l;
                    for (a, b) in grad.iter_mut().zip(g) {
                        *a += *b;
                    }
                }
            }
            SumOrder::AllReduce => {
                let mut buf = vec![0f32; width + 1];
                for res in &results {
                    buf[width] += res.loss as f32;
                    for (a, b) in buf.iter_mut().zip(&res.gradient) {
                        *a += b.to_f64() as f32;
                    }
                    if figures {
                        let illum = res
                            .source_illumination
                            .iter()
                            .chain(&res.receiver_illumination)
                            .flatten();
                        for (a, b) in buf[cells..width].iter_mut().zip(illum) {
                            *a += b.to_f64() as f32;
                        }
                    }
                }
                comm.all_reduce(&mut buf, ReduceOp::Sum)?;
                loss = buf[width] as f64;
                grad = buf[..width]
                    .iter()
                    .map(|&v| T::from_f64(v as f64))
                    .collect();
            }
        }
        let illumination = figures.then(|| grad.split_off(cells));
        let mut g: Vec<T> = if smooth_cells > 0.0 {
            let f: Vec<f64> = grad.iter().map(|v| v.to_f64()).collect();
            marmousi::gaussian_smooth(&f, nz, nx, smooth_cells)?
                .into_iter()
                .map(T::from_f64)
                .collect()
        } else {
            grad
        };
        for (v, &keep) in g.iter_mut().zip(mask) {
            if !keep {
                *v = T::ZERO;
            }
        }
        adam.lr = learning_rate;
        adam.step(&mut model, &g);
        // Every rank holds the same model, so every rank stops here alike; no non-finite model is
        // ever written or sent on.
        let bad = model.iter().filter(|v| !v.to_f64().is_finite()).count();
        if bad > 0 {
            return Err(Error::NonFinite {
                what: format!(
                    "the model after the step of epoch {} (learning rate {learning_rate:?}: too large?)",
                    epoch + 1
                ),
                count: bad,
            });
        }
        for v in model.iter_mut() {
            if *v < lo {
                *v = lo;
            } else if *v > hi {
                *v = hi;
            }
        }
        // Every rank must now hold the same model: exchange hashes with the timings.
        let mine_report = Report {
            timing: RankEpoch {
                rank,
                shots: batch[mine.clone()].to_vec(),
                forward_secs,
                adjoint_secs: model_secs - forward_secs,
                communication_secs: timed.secs() - comm_mark,
            },
            hash: model_hash(&model),
        };
        let reports: Vec<Report> =
            wire::all_gather_as(comm.as_ref(), "epoch report", &mine_report)?;
        if let Some(bad) = reports.iter().find(|r| r.hash != reports[0].hash) {
            return Err(Error::PeerLost {
                rank: bad.timing.rank,
                how: format!(
                    "holds a different model than rank 0 after epoch {} (hash {:016x} vs {:016x}): the ranks diverged",
                    epoch + 1,
                    bad.hash,
                    reports[0].hash
                ),
            });
        }
        let report = EpochReport {
            epoch: epoch + 1,
            epochs,
            loss,
            model_error: setup.truth.as_ref().map(|t| rel_error(&model, t)),
            cutoff_hz: cutoff,
            batch: batch.clone(),
            ranks: reports.into_iter().map(|r| r.timing).collect(),
            secs: t_epoch.elapsed().as_secs_f64(),
        };
        let shown = FigureEpoch {
            epoch: report.epoch,
            model_error: report.model_error,
            model: to_f32(&model),
            gradient: to_f32(&g),
            illumination: illumination.as_ref().map(|i| to_f32(i)),
        };
        if let Some(staging) = carried.staging.as_ref().filter(|_| figures) {
            let panel = shown.draw(staging.path(), &layout, truth_f32.as_deref())?;
            carried.panels.push((report.epoch, panel));
        }
        carried.stop |= on_event(FwiEvent::Epoch {
            report: &report,
            model: &shown.model,
            gradient: &shown.gradient,
            illumination: shown.illumination_pair(),
        })
        .is_break();
        if carried.keep_states && figures {
            carried.figure_epochs.push(shown);
        }
        carried.completed(report, &model, &adam);
        carried.checkpoint_if_due(epochs);
        if epoch + 1 < epochs
            && !carried.stop
            && let Some((probe, next)) = carried.grow.as_mut()
            && probe.boundary(timed.as_ref(), *next, epoch + 1)?
        {
            carried.leaving_to_grow = true;
            return Err(Error::Cancelled(format!(
                "generation left after epoch {} for joining rank(s)",
                epoch + 1
            )));
        }
    }
    let solve_secs = carried.solve_secs_before + t_solve.elapsed().as_secs_f64();
    let final_f32 = to_f32(&model);
    let history = carried.history.clone();
    let mut summary = FwiSummary {
        name: preset.name.clone(),
        model_shape: [nz, nx],
        shots: n_shots,
        epochs: history.len(),
        stopped_early: carried.stopped_early,
        initial_model_error: *initial_error,
        final_model_error: setup.truth.as_ref().map(|t| rel_error(&model, t)),
        step_ratio,
        internal_dt_s: internal_dt,
        max_vel,
        precision: preset.wave.precision,
        gradient_strategy: preset.wave.gradient,
        peak_bytes_per_shot: carried.peak_bytes,
        world_size: world,
        threads_per_rank: rayon::current_num_threads(),
        backend: comm.backend_name(),
        setup_secs: *setup_secs,
        solve_secs,
        history,
        recoveries: carried.recoveries.list().to_vec(),
        resumed: carried.resumed.clone(),
        outputs: Vec::new(),
        run_dir: None,
        preset: preset.to_toml()?,
        model: final_f32,
    };
    let Some(staging) = carried.staging.take() else {
        return Ok(summary);
    };
    let out_dir = staging.path();
    let grid = |v: &[f32]| crate::tensor::Tensor::from_vec(&[nz, nx], v.to_vec());
    let mut put = |name: &str, t: crate::tensor::Tensor| -> Result<()> {
        io::write_array(&out_dir.join(name), &t)?;
        summary.outputs.push(PathBuf::from(name));
        Ok(())
    };
    if let Some(t) = &truth_f32 {
        put("true_model.npy", grid(t)?)?;
    }
    put("initial_model.npy", grid(initial_f32)?)?;
    put("inverted_model.npy", grid(&summary.model)?)?;
    let nr = acq.max_receivers();
    if setup.data.is_none() && acq.shots.iter().all(|s| s.receivers.len() == nr) {
        put(
            "observed_data.npy",
            crate::tensor::Tensor::from_vec(&[n_shots, nr, nt], to_f32(observed_flat))?,
        )?;
    }
    let history: Vec<_> = summary
        .history
        .iter()
        .map(|r| (r.epoch, r.loss, r.model_error, r.cutoff_hz))
        .collect();
    summary.outputs.extend(super::figures::summary_figures(
        out_dir,
        &history,
        summary.initial_model_error,
        &setup.wavelet,
        preset.wave.dt_s,
        (observed, acq, dx),
    )?);
    // A rank that took over rank 0's role draws the panels its predecessor drew.
    for f in &carried.figure_epochs {
        if !carried.panels.iter().any(|(epoch, _)| *epoch == f.epoch) {
            let panel = f.draw(out_dir, &layout, truth_f32.as_deref())?;
            carried.panels.push((f.epoch, panel));
        }
    }
    carried.panels.sort_by_key(|(epoch, _)| *epoch);
    summary
        .outputs
        .extend(carried.panels.drain(..).map(|(_, panel)| panel));
    summary.outputs.push(PathBuf::from(io::METRICS_FILE));
    io::write_json_atomic(&out_dir.join(io::METRICS_FILE), &summary)?;
    summary.run_dir = Some(staging.commit(&preset.name)?);
    if let Some(writer) = &carried.checkpoints {
        writer.finish();
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physics::wave::cfl_step_ratio;

    /// Every truncation of rank 0's setup, and seeded random bytes in place of the setup and of
    /// a rank's shot gradients, are BadPeerData naming the sender — never a panic.
    #[test]
    fn malformed_inversion_messages_name_the_sender_and_never_panic() {
        use rand::{RngExt, SeedableRng};
        let setup = Setup {
            nz: 3,
            nx: 4,
            truth: Some(vec![1500.0; 12]),
            start: vec![1400.0; 12],
            acquisition: Acquisition {
                shots: vec![Shot {
                    sources: vec![[0, 1]],
                    receivers: vec![[0, 0], [0, 3]],
                }],
            },
            wavelet: vec![0.0, 1.0, -0.5],
            data: None,
        };
        let bytes = encode_setup(&setup).unwrap();
        let back = decode_setup(&bytes).unwrap();
        assert_eq!((back.nz, back.nx, back.start), (3, 4, setup.start.clone()));
        assert_eq!(back.acquisition.shots[0].receivers, vec![[0, 0], [0, 3]]);
        for cut in 0..bytes.len() {
            let e = decode_setup(&bytes[..cut])
                .err()
                .expect("a cut setup is refused");
            assert!(matches!(e, Error::BadPeerData { rank: 0, .. }), "{e}");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(28);
        for _ in 0..2000 {
            let len = rng.random_range(0..96);
            let junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if let Err(e) = decode_setup(&junk) {
                assert!(matches!(e, Error::BadPeerData { rank: 0, .. }), "{e}");
            }
            if let Err(e) = wire::decode_from::<Vec<ShotPart<f32>>>(2, "shot gradients", &junk) {
                assert!(matches!(e, Error::BadPeerData { rank: 2, .. }), "{e}");
            }
        }
    }

    #[test]
    fn a_sample_interval_far_above_the_stable_step_is_named() {
        // The bundled preset's 2 ms at 10 m needs 3 steps per sample: no warning.
        assert_eq!(step_ratio_warning(0.002, 3, 600), None);
        assert_eq!(step_ratio_warning(0.05, STEP_RATIO_WARNING - 1, 600), None);
        // 1 s typed for 1 ms.
        let ratio = cfl_step_ratio(1.0, 5000.0, 10.0, 10.0);
        assert!(ratio >= STEP_RATIO_WARNING, "{ratio}");
        let w = step_ratio_warning(1.0, ratio, 600).expect("a warning");
        assert!(w.contains("`wave.dt_s` = 1 s"), "{w}");
        assert!(w.contains(&format!("{ratio} internal steps")), "{w}");
        assert!(w.contains(&(600 * ratio).to_string()), "{w}");
    }

    /// The inversion's hand-over decoded from hostile bytes: truncated, flipped, of another kind
    /// (an imaging hand-over), preset, epoch or sizes: `BadPeerData` naming rank 0, never a panic.
    #[test]
    fn a_hostile_inversion_hand_over_names_the_sender_and_never_panics() {
        let (preset, _, _) = FwiPreset::load("fwi_marmousi", &[]).unwrap().unwrap();
        let toml = preset.to_toml().unwrap();
        let out = RunDir::Exact {
            path: "o".into(),
            replace: false,
        };
        let report = |epoch: usize| EpochReport {
            epoch,
            epochs: 5,
            loss: 1.0 / epoch as f64,
            model_error: Some(0.1),
            cutoff_hz: None,
            batch: vec![0, 1],
            ranks: Vec::new(),
            secs: 0.5,
        };
        let state = |k: usize, cells: usize, moments: usize| InversionState {
            history: (1..=k).map(report).collect(),
            model: vec![1500.0; cells],
            adam_step: k as u32,
            exp_avg: vec![0.5; moments],
            exp_avg_sq: vec![0.25; moments],
            figure_epochs: Vec::new(),
        };
        let encode =
            |kind, toml: &str, k, s| encode_handover(kind, toml.into(), &out, k, s).unwrap();
        let good = encode(RunKind::Inversion, &toml, 2, state(2, 6, 6));
        let s = receive_state(0, &good, &preset, 2).unwrap();
        assert_eq!(s, state(2, 6, 6));
        let refused = |bytes: &[u8], resume: usize, says: &str| match receive_state(
            0, bytes, &preset, resume,
        ) {
            Err(Error::BadPeerData { rank: 0, what }) => {
                assert!(what.contains(says), "`{says}` not in: {what}")
            }
            other => panic!("expected BadPeerData naming rank 0 ({says}), got {other:?}"),
        };
        refused(&good[..good.len() - 3], 2, "truncated");
        let mut flipped = good.clone();
        let at = flipped.len() - 10;
        flipped[at] ^= 0x40;
        refused(&flipped, 2, "corrupted");
        let imaging = encode_handover(
            RunKind::Imaging,
            toml.clone(),
            &out,
            2,
            (Vec::<u8>::new(), 7u32),
        )
        .unwrap();
        refused(&imaging, 2, "another kind");
        let other = encode(RunKind::Inversion, "name = \"other\"", 2, state(2, 6, 6));
        refused(&other, 2, "another experiment");
        refused(&good, 3, "resumes after epoch 3");
        let reports = encode(RunKind::Inversion, &toml, 2, state(1, 6, 6));
        refused(&reports, 2, "1 reports");
        let moments = encode(RunKind::Inversion, &toml, 2, state(2, 6, 5));
        refused(&moments, 2, "Adam moments of 5");
        let early = encode(RunKind::Inversion, &toml, 0, state(0, 6, 6));
        refused(&early, 0, "model of 6 cells");
        for n in 0..good.len() {
            assert!(receive_state(0, &good[..n], &preset, 2).is_err());
        }
    }

    #[test]
    fn the_bundled_inversion_is_sized_well_within_a_laptop_and_absurd_sizes_are_named() {
        let (preset, _, _) = FwiPreset::load("fwi_marmousi", &[]).unwrap().unwrap();
        let setup = load_setup(&preset, Path::new("")).unwrap();
        let start = VelocityModel::<f32>::new(
            setup.nz,
            setup.nx,
            preset.model.dz_m,
            preset.model.dx_m,
            setup.start.iter().map(|&v| v as f32).collect(),
        )
        .unwrap();
        let settings = SolverSettings {
            max_vel: Some(5000.0),
            ..preset.wave.settings(preset.wavelet.freq_hz())
        };
        let solver = Solver::new(&start, &settings).unwrap();
        let parts = crate::memory::fwi(&memory_size(&preset, &setup, &solver, 2), 2);
        assert!(parts.total_bytes() < 1 << 30, "{parts}");
        assert!(parts.total_bytes() > 8 << 20, "{parts}");
        // A spacing of 1e-300 m: no overflow in the step count, an error naming it.
        let err = refusal("model.dx_m=1e-300");
        assert!(err.contains("internal steps"), "{err}");
        // Named as given, not as 300 digits, and the steps it would take, not a saturated count.
        assert!(
            err.contains("1e-300 m") && err.contains("1.667e301 internal steps") && err.len() < 400,
            "{err}"
        );
        for (set, field, why) in [
            (
                "fwi.smooth_gradient_cells=1e9",
                "fwi.smooth_gradient_cells",
                "at most 240",
            ),
            (
                "model.start.sigma_cells=1e9",
                "model.start.sigma_cells",
                "at most 240",
            ),
            (
                "fwi.freeze_rows=100000",
                "fwi.freeze_rows",
                "none to invert",
            ),
            (
                "model.start.keep_rows=1000000",
                "model.start.keep_rows",
                "none to invert",
            ),
        ] {
            let err = refusal(set);
            assert!(err.contains(field) && err.contains(why), "{err}");
        }
        let err = FwiPreset::load(
            "fwi_marmousi",
            &["fwi.stages=[{ cutoff_hz = 5.0, epochs = 0 }]".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("fwi.stages[0].epochs"), "{err}");
    }

    /// The error of running `fwi_marmousi` with `set`, which the run must refuse.
    fn refusal(set: &str) -> String {
        let preset = FwiPreset::load("fwi_marmousi", &[set.into()])
            .unwrap()
            .unwrap()
            .0;
        run(
            &preset,
            Path::new(""),
            tempfile::tempdir().unwrap().path().join("o").as_path(),
            &mut |_| ControlFlow::Continue(()),
        )
        .unwrap_err()
        .to_string()
    }
}
