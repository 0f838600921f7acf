//! The propagator (Devito's `AcousticWaveSolver`, deepwave's `scalar`): forward modelling of a batch
//! of shots, the adjoint-state gradient of a data misfit with a choice of memory strategy, and the
//! Born (linearised) forward operator whose adjoint the gradient is.
//!
//! Time stepping follows deepwave: the user's `dt` is the sample interval of wavelets and data; the
//! solver steps at `dt / step_ratio` with `step_ratio = ⌈dt·v_max·‖1/Δ‖·min Δ / (0.6·min Δ)⌉`,
//! resampling wavelets up and data down with band-limited FFT interpolation. Sources add
//! `−f·v²·dt²` to the new time level; receivers read the current one.
//!
//! The gradient is the exact gradient of this discrete forward map (the adjoint of every step,
//! including the absorbing layers, the free surface, the resampling and the edge replication of the
//! model into the padding), checked by a dot-product test against the Born operator and by finite
//! differences. deepwave's compiled backend, by contrast, samples it every `step_ratio` internal
//! steps; the two agree when `step_ratio = 1`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::geometry::Shot;
use super::grid::{Grid, fill_free_surface};
use super::kernels::{
    Axis, Coefs, FlushSubnormals, Isa, Kernel, Leapfrog, laplacian_leapfrog_on, widen_layer_cols,
};
use super::pml;
use super::resample;
use super::stencil::Accuracy;
use super::step::{self, Extras, Gradient, State};
use super::velocity::VelocityModel;
use crate::error::{Error, Result};
use crate::float::Float;
use crate::heap::try_vec;

/// deepwave's default Courant number for the internal time step.
pub const COURANT: f64 = 0.6;

/// Numerical settings of the propagator (deepwave's `scalar` arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct SolverSettings {
    pub accuracy: Accuracy,
    /// Absorbing layer widths in cells: `[top, bottom, left, right]`.
    pub pml_width: [usize; 4],
    /// Frequency the absorbing layers are tuned to (usually the wavelet's).
    pub pml_freq_hz: f64,
    /// Velocity used for the CFL condition and the layers; `None`: the model's maximum.
    pub max_vel: Option<f64>,
    /// Pressure-release top surface instead of an absorbing layer (the top width is then 0).
    pub free_surface: bool,
    /// Sample interval of wavelets and data (s).
    pub dt_s: f64,
    /// Samples per trace.
    pub nt: usize,
}

/// How the adjoint pass gets the forward wavefield it correlates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradientStrategy {
    /// Keep the spatial term of every internal step: fastest, memory ∝ steps × cells.
    StoreWavefield,
    /// Keep the full state every `checkpoint_every` steps and recompute each segment during the
    /// adjoint pass: one extra forward pass, memory ∝ √steps × cells.
    #[default]
    Checkpoint,
    /// Keep only a stencil-wide strip around the lossless interior each step and run the forward
    /// wavefield backwards in time there: memory ∝ steps × perimeter. The gradient is exact (to
    /// rounding of the time reversal) in the interior and left out in the absorbing layers, whose
    /// contribution reaches only the outermost `accuracy/2` model cells.
    BoundarySaving,
}

/// Options of a gradient computation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GradientOptions {
    pub strategy: GradientStrategy,
    /// Steps between checkpoints (`None`: ⌈√(6·steps)⌉, which minimises memory).
    pub checkpoint_every: Option<usize>,
    /// Also accumulate the source and receiver illumination (`Σₜ u²`, `Σₜ λ²`).
    pub illumination: bool,
}

/// Receiver data of one shot: `receivers × nt`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Gather<T> {
    pub receivers: usize,
    pub nt: usize,
    pub data: Vec<T>,
}

impl<T: Float> Gather<T> {
    pub fn zeros(receivers: usize, nt: usize) -> Self {
        Gather {
            receivers,
            nt,
            data: vec![T::ZERO; receivers * nt],
        }
    }

    /// Trace of receiver `r`.
    pub fn trace(&self, r: usize) -> &[T] {
        &self.data[r * self.nt..(r + 1) * self.nt]
    }
}

/// A data misfit: the loss of a shot's synthetic data and its derivative with respect to that data.
pub trait Misfit<T>: Sync {
    /// Loss of shot `shot` (its index in the batch) and `∂loss/∂data`, shaped like `synthetic`.
    fn evaluate(&self, shot: usize, synthetic: &Gather<T>) -> Result<(f64, Gather<T>)>;
}

/// `½‖F(d − d_obs)‖² · weight` with an optional zero-phase low-pass `F` (frequency continuation).
pub struct L2Misfit<'a, T> {
    pub observed: &'a [Gather<T>],
    pub weight: f64,
    /// `(dt_s, cutoff_hz)` of the low-pass applied to both data sets.
    pub low_pass: Option<(f64, f64)>,
}

impl<T: Float> Misfit<T> for L2Misfit<'_, T> {
    fn evaluate(&self, shot: usize, synthetic: &Gather<T>) -> Result<(f64, Gather<T>)> {
        let obs = self.observed.get(shot).ok_or_else(|| {
            Error::config(
                "observed data",
                format!("no observed gather for shot {shot}"),
            )
        })?;
        if (obs.receivers, obs.nt) != (synthetic.receivers, synthetic.nt) {
            return Err(Error::shape(
                "observed data",
                &[synthetic.receivers, synthetic.nt],
                &[obs.receivers, obs.nt],
            ));
        }
        let mut r: Vec<f64> = synthetic
            .data
            .iter()
            .zip(&obs.data)
            .map(|(s, o)| s.to_f64() - o.to_f64())
            .collect();
        if let Some((dt, cutoff)) = self.low_pass {
            resample::low_pass(&mut r, synthetic.nt, dt, cutoff);
        }
        let loss = 0.5 * self.weight * r.iter().map(|v| v * v).sum::<f64>();
        if let Some((dt, cutoff)) = self.low_pass {
            // F is symmetric, so ∂/∂d ½‖F r‖² = Fᵀ F r = F (F r).
            resample::low_pass(&mut r, synthetic.nt, dt, cutoff);
        }
        Ok((
            loss,
            Gather {
                receivers: synthetic.receivers,
                nt: synthetic.nt,
                data: r.iter().map(|v| T::from_f64(v * self.weight)).collect(),
            },
        ))
    }
}

