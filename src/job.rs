//! Running a preset end to end: load or generate the image, build the physics stack, simulate the
//! measurements (or load measured data), reconstruct, and write the outputs (arrays, images,
//! `metrics.json`).
//!
//! This is the one place where configs become live objects. Progress goes out through a callback of
//! [`JobEvent`]s (the CLI draws a progress bar from them; the GUI backend will stream them), and the
//! callback can stop the run. Outputs are written atomically, so a failed run never leaves a
//! half-written file in place of a previous result.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(test)]
mod device_tests;
mod elastic;

pub use elastic::{
    Checkpoints, Elastic, REGROUP_AVAILABLE_ENV, Recovery, regroup_admission, run_elastic,
    run_elastic_lent,
};
use elastic::{DieAt, DiePoint};

use crate::denoise::Denoiser;
use crate::device::Device;
use crate::device::solve::{
    BuiltOperator, DeviceDenoiser, DeviceSolver, HostOperator, LeastSquares, PnpProblem,
};
use crate::dist::denoise::{DistributedTiledDenoiser, TileClock, TileTime};
use crate::dist::elastic::{GrowProbe, Recoveries};
use crate::dist::patch_map::{PatchMap, TileCost};
use crate::dist::physics::DistributedStack;
use crate::dist::profile::{IterationProfile, Profiler};
use crate::dist::spatial::HaloTraffic;
use crate::dist::timed::{PhasedDenoiser, TimedCollective};
use crate::dist::{Collective, SingleProcess};
use crate::error::{Error, Result};
use crate::io::{self, METRICS_FILE, RunDir, Staging};
use crate::metrics;
use crate::optim::pnp::{PnpConfig, PnpStart};
use crate::optim::space::HostView;
use crate::optim::{self, AlgorithmConfig, CgConfig, IterationReport, Monitor, Reconstruction};
use crate::physics::{PhysicsConfig, StackedLinearPhysics};
use crate::preset::{ImageSource, MeasurementSource, Preset};
use crate::samples;
use crate::tensor::Tensor;
use crate::tiling::{Decomposition, TiledDenoiser};

/// Default sample size when a preset gives none.
const DEFAULT_SAMPLE_SIZE: usize = 256;

/// What a running job reports.
#[derive(Debug)]
pub enum JobEvent<'a> {
    /// The problem is set up and the algorithm starts.
    Started {
        name: &'a str,
        image_shape: &'a [usize],
        operators: usize,
        iterations: usize,
        world_size: usize,
        /// Name of each operator (operator `i` is owned by rank `i % world_size`).
        operator_names: &'a [String],
        /// The ground truth (`None` for measured data of an unknown image) and the measurements,
        /// simulated or loaded (every rank holds them).
        truth: Option<&'a Tensor>,
        measurements: &'a [Tensor],
    },
    /// One iteration finished; `x` is the current reconstruction, in host or device memory: a
    /// receiver that needs its values (a preview that is due) asks `x.to_host()`, so a device run
    /// copies the iterate to the host only then. `report.times.communication_secs` is this rank's
    /// time inside collectives during the iteration.
    Iteration {
        report: &'a IterationReport,
        x: &'a dyn HostView,
        /// The ranks that computed the iteration, for a receiver's own exchange after it.
        ranks: IterationRanks<'a>,
    },
    /// An elastic run formed its group again after a loss (every member sees it, before the new
    /// generation starts): who was lost, who is left or joined, where the run resumes, and the
    /// new assignment. The next `Iteration`s number the ranks of the new group.
    Regrouped {
        recovery: &'a crate::dist::elastic::Recovery,
    },
}

/// The group of ranks that computed an iteration (an elastic run's current generation), lent to
/// the receiver of [`JobEvent::Iteration`] for an exchange of its own (serve's stop flag and
/// per-rank times). The exchange is part of the run: a lost peer fails it as it fails the
/// iteration's collectives, so the run ends with that error after this iteration, and an elastic
/// run recovers from it like from any other (an exchange on a group of the receiver's own would
/// meet the loss where the run cannot).
pub struct IterationRanks<'a> {
    comm: &'a dyn Collective,
    failed: &'a mut Option<Error>,
}

impl IterationRanks<'_> {
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// Every rank's `value` in rank order (`what` names it in errors). A failure ends the run
    /// with its error once the receiver returns, and comes back as `Break`.
    pub fn all_gather<T: Serialize + serde::de::DeserializeOwned>(
        &mut self,
        what: &str,
        value: &T,
    ) -> ControlFlow<(), Vec<T>> {
        match crate::dist::wire::all_gather_as(self.comm, what, value) {
            Ok(values) => ControlFlow::Continue(values),
            Err(e) => {
                *self.failed = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

impl std::fmt::Debug for IterationRanks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IterationRanks")
            .field("rank", &self.comm.rank())
            .field("world_size", &self.comm.world_size())
            .finish()
    }
}

/// Quality of one image against the ground truth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Quality {
    pub psnr_db: f64,
    /// `None` when not requested (`ssim_every = 0`) or the image is smaller than SSIM's 11-pixel
    /// window.
    pub ssim: Option<f64>,
}

/// How the back-projection baseline of `metrics.json` is formed from the measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackProjectionMethod {
    /// `Σ Aᵢᵀyᵢ / n` over the stack's n operators (deepinv's examples compare against the adjoint;
    /// dividing by n keeps a stack of n normalised blurs at the image's scale).
    AdjointMean,
    /// `A†y` by filtered back-projection (a single tomography operator, whose adjoint alone is far
    /// from the image's scale).
    Fbp,
}

/// The back-projection baseline a reconstruction is compared with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackProjection {
    pub method: BackProjectionMethod,
    pub quality: Quality,
}

/// Time one rank spent per component over the whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankTimes {
    pub rank: usize,
    /// Indices of the operators this rank owned.
    pub operators: Vec<usize>,
    pub gradient_secs: f64,
    pub denoiser_secs: f64,
    /// Time inside collectives (part of the gradient and denoiser times).
    pub communication_secs: f64,
    pub total_secs: f64,
    /// Time the solve spent waiting at collectives for the last rank to arrive (part of
    /// `communication_secs`).
    #[serde(default)]
    pub idle_secs: f64,
    /// Compute threads of this rank's pool.
    #[serde(default)]
    pub threads: usize,
    /// Peak resident memory of the rank over the iterations, bytes.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// The rank's profile per iteration: time, communication and idle per phase, peak memory.
    #[serde(default)]
    pub iterations: Vec<IterationProfile>,
}

/// One rank's device in a run on a GPU (`metrics.json`'s `devices`, absent from CPU runs): what it
/// is, its memory, and the most the job's buffers held on it against the estimate it was admitted
/// with (`memory::device_job`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankDeviceUse {
    pub rank: usize,
    /// The device's name: `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `cuda:0`.
    pub device: String,
    pub total_bytes: u64,
    /// The most bytes this rank's buffers held on the device at once during the job.
    pub peak_bytes: u64,
    /// The estimate per rank checked against the free memory before the job started.
    pub estimated_bytes: u64,
}

/// The bytes one spatial denoiser call moved per exchange, summed over ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HaloExchange {
    /// Ranks per spatial axis `[D, H, W]`.
    pub grid: [usize; 3],
    pub layers: Vec<LayerExchange>,
}

