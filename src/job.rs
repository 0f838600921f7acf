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

use serde::Serialize;

use std::sync::Arc;

use crate::denoise::Denoiser;
use crate::dist::denoise::DistributedTiledDenoiser;
use crate::dist::physics::DistributedStack;
use crate::dist::profile::{IterationProfile, Profiler};
use crate::dist::timed::{PhasedDenoiser, TimedCollective};
use crate::dist::{Collective, SingleProcess};
use crate::error::{Error, Result};
use crate::io;
use crate::metrics;
use crate::optim::{self, AlgorithmConfig, IterationReport, Monitor, Reconstruction};
use crate::physics::{PhysicsConfig, StackedLinearPhysics};
use crate::preset::{ImageSource, MeasurementSource, Preset};
use crate::samples;
use crate::tensor::Tensor;
use crate::tiling::TiledDenoiser;

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
    /// One iteration finished; `x` is the current reconstruction. `report.times.communication_secs`
    /// is this rank's time inside collectives during the iteration.
    Iteration {
        report: &'a IterationReport,
        x: &'a Tensor,
    },
}

/// Quality of one image against the ground truth.
#[derive(Debug, Clone, Serialize)]
pub struct Quality {
    pub psnr_db: f64,
    pub ssim: f64,
}

/// Time one rank spent per component over the whole run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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

/// Summary of a finished job; also written as `metrics.json`.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    pub name: String,
    pub image_shape: Vec<usize>,
    pub operators: Vec<String>,
    pub algorithm: String,
    pub iterations: usize,
    pub stopped_early: bool,
    /// Quality of the final reconstruction (`None` without a ground truth).
    pub reconstruction: Option<Quality>,
    /// Quality of the back-projection `Σ Aᵢᵀyᵢ`, for comparison.
    pub adjoint: Option<Quality>,
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
    pub backend: String,
    /// Per-rank totals (gathered on rank 0).
    pub ranks: Vec<RankTimes>,
    pub history: Vec<IterationReport>,
    pub outputs: Vec<PathBuf>,
    /// The preset that was run, as TOML (after overrides).
    pub preset: String,
}

/// Arrays a job receives with its preset instead of from files (`[image] inline = "NAME"`).
pub type InlineArrays = [(String, Tensor)];

/// Loads the ground truth described by `source` (sample or file relative to `base_dir`).
pub fn load_image(
    source: &ImageSource,
    volumetric: bool,
    seed: u64,
    base_dir: &Path,
) -> Result<Tensor> {
    load_image_with(source, volumetric, seed, base_dir, &[])
}

/// Like [`load_image`], resolving `inline = "NAME"` among `inline`.
pub fn load_image_with(
    source: &ImageSource,
    volumetric: bool,
    seed: u64,
    base_dir: &Path,
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
            let full = io::resolve(base_dir, path);
            let x = io::read_array(&full)?;
            x.check_finite(&full.display().to_string())?;
            to_batch_layout(x, volumetric, &full)?
        }
        (None, None) => return Err(Error::config("image", "give `sample` or `path`")),
    };
    if source.grayscale && x.shape()[1] > 1 {
        x = to_grayscale(&x);
    }
    Ok(x)
}

/// The ground truth, when the preset has one, and the shape `(B, C, …)` of the image to reconstruct.
pub fn load_truth(
    source: &ImageSource,
    volumetric: bool,
    seed: u64,
    base_dir: &Path,
    inline: &InlineArrays,
) -> Result<(Option<Tensor>, Vec<usize>)> {
    if let Some(shape) = &source.shape {
        return Ok((None, [&[1], &shape[..]].concat()));
    }
    let x = load_image_with(source, volumetric, seed, base_dir, inline)?;
    let shape = x.shape().to_vec();
    Ok((Some(x), shape))
}