/// A given residual (for the adjoint of the Born operator, `Jᵀδd`): loss 0.
pub struct GivenResidual<'a, T>(pub &'a [Gather<T>]);

impl<T: Float> Misfit<T> for GivenResidual<'_, T> {
    fn evaluate(&self, shot: usize, _synthetic: &Gather<T>) -> Result<(f64, Gather<T>)> {
        let g = self
            .0
            .get(shot)
            .ok_or_else(|| Error::config("residual", format!("no residual for shot {shot}")))?;
        Ok((0.0, g.clone()))
    }
}

/// The gradient of one shot's misfit.
#[derive(Debug, Clone)]
pub struct ShotGradient<T> {
    pub loss: f64,
    /// `∂loss/∂v` on the model grid.
    pub gradient: Vec<T>,
    pub synthetic: Gather<T>,
    /// `Σₜ u²` and `Σₜ λ²` on the model grid, with [`GradientOptions::illumination`].
    pub source_illumination: Option<Vec<T>>,
    pub receiver_illumination: Option<Vec<T>>,
    /// Bytes held at the peak of the computation (state, history, gradient buffers).
    pub peak_bytes: usize,
    /// Wall-clock seconds of the forward pass (with the misfit) and of the adjoint pass.
    pub forward_secs: f64,
    pub adjoint_secs: f64,
}

/// A shot prepared for stepping: padded indices and wavelets at the internal rate, time-major.
struct Plan<T> {
    src: Vec<usize>,
    rec: Vec<usize>,
    /// Upsampled wavelets `f[t][s]`.
    f: Vec<T>,
    /// What is added to the wavefield: `−f·v²·dt²`.
    s: Vec<T>,
}

/// What the forward pass keeps for the adjoint pass.
enum Record<'a, T> {
    Nothing,
    /// `w` of steps `t0..t1`, one grid per step.
    History(&'a mut [T]),
    /// The state every `every` steps.
    Checkpoints {
        every: usize,
        out: &'a mut Vec<[Vec<T>; 6]>,
    },
    /// The halo of the lossless region of `u(t)`, `halo.len()` values per step.
    Halo {
        out: &'a mut [T],
        halo: &'a [usize],
    },
}

/// The wave propagator on one velocity model.
pub struct Solver<T> {
    grid: Grid,
    accuracy: Accuracy,
    settings: SolverSettings,
    step_ratio: usize,
    dt_internal: f64,
    max_vel: f64,
    /// Padded velocity and `v²·dt²` (internal dt).
    v: Vec<T>,
    vv: Vec<T>,
    /// C-PML profiles `[a, b, db]` along depth and x.
    py: [Vec<T>; 3],
    px: [Vec<T>; 3],
    /// `1/Δz`, `1/Δx`, `1/Δz²`, `1/Δx²`.
    rd: [f64; 4],
    /// The lossless region (boundary saving) and its stencil halo.
    lossless: ((usize, usize), (usize, usize)),
    halo: Vec<usize>,
    isa: Isa,
    /// Temporal blocking of the forward-only path on one thread: `(steps, rows)` per block
    /// (`steps <= 1`: one sweep of the grid per step).
    time_block: (usize, usize),
}

/// Steps advanced together by the forward-only path when one thread owns a shot, and the rows per
/// block: `(block + steps·R)` rows of the ~9 forward fields (2.6 KB a row at 644 columns) stay
/// within a 1 MiB L2.
pub const TIME_BLOCK_STEPS: usize = 8;
pub const TIME_BLOCK_ROWS: usize = 16;

/// Most internal time steps one propagation may take (samples × the CFL ratio): past it a run
/// would not end in any useful time, and its per-step buffers could not be sized.
pub const MAX_INTERNAL_STEPS: usize = 1 << 32;

/// The internal-step ratio deepwave's `cfl_condition_n` chooses (saturating: a ratio beyond
/// `usize` is `usize::MAX`).
pub fn cfl_step_ratio(dt_s: f64, max_vel: f64, dz_m: f64, dx_m: f64) -> usize {
    (cfl_ratio(dt_s, max_vel, dz_m, dx_m).ceil() as usize).max(1)
}

/// The CFL ratio before rounding up (0 where the time step or the velocity is 0).
fn cfl_ratio(dt_s: f64, max_vel: f64, dz_m: f64, dx_m: f64) -> f64 {
    if dt_s == 0.0 || max_vel == 0.0 {
        return 0.0;
    }
    let s = dz_m.min(dx_m);
    let norm = (s / dz_m).hypot(s / dx_m);
    dt_s.abs() * max_vel * norm / s / COURANT
}

/// Internal steps per sample for a message: from the unrounded ratio (the rounded one saturates
/// past `usize`), to 4 digits when it is huge.
fn per_sample_steps(dt_s: f64, max_vel: f64, dz_m: f64, dx_m: f64) -> String {
    let steps = cfl_ratio(dt_s, max_vel, dz_m, dx_m).ceil();
    if steps < 1e9 {
        format!("{steps}")
    } else {
        format!("{steps:.3e}")
    }
}

/// `x` as a message reads it: plain digits in a human range, otherwise `1e-300` rather than 300
/// zeros.
fn readable(x: f64) -> String {
    if x != 0.0 && !(1e-3..1e9).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// Whether each step's rows are spread over the rayon pool: only when there are fewer shots than
/// threads. Otherwise every shot's whole time loop runs on one thread (no fork/join per step).
fn rows_in_parallel(shots: usize) -> bool {
    shots < rayon::current_num_threads()
}

macro_rules! by_radius {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match $self.accuracy {
            Accuracy::Two => $self.$method::<1>($($arg),*),
            Accuracy::Four => $self.$method::<2>($($arg),*),
            Accuracy::Six => $self.$method::<3>($($arg),*),
            Accuracy::Eight => $self.$method::<4>($($arg),*),
        }
    };
}

/// One shot's gradient in flight: what its three memory strategies share — the forward and
/// adjoint kernels, the source/receiver plan, the forward state and receiver traces, the adjoint
/// state, the gradient and illumination sums they build, and the misfit that turns the synthetic
/// data into the adjoint source.
struct ShotRun<'a, T, const R: usize> {
    kf: Kernel<'a, T, R>,
    ka: Kernel<'a, T, R>,
    plan: Plan<T>,
    state: State<T>,
    rec: Vec<T>,
    src_energy: Option<Vec<T>>,
    rec_energy: Option<Vec<T>>,
    acc: Vec<T>,
    adj: State<T>,
    index: usize,
    misfit: &'a dyn Misfit<T>,
    t_start: std::time::Instant,
}