/// One exchange of a spatial denoiser call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerExchange {
    /// The layer that gathered its halo (`None` where the denoiser's exchanges are not one pass of
    /// its network, so none is predicted).
    pub layer: Option<String>,
    /// Bytes all ranks sent.
    pub sent_bytes: u64,
    /// Bytes the predicted halo volume needs.
    pub predicted_bytes: Option<u64>,
}

impl HaloExchange {
    /// Sums the ranks' traffic (`None` on every rank: no spatial denoiser ran).
    fn from_ranks<'a>(
        ranks: impl Iterator<Item = Option<&'a HaloTraffic>>,
    ) -> Result<Option<HaloExchange>> {
        let ranks: Vec<&HaloTraffic> = ranks.flatten().collect();
        let Some(first) = ranks.first() else {
            return Ok(None);
        };
        let mut sent = vec![0u64; first.sent.len()];
        for (r, t) in ranks.iter().enumerate() {
            if t.sent.len() != sent.len() || t.grid != first.grid {
                return Err(Error::Internal(format!(
                    "rank {r} made {} halo exchanges on grid {:?}, rank 0 {} on {:?}",
                    t.sent.len(),
                    t.grid,
                    sent.len(),
                    first.grid
                )));
            }
            sent.iter_mut().zip(&t.sent).for_each(|(a, b)| *a += b);
        }
        let predicted = first.predicted.as_ref().filter(|p| p.len() == sent.len());
        let layers = sent
            .into_iter()
            .enumerate()
            .map(|(i, sent_bytes)| LayerExchange {
                layer: predicted.map(|p| p[i].0.clone()),
                sent_bytes,
                predicted_bytes: predicted.map(|p| p[i].1),
            })
            .collect();
        Ok(Some(HaloExchange {
            grid: first.grid,
            layers,
        }))
    }

    /// Whether every exchange sent exactly its predicted halo volume (`None`: nothing predicted).
    pub fn matches_prediction(&self) -> Option<bool> {
        self.layers
            .iter()
            .map(|l| l.predicted_bytes.map(|p| p == l.sent_bytes))
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().all(|&m| m))
    }

    pub fn sent_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.sent_bytes).sum()
    }
}

/// Summary of a finished job; also written as `metrics.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSummary {
    pub name: String,
    pub image_shape: Vec<usize>,
    pub operators: Vec<String>,
    pub algorithm: String,
    pub iterations: usize,
    pub stopped_early: bool,
    /// Quality of the final reconstruction (`None` without a ground truth).
    pub reconstruction: Option<Quality>,
    /// Quality of a back-projection of the measurements, for comparison (`None` without a ground
    /// truth).
    pub back_projection: Option<BackProjection>,
    /// Whether the measurements were loaded (`[measurements]`) rather than simulated.
    pub measurements_loaded: bool,
    pub setup_secs: f64,
    pub solve_secs: f64,
    /// Totals over all iterations.
    pub gradient_secs: f64,
    pub denoiser_secs: f64,
    pub communication_secs: f64,
    /// Number of ranks and the transport between them.
    pub world_size: usize,
    pub backend: crate::dist::Transport,
    /// Per-rank totals (gathered on rank 0).
    pub ranks: Vec<RankTimes>,
    pub history: Vec<IterationReport>,
    /// Measured denoiser cost of each tile with the rank that denoised it (tiled denoisers;
    /// empty otherwise, and for "spatial"), by tile index.
    #[serde(default)]
    pub tiles: Vec<TileCost>,
    /// The halo exchanges of the last denoiser call under "spatial" tiling, per layer, against
    /// the predicted halo volume (`None` for other denoisers).
    #[serde(default)]
    pub halo_exchange: Option<HaloExchange>,
    /// Runs on a device: each rank's device and the memory the job used there (absent on the CPU).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<RankDeviceUse>,
    /// Elastic runs: each recovery from a lost rank (absent when there was none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<Recovery>,
    /// Elastic runs that lost a rank: each generation of the group, in order (`solve_secs` and the
    /// ranks' times and profiles above are their sums; absent when there was one generation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generations: Vec<GenerationTimes>,
    /// Runs continued from a checkpoint (`tessera run --resume DIR`): which one, and after which
    /// iteration (absent for a run that started from the beginning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<io::checkpoint::Resumed>,
    /// The files of the run, relative to its folder (`metrics.json` last).
    pub outputs: Vec<PathBuf>,
    /// The run's folder once complete (rank 0; not in `metrics.json`, which lives in it).
    #[serde(skip)]
    pub run_dir: Option<PathBuf>,
    /// The preset that was run, as TOML (after overrides).
    pub preset: String,
}

/// One generation of an elastic group, as rank 0 of the last generation saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationTimes {
    /// 0 is the group the launcher started; each recovery adds one.
    pub generation: u32,
    pub world_size: usize,
    /// The iterations completed in it: after `first_iteration`, up to `last_iteration` (equal:
    /// none). A generation after a loss may redo iterations its predecessor completed.
    pub first_iteration: usize,
    pub last_iteration: usize,
    /// Seconds from its first iteration to its end (its failure, or the run's end).
    pub solve_secs: f64,
}

/// Arrays a job receives with its preset instead of from files (`[image] inline = "NAME"`).
pub type InlineArrays = [(String, Tensor)];

/// Loads the ground truth described by `source` (a sample, or a file: paths are read as given, so a
/// preset's are resolved when it is loaded).
pub fn load_image(source: &ImageSource, volumetric: bool, seed: u64) -> Result<Tensor> {
    load_image_with(source, volumetric, seed, &[])
}

/// Like [`load_image`], resolving `inline = "NAME"` among `inline`.
pub fn load_image_with(
    source: &ImageSource,
    volumetric: bool,
    seed: u64,
    inline: &InlineArrays,
) -> Result<Tensor> {
    if let Some(shape) = &source.shape {
        return Err(Error::config(
            "image.shape",
            format!("an unknown image of shape {shape:?} has no pixels to load"),
        ));
    }
    if let Some(name) = &source.inline {
        let Some((_, x)) = inline.iter().find(|(n, _)| n == name) else {
            return Err(Error::config(
                "image.inline",
                format!("no array named `{name}` was sent with the job"),
            ));
        };
        x.check_finite(&format!("inline array `{name}`"))?;
        let mut x = to_batch_layout(x.clone(), volumetric, Path::new(name))?;
        if source.grayscale && x.shape()[1] > 1 {
            x = to_grayscale(&x);
        }
        return Ok(x);
    }
    let mut x = match (&source.sample, &source.path) {
        (Some(sample), _) => {
            let size = source
                .size
                .clone()
                .unwrap_or_else(|| vec![DEFAULT_SAMPLE_SIZE; if volumetric { 3 } else { 2 }]);
            samples::generate(*sample, &size, seed)?
        }
        (None, Some(path)) => {
            let x = io::read_array(path)?;
            x.check_finite(&path.display().to_string())?;
            to_batch_layout(x, volumetric, path)?
        }
        (None, None) => return Err(Error::config("image", "give `sample` or `path`")),
    };
    if source.grayscale && x.shape()[1] > 1 {
        x = to_grayscale(&x);
    }
    Ok(x)
}

