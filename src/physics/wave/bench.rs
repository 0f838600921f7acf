//! The wave benchmark (issue 10), shared by `cargo bench --bench wave` and `tessera bench wave`:
//! forward and forward+adjoint throughput in cell-updates per second per core on a Marmousi-sized
//! grid, the peak memory per shot of each gradient strategy, and the machine's memory bandwidth
//! (a STREAM-like triad measured in the same run) to put the throughput in proportion. Each round
//! also runs the forward with the row kernels compiled for plain x86-64, the baseline the AVX2 /
//! AVX-512 variants are measured against in the same run.
//! `scripts/bench_deepwave.py` runs deepwave on the same problem, interleaved with this one.

use std::time::Instant;

use serde::Serialize;

use super::geometry::Shot;
use super::solver::{GradientOptions, GradientStrategy, L2Misfit, Solver, SolverSettings};
use super::stencil::Accuracy;
use super::velocity::VelocityModel;
use super::wavelet::ricker;
use crate::error::Result;
use crate::float::Float;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct WaveBenchSpec {
    /// Model cells (depth, x).
    pub nz: usize,
    pub nx: usize,
    pub shots: usize,
    pub nt: usize,
    pub accuracy: usize,
    pub pml_width: usize,
    pub repeats: usize,
    /// Also time the adjoint (gradient) pass.
    pub gradient: bool,
}

impl Default for WaveBenchSpec {
    fn default() -> Self {
        WaveBenchSpec {
            nz: 250,
            nx: 600,
            shots: 2,
            nt: 500,
            accuracy: 4,
            pml_width: 20,
            repeats: 3,
            gradient: true,
        }
    }
}

/// Results (medians over the repeats).
#[derive(Debug, Clone, Serialize)]
pub struct WaveBench {
    pub spec: WaveBenchSpec,
    pub threads: usize,
    pub padded: (usize, usize),
    pub internal_steps: usize,
    /// Cells updated by one propagation of one shot (padded interior × internal steps).
    pub cell_updates_per_shot: f64,
    pub forward_secs: f64,
    /// The same forward with the kernels compiled for plain x86-64 (no AVX), in the same rounds.
    pub forward_baseline_isa_secs: f64,
    /// The same forward sweeping the whole grid once per step (no temporal blocking), in the
    /// same rounds.
    pub forward_one_sweep_secs: f64,
    /// Forward + adjoint with the stored wavefield.
    pub gradient_secs: Option<f64>,
    /// Peak bytes per shot of each strategy: stored wavefield, checkpointing, boundary saving.
    pub peak_bytes: Vec<(GradientStrategy, usize)>,
    /// STREAM-like triad over arrays far larger than the caches (bytes/s, all threads).
    pub triad_bytes_per_sec: f64,
}

impl WaveBench {
    /// Forward cell-updates per second per core.
    pub fn forward_rate_per_core(&self) -> f64 {
        self.cell_updates_per_shot * self.spec.shots as f64
            / self.forward_secs
            / self.threads as f64
    }

    /// Forward + adjoint (one forward and one adjoint propagation per shot) cell-updates per second
    /// per core, counting both propagations.
    pub fn gradient_rate_per_core(&self) -> Option<f64> {
        self.gradient_secs.map(|s| {
            2.0 * self.cell_updates_per_shot * self.spec.shots as f64 / s / self.threads as f64
        })
    }

    /// Fraction of the triad bandwidth the forward loop moves, counting the minimum traffic of an
    /// interior update: read u(t), u(t−1), v²dt², write u(t+1) — 16 bytes in float32.
    pub fn forward_bandwidth_fraction(&self) -> f64 {
        let bytes = 4.0 * f32::BYTES as f64 * self.cell_updates_per_shot * self.spec.shots as f64;
        bytes / self.forward_secs / self.triad_bytes_per_sec
    }
}

/// The benchmark problem: model, settings, shots and their wavelets.
pub struct Problem {
    pub model: VelocityModel<f32>,
    pub settings: SolverSettings,
    pub shots: Vec<Shot>,
    pub wavelets: Vec<Vec<f32>>,
}