/// What a shot's forward pass ends with, whatever the strategy: the misfit, the synthetic data,
/// the adjoint source (the residual at the internal rate) and the seconds it took.
struct Forward<T> {
    loss: f64,
    synthetic: Gather<T>,
    rho: Vec<T>,
    secs: f64,
}

impl<T: Float> Solver<T> {
    /// Builds the propagator for `model`.
    pub fn new(model: &VelocityModel<T>, settings: &SolverSettings) -> Result<Self> {
        let s = settings;
        if !(s.dt_s.is_finite() && s.dt_s > 0.0) {
            return Err(Error::config(
                "dt_s",
                format!("must be positive, got {}", s.dt_s),
            ));
        }
        if s.nt == 0 {
            return Err(Error::config("nt", "needs at least one time sample"));
        }
        if !(s.pml_freq_hz.is_finite() && s.pml_freq_hz >= 0.0) {
            return Err(Error::config(
                "pml_freq_hz",
                format!("must be a non-negative frequency, got {}", s.pml_freq_hz),
            ));
        }
        let model_max = model.max_velocity();
        let max_vel = match s.max_vel {
            Some(m) if !(m.is_finite() && m > 0.0) => {
                return Err(Error::config(
                    "max_vel",
                    format!("must be positive, got {m}"),
                ));
            }
            Some(m) if m < model_max * (1.0 - 1e-12) => {
                return Err(Error::config(
                    "max_vel",
                    format!(
                        "{m} m/s is below the model's maximum {model_max} m/s: the run would be unstable"
                    ),
                ));
            }
            Some(m) => m,
            None => model_max,
        };
        let accuracy = s.accuracy;
        let r = accuracy.radius();
        let mut pml = s.pml_width;
        if s.free_surface {
            pml[0] = 0;
        }
        let grid = Grid::new(model.nz, model.nx, r, pml, s.free_surface);
        let step_ratio = cfl_step_ratio(s.dt_s, max_vel, model.dz_m, model.dx_m);
        if step_ratio
            .checked_mul(s.nt)
            .is_none_or(|n| n > MAX_INTERNAL_STEPS)
        {
            return Err(Error::config(
                "dt_s",
                format!(
                    "{} samples of {} s on cells of {} × {} m at {} m/s need {} internal steps \
                     per sample, more than {MAX_INTERNAL_STEPS} in all: the cells are too small \
                     or the sampling too coarse",
                    s.nt,
                    readable(s.dt_s),
                    readable(model.dz_m),
                    readable(model.dx_m),
                    readable(max_vel),
                    per_sample_steps(s.dt_s, max_vel, model.dz_m, model.dx_m)
                ),
            ));
        }
        let dt = s.dt_s / step_ratio as f64;
        let dt2 = T::from_f64(dt * dt);
        let v = grid.pad(&model.v);
        let vv: Vec<T> = v.iter().map(|&x| x * x * dt2).collect();
        let conv = |p: Vec<f64>| -> Vec<T> { p.into_iter().map(T::from_f64).collect() };
        let axis = |n: usize, w: [usize; 2], d: f64| {
            let p = pml::profile(n, w, accuracy, d, dt, max_vel, s.pml_freq_hz);
            [conv(p.a), conv(p.b), conv(p.db)]
        };
        let py = axis(grid.nz, [pml[0], pml[1]], model.dz_m);
        let px = axis(grid.nx, [pml[2], pml[3]], model.dx_m);
        let (rows, cols) = grid.lossless_region();
        if rows.lo >= rows.hi || cols.lo >= cols.hi {
            return Err(Error::config(
                "model",
                format!(
                    "the {}×{} model leaves no interior between absorbing layers of width {:?}",
                    model.nz, model.nx, pml
                ),
            ));
        }
        let mut halo = Vec::new();
        for y in (rows.lo - r..rows.lo).chain(rows.hi..rows.hi + r) {
            halo.extend((cols.lo..cols.hi).map(|x| y * grid.nx + x));
        }
        for y in rows.lo..rows.hi {
            halo.extend(
                (cols.lo - r..cols.lo)
                    .chain(cols.hi..cols.hi + r)
                    .map(|x| y * grid.nx + x),
            );
        }
        Ok(Solver {
            accuracy,
            settings: s.clone(),
            step_ratio,
            dt_internal: dt,
            max_vel,
            v,
            vv,
            py,
            px,
            rd: [
                1.0 / model.dz_m,
                1.0 / model.dx_m,
                1.0 / (model.dz_m * model.dz_m),
                1.0 / (model.dx_m * model.dx_m),
            ],
            lossless: ((rows.lo, rows.hi), (cols.lo, cols.hi)),
            halo,
            grid,
            isa: Isa::detect(),
            time_block: (TIME_BLOCK_STEPS, TIME_BLOCK_ROWS),
        })
    }

    /// Internal steps per data sample.
    pub fn step_ratio(&self) -> usize {
        self.step_ratio
    }

    /// The internal time step (s).
    pub fn internal_dt(&self) -> f64 {
        self.dt_internal
    }

    /// Internal time steps of one propagation.
    pub fn internal_steps(&self) -> usize {
        self.settings.nt * self.step_ratio
    }

    /// The velocity used for stability and the absorbing layers.
    pub fn max_vel(&self) -> f64 {
        self.max_vel
    }

    /// Padded grid size `(rows, cols)` (model + layers + guard cells).
    pub fn padded_shape(&self) -> (usize, usize) {
        (self.grid.nz, self.grid.nx)
    }

    /// Cells updated per internal step.
    pub fn updated_cells(&self) -> usize {
        self.grid.updated_cells()
    }

    pub fn settings(&self) -> &SolverSettings {
        &self.settings
    }

    /// Steps between checkpoints with `opts` (`checkpoint_every`, else ⌈√(6·steps)⌉).
    fn checkpoint_every(&self, opts: &GradientOptions) -> usize {
        let nti = self.internal_steps();
        opts.checkpoint_every
            .unwrap_or_else(|| ((6 * nti) as f64).sqrt().ceil() as usize)
            .clamp(1, nti)
    }