/// The shape `(B, C, …)` of the image [`load_truth`] gives, without loading or generating it: a
/// sample's from its size, a file's from its header, an inline array's as sent. A job is sized with
/// it before any pixel is allocated.
pub fn truth_shape(
    source: &ImageSource,
    volumetric: bool,
    inline: &InlineArrays,
) -> Result<Vec<usize>> {
    let mut shape = if let Some(shape) = &source.shape {
        return Ok([&[1], &shape[..]].concat());
    } else if let Some(name) = &source.inline {
        match inline.iter().find(|(n, _)| n == name) {
            Some((_, x)) => x.shape().to_vec(),
            None => {
                return Err(Error::config(
                    "image.inline",
                    format!("no array named `{name}` was sent with the job"),
                ));
            }
        }
    } else if let Some(sample) = source.sample {
        let size = source
            .size
            .clone()
            .unwrap_or_else(|| vec![DEFAULT_SAMPLE_SIZE; if volumetric { 3 } else { 2 }]);
        samples::shape(sample, &size)?
    } else if let Some(path) = &source.path {
        io::peek_shape(path)?
    } else {
        return Err(Error::config("image", "give `sample` or `path`"));
    };
    let want = if volumetric { 5 } else { 4 };
    while shape.len() < want {
        shape.insert(0, 1);
    }
    if source.grayscale && shape.len() > 1 {
        shape[1] = 1;
    }
    Ok(shape)
}

/// The ground truth, when the preset has one, and the shape `(B, C, …)` of the image to reconstruct.
pub fn load_truth(
    source: &ImageSource,
    volumetric: bool,
    seed: u64,
    inline: &InlineArrays,
) -> Result<(Option<Tensor>, Vec<usize>)> {
    if let Some(shape) = &source.shape {
        return Ok((None, [&[1], &shape[..]].concat()));
    }
    let x = load_image_with(source, volumetric, seed, inline)?;
    let shape = x.shape().to_vec();
    Ok((Some(x), shape))
}

/// Loads `[measurements]` (files, or arrays among `inline`) and checks each
/// against the shape its operator produces (`shapes[i]`, operator named `names[i]`). Leading axes
/// of size 1 that a file leaves out are added.
pub fn load_measurements(
    source: &MeasurementSource,
    inline: &InlineArrays,
    shapes: &[Vec<usize>],
    names: &[String],
) -> Result<Vec<Tensor>> {
    if source.len() != shapes.len() {
        return Err(Error::config(
            "measurements",
            format!(
                "{} measurement(s) for {} operator(s)",
                source.len(),
                shapes.len()
            ),
        ));
    }
    (0..shapes.len())
        .map(|i| {
            let (field, what, y) = if source.paths.is_empty() {
                let name = &source.inline[i];
                let field = format!("measurements.inline[{i}]");
                let Some((_, y)) = inline.iter().find(|(n, _)| n == name) else {
                    return Err(Error::config(
                        field,
                        format!("no array named `{name}` was sent with the job"),
                    ));
                };
                (field, format!("inline array `{name}`"), y.clone())
            } else {
                let path = &source.paths[i];
                let y = io::read_array(path)?;
                (
                    format!("measurements.paths[{i}]"),
                    path.display().to_string(),
                    y,
                )
            };
            y.check_finite(&what)?;
            let want = &shapes[i];
            let name = names.get(i).map(String::as_str).unwrap_or("?");
            fit_leading_ones(y, want).map_err(|got| {
                Error::config(
                    field,
                    format!(
                        "{what} has shape {got:?}, but operator {i} ({name}) measures {want:?}"
                    ),
                )
            })
        })
        .collect()
}

/// `y` reshaped to `want` when it equals `want` up to leading axes of size 1; else `y`'s shape.
fn fit_leading_ones(y: Tensor, want: &[usize]) -> std::result::Result<Tensor, Vec<usize>> {
    let got = y.shape().to_vec();
    if got == want {
        return Ok(y);
    }
    let extra = want.len().saturating_sub(got.len());
    if got.len() < want.len() && want[..extra].iter().all(|&d| d == 1) && want[extra..] == got {
        return y.reshape(want).map_err(|_| got);
    }
    Err(got)
}

/// Checks a preset against its real inputs without running it: the image (or its shape) loads,
/// every operator accepts that image, loaded measurements exist, are finite and fit their
/// operators, the job fits in the memory this machine has left for its `ranks_here` of `world`
/// ranks (see [`crate::memory`]), the tiling plans tiles for that image, and the denoiser builds
/// (its weights or model file exists and reads). `tessera serve` calls this on rank 0 before any
/// rank starts, and `tessera run` before it starts its ranks, so bad input fails the job, never the
/// group.
pub fn check_inputs(
    preset: &Preset,
    inline: &InlineArrays,
    world: usize,
    ranks_here: usize,
) -> Result<()> {
    let sized = JobSizes::of(preset, inline)?;
    let (x_shape, ops, shapes) = (&sized.x_shape, &sized.ops, &sized.shapes);
    // Before anything large is built (weights, tiles): a job that cannot fit is refused here.
    if let Some(available) = crate::memory::available_bytes() {
        sized
            .estimate(preset, world, ranks_here)?
            .check_fits(available)?;
    }
    let (_, loaded_shape) = load_truth(&preset.image, preset.is_volumetric(), preset.seed, inline)?;
    if loaded_shape != *x_shape {
        return Err(Error::Internal(format!(
            "the image's header declares {x_shape:?} but it loads as {loaded_shape:?}"
        )));
    }
    if let Some(source) = &preset.measurements {
        let names: Vec<String> = ops.iter().map(|op| op.name()).collect();
        load_measurements(source, inline, shapes, &names)?;
    }
    let denoiser = preset.denoiser.as_ref().map(|d| d.build()).transpose()?;
    if let Some(t) = &preset.tiling {
        match t.decomposition()? {
            Decomposition::Tiles(strategy) => {
                strategy.plan(&x_shape[2..])?;
            }
            // No tile plan: the grid must fit the image and the denoiser run on blocks.
            Decomposition::Spatial => {
                crate::dist::patch_map::PatchMap::plan(
                    t,
                    &x_shape[2..],
                    world,
                    preset.distributed.tile_assignment,
                )?;
                if let Some(d) = &denoiser {
                    crate::dist::spatial::check_block_denoiser(&**d)?;
                }
            }
        }
    }
    Ok(())
}

/// A job's sizes from the image's header (or size) and its operators, before any pixel is read:
/// what its memory estimate needs.
struct JobSizes {
    x_shape: Vec<usize>,
    ops: Vec<Box<dyn crate::physics::LinearPhysics>>,
    /// Each operator's measurement shape.
    shapes: Vec<Vec<usize>>,
}

impl JobSizes {
    fn of(preset: &Preset, inline: &InlineArrays) -> Result<JobSizes> {
        let x_shape = truth_shape(&preset.image, preset.is_volumetric(), inline)?;
        let ops = preset
            .operators()?
            .iter()
            .map(|p| p.build(&x_shape, None))
            .collect::<Result<Vec<_>>>()?;
        let shapes = ops
            .iter()
            .map(|op| op.output_shape(&x_shape))
            .collect::<Result<Vec<_>>>()?;
        Ok(JobSizes {
            x_shape,
            ops,
            shapes,
        })
    }

    /// What one of `world` ranks needs, `ranks_here` of them on this machine.
    fn estimate(
        &self,
        preset: &Preset,
        world: usize,
        ranks_here: usize,
    ) -> Result<crate::memory::MemoryEstimate> {
        let measurement_elems = self
            .shapes
            .iter()
            .map(|s| s.iter().map(|&d| d as u64).product::<u64>())
            .sum();
        crate::memory::estimate(preset, &self.x_shape, measurement_elems, world, ranks_here)
    }
}