/// Loads `[measurements]` (files relative to `base_dir`, or arrays among `inline`) and checks each
/// against the shape its operator produces (`shapes[i]`, operator named `names[i]`). Leading axes
/// of size 1 that a file leaves out are added.
pub fn load_measurements(
    source: &MeasurementSource,
    base_dir: &Path,
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
                let path = io::resolve(base_dir, &source.paths[i]);
                let y = io::read_array(&path)?;
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

/// Checks a preset's inputs without running it: the image (or its shape) loads, and loaded
/// measurements exist, are finite and fit their operators. `tessera serve` calls this on rank 0
/// before any rank starts, so bad input fails the job instead of the whole group.
pub fn check_inputs(preset: &Preset, base_dir: &Path, inline: &InlineArrays) -> Result<()> {
    let (_, x_shape) = load_truth(
        &preset.image,
        preset.is_volumetric(),
        preset.seed,
        base_dir,
        inline,
    )?;
    if let Some(source) = &preset.measurements {
        let ops = preset
            .physics
            .iter()
            .map(|p| p.build(&x_shape, None))
            .collect::<Result<Vec<_>>>()?;
        let shapes = ops
            .iter()
            .map(|op| op.output_shape(&x_shape))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<String> = ops.iter().map(|op| op.name()).collect();
        load_measurements(source, base_dir, inline, &shapes, &names)?;
    }
    Ok(())
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

/// Builds the denoiser of a preset; with `[tiling]` its tiles are spread over the group's ranks.
/// Without tiling every rank denoises the whole image (the same result on each).
pub fn build_denoiser(
    preset: &Preset,
    base_dir: &Path,
    comm: Arc<dyn Collective>,
) -> Result<Option<Box<dyn Denoiser>>> {
    let Some(cfg) = &preset.denoiser else {
        return Ok(None);
    };
    let inner = cfg.build_in(base_dir)?;
    Ok(Some(match &preset.tiling {
        Some(t) if t.kind == crate::tiling::TilingKind::Spatial => {
            Box::new(crate::dist::spatial::SpatialDenoiser::new(comm, inner, t)?)
        }
        Some(t) => Box::new(DistributedTiledDenoiser::new(
            comm,
            TiledDenoiser::from_config(inner, t)?,
            preset.distributed.tile_assignment,
        )),
        None => inner,
    }))
}

/// Runs `preset` in this process alone, writing outputs into `out_dir` (created if needed).
pub fn run(
    preset: &Preset,
    base_dir: &Path,
    out_dir: &Path,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    run_in_group(preset, base_dir, out_dir, Box::new(SingleProcess), on_event)
}

/// Runs `preset` on every rank of a group (each rank calls this with its collective). Operators and
/// tiles are shared among the ranks; every rank holds the same iterate; rank 0 writes the outputs
/// and the returned summary holds every rank's timings.
pub fn run_in_group(
    preset: &Preset,
    base_dir: &Path,
    out_dir: &Path,
    comm: Box<dyn Collective>,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    run_in_group_with(preset, base_dir, out_dir, comm, &[], on_event)
}

/// [`run_in_group`] with arrays sent along with the preset (every rank passes the same ones).
pub fn run_in_group_with(
    preset: &Preset,
    base_dir: &Path,
    out_dir: &Path,
    comm: Box<dyn Collective>,
    inline: &InlineArrays,
    on_event: &mut dyn FnMut(JobEvent<'_>) -> ControlFlow<()>,
) -> Result<JobSummary> {
    preset.validate()?;
    let t_start = Instant::now();
    let timed = Arc::new(TimedCollective::new(comm));
    let comm: Arc<dyn Collective> = timed.clone();
    let (rank, world_size) = (comm.rank(), comm.world_size());
    let volumetric = preset.is_volumetric();
    let (truth, x_shape) = load_truth(&preset.image, volumetric, preset.seed, base_dir, inline)?;
    let mut stack = DistributedStack::from_factory(comm.clone(), preset.physics.len(), |i| {
        preset.physics[i].build(&x_shape, preset.noise.as_ref())
    })?;
    stack.gather = preset.distributed.gather;
    stack.sum_order = preset.distributed.sum_order;
    let noise_seed =
        crate::dist::rank_seed(preset.seed, rank, preset.distributed.seed_offset_by_rank);
    let operator_names = stack.names();
    let ys = match (&preset.measurements, &truth) {
        (Some(source), _) => {
            // Every rank reads every measurement (the stack's adjoint sums need all of them); the
            // shapes are gathered first so that all ranks agree on an error.
            let shapes = stack.output_shapes(&x_shape)?;
            load_measurements(source, base_dir, inline, &shapes, &operator_names)?
        }
        (None, Some(truth)) => stack.measure(truth, noise_seed)?,
        (None, None) => {
            return Err(Error::config(
                "image.shape",
                "an unknown image needs loaded [measurements]",
            ));
        }
    };
    let adjoint = stack.adjoint(&ys)?;
    let denoiser = build_denoiser(preset, base_dir, comm.clone())?.map(|inner| PhasedDenoiser {
        inner,
        timed: timed.clone(),
    });
    if rank == 0 {
        std::fs::create_dir_all(out_dir)
            .map_err(|e| Error::io("creating output folder", out_dir, e))?;
    }
    let setup_secs = t_start.elapsed().as_secs_f64();
    let mut comm_per_iter = Vec::new();
    let mut comm_mark = timed.secs();

    let monitor = Monitor {
        ground_truth: truth.as_ref(),
        data_range: 1.0,
        ssim_every: preset.output.ssim_every,
    };
    let iterations = preset.algorithm.iterations();
    if on_event(JobEvent::Started {
        name: &preset.name,
        image_shape: &x_shape,
        operators: stack.len(),
        iterations,
        world_size,
        operator_names: &operator_names,
        truth: truth.as_ref(),
        measurements: &ys,
    })
    .is_break()
    {
        return Err(Error::Unsupported(
            "the job was cancelled before it started".into(),
        ));
    }
    let mut profiler = Profiler::start(timed.clone())?;
    let mut callback = |report: &IterationReport, x: &Tensor| {
        profiler.iteration_done(&report.times);
        let now = timed.secs();
        comm_per_iter.push(now - comm_mark);
        let mut report = report.clone();
        report.times.communication_secs = now - comm_mark;
        comm_mark = now;
        let flow = on_event(JobEvent::Iteration { report: &report, x });
        profiler.next_iteration();
        flow
    };
    let t_solve = Instant::now();
    let (algorithm, recon) = match &preset.algorithm {
        AlgorithmConfig::Pnp(cfg) => {
            let denoiser = denoiser.as_ref().ok_or_else(|| {
                Error::config("denoiser", "the pnp algorithm needs a [denoiser] section")
            })?;
            let r = optim::pnp(
                &stack,
                &preset.fidelity,
                denoiser,
                &ys,
                &x_shape,
                cfg,
                &monitor,
                &mut callback,
            )?;
            (format!("pnp ({})", denoiser.name()), r)
        }
        AlgorithmConfig::Cg(cfg) => (
            "cg least squares".to_string(),
            optim::least_squares(&stack, &ys, cfg, &monitor, &mut callback)?,
        ),
        AlgorithmConfig::Fbp(_) => (
            "fbp".to_string(),
            run_fbp(preset, &x_shape, &ys, &monitor, &mut callback)?,
        ),
    };
    let solve_secs = t_solve.elapsed().as_secs_f64();
    let mut history = recon.history.clone();
    for (h, c) in history.iter_mut().zip(&comm_per_iter) {
        h.times.communication_secs = *c;
    }
    let gradient_secs = history.iter().map(|h| h.times.gradient_secs).sum();
    let denoiser_secs = history.iter().map(|h| h.times.denoiser_secs).sum();
    let profiles = profiler.finish()?;
    let mine = RankTimes {
        rank,
        operators: stack.local_indices(),
        gradient_secs,
        denoiser_secs,
        communication_secs: timed.secs(),
        total_secs: t_start.elapsed().as_secs_f64(),
        idle_secs: 0.0,
        threads: rayon::current_num_threads(),
        peak_rss_bytes: 0,
        iterations: Vec::new(),
    };
    let mut ranks = gather_rank_times(comm.as_ref(), &mine)?;
    for (r, iterations) in ranks.iter_mut().zip(profiles) {
        r.idle_secs = iterations.iter().map(IterationProfile::idle_secs).sum();
        r.peak_rss_bytes = iterations
            .iter()
            .map(|i| i.peak_rss_bytes)
            .max()
            .unwrap_or(0);
        r.iterations = iterations;
    }

    let quality = |x: &Tensor| -> Result<Option<Quality>> {
        let Some(truth) = &truth else {
            return Ok(None);
        };
        Ok(Some(Quality {
            psnr_db: metrics::psnr(x, truth, 1.0)?,
            ssim: metrics::ssim(x, truth, 1.0)?,
        }))
    };
    let mut summary = JobSummary {
        name: preset.name.clone(),
        image_shape: x_shape.clone(),
        operators: operator_names,
        algorithm,
        iterations: recon.history.len(),
        stopped_early: recon.stopped,
        reconstruction: quality(&recon.x)?,
        adjoint: quality(&adjoint)?,
        measurements_loaded: preset.measurements.is_some(),
        setup_secs,
        solve_secs,
        gradient_secs,
        denoiser_secs,
        communication_secs: mine.communication_secs,
        world_size,
        backend: comm.backend_name(),
        ranks,
        history,
        outputs: Vec::new(),
        preset: preset.to_toml()?,
    };
    if rank != 0 {
        return Ok(summary);
    }
    summary.outputs = write_outputs(out_dir, preset, truth.as_ref(), &recon, &ys, volumetric)?;
    let metrics_path = out_dir.join("metrics.json");
    summary.outputs.push(metrics_path.clone());
    let json = serde_json::to_vec_pretty(&summary)
        .map_err(|e| Error::config("metrics.json", e.to_string()))?;
    io::write_atomic(&metrics_path, &json)?;
    Ok(summary)
}

/// Every rank's timings, in rank order.
fn gather_rank_times(comm: &dyn Collective, mine: &RankTimes) -> Result<Vec<RankTimes>> {
    let bytes = serde_json::to_vec(mine).map_err(|e| Error::config("timings", e.to_string()))?;
    comm.all_gather(&bytes)?
        .iter()
        .map(|b| {
            serde_json::from_slice(b).map_err(|e| {
                Error::config("timings", format!("a rank sent unreadable timings: {e}"))
            })
        })
        .collect()
}

fn run_fbp(
    preset: &Preset,
    x_shape: &[usize],
    ys: &[Tensor],
    monitor: &Monitor<'_>,
    on_iter: &mut optim::IterationCallback<'_>,
) -> Result<Reconstruction> {
    let t = Instant::now();
    let x = match &preset.physics[..] {
        [PhysicsConfig::Tomography(c)] => c.build(x_shape)?.fbp(&ys[0])?,
        [PhysicsConfig::Tomography3d(c)] => c.build(x_shape)?.fbp(&ys[0])?,
        _ => {
            return Err(Error::config(
                "algorithm.kind",
                "fbp needs exactly one tomography operator",
            ));
        }
    };
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
        let path = out_dir.join(name);
        io::write_array(&path, x)?;
        written.push(path);
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