    /// Bytes one shot's gradient holds at its peak, with `receivers` and `sources`: the forward
    /// and adjoint states, the traces at the internal rate, the source terms, the accumulated
    /// gradient (and illumination), and the forward wavefield kept for the adjoint pass as
    /// `opts.strategy` keeps it (every step, checkpoints and a segment, or boundary strips).
    /// Computed before anything is allocated, so a job is sized before it runs;
    /// [`ShotGradient::peak_bytes`] reports the same number.
    pub fn gradient_bytes(&self, receivers: usize, sources: usize, opts: &GradientOptions) -> u64 {
        let (cells, nti) = (self.grid.cells() as u64, self.internal_steps() as u64);
        let t = T::BYTES as u64;
        // Forward state 8 fields, adjoint 10; the gradient; internal-rate traces, source terms.
        let mut floats = cells * (8 + 10 + 1)
            + nti.saturating_mul((receivers + 2 * sources) as u64)
            + if opts.illumination { 2 * cells } else { 0 };
        floats = floats.saturating_add(match opts.strategy {
            GradientStrategy::StoreWavefield => nti.saturating_mul(cells),
            GradientStrategy::Checkpoint => {
                let every = self.checkpoint_every(opts) as u64;
                // Each snapshot holds 6 of the state's fields.
                nti.div_ceil(every)
                    .saturating_mul(6 * cells)
                    .saturating_add(every.saturating_mul(cells))
            }
            GradientStrategy::BoundarySaving => nti
                .saturating_mul(self.halo.len() as u64)
                .saturating_add(cells),
        });
        floats.saturating_mul(t)
    }

    /// Bytes one shot's forward modelling holds: the forward state, the traces at the internal
    /// rate, the source terms and the resampling's f64 traces.
    pub fn forward_bytes(&self, receivers: usize, sources: usize) -> u64 {
        let (cells, nti) = (self.grid.cells() as u64, self.internal_steps() as u64);
        (8 * cells)
            .saturating_add(nti.saturating_mul((receivers + 2 * sources) as u64))
            .saturating_mul(T::BYTES as u64)
            .saturating_add(self.resampling_bytes(receivers, sources))
    }

    /// Bytes of the f64 traces one shot's resampling holds beside [`Solver::gradient_bytes`]
    /// (or a forward shot's state): internal-rate traces converted to and from the data's rate.
    pub fn resampling_bytes(&self, receivers: usize, sources: usize) -> u64 {
        let nti = self.internal_steps() as u64;
        nti.saturating_mul((2 * receivers + sources) as u64)
            .saturating_mul(8)
    }

    /// The same propagator with another temporal blocking of its forward-only path (`steps <= 1`:
    /// none), which `tessera bench wave` measures against.
    pub(crate) fn with_time_block(mut self, steps: usize, rows: usize) -> Self {
        self.time_block = (steps, rows);
        self
    }

    /// The same propagator with its row kernels compiled for plain x86-64 (SSE2), the baseline
    /// `tessera bench wave` measures the vector variants against.
    pub(crate) fn with_baseline_isa(mut self) -> Self {
        self.isa = Isa::Baseline;
        self
    }

    /// Receiver data of each shot; `wavelets[i]` holds shot i's source signals, `sources × nt`.
    pub fn forward(&self, shots: &[Shot], wavelets: &[Vec<T>]) -> Result<Vec<Gather<T>>> {
        self.check_batch(shots, wavelets)?;
        let par = rows_in_parallel(shots.len());
        shots
            .par_iter()
            .zip(wavelets)
            .map(|(shot, w)| by_radius!(self.forward_shot(shot, w, par)))
            .collect()
    }

    /// The misfit, its gradient with respect to the velocity and the synthetic data of each shot.
    pub fn gradient(
        &self,
        shots: &[Shot],
        wavelets: &[Vec<T>],
        misfit: &dyn Misfit<T>,
        opts: &GradientOptions,
    ) -> Result<Vec<ShotGradient<T>>> {
        self.check_batch(shots, wavelets)?;
        if opts.checkpoint_every == Some(0) {
            return Err(Error::config("checkpoint_every", "must be at least 1"));
        }
        let par = rows_in_parallel(shots.len());
        shots
            .par_iter()
            .zip(wavelets)
            .enumerate()
            .map(|(i, (shot, w))| by_radius!(self.gradient_shot(i, shot, w, misfit, opts, par)))
            .collect()
    }

    /// The Born (linearised) data `J·δv` of each shot for a velocity perturbation `dv` on the model
    /// grid. [`Solver::gradient`] with [`GivenResidual`] applies `Jᵀ`.
    pub fn born(&self, shots: &[Shot], wavelets: &[Vec<T>], dv: &[T]) -> Result<Vec<Gather<T>>> {
        self.check_batch(shots, wavelets)?;
        if dv.len() != self.grid.mz * self.grid.mx {
            return Err(Error::shape(
                "velocity perturbation",
                &[self.grid.mz, self.grid.mx],
                &[dv.len()],
            ));
        }
        let dt2 = T::from_f64(self.dt_internal * self.dt_internal);
        let dv_pad = self.grid.pad(dv);
        let dvv: Vec<T> = self
            .v
            .iter()
            .zip(&dv_pad)
            .map(|(&v, &d)| T::TWO * v * dt2 * d)
            .collect();
        let par = rows_in_parallel(shots.len());
        shots
            .par_iter()
            .zip(wavelets)
            .map(|(shot, w)| by_radius!(self.born_shot(shot, w, &dvv, par)))
            .collect()
    }