/// Brings a file's array into (B, C, H, W) or (B, C, D, H, W).
fn to_batch_layout(x: Tensor, volumetric: bool, path: &Path) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let want = if volumetric { 5 } else { 4 };
    let new_shape: Vec<usize> = match shape.len() {
        n if n == want => shape.clone(),
        n if n + 1 == want => [&[1], &shape[..]].concat(),
        n if n + 2 == want => [&[1, 1], &shape[..]].concat(),
        _ => {
            return Err(Error::format(
                path,
                format!(
                    "array of shape {shape:?} is not a {} (expected {} to {want} dimensions)",
                    if volumetric { "volume" } else { "image" },
                    want - 2
                ),
            ));
        }
    };
    x.reshape(&new_shape)
}

/// Mean over channels.
fn to_grayscale(x: &Tensor) -> Tensor {
    let (b, c) = (x.shape()[0], x.shape()[1]);
    let n = x.plane_len();
    let mut shape = x.shape().to_vec();
    shape[1] = 1;
    let mut out = Tensor::zeros(&shape);
    for bi in 0..b {
        let dst = &mut out.data_mut()[bi * n..(bi + 1) * n];
        for ci in 0..c {
            for (d, s) in dst.iter_mut().zip(x.plane(bi * c + ci)) {
                *d += s / c as f32;
            }
        }
    }
    out
}

/// A job's denoiser with what the job reads back from it after the solve.
pub struct BuiltDenoiser {
    pub denoiser: Box<dyn Denoiser>,
    /// For tiles spread over the ranks: the clock of this rank's per-tile times.
    pub tile_clock: Option<Arc<TileClock>>,
    /// For "spatial": the halo traffic of its last call.
    pub traffic: Option<crate::dist::spatial::TrafficProbe>,
}

/// Builds the denoiser of a preset for images of `channels` channels
/// (`DenoiserConfig::for_image_channels`); with `[tiling]` its tiles are spread over the group's
/// ranks (or, for "spatial", its blocks). Without tiling every rank denoises the whole image (the
/// same result on each).
pub fn build_denoiser(
    preset: &Preset,
    channels: usize,
    comm: Arc<dyn Collective>,
) -> Result<Option<BuiltDenoiser>> {
    let Some(cfg) = &preset.denoiser else {
        return Ok(None);
    };
    let inner = cfg.for_image_channels(channels).build()?;
    let Some(t) = &preset.tiling else {
        return Ok(Some(BuiltDenoiser {
            denoiser: inner,
            tile_clock: None,
            traffic: None,
        }));
    };
    Ok(Some(match t.decomposition()? {
        Decomposition::Tiles(strategy) => {
            let d = DistributedTiledDenoiser::new(
                comm,
                TiledDenoiser::new(inner, strategy, t.max_batch_size),
                preset.distributed.tile_assignment,
            );
            BuiltDenoiser {
                tile_clock: Some(d.clock()),
                denoiser: Box::new(d),
                traffic: None,
            }
        }
        Decomposition::Spatial => {
            let d = crate::dist::spatial::SpatialDenoiser::new(comm, inner, t)?;
            BuiltDenoiser {
                traffic: Some(d.traffic_probe()),
                denoiser: Box::new(d),
                tile_clock: None,
            }
        }
    }))
}

/// Runs `preset` in this process alone, writing outputs into `out` (a folder path: it must not
/// hold files yet).
pub fn run(
    preset: &Preset,
    out: impl Into<RunDir>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    run_in_group(preset, out, Box::new(SingleProcess), on_event)
}

/// Runs `preset` on every rank of a group (each rank calls this with its collective). Operators and
/// tiles are shared among the ranks; every rank holds the same iterate; rank 0 writes the outputs
/// and the returned summary holds every rank's timings.
pub fn run_in_group(
    preset: &Preset,
    out: impl Into<RunDir>,
    comm: Box<dyn Collective>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    run_in_group_with(preset, &out.into(), comm, &[], on_event)
}

/// [`run_in_group`] with arrays sent along with the preset (every rank passes the same ones).
///
/// Rank 0 stages the run's files in a hidden folder made before anything is computed (an
/// unwritable destination fails at once), writes `metrics.json` last and moves the folder into
/// place when the run is complete; a failed run leaves nothing behind.
pub fn run_in_group_with(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    run_in_group_from(preset, out, comm, inline, None, on_event)
}

/// [`run_in_group_with`] that keeps a checkpoint (`tessera run --resume DIR` without `--elastic`
/// continues one, and keeps it up to date).
pub fn run_in_group_from(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    checkpoints: Option<Checkpoints>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    preset.validate()?;
    let device = open_device(preset, comm.rank())?;
    run_on(preset, out, comm, inline, device, checkpoints, on_event)
}

/// [`run_in_group_from`] on `device` (`None`: the CPU).
fn run_on(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    device: Option<Box<dyn DeviceSolver>>,
    checkpoints: Option<Checkpoints>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    // Before any work (the run's folder included): a job that does not fit the device is refused.
    let device_estimate = match &device {
        Some(d) => Some(fit_on_device(d.as_ref(), preset, inline, comm.as_ref())?),
        None => None,
    };
    let mut carried = Carried::new(out, comm.rank(), false)?;
    carried.die_at = crate::dist::launch::launched_die_hook(comm.rank())?;
    if let Some(d) = &device {
        tracing::info!("rank {} computes on {}", comm.rank(), d.describe());
        d.start_job();
    }
    carried.device = device;
    carried.device_estimate_bytes = device_estimate.unwrap_or(0);
    if let Some(plan) = checkpoints {
        elastic::start_checkpoints(plan, preset, out, &mut carried)?;
    }
    run_generation(preset, out, comm, inline, on_event, &mut carried)
}

/// The job's device memory estimate on this rank (`device::solve::footprint`, for the ranks of this
/// machine that share the device) against the device's free memory, before any work; returns the
/// estimate per rank. Every rank learns every rank's verdict, so a refusal on one rank fails the
/// job on all of them (no rank waits for a peer that refused).
fn fit_on_device(
    device: &dyn DeviceSolver,
    preset: &Preset,
    inline: &InlineArrays,
    comm: &dyn Collective,
) -> Result<u64> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let mine = (|| -> Result<u64> {
        let x_shape = truth_shape(&preset.image, preset.is_volumetric(), inline)?;
        let parts = crate::device::solve::footprint(preset, &x_shape, world, rank)?;
        let memory = device.memory()?;
        let here = crate::memory::ranks_here(world);
        // Ranks of this machine on this rank's GPU (`Device::ordinal`: round robin, or all on one).
        let pinned = matches!(
            preset
                .distributed
                .device
                .as_deref()
                .map(|t| Device::parse("distributed.device", t)),
            Some(Ok(Device::Cuda(Some(_))))
        );
        let sharing = match pinned {
            true => here,
            false => here.div_ceil(memory.device_count.max(1)),
        };
        let estimate = crate::memory::device_job(parts, sharing);
        estimate.check_device(
            &format!("{} ({})", memory.name, memory.label),
            memory.free_bytes,
            memory.total_bytes,
        )?;
        tracing::debug!(rank, %estimate, "the job fits the device");
        Ok(estimate.per_rank_bytes())
    })();
    let verdict: Option<String> = mine.as_ref().err().map(|e| e.to_string());
    let verdicts: Vec<Option<String>> =
        crate::dist::wire::all_gather_as(comm, "device memory verdicts", &verdict)?;
    let estimate = mine?;
    match verdicts
        .into_iter()
        .enumerate()
        .find_map(|(r, v)| v.map(|v| (r, v)))
    {
        Some((r, reason)) => Err(Error::Device {
            device: format!("rank {r}"),
            reason,
        }),
        None => Ok(estimate),
    }
}