/// A smooth Marmousi-sized model (1500 m/s at the top to 4000 m/s at the bottom with a lateral
/// undulation), sources and receivers along the top, dt at 0.95 of the CFL limit so the solver
/// steps at the data rate, as in deepwave's Marmousi example.
pub fn problem(spec: &WaveBenchSpec) -> Result<Problem> {
    let (nz, nx, dx) = (spec.nz, spec.nx, 4.0);
    let v: Vec<f32> = (0..nz * nx)
        .map(|i| {
            let (z, x) = ((i / nx) as f64 / nz as f64, (i % nx) as f64 / nx as f64);
            (1500.0 + 2500.0 * z + 150.0 * (6.0 * x + 3.0 * z).sin()).clamp(1500.0, 4000.0) as f32
        })
        .collect();
    let model = VelocityModel::new(nz, nx, dx, dx, v)?;
    let vmax = model.max_velocity();
    let dt = 0.95 * super::solver::COURANT * dx / (vmax * 2f64.sqrt());
    let accuracy = Accuracy::try_from(spec.accuracy as u32)?;
    let settings = SolverSettings {
        accuracy,
        pml_width: [spec.pml_width; 4],
        pml_freq_hz: 25.0,
        max_vel: None,
        free_surface: false,
        dt_s: dt,
        nt: spec.nt,
    };
    let shots: Vec<Shot> = (0..spec.shots)
        .map(|s| Shot {
            sources: vec![[2, (s + 1) * nx / (spec.shots + 1)]],
            receivers: (0..nx / 4).map(|r| [2, 4 * r]).collect(),
        })
        .collect();
    let w: Vec<f32> = ricker(25.0, spec.nt, dt, Some(1.5 / 25.0))
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let wavelets = vec![w; spec.shots];
    Ok(Problem {
        model,
        settings,
        shots,
        wavelets,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Bytes per second of `a = b + s·c` over three 64 MiB float32 arrays on the rayon pool (best of 5).
pub fn triad_bandwidth() -> f64 {
    use rayon::prelude::*;
    let n = 16 << 20;
    let b = vec![1.0f32; n];
    let c = vec![2.0f32; n];
    let mut a = vec![0.0f32; n];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        a.par_chunks_mut(1 << 16)
            .zip(b.par_chunks(1 << 16))
            .zip(c.par_chunks(1 << 16))
            .for_each(|((a, b), c)| {
                for i in 0..a.len() {
                    a[i] = b[i] + 3.0 * c[i];
                }
            });
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&a);
    3.0 * 4.0 * n as f64 / best
}

/// Runs the benchmark.
pub fn bench_wave(spec: &WaveBenchSpec) -> Result<WaveBench> {
    let Problem {
        model,
        settings,
        shots,
        wavelets,
    } = problem(spec)?;
    let solver = Solver::new(&model, &settings)?;
    let observed = solver.forward(&shots, &wavelets)?;
    let mut forward = Vec::new();
    let mut forward_baseline = Vec::new();
    let mut gradient = Vec::new();
    let misfit = L2Misfit {
        observed: &observed,
        weight: 1.0,
        low_pass: None,
    };
    // The starting model differs from the observed one, so the residual is not zero.
    let mut start = model.clone();
    start.v.iter_mut().for_each(|v| *v *= 0.98);
    let start_solver = Solver::new(
        &start,
        &SolverSettings {
            max_vel: Some(solver.max_vel()),
            ..settings.clone()
        },
    )?;
    let store = GradientOptions {
        strategy: GradientStrategy::StoreWavefield,
        ..Default::default()
    };
    let baseline = Solver::new(&model, &settings)?.with_baseline_isa();
    let one_sweep = Solver::new(&model, &settings)?.with_time_block(1, 1);
    let mut forward_one_sweep = Vec::new();
    for _ in 0..spec.repeats.max(1) {
        let t = Instant::now();
        std::hint::black_box(solver.forward(&shots, &wavelets)?);
        forward.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(baseline.forward(&shots, &wavelets)?);
        forward_baseline.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(one_sweep.forward(&shots, &wavelets)?);
        forward_one_sweep.push(t.elapsed().as_secs_f64());
        if spec.gradient {
            let t = Instant::now();
            std::hint::black_box(start_solver.gradient(&shots, &wavelets, &misfit, &store)?);
            gradient.push(t.elapsed().as_secs_f64());
        }
    }
    let mut peak_bytes = Vec::new();
    if spec.gradient {
        for strategy in [
            GradientStrategy::StoreWavefield,
            GradientStrategy::Checkpoint,
            GradientStrategy::BoundarySaving,
        ] {
            let opts = GradientOptions {
                strategy,
                ..Default::default()
            };
            let one = start_solver.gradient(&shots[..1], &wavelets[..1], &misfit, &opts)?;
            peak_bytes.push((strategy, one[0].peak_bytes));
        }
    }
    Ok(WaveBench {
        spec: spec.clone(),
        threads: rayon::current_num_threads(),
        padded: solver.padded_shape(),
        internal_steps: solver.internal_steps(),
        cell_updates_per_shot: (solver.updated_cells() * solver.internal_steps()) as f64,
        forward_secs: median(forward),
        forward_baseline_isa_secs: median(forward_baseline),
        forward_one_sweep_secs: median(forward_one_sweep),
        gradient_secs: spec.gradient.then(|| median(gradient)),
        peak_bytes,
        triad_bytes_per_sec: triad_bandwidth(),
    })
}

impl std::fmt::Display for WaveBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.spec;
        writeln!(
            f,
            "wave: {}×{} model ({}×{} padded), accuracy {}, {} shots × {} steps, {} threads",
            s.nz,
            s.nx,
            self.padded.0,
            self.padded.1,
            s.accuracy,
            s.shots,
            self.internal_steps,
            self.threads
        )?;
        writeln!(
            f,
            "  forward           {:8.3} s   {:7.1} M cell-updates/s/core   {:.0} % of triad bandwidth ({:.1} GB/s)",
            self.forward_secs,
            self.forward_rate_per_core() / 1e6,
            100.0 * self.forward_bandwidth_fraction(),
            self.triad_bytes_per_sec / 1e9
        )?;
        writeln!(
            f,
            "  forward, x86-64  {:8.3} s   kernels without AVX: the vector variants are {:.2}× faster",
            self.forward_baseline_isa_secs,
            self.forward_baseline_isa_secs / self.forward_secs
        )?;
        writeln!(
            f,
            "  forward, 1 sweep {:8.3} s   one sweep of the grid per step: temporal blocking is {:.2}× faster",
            self.forward_one_sweep_secs,
            self.forward_one_sweep_secs / self.forward_secs
        )?;
        if let (Some(g), Some(r)) = (self.gradient_secs, self.gradient_rate_per_core()) {
            writeln!(
                f,
                "  forward+adjoint   {g:8.3} s   {:7.1} M cell-updates/s/core (both passes)",
                r / 1e6
            )?;
        }
        for (strategy, bytes) in &self.peak_bytes {
            writeln!(
                f,
                "  peak memory per shot, {strategy:?}: {:.1} MiB",
                *bytes as f64 / (1 << 20) as f64
            )?;
        }
        Ok(())
    }
}