    fn check_batch(&self, shots: &[Shot], wavelets: &[Vec<T>]) -> Result<()> {
        if shots.len() != wavelets.len() {
            return Err(Error::config(
                "wavelets",
                format!("{} wavelet sets for {} shots", wavelets.len(), shots.len()),
            ));
        }
        for (i, (shot, w)) in shots.iter().zip(wavelets).enumerate() {
            let acq = super::geometry::Acquisition {
                shots: vec![shot.clone()],
            };
            acq.validate(self.grid.mz, self.grid.mx)
                .map_err(|e| Error::config("acquisition", format!("shot {i}: {e}")))?;
            if w.len() != shot.sources.len() * self.settings.nt {
                return Err(Error::shape(
                    "source wavelets",
                    &[shot.sources.len(), self.settings.nt],
                    &[w.len()],
                ));
            }
            if let Some(j) = w.iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite {
                    what: format!("wavelet of shot {i} (sample {j})"),
                    count: w.iter().filter(|x| !x.is_finite()).count(),
                });
            }
        }
        Ok(())
    }

    /// The stencil kernel of the forward (or adjoint) pass; `parallel`: spread each step's rows
    /// over the rayon pool (false when every thread has a shot of its own).
    fn kernel<const R: usize>(&self, adjoint: bool, parallel: bool) -> Kernel<'_, T, R> {
        let (rows, cols) = if adjoint {
            (self.grid.adjoint_rows(), self.grid.adjoint_cols())
        } else {
            (self.grid.forward_rows(), self.grid.forward_cols())
        };
        Kernel {
            nx: self.grid.nx,
            c: Coefs::new(
                std::array::from_fn(|k| self.accuracy.first()[k]),
                std::array::from_fn(|k| self.accuracy.second()[k]),
                self.rd,
            ),
            y: Axis {
                a: &self.py[0],
                b: &self.py[1],
                db: &self.py[2],
            },
            x: Axis {
                a: &self.px[0],
                b: &self.px[1],
                db: &self.px[2],
            },
            rows: (rows.lo, rows.hi),
            cols: widen_layer_cols((cols.lo, cols.hi), self.grid.nx, R),
            isa: self.isa,
            parallel,
        }
    }

    fn plan(&self, shot: &Shot, wavelets: &[T]) -> Plan<T> {
        let nt = self.settings.nt;
        let ratio = self.step_ratio;
        let nti = nt * ratio;
        let ns = shot.sources.len();
        let up = resample::upsample(
            &wavelets.iter().map(|x| x.to_f64()).collect::<Vec<_>>(),
            nt,
            ratio,
        );
        let src: Vec<usize> = shot.sources.iter().map(|&c| self.grid.index(c)).collect();
        let dt2 = T::from_f64(self.dt_internal * self.dt_internal);
        let mut f = vec![T::ZERO; nti * ns];
        let mut s = vec![T::ZERO; nti * ns];
        for (j, &si) in src.iter().enumerate() {
            let vsq = self.v[si] * self.v[si];
            for t in 0..nti {
                let a = T::from_f64(up[j * nti + t]);
                f[t * ns + j] = a;
                s[t * ns + j] = -a * vsq * dt2;
            }
        }
        Plan {
            src,
            rec: shot.receivers.iter().map(|&c| self.grid.index(c)).collect(),
            f,
            s,
        }
    }

    /// Steps `t0..t1` of the forward propagation; records receivers (`rec[t][r]`) and what the
    /// adjoint pass needs.
    #[allow(clippy::too_many_arguments)]
    fn forward_pass<const R: usize>(
        &self,
        k: &Kernel<'_, T, R>,
        plan: &Plan<T>,
        state: &mut State<T>,
        (t0, t1): (usize, usize),
        mut rec: Option<&mut [T]>,
        mut record: Record<'_, T>,
        mut energy: Option<&mut [T]>,
    ) {
        let (nx, cells) = (self.grid.nx, self.grid.cells());
        let (ns, nr) = (plan.src.len(), plan.rec.len());
        let (block_steps, block_rows) = self.time_block;
        if block_steps > 1
            && !k.parallel
            && !self.grid.free_surface
            && matches!(record, Record::Nothing)
            && energy.is_none()
        {
            let mut c = t0;
            while c < t1 {
                let levels = block_steps.min(t1 - c);
                if let Some(rec) = rec.as_deref_mut() {
                    for (j, &i) in plan.rec.iter().enumerate() {
                        rec[c * nr + j] = state.cur[i];
                    }
                }
                let rec = &mut rec;
                step::forward_blocked(
                    k,
                    self.grid.nz,
                    &self.vv,
                    state,
                    levels,
                    block_rows,
                    |l, (r0, r1), new| {
                        let t = c + l;
                        let cells = r0 * nx..r1 * nx;
                        for (j, &i) in plan.src.iter().enumerate() {
                            if cells.contains(&i) {
                                new[i] += plan.s[t * ns + j];
                            }
                        }
                        if let Some(rec) = rec.as_deref_mut().filter(|_| l + 1 < levels) {
                            for (j, &i) in plan.rec.iter().enumerate() {
                                if cells.contains(&i) {
                                    rec[(t + 1) * nr + j] = new[i];
                                }
                            }
                        }
                    },
                );
                c += levels;
            }
            return;
        }
        for t in t0..t1 {
            if self.grid.free_surface {
                fill_free_surface(&mut state.cur, nx, R);
            }
            if let Some(rec) = rec.as_deref_mut() {
                for (j, &i) in plan.rec.iter().enumerate() {
                    rec[t * nr + j] = state.cur[i];
                }
            }
            let mut w_out = None;
            match &mut record {
                Record::Nothing => {}
                Record::History(h) => w_out = Some(&mut h[(t - t0) * cells..(t - t0 + 1) * cells]),
                Record::Checkpoints { every, out } => {
                    if (t - t0).is_multiple_of(*every) {
                        out.push(state.snapshot());
                    }
                }
                Record::Halo { out, halo } => {
                    let dst = &mut out[t * halo.len()..(t + 1) * halo.len()];
                    for (d, &i) in dst.iter_mut().zip(halo.iter()) {
                        *d = state.cur[i];
                    }
                }
            }
            let extras = Extras {
                w_out,
                energy: energy.as_deref_mut(),
                ..Default::default()
            };
            step::forward(k, self.grid.nz, &self.vv, state, extras);
            for (j, &i) in plan.src.iter().enumerate() {
                state.prev[i] += plan.s[t * ns + j];
            }
            state.rotate();
        }
    }

    /// One adjoint step at time `t`: β(t) from β(t+1), β(t+2); `G += β(t+1)·w(t)` over `region`,
    /// the source term, and the residual injected at the receivers.
    #[allow(clippy::too_many_arguments)]
    fn adjoint_step<const R: usize>(
        &self,
        k: &Kernel<'_, T, R>,
        plan: &Plan<T>,
        adj: &mut State<T>,
        t: usize,
        rho: &[T],
        w_fwd: &[T],
        region: ((usize, usize), (usize, usize)),
        acc: &mut [T],
        energy: Option<&mut [T]>,
    ) {
        let nx = self.grid.nx;
        let (ns, nr) = (plan.src.len(), plan.rec.len());
        if self.grid.free_surface {
            fill_free_surface(&mut adj.cur, nx, R);
        }
        let extras = Extras {
            energy,
            gradient: Some(Gradient {
                acc: &mut *acc,
                w_fwd,
                rows: region.0,
                cols: region.1,
            }),
            ..Default::default()
        };
        step::adjoint(k, self.grid.nz, &self.vv, adj, extras);
        for (j, &i) in plan.src.iter().enumerate() {
            acc[i] -= plan.f[t * ns + j] * adj.cur[i];
        }
        for (j, &i) in plan.rec.iter().enumerate() {
            adj.prev[i] += self.vv[i] * rho[t * nr + j];
        }
        adj.rotate();
    }

    /// Internal-rate receiver samples `rec[t][r]` → user-rate gather.
    fn to_gather(&self, rec: &[T], nr: usize) -> Result<Gather<T>> {
        let nti = self.internal_steps();
        let mut traces = vec![0.0; nr * nti];
        for t in 0..nti {
            for j in 0..nr {
                traces[j * nti + t] = rec[t * nr + j].to_f64();
            }
        }
        let down = resample::downsample(&traces, nti, self.step_ratio)?;
        Ok(Gather {
            receivers: nr,
            nt: self.settings.nt,
            data: down.into_iter().map(T::from_f64).collect(),
        })
    }

    /// User-rate residual gather → internal-rate `ρ[t][r]` (the adjoint of [`Self::to_gather`]).
    fn residual_internal(&self, g: &Gather<T>, nr: usize) -> Result<Vec<T>> {
        if (g.receivers, g.nt) != (nr, self.settings.nt) {
            return Err(Error::shape(
                "data residual",
                &[nr, self.settings.nt],
                &[g.receivers, g.nt],
            ));
        }
        let nti = self.internal_steps();
        let x: Vec<f64> = g.data.iter().map(|v| v.to_f64()).collect();
        let up = resample::downsample_adjoint(&x, self.settings.nt, self.step_ratio);
        let mut rho = vec![T::ZERO; nti * nr];
        for j in 0..nr {
            for t in 0..nti {
                rho[t * nr + j] = T::from_f64(up[j * nti + t]);
            }
        }
        Ok(rho)
    }

    fn forward_shot<const R: usize>(
        &self,
        shot: &Shot,
        wavelets: &[T],
        par: bool,
    ) -> Result<Gather<T>> {
        let k = self.kernel::<R>(false, par);
        let plan = self.plan(shot, wavelets);
        let nr = plan.rec.len();
        let nti = self.internal_steps();
        let mut state = State::zeros(self.grid.cells(), false);
        let mut rec = try_vec(nti.saturating_mul(nr), T::ZERO, "a shot's receiver traces")?;
        self.forward_pass(
            &k,
            &plan,
            &mut state,
            (0, nti),
            Some(&mut rec),
            Record::Nothing,
            None,
        );
        self.to_gather(&rec, nr)
    }

    fn born_shot<const R: usize>(
        &self,
        shot: &Shot,
        wavelets: &[T],
        dvv: &[T],
        par: bool,
    ) -> Result<Gather<T>> {
        let k = self.kernel::<R>(false, par);
        let plan = self.plan(shot, wavelets);
        let (nx, cells) = (self.grid.nx, self.grid.cells());
        let (ns, nr) = (plan.src.len(), plan.rec.len());
        let nti = self.internal_steps();
        let mut bg = State::zeros(cells, false);
        let mut dl = State::zeros(cells, false);
        let mut w_bg = vec![T::ZERO; cells];
        let mut rec = try_vec(nti.saturating_mul(nr), T::ZERO, "a shot's receiver traces")?;
        // ∂(−f·v²·dt²)/∂v · δv = −f·(2·v·δv)·dt², with dvv = 2·v·dt²·δv.
        let ds: Vec<T> = plan.src.iter().map(|&i| dvv[i]).collect();
        for t in 0..nti {
            if self.grid.free_surface {
                fill_free_surface(&mut bg.cur, nx, R);
                fill_free_surface(&mut dl.cur, nx, R);
            }
            for (j, &i) in plan.rec.iter().enumerate() {
                rec[t * nr + j] = dl.cur[i];
            }
            step::forward(
                &k,
                self.grid.nz,
                &self.vv,
                &mut bg,
                Extras {
                    w_out: Some(&mut w_bg),
                    ..Default::default()
                },
            );
            step::forward(
                &k,
                self.grid.nz,
                &self.vv,
                &mut dl,
                Extras {
                    born: Some((dvv, &w_bg)),
                    ..Default::default()
                },
            );
            for (j, &i) in plan.src.iter().enumerate() {
                bg.prev[i] += plan.s[t * ns + j];
                dl.prev[i] += -plan.f[t * ns + j] * ds[j];
            }
            bg.rotate();
            dl.rotate();
        }
        self.to_gather(&rec, nr)
    }

    /// One shot's misfit, gradient and synthetic data: the forward pass keeps the forward wavefield
    /// as `opts.strategy` says, the adjoint pass runs back through it (one function per strategy),
    /// and the sums they build become the gradient on the model.
    fn gradient_shot<const R: usize>(
        &self,
        index: usize,
        shot: &Shot,
        wavelets: &[T],
        misfit: &dyn Misfit<T>,
        opts: &GradientOptions,
        par: bool,
    ) -> Result<ShotGradient<T>> {
        let kf = self.kernel::<R>(false, par);
        let ka = self.kernel::<R>(true, par);
        let plan = self.plan(shot, wavelets);
        let cells = self.grid.cells();
        let nr = plan.rec.len();
        let nti = self.internal_steps();
        let peak_bytes = self.gradient_bytes(nr, plan.src.len(), opts) as usize;
        let mut run = ShotRun {
            state: State::zeros(cells, false),
            rec: try_vec(nti.saturating_mul(nr), T::ZERO, "a shot's receiver traces")?,
            src_energy: opts.illumination.then(|| vec![T::ZERO; cells]),
            rec_energy: opts.illumination.then(|| vec![T::ZERO; cells]),
            acc: vec![T::ZERO; cells],
            adj: State::zeros(cells, true),
            kf,
            ka,
            plan,
            index,
            misfit,
            t_start: std::time::Instant::now(),
        };
        let forward = match opts.strategy {
            GradientStrategy::StoreWavefield => self.adjoint_through_history(&mut run)?,
            GradientStrategy::Checkpoint => {
                self.adjoint_through_checkpoints(&mut run, self.checkpoint_every(opts))?
            }
            GradientStrategy::BoundarySaving => self.adjoint_through_reverse_steps(&mut run)?,
        };
        // g = 2·v·dt²·Σ λ·w = (2/v)·Σ β·w on the padded grid, folded onto the model.
        let padded: Vec<f64> = run
            .acc
            .iter()
            .zip(&self.v)
            .map(|(g, v)| 2.0 * g.to_f64() / v.to_f64())
            .collect();
        let gradient = self
            .grid
            .fold(&padded)
            .into_iter()
            .map(T::from_f64)
            .collect();
        let crop = |e: Option<Vec<T>>, scale: bool| {
            e.map(|e| {
                let e: Vec<T> = if scale {
                    e.iter()
                        .zip(&self.vv)
                        .map(|(&b, &vv)| b / (vv * vv))
                        .collect()
                } else {
                    e
                };
                self.grid.crop(&e)
            })
        };
        Ok(ShotGradient {
            loss: forward.loss,
            gradient,
            synthetic: forward.synthetic,
            source_illumination: crop(run.src_energy, false),
            receiver_illumination: crop(run.rec_energy, true),
            peak_bytes,
            forward_secs: forward.secs,
            adjoint_secs: run.t_start.elapsed().as_secs_f64() - forward.secs,
        })
    }

    /// Ends a shot's forward pass: its synthetic gather, the misfit and the adjoint source.
    fn finish_forward<const R: usize>(&self, run: &ShotRun<'_, T, R>) -> Result<Forward<T>> {
        let nr = run.plan.rec.len();
        let synthetic = self.to_gather(&run.rec, nr)?;
        let (loss, res) = run.misfit.evaluate(run.index, &synthetic)?;
        let rho = self.residual_internal(&res, nr)?;
        Ok(Forward {
            loss,
            synthetic,
            rho,
            secs: run.t_start.elapsed().as_secs_f64(),
        })
    }

    /// The interior of the padded grid, where the adjoint runs when the forward field is stored.
    fn interior<const R: usize>(&self) -> ((usize, usize), (usize, usize)) {
        ((R, self.grid.nz - R), (R, self.grid.nx - R))
    }

    /// The adjoint from step `t1 − 1` down to `t0` in the interior, the forward field of step `t`
    /// read from `fields` (step `t0` first).
    fn adjoint_back_through<const R: usize>(
        &self,
        run: &mut ShotRun<'_, T, R>,
        rho: &[T],
        fields: &[T],
        (t0, t1): (usize, usize),
    ) {
        let cells = self.grid.cells();
        for t in (t0..t1).rev() {
            let w = &fields[(t - t0) * cells..(t - t0 + 1) * cells];
            self.adjoint_step(
                &run.ka,
                &run.plan,
                &mut run.adj,
                t,
                rho,
                w,
                self.interior::<R>(),
                &mut run.acc,
                run.rec_energy.as_deref_mut(),
            );
        }
    }

    /// [`GradientStrategy::StoreWavefield`]: the forward wavefield of every step kept, the adjoint
    /// run back through it (the most memory, nothing recomputed).
    fn adjoint_through_history<const R: usize>(
        &self,
        run: &mut ShotRun<'_, T, R>,
    ) -> Result<Forward<T>> {
        let (cells, nti) = (self.grid.cells(), self.internal_steps());
        let mut hist = try_vec(
            nti.saturating_mul(cells),
            T::ZERO,
            "the forward wavefield of every step",
        )?;
        self.forward_pass(
            &run.kf,
            &run.plan,
            &mut run.state,
            (0, nti),
            Some(&mut run.rec),
            Record::History(&mut hist),
            run.src_energy.as_deref_mut(),
        );
        let forward = self.finish_forward(run)?;
        self.adjoint_back_through(run, &forward.rho, &hist, (0, nti));
        Ok(forward)
    }

    /// [`GradientStrategy::Checkpoint`]: the state kept every `every` steps; each segment's
    /// wavefield recomputed from its checkpoint, last segment first, and the adjoint run back
    /// through it.
    fn adjoint_through_checkpoints<const R: usize>(
        &self,
        run: &mut ShotRun<'_, T, R>,
        every: usize,
    ) -> Result<Forward<T>> {
        let (cells, nti) = (self.grid.cells(), self.internal_steps());
        let mut snaps = Vec::new();
        self.forward_pass(
            &run.kf,
            &run.plan,
            &mut run.state,
            (0, nti),
            Some(&mut run.rec),
            Record::Checkpoints {
                every,
                out: &mut snaps,
            },
            run.src_energy.as_deref_mut(),
        );
        let forward = self.finish_forward(run)?;
        let mut seg = try_vec(
            every.saturating_mul(cells),
            T::ZERO,
            "a checkpoint segment of the forward wavefield",
        )?;
        for (j, snap) in snaps.iter().enumerate().rev() {
            let (t0, t1) = (j * every, ((j + 1) * every).min(nti));
            run.state.restore(snap);
            self.forward_pass(
                &run.kf,
                &run.plan,
                &mut run.state,
                (t0, t1),
                None,
                Record::History(&mut seg),
                None,
            );
            self.adjoint_back_through(run, &forward.rho, &seg, (t0, t1));
        }
        Ok(forward)
    }

    /// [`GradientStrategy::BoundarySaving`]: only the strips around the lossless region kept; the
    /// forward field stepped backwards from the last two states ([`Self::reverse_step`]) beside
    /// the adjoint, which runs in the lossless region.
    fn adjoint_through_reverse_steps<const R: usize>(
        &self,
        run: &mut ShotRun<'_, T, R>,
    ) -> Result<Forward<T>> {
        let (cells, nti) = (self.grid.cells(), self.internal_steps());
        let mut strips = try_vec(
            nti.saturating_mul(self.halo.len()),
            T::ZERO,
            "the boundary strips of the forward wavefield",
        )?;
        let mut w = vec![T::ZERO; cells];
        self.forward_pass(
            &run.kf,
            &run.plan,
            &mut run.state,
            (0, nti),
            Some(&mut run.rec),
            Record::Halo {
                out: &mut strips,
                halo: &self.halo,
            },
            run.src_energy.as_deref_mut(),
        );
        let forward = self.finish_forward(run)?;
        // u(t+1) in `state.cur`, u(t) in `state.prev` once swapped below.
        let (mut hi, mut lo) = (
            std::mem::take(&mut run.state.cur),
            std::mem::take(&mut run.state.prev),
        );
        for t in (0..nti).rev() {
            self.reverse_step::<R>(&run.kf, &run.plan, t, &mut hi, &lo, &mut w, &strips);
            std::mem::swap(&mut hi, &mut lo);
            self.adjoint_step(
                &run.ka,
                &run.plan,
                &mut run.adj,
                t,
                &forward.rho,
                &w,
                self.lossless,
                &mut run.acc,
                run.rec_energy.as_deref_mut(),
            );
        }
        Ok(forward)
    }

    /// Steps the forward field backwards in the lossless region: from `lo = u(t)` and
    /// `hi = u(t+1)`, writes `w(t)` there and `hi ← u(t−1)`, whose halo comes from `strips`.
    #[allow(clippy::too_many_arguments)]
    fn reverse_step<const R: usize>(
        &self,
        k: &Kernel<'_, T, R>,
        plan: &Plan<T>,
        t: usize,
        hi: &mut [T],
        lo: &[T],
        w: &mut [T],
        strips: &[T],
    ) {
        let nx = self.grid.nx;
        let ((y0, y1), (x0, x1)) = self.lossless;
        let isa = self.isa;
        let row = |(j, (hrow, wrow)): (usize, (&mut [T], &mut [T]))| {
            let _flush = FlushSubnormals::new();
            let y = y0 + j;
            let base = y * nx;
            let mut leap = Leapfrog {
                vv: &self.vv[base..base + nx],
                new: hrow,
            };
            laplacian_leapfrog_on(isa, &k.c, lo, nx, y, x0, x1, wrow, &mut leap);
        };
        let (hi_rows, w_rows) = (&mut hi[y0 * nx..y1 * nx], &mut w[y0 * nx..y1 * nx]);
        if k.parallel {
            hi_rows
                .par_chunks_mut(nx)
                .zip(w_rows.par_chunks_mut(nx))
                .enumerate()
                .for_each(row);
        } else {
            hi_rows
                .chunks_mut(nx)
                .zip(w_rows.chunks_mut(nx))
                .enumerate()
                .for_each(row);
        }
        let ns = plan.src.len();
        for (j, &i) in plan.src.iter().enumerate() {
            let (y, x) = (i / nx, i % nx);
            if y >= y0 && y < y1 && x >= x0 && x < x1 {
                hi[i] += plan.s[t * ns + j];
            }
        }
        if t > 0 {
            let n = self.halo.len();
            for (&i, &v) in self.halo.iter().zip(&strips[(t - 1) * n..t * n]) {
                hi[i] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Temporal blocking changes only the order over cells: receiver data and every final field
    /// equal the one-sweep-per-step forward as numbers, for odd grids, sources and receivers in
    /// the guard rows, the absorbing layers and at block edges, and several block shapes.
    fn blocked_equals_stepwise<const R: usize>(accuracy: Accuracy, free_surface: bool) {
        let (mz, mx) = (23, 31);
        let v: Vec<f32> = (0..mz * mx)
            .map(|i| 1800.0 + 9.0 * (i / mx) as f32 + 3.0 * (i % mx) as f32)
            .collect();
        let model = VelocityModel::new(mz, mx, 5.0, 5.0, v).unwrap();
        let settings = SolverSettings {
            accuracy,
            pml_width: [6, 7, 5, 8],
            pml_freq_hz: 25.0,
            max_vel: None,
            free_surface,
            dt_s: 0.0008,
            nt: 61,
        };
        let solver = |steps, rows| {
            Solver::new(&model, &settings)
                .unwrap()
                .with_time_block(steps, rows)
        };
        let base = solver(1, 1);
        let (nz, nx) = (base.grid.nz, base.grid.nx);
        let nti = base.internal_steps();
        let shot = Shot {
            sources: vec![[0, 0]],
            receivers: vec![[0, 0]],
        };
        let wavelet: Vec<f32> = (0..settings.nt)
            .map(|t| ((t as f32) * 0.37).sin() * (-(t as f32 - 12.0).powi(2) / 40.0).exp())
            .collect();
        let mut plan = base.plan(&shot, &wavelet);
        // Guard row, layer rows, rows at and next to block edges, the last row; two sources on
        // one cell (their order matters in floating point).
        let cells = [
            (0, 3),
            (R, nx / 2),
            (R + 1, 5),
            (R + 16, 9),
            (R + 17, nx - 1 - R),
            (nz / 2, nx / 2),
            (nz / 2, nx / 2),
            (nz - R - 1, 7),
            (nz - 1, nx - 2),
        ];
        plan.src = cells.iter().map(|&(y, x)| y * nx + x).collect();
        plan.s = (0..nti * plan.src.len())
            .map(|i| ((i as f32) * 0.61).sin() * 1e-2)
            .collect();
        plan.rec = cells
            .iter()
            .chain(&[(R + 2, 1), (nz - R, 4), (R + 15, nx - 1)])
            .map(|&(y, x)| y * nx + x)
            .collect();
        let nr = plan.rec.len();
        let run = |solver: &Solver<f32>| {
            let k = solver.kernel::<R>(false, false);
            let mut state = State::zeros(solver.grid.cells(), false);
            let mut rec = vec![0.0f32; nti * nr];
            solver.forward_pass(
                &k,
                &plan,
                &mut state,
                (0, nti),
                Some(&mut rec),
                Record::Nothing,
                None,
            );
            (rec, state)
        };
        let (rec0, state0) = run(&base);
        assert!(rec0.iter().any(|&r| r != 0.0));
        for (steps, rows) in [(2, 1), (3, 5), (8, 16), (5, 7), (13, 3), (nti + 3, 40)] {
            let (rec, state) = run(&solver(steps, rows));
            assert!(
                rec == rec0,
                "receivers differ, block {steps} steps x {rows} rows"
            );
            assert!(
                state == state0,
                "fields differ, block {steps} steps x {rows} rows"
            );
        }
    }

    #[test]
    fn temporal_blocking_gives_the_numbers_of_one_sweep_per_step() {
        blocked_equals_stepwise::<2>(Accuracy::Four, false);
        blocked_equals_stepwise::<4>(Accuracy::Eight, false);
        blocked_equals_stepwise::<1>(Accuracy::Two, false);
        // A free surface falls back to one sweep per step; still the same numbers.
        blocked_equals_stepwise::<2>(Accuracy::Four, true);
    }
}