/// The device a rank of a job computes on: the preset's `[distributed] device` (`tessera run`
/// writes its `--device` there), else the CPU. A GPU is opened only for a job whose every component
/// is on it (else one error names every missing one, `device::coverage`), and a build without the
/// `cuda` feature says how to rebuild: never a silent CPU run.
fn open_device(preset: &Preset, rank: usize) -> Result<Option<Box<dyn DeviceSolver>>> {
    let device = match &preset.distributed.device {
        Some(text) => Device::parse("distributed.device", text)?,
        None => Device::Cpu,
    };
    if !device.is_cuda() {
        return Ok(None);
    }
    crate::device::coverage::check(device, preset)?;
    // Ranks on one node share its GPUs round robin (`Device::ordinal`).
    let local_rank = std::env::var("LOCAL_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rank);
    open_gpu(device, local_rank)
}

#[cfg(feature = "cuda")]
fn open_gpu(device: Device, local_rank: usize) -> Result<Option<Box<dyn DeviceSolver>>> {
    let gpu = Arc::new(crate::cuda::Gpu::open(device, local_rank)?);
    Ok(Some(Box::new(gpu)))
}

#[cfg(not(feature = "cuda"))]
fn open_gpu(device: Device, _local_rank: usize) -> Result<Option<Box<dyn DeviceSolver>>> {
    Err(crate::device::selftest::no_gpu_support(device))
}

/// What the setup of a run computed: carried from one generation of an elastic group to the next
/// (every rank holds all of it), so a re-formed group starts iterating at once.
struct Setup {
    truth: Option<Tensor>,
    x_shape: Vec<usize>,
    ys: Vec<Tensor>,
    adjoint_mean: Option<Tensor>,
    /// PnP's step, derived once (elastic runs; `None`: PnP derives it).
    pnp_step: Option<f32>,
    secs: f64,
}

/// What a rank carries across the generations of its group (one generation unless elastic).
struct Carried {
    t_start: Instant,
    staging: Option<Staging>,
    setup: Option<Setup>,
    /// Reports of the completed iterations, in order (iteration `k` at `k - 1`).
    history: Vec<IterationReport>,
    /// Elastic runs: the last two completed iterates (survivors differ by at most one iteration).
    keep_iterates: bool,
    iterates: Vec<(usize, Tensor)>,
    /// The iteration (and its iterate) the next generation resumes after.
    resume: Option<(usize, Tensor)>,
    started: bool,
    recoveries: Recoveries,
    die_at: Option<DieAt>,
    /// The device the algorithm runs on (`None`: the CPU).
    device: Option<Box<dyn DeviceSolver>>,
    /// The job's device memory estimate per rank it was admitted with.
    device_estimate_bytes: u64,
    /// The generations before this one (elastic runs that lost a rank), with this rank's
    /// communication seconds and iteration profiles in them.
    generations: Vec<GenerationTimes>,
    communication_secs_before: f64,
    profiles_before: Vec<IterationProfile>,
    /// Runs with checkpoints (elastic or resumed); rank 0 writes them.
    checkpoints: Option<io::checkpoint::Writer>,
    /// PnP's step from the checkpoint resumed from.
    resumed_step: Option<f32>,
    /// The checkpoint resumed from, for `metrics.json`.
    resumed: Option<io::checkpoint::Resumed>,
    /// Whether the group a generation ran on is handed back when it ends without losing a rank
    /// (serve lends its group to each job), into `group`.
    keep_group: bool,
    group: Option<Box<dyn Collective>>,
    /// Elastic runs that take joining ranks (`tessera join`): rank 0's look for join requests at
    /// each iteration boundary, and the generation they would join.
    grow: Option<(GrowProbe, u32)>,
    /// The generation ended at an iteration boundary for joining ranks (not a failure).
    leaving_to_grow: bool,
}

impl Carried {
    /// Rank 0 stages the run's files before anything is computed (an unwritable destination fails
    /// at once).
    fn new(out: &RunDir, rank: usize, keep_iterates: bool) -> Result<Carried> {
        let t_start = Instant::now();
        Ok(Carried {
            t_start,
            staging: match rank {
                0 => Some(Staging::create(out)?),
                _ => None,
            },
            setup: None,
            history: Vec::new(),
            keep_iterates,
            iterates: Vec::new(),
            resume: None,
            started: false,
            recoveries: Recoveries::new(t_start),
            die_at: None,
            device: None,
            device_estimate_bytes: 0,
            generations: Vec::new(),
            communication_secs_before: 0.0,
            profiles_before: Vec::new(),
            checkpoints: None,
            resumed_step: None,
            resumed: None,
            keep_group: false,
            group: None,
            grow: None,
            leaving_to_grow: false,
        })
    }

    /// Records a completed iteration (elastic runs copy its iterate to the host).
    fn completed(&mut self, report: &IterationReport, x: &dyn HostView) -> Result<()> {
        self.history.push(report.clone());
        if self.keep_iterates {
            let x = &*x.to_host()?;
            // The older of the two iterates kept is dropped: its buffer takes the new one.
            let kept = match self.iterates.len() {
                2 => match self.iterates.remove(0) {
                    (_, mut old) if old.shape() == x.shape() => {
                        old.data_mut().copy_from_slice(x.data());
                        old
                    }
                    _ => x.clone(),
                },
                _ => x.clone(),
            };
            self.iterates.push((report.iteration, kept));
        }
        self.recoveries.work_completed();
        Ok(())
    }

    /// Records the end of a generation of `world_size` ranks that began after iteration `first`
    /// and solved for `solve_secs` (its profile shifted to the run's iteration numbers).
    fn close_generation(
        &mut self,
        world_size: usize,
        first: usize,
        solve_secs: f64,
        communication_secs: f64,
        mut profiles: Vec<IterationProfile>,
    ) {
        self.generations.push(GenerationTimes {
            generation: self.recoveries.generation(),
            world_size,
            first_iteration: first,
            last_iteration: self.history.len(),
            solve_secs,
        });
        self.communication_secs_before += communication_secs;
        profiles.iter_mut().for_each(|p| p.iteration += first);
        self.profiles_before.append(&mut profiles);
    }
}

/// One generation of the run: the whole run unless an elastic group loses a rank. With
/// `carried.keep_group`, a generation that did not lose a rank (it completed, or failed for a
/// reason of its own) hands its group back in `carried.group`; one that lost a rank drops it here,
/// which closes its links, so every survivor leaves the collective it waits in.
fn run_generation(
    preset: &Preset,
    out: &RunDir,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
    carried: &mut Carried,
) -> Result<JobSummary> {
    let timed = Arc::new(TimedCollective::new(comm));
    let result = generation_on(preset, out, &timed, inline, on_event, carried);
    if carried.keep_group && !result.as_ref().is_err_and(crate::dist::elastic::is_loss) {
        // Every clone (stack, denoiser) ended with the generation.
        carried.group = Arc::try_unwrap(timed).ok().map(TimedCollective::into_inner);
        if carried.group.is_none() {
            tracing::error!("a job's group is still in use after the job: it cannot be lent again");
        }
    }
    result
}

/// [`run_generation`] on its timed group.
fn generation_on(
    preset: &Preset,
    out: &RunDir,
    timed: &Arc<TimedCollective>,
    inline: &InlineArrays,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
    carried: &mut Carried,
) -> Result<JobSummary> {
    let t_generation = Instant::now();
    if timed.rank() == 0 && carried.staging.is_none() {
        // The lowest surviving rank takes rank 0's role, staging folder included.
        carried.staging = Some(Staging::create(out)?);
    }
    let comm: Arc<dyn Collective> = timed.clone();
    let rank = comm.rank();
    let volumetric = preset.is_volumetric();
    let operators = preset.operators()?;
    let build_stack = |x_shape: &[usize]| -> Result<DistributedStack> {
        let mut stack = DistributedStack::from_factory(comm.clone(), operators.len(), |i| {
            operators[i].build(x_shape, preset.noise.as_ref())
        })?;
        stack.gather = preset.distributed.gather;
        stack.sum_order = preset.distributed.sum_order;
        Ok(stack)
    };
    let fbp_operator = preset.fbp_operator()?;
    let back_projection_method = back_projection_method(fbp_operator.as_ref());
    let stack = match &carried.setup {
        Some(setup) => build_stack(&setup.x_shape)?,
        None => {
            let (truth, x_shape) = load_truth(&preset.image, volumetric, preset.seed, inline)?;
            let stack = build_stack(&x_shape)?;
            let noise_seed =
                crate::dist::rank_seed(preset.seed, rank, preset.distributed.seed_offset_by_rank);
            let ys = match (&preset.measurements, &truth) {
                (Some(source), _) => {
                    // Every rank reads every measurement (the stack's adjoint sums need all of
                    // them); the shapes are gathered first so that all ranks agree on an error.
                    let shapes = stack.output_shapes(&x_shape)?;
                    load_measurements(source, inline, &shapes, &stack.names())?
                }
                (None, Some(truth)) => {
                    let mut ys = stack.measure(truth, noise_seed)?;
                    if let Some([lo, hi]) = preset.measurement_clamp {
                        ys.iter_mut()
                            .flat_map(|y| y.data_mut().iter_mut())
                            .for_each(|v| *v = v.clamp(lo, hi));
                    }
                    ys
                }
                (None, None) => {
                    return Err(Error::config(
                        "image.shape",
                        "an unknown image needs loaded [measurements]",
                    ));
                }
            };
            // Every rank joins the adjoint's collectives; only rank 0 scores it.
            let adjoint_mean = match back_projection_method {
                BackProjectionMethod::AdjointMean => {
                    Some(stack.adjoint(&ys)?.scaled(1.0 / stack.len() as f32))
                }
                BackProjectionMethod::Fbp => None,
            };
            let derive_once = carried.keep_iterates || carried.checkpoints.is_some();
            let pnp_step = match &preset.algorithm {
                AlgorithmConfig::Pnp(_) if carried.resumed_step.is_some() => carried.resumed_step,
                AlgorithmConfig::Pnp(cfg) if derive_once => Some(optim::pnp::step_size(
                    &stack,
                    &preset.fidelity,
                    &x_shape,
                    cfg,
                )?),
                _ => None,
            };
            carried.setup = Some(Setup {
                truth,
                x_shape,
                ys,
                adjoint_mean,
                pnp_step,
                secs: t_generation.elapsed().as_secs_f64(),
            });
            stack
        }
    };
    let Some(setup) = carried.setup.take() else {
        return Err(Error::Internal("the run's setup vanished".into()));
    };
    let result = solve_and_report(
        preset,
        comm,
        timed,
        stack,
        &setup,
        on_event,
        carried,
        fbp_operator.as_ref(),
    );
    carried.setup = Some(setup);
    result
}

/// The iterations of one generation, then the gathered timings and (rank 0) the outputs.
#[allow(clippy::too_many_arguments)]
fn solve_and_report(
    preset: &Preset,
    comm: Arc<dyn Collective>,
    timed: &Arc<TimedCollective>,
    stack: DistributedStack,
    setup: &Setup,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
    carried: &mut Carried,
    fbp_operator: Option<&PhysicsConfig>,
) -> Result<JobSummary> {
    let (rank, world_size) = (comm.rank(), comm.world_size());
    let volumetric = preset.is_volumetric();
    let Setup {
        truth,
        x_shape,
        ys,
        adjoint_mean,
        ..
    } = setup;
    let truth = truth.as_ref();
    let operator_names = stack.names();
    let iteration_now = Arc::new(AtomicUsize::new(carried.history.len() + 1));
    let (denoiser, tile_clock, traffic) = match build_denoiser(preset, x_shape[1], comm.clone())? {
        Some(built) => {
            let inner = match carried.die_at {
                Some(die) => elastic::dying(built.denoiser, die, iteration_now.clone()),
                None => built.denoiser,
            };
            (
                Some(PhasedDenoiser {
                    inner,
                    timed: timed.clone(),
                }),
                built.tile_clock,
                built.traffic,
            )
        }
        None => (None, None, None),
    };
    let setup_secs = setup.secs;
    let mut comm_mark = timed.secs();

    let monitor = Monitor {
        ground_truth: truth,
        data_range: 1.0,
        ssim_every: preset.output.ssim_every,
    };
    let iterations = preset.algorithm.iterations();
    if !carried.started {
        carried.started = true;
        if on_event(JobEvent::Started {
            name: &preset.name,
            image_shape: x_shape,
            operators: stack.len(),
            iterations,
            world_size,
            operator_names: &operator_names,
            truth,
            measurements: ys,
        })
        .is_break()
        {
            return Err(Error::Cancelled("before the first iteration".into()));
        }
    }
    let resume = carried.resume.take();
    let first_iteration = carried.history.len();
    let die_at = carried.die_at;
    if let Some(die) = die_at {
        die.check(carried.history.len() + 1, DiePoint::Start);
    }
    let mut profiler = Profiler::start(timed.clone())?;
    let device = carried.device.take();
    // A failed download of the iterate (a device run) ends the run with its error.
    let mut failed = None;
    let mut callback = |report: &IterationReport, x: &dyn HostView| {
        profiler.iteration_done(&report.times);
        let now = timed.secs();
        let mut report = report.clone();
        report.times.communication_secs = now - comm_mark;
        comm_mark = now;
        if let Err(e) = carried.completed(&report, x) {
            failed = Some(e);
            return ControlFlow::Break(());
        }
        if let Some(writer) = &carried.checkpoints
            && carried.staging.is_some()
            && let Err(e) =
                elastic::checkpoint_if_due(writer, preset, &carried.history, x, setup.pnp_step)
        {
            failed = Some(e);
            return ControlFlow::Break(());
        }
        let flow = on_event(JobEvent::Iteration {
            report: &report,
            x,
            ranks: IterationRanks {
                comm: timed.inner(),
                failed: &mut failed,
            },
        });
        if failed.is_some() {
            return ControlFlow::Break(());
        }
        if report.iteration < iterations
            && let Some((probe, next)) = carried.grow.as_mut()
        {
            match probe.boundary(timed.as_ref(), *next, report.iteration) {
                Ok(false) => {}
                Ok(true) => {
                    carried.leaving_to_grow = true;
                    failed = Some(Error::Cancelled(format!(
                        "generation left after iteration {} for joining rank(s)",
                        report.iteration
                    )));
                    return ControlFlow::Break(());
                }
                Err(e) => {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        iteration_now.store(report.iteration + 1, Ordering::Relaxed);
        if let Some(die) = die_at {
            die.check(report.iteration + 1, DiePoint::Start);
        }
        profiler.next_iteration();
        flow
    };
    let t_solve = Instant::now();
    let solved = match &preset.algorithm {
        AlgorithmConfig::Pnp(cfg) => {
            let denoiser = denoiser.as_ref().ok_or_else(|| {
                Error::config("denoiser", "the pnp algorithm needs a [denoiser] section")
            })?;
            let cfg = PnpConfig {
                step: cfg.step.or(setup.pnp_step),
                ..cfg.clone()
            };
            let start = resume.as_ref().map(|(iteration, x)| PnpStart {
                iteration: *iteration,
                x,
            });
            match (&device, start) {
                (Some(device), None) => pnp_on_device(
                    device.as_ref(),
                    preset,
                    &stack,
                    ys,
                    x_shape,
                    &cfg,
                    &monitor,
                    &mut callback,
                ),
                (Some(_), Some(_)) => Err(Error::Internal(
                    "a resumed (elastic) run on a device".into(),
                )),
                (None, start) => optim::pnp::pnp_from(
                    &stack,
                    &preset.fidelity,
                    denoiser,
                    ys,
                    x_shape,
                    &cfg,
                    &monitor,
                    &mut |r: &IterationReport, x: &Tensor| callback(r, x),
                    start,
                ),
            }
            .map(|r| (format!("pnp ({})", denoiser.name()), r))
        }
        AlgorithmConfig::Cg(cfg) => match &device {
            Some(device) => cg_on_device(
                device.as_ref(),
                preset,
                &stack,
                ys,
                x_shape,
                cfg,
                &monitor,
                &mut callback,
            ),
            None => optim::least_squares(
                &stack,
                ys,
                cfg,
                &monitor,
                &mut |r: &IterationReport, x: &Tensor| callback(r, x),
            ),
        }
        .map(|r| ("cg least squares".to_string(), r)),
        AlgorithmConfig::Fbp(_) => run_fbp(
            fbp_operator,
            device.as_deref(),
            x_shape,
            ys,
            &monitor,
            &mut |r: &IterationReport, x: &Tensor| callback(r, x),
        )
        .map(|r| ("fbp".to_string(), r)),
    };
    carried.device = device;
    let solved = match failed {
        Some(e) => Err(e),
        None => solved,
    };
    let generation_secs = t_solve.elapsed().as_secs_f64();
    let (algorithm, recon) = match solved {
        Ok(solved) => solved,
        Err(e) => {
            // Its peers are gone or going: what this rank measured is kept for the summary.
            carried.close_generation(
                world_size,
                first_iteration,
                generation_secs,
                timed.secs(),
                profiler.finish_alone(),
            );
            return Err(e);
        }
    };
    let solve_secs = generation_secs
        + carried
            .generations
            .iter()
            .map(|g| g.solve_secs)
            .sum::<f64>();
    let history = carried.history.clone();
    let gradient_secs = history.iter().map(|h| h.times.gradient_secs).sum();
    let denoiser_secs = history.iter().map(|h| h.times.denoiser_secs).sum();
    let profiles = profiler.finish()?;
    let mine = RankTimes {
        rank,
        operators: stack.local_indices(),
        gradient_secs,
        denoiser_secs,
        communication_secs: carried.communication_secs_before + timed.secs(),
        total_secs: carried.t_start.elapsed().as_secs_f64(),
        idle_secs: 0.0,
        threads: rayon::current_num_threads(),
        peak_rss_bytes: 0,
        // This rank's profiles of the generations before (the ones it was in): gathered with the
        // rest, then followed by this generation's.
        iterations: carried.profiles_before.clone(),
    };
    // The tiles' times and the halo traffic travel with the other timings: no message of their own.
    let tile_times = tile_clock.map(|c| c.times()).unwrap_or_default();
    let traffic = traffic.and_then(|t| t.lock().expect("traffic lock").clone());
    let communication_secs = mine.communication_secs;
    // A failed reading leaves this rank out of `devices` rather than failing here, before the
    // gather its peers wait in: the job's results stand.
    let device_use = match carried.device.as_ref().map(|d| d.memory()) {
        Some(Err(e)) => {
            tracing::warn!(
                "rank {rank}: the device's memory could not be read after the job ({e}); \
                 metrics.json leaves this rank out of `devices`"
            );
            None
        }
        Some(Ok(m)) => {
            tracing::info!(
                "rank {rank}: the job's peak on {} ({}) was {} of {} (estimated {})",
                m.name,
                m.label,
                crate::error::human_bytes(m.peak_bytes),
                crate::error::human_bytes(m.total_bytes),
                crate::error::human_bytes(carried.device_estimate_bytes)
            );
            Some(RankDeviceUse {
                rank,
                name: m.name,
                device: m.label,
                total_bytes: m.total_bytes,
                peak_bytes: m.peak_bytes,
                estimated_bytes: carried.device_estimate_bytes,
            })
        }
        None => None,
    };
    type Gathered = (
        RankTimes,
        Vec<TileTime>,
        Option<HaloTraffic>,
        Option<RankDeviceUse>,
    );
    let gathered: Vec<Gathered> = crate::dist::wire::all_gather_as(
        comm.as_ref(),
        "timings",
        &(mine, tile_times, traffic, device_use),
    )?;
    let halo_exchange = HaloExchange::from_ranks(gathered.iter().map(|g| g.2.as_ref()))?;
    let devices: Vec<RankDeviceUse> = gathered.iter().filter_map(|g| g.3.clone()).collect();
    let (mut ranks, tile_times): (Vec<RankTimes>, Vec<Vec<TileTime>>) =
        gathered.into_iter().map(|(r, t, _, _)| (r, t)).unzip();
    for (r, mut iterations) in ranks.iter_mut().zip(profiles) {
        iterations
            .iter_mut()
            .for_each(|p| p.iteration += first_iteration);
        r.iterations.append(&mut iterations);
        let iterations = &r.iterations;
        r.idle_secs = iterations.iter().map(IterationProfile::idle_secs).sum();
        r.peak_rss_bytes = iterations
            .iter()
            .map(|i| i.peak_rss_bytes)
            .max()
            .unwrap_or(0);
    }
    let mut generations = std::mem::take(&mut carried.generations);
    if !generations.is_empty() {
        generations.push(GenerationTimes {
            generation: carried.recoveries.generation(),
            world_size,
            first_iteration,
            last_iteration: history.len(),
            solve_secs: generation_secs,
        });
    }

    let mut summary = JobSummary {
        name: preset.name.clone(),
        image_shape: x_shape.clone(),
        operators: operator_names,
        algorithm,
        iterations: history.len(),
        // A stop that came with the last iteration stopped nothing.
        stopped_early: recon.stopped && history.len() < iterations,
        reconstruction: None,
        back_projection: None,
        measurements_loaded: preset.measurements.is_some(),
        setup_secs,
        solve_secs,
        gradient_secs,
        denoiser_secs,
        communication_secs,
        world_size,
        backend: comm.transport(),
        ranks,
        history,
        tiles: Vec::new(),
        halo_exchange,
        devices,
        recoveries: carried.recoveries.list().to_vec(),
        generations,
        resumed: carried.resumed.clone(),
        outputs: Vec::new(),
        run_dir: None,
        preset: preset.to_toml()?,
    };
    // The collective part is over: from here on only rank 0 works (scores, writes), so a failure
    // here cannot leave the other ranks waiting.
    let Some(staging) = carried.staging.take() else {
        return Ok(summary);
    };
    if let Some(t) = &preset.tiling
        && tile_times.iter().any(|r| !r.is_empty())
    {
        let map = PatchMap::plan(
            t,
            &x_shape[2..],
            world_size,
            preset.distributed.tile_assignment,
        )?;
        summary.tiles = map.measured(&tile_times)?;
    }
    if let Some(truth) = truth {
        let quality = |x: &Tensor| -> Result<Quality> {
            let ssim = match preset.output.ssim_every > 0 && metrics::ssim_fits(x.shape()) {
                true => Some(metrics::ssim(x, truth, 1.0)?),
                false => None,
            };
            Ok(Quality {
                psnr_db: metrics::psnr(x, truth, 1.0)?,
                ssim,
            })
        };
        summary.reconstruction = Some(quality(&recon.x)?);
        let computed;
        let baseline = match (adjoint_mean, &preset.algorithm) {
            (Some(x), _) => x,
            // An FBP job's reconstruction is the baseline itself (on its device, if any).
            (None, AlgorithmConfig::Fbp(_)) => &recon.x,
            (None, _) => {
                computed = fbp(fbp_operator, None, x_shape, ys)?;
                &computed
            }
        };
        summary.back_projection = Some(BackProjection {
            method: back_projection_method(fbp_operator),
            quality: quality(baseline)?,
        });
    }
    summary.outputs = write_outputs(staging.path(), preset, truth, &recon, ys, volumetric)?;
    summary.outputs.push(PathBuf::from(METRICS_FILE));
    let json = serde_json::to_vec_pretty(&summary)
        .map_err(|e| Error::Internal(format!("encoding {METRICS_FILE}: {e}")))?;
    io::write_atomic(&staging.path().join(METRICS_FILE), &json)?;
    summary.run_dir = Some(staging.commit(&preset.name)?);
    if let Some(writer) = &carried.checkpoints {
        writer.finish();
    }
    Ok(summary)
}

/// The preset's operators built on the host for their device twins.
fn device_operators(preset: &Preset, x_shape: &[usize]) -> Result<Vec<BuiltOperator>> {
    preset
        .operators()?
        .iter()
        .map(|spec| BuiltOperator::build(spec, x_shape))
        .collect()
}

/// CG least squares on `device` (`open_device` checked that the operators have device twins), from
/// the measurements `ys` simulated on the host as for a CPU run.
#[allow(clippy::too_many_arguments)]
fn cg_on_device(
    device: &dyn DeviceSolver,
    preset: &Preset,
    stack: &DistributedStack,
    ys: &[Tensor],
    x_shape: &[usize],
    cfg: &CgConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut optim::ViewCallback<'_>,
) -> Result<Reconstruction> {
    let built = device_operators(preset, x_shape)?;
    let ops: Vec<HostOperator<'_>> = built.iter().map(BuiltOperator::host).collect();
    let problem = LeastSquares {
        ops: &ops,
        ys,
        x_shape,
        cfg,
        monitor,
        ranks: Some(stack),
    };
    device.cg(&problem, on_iter)
}

/// PnP on `device` (every component of the preset has a device twin: `open_device` checked): the
/// preset's operators built on the host for their twins, the measurements `ys` simulated on the
/// host as for a CPU run, the step from the host stack (the CPU run's value).
#[allow(clippy::too_many_arguments)]
fn pnp_on_device(
    device: &dyn DeviceSolver,
    preset: &Preset,
    stack: &DistributedStack,
    ys: &[Tensor],
    x_shape: &[usize],
    cfg: &PnpConfig,
    monitor: &Monitor<'_>,
    on_iter: &mut optim::ViewCallback<'_>,
) -> Result<Reconstruction> {
    let built = device_operators(preset, x_shape)?;
    let ops: Vec<HostOperator<'_>> = built.iter().map(BuiltOperator::host).collect();
    let denoiser = match &preset.denoiser {
        Some(config) => DeviceDenoiser::from_config(config)?,
        None => {
            return Err(Error::config(
                "denoiser",
                "the pnp algorithm needs a [denoiser] section",
            ));
        }
    };
    let problem = PnpProblem {
        host_physics: stack,
        ops: &ops,
        fidelity: &preset.fidelity,
        denoiser: &denoiser,
        ys,
        x_shape,
        cfg,
        monitor,
        ranks: Some(stack),
    };
    device.pnp(&problem, on_iter)
}

/// How the back-projection baseline is formed: FBP for a stack of one tomography operator.
fn back_projection_method(fbp_operator: Option<&PhysicsConfig>) -> BackProjectionMethod {
    match fbp_operator {
        Some(_) => BackProjectionMethod::Fbp,
        None => BackProjectionMethod::AdjointMean,
    }
}

/// The filtered back-projection `A†y` of a stack of one whole tomography operator
/// ([`Preset::fbp_operator`]), 2-D or 3-D, on `device` when there is one.
fn fbp(
    operator: Option<&PhysicsConfig>,
    device: Option<&dyn DeviceSolver>,
    x_shape: &[usize],
    ys: &[Tensor],
) -> Result<Tensor> {
    match (operator, ys) {
        (Some(PhysicsConfig::Tomography(c)), [y]) => match device {
            Some(device) => device.fbp(HostOperator::Tomography(&c.build(x_shape)?), y),
            None => c.build(x_shape)?.fbp(y),
        },
        (Some(PhysicsConfig::Tomography3d(c)), [y]) => match device {
            Some(device) => device.fbp(HostOperator::Tomography3d(&c.build(x_shape)?), y),
            None => c.build(x_shape)?.fbp(y),
        },
        _ => Err(Error::config(
            "algorithm.kind",
            "fbp needs exactly one tomography operator",
        )),
    }
}

fn run_fbp(
    operator: Option<&PhysicsConfig>,
    device: Option<&dyn DeviceSolver>,
    x_shape: &[usize],
    ys: &[Tensor],
    monitor: &Monitor<'_>,
    on_iter: &mut optim::IterationCallback<'_>,
) -> Result<Reconstruction> {
    let t = Instant::now();
    let x = fbp(operator, device, x_shape, ys)?;
    let (psnr_db, ssim) = monitor.quality(&x, 1, true)?;
    let report = IterationReport {
        iteration: 1,
        iterations: 1,
        psnr_db,
        ssim,
        objective: None,
        relative_change: 1.0,
        times: optim::ComponentTimes {
            gradient_secs: t.elapsed().as_secs_f64(),
            ..Default::default()
        },
    };
    let stopped = on_iter(&report, &x).is_break();
    Ok(Reconstruction {
        x,
        history: vec![report],
        stopped,
    })
}

/// Writes the run's arrays into `out_dir`; returns their names.
fn write_outputs(
    out_dir: &Path,
    preset: &Preset,
    truth: Option<&Tensor>,
    recon: &Reconstruction,
    ys: &[Tensor],
    volumetric: bool,
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut put = |name: &str, x: &Tensor| -> Result<()> {
        io::write_array(&out_dir.join(name), x)?;
        written.push(PathBuf::from(name));
        Ok(())
    };
    put("reconstruction.npy", &recon.x)?;
    if let Some(truth) = truth {
        put("ground_truth.npy", truth)?;
    }
    if volumetric {
        put("reconstruction.nii.gz", &recon.x)?;
    } else if matches!(recon.x.shape(), [1, 1 | 3, _, _]) {
        put("reconstruction.png", &recon.x)?;
        if let Some(truth) = truth {
            put("ground_truth.png", truth)?;
        }
    }
    // Loaded measurements are the user's files: they are not copied.
    if preset.output.save_measurements && preset.measurements.is_none() {
        for (i, y) in ys.iter().enumerate() {
            put(&format!("measurement_{i}.npy"), y)?;
        }
    }
    Ok(written)
}
