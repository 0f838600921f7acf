//! `tessera bench spatial-memory`: the memory study of exact spatial decomposition. Each rank of a
//! group holds only its block of a generated input (never the whole image), runs a network forward
//! (inference) or forward + backward (one training step) with halos exchanged by [`SpatialPartition`],
//! and reports the peak resident memory the run added above what the process held before the input
//! existed (network weights, transport buffers and the binary are the baseline, measured apart).
//!
//! The study compares each rank's working memory on N ranks with the single process's divided by N
//! (goal: ≤ 1.15 × single / N + halos; a training step's gradient buffers, as large as the weights
//! on every rank whatever N, are counted whole). Resident memory is held to it with the largest
//! halo one exchange sends; live heap bytes with the halo each rank holds at once for one layer
//! ([`Network::largest_halo`]), beside the plain ratio. From a straight-line fit of working memory
//! against pixels per configuration it also gives the largest image that fits a per-rank budget.
//! [`run_study`] runs the configurations, each as its own process group of the tessera binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::Collective;
use super::profile::{peak_rss_bytes, reset_peak_rss};
use super::spatial::SpatialPartition;
use crate::error::{Error, Result};
use crate::nn::{Drunet, DrunetArch, Features, Grid, Network, Partition, TestModel, Whole};

/// The networks of the study: the reference paper's test models and DRUNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyModel {
    Cnn2d,
    Cnn3d,
    Fcn2d,
    /// deepinv's DRUNet (grey, `nc` [64, 128, 256, 512], 4 blocks per scale), random weights.
    Drunet,
}

impl std::str::FromStr for StudyModel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        StudyModel::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::config(
                    "--models",
                    format!("unknown model `{s}`: give cnn2d, cnn3d, fcn2d or drunet"),
                )
            })
    }
}

impl StudyModel {
    pub const ALL: [StudyModel; 4] = [
        StudyModel::Cnn2d,
        StudyModel::Cnn3d,
        StudyModel::Fcn2d,
        StudyModel::Drunet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StudyModel::Cnn2d => "cnn2d",
            StudyModel::Cnn3d => "cnn3d",
            StudyModel::Fcn2d => "fcn2d",
            StudyModel::Drunet => "drunet",
        }
    }

    /// Spatial axes of its input.
    pub fn axes(self) -> usize {
        match self {
            StudyModel::Cnn3d => 3,
            _ => 2,
        }
    }

    /// Sizes (side of a square image or cube) the study runs by default: from small to as large
    /// as 2 cores finish in seconds.
    pub fn default_sizes(self) -> &'static [usize] {
        match self {
            StudyModel::Cnn2d | StudyModel::Fcn2d => &[256, 512, 1024],
            StudyModel::Cnn3d => &[32, 48, 64],
            StudyModel::Drunet => &[128, 192, 256],
        }
    }

    fn network(self, seed: u64) -> Result<Network> {
        match self {
            StudyModel::Cnn2d => TestModel::Cnn2d.build(1, 16, seed),
            StudyModel::Cnn3d => TestModel::Cnn3d.build(1, 8, seed),
            StudyModel::Fcn2d => TestModel::Fcn2d.build(1, 16, seed),
            StudyModel::Drunet => {
                let arch = DrunetArch {
                    in_channels: 1,
                    out_channels: 1,
                    ..DrunetArch::default()
                };
                Ok(Drunet::random(arch, seed)?.network().clone())
            }
        }
    }
}

/// One configuration of the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySpec {
    pub model: StudyModel,
    /// Side of the square image (or cube) in pixels.
    pub size: usize,
    /// One training step (forward keeping every activation, backward, weight gradients summed
    /// over ranks) instead of a forward pass.
    pub train: bool,
}

/// One rank's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankMemory {
    /// Resident bytes before the input existed (binary, weights, transport).
    pub baseline_bytes: u64,
    /// Peak resident bytes above the baseline during the run.
    pub working_bytes: u64,
    /// The largest single halo exchange this rank sent (bytes).
    pub largest_halo_bytes: u64,
    /// All halo bytes this rank sent.
    pub halo_bytes: u64,
    /// The most halo bytes this rank holds at once for any one layer (the cells widening adds
    /// beyond its block: [`Network::largest_halo`]); the "+ halos" of the live-heap goal.
    #[serde(default)]
    pub largest_halo_held_bytes: u64,
    /// Peak live heap bytes above those live at the baseline (`crate::heap`; `None` where the
    /// binary does not count them): the working memory without the allocator's holes.
    #[serde(default)]
    pub live_working_bytes: Option<u64>,
    pub secs: f64,
}

/// One configuration measured on every rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    pub spec: MemorySpec,
    pub ranks: usize,
    pub grid: [usize; 3],
    pub weights_bytes: u64,
    /// Working bytes every rank needs whatever N: a training step's two gradient buffers (the
    /// caller's and the backward pass's own, summed over ranks), each as large as the weights.
    pub replicated_bytes: u64,
    pub per_rank: Vec<RankMemory>,
}

impl MemoryPoint {
    /// The largest working memory of any rank.
    pub fn max_working(&self) -> u64 {
        self.per_rank
            .iter()
            .map(|r| r.working_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The largest live-heap working memory of any rank (`None` unless every rank counted it).
    pub fn max_live(&self) -> Option<u64> {
        self.per_rank
            .iter()
            .map(|r| r.live_working_bytes)
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max())
    }

    pub fn max_halo(&self) -> u64 {
        self.per_rank
            .iter()
            .map(|r| r.largest_halo_bytes)
            .max()
            .unwrap_or(0)
    }

    pub fn pixels(&self) -> f64 {
        (self.spec.size as f64).powi(self.spec.model.axes() as i32)
    }
}

/// A smooth, seeded test pattern at global coordinates (so each rank makes only its block).
fn pattern(z: usize, y: usize, x: usize) -> f32 {
    let (z, y, x) = (z as f32, y as f32, x as f32);
    0.5 + 0.25 * (0.11 * x + 0.07 * y).sin() * (0.05 * y - 0.13 * z).cos()
}

/// Runs `spec` on this rank of `comm` (every rank calls it); rank 0 returns every rank's figures.
pub fn measure(comm: &dyn Collective, spec: MemorySpec) -> Result<Option<MemoryPoint>> {
    if spec.size == 0 {
        return Err(Error::config("--sizes", "sizes must be positive"));
    }
    let net = spec.model.network(0)?;
    let weights_bytes = (net.param_count() * std::mem::size_of::<f32>()) as u64;
    let axes = spec.model.axes();
    let dims = match axes {
        3 => [spec.size; 3],
        _ => [1, spec.size, spec.size],
    };
    let grid = Grid::for_axes(None, axes, comm.world_size(), dims, "--ranks")?;
    let spatial = SpatialPartition::new(comm, grid)?;
    // One rank runs as one process does (`Whole`: a layer reads its input in place), not as a
    // 1-rank decomposition, which copies every layer's input and, in training, keeps the copy
    // beside the taped input: that reference was a map too large and flattered every ratio.
    let partition: &dyn Partition<f32> = match comm.world_size() {
        1 => &Whole,
        _ => &spatial,
    };
    comm.barrier()?;
    // Building the network freed memory the heap keeps resident; a run reusing it would not show
    // in the peak, so the baseline holds live memory only.
    crate::heap::release_free_pages();
    let baseline = current_rss_bytes().unwrap_or(0);
    let live_baseline = crate::heap::live_bytes();
    crate::heap::reset_peak();
    let reset = reset_peak_rss();
    let start = Instant::now();
    let block = grid.block(dims, comm.rank());
    let mut x = Features::zeros(1, net.in_channels(), block.dims());
    let [bd, bh, bw] = block.dims();
    let plane = bd * bh * bw;
    for c in 0..net.in_channels() {
        for (k, v) in x.data[c * plane..(c + 1) * plane].iter_mut().enumerate() {
            let (z, y, xx) = (k / (bh * bw), (k / bw) % bh, k % bw);
            let at = |a: usize, i: usize| (block.lo[a] + i as isize) as usize;
            *v = pattern(at(0, z), at(1, y), at(2, xx));
        }
    }
    if spec.train {
        let mut tape = net.forward_train(x, dims, partition)?;
        // The gradient of ½‖y‖²: y itself.
        let dy = tape.output().clone();
        let mut grads = net.zero_grads();
        net.backward(&mut tape, dy, partition, &mut grads, false)?;
    } else {
        net.forward(x, dims, partition)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rss_bytes().unwrap_or(0);
    let live_peak = crate::heap::peak_bytes();
    let stats = spatial.take_stats();
    let mine = RankMemory {
        baseline_bytes: baseline,
        working_bytes: match reset {
            true => peak.saturating_sub(baseline),
            false => 0,
        },
        largest_halo_bytes: stats.bytes_sent.iter().copied().max().unwrap_or(0),
        halo_bytes: stats.bytes_sent.iter().sum(),
        largest_halo_held_bytes: (net.largest_halo(dims, grid, comm.rank(), spec.train)?
            * std::mem::size_of::<f32>()) as u64,
        live_working_bytes: live_baseline
            .zip(live_peak)
            .map(|(b, p)| p.saturating_sub(b) as u64),
        secs,
    };
    let all = super::wire::all_gather_as(comm, "memory figures", &mine)?;
    Ok((comm.rank() == 0).then(|| MemoryPoint {
        spec,
        ranks: comm.world_size(),
        grid: grid.shape,
        weights_bytes,
        replicated_bytes: if spec.train { 2 * weights_bytes } else { 0 },
        per_rank: all,
    }))
}

/// Resident bytes now (`VmRSS`).
fn current_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One row of the study's table: a configuration on N ranks against the same on one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyRow {
    pub model: &'static str,
    pub mode: &'static str,
    pub size: usize,
    pub ranks: usize,
    pub grid: [usize; 3],
    pub max_working_mib: f64,
    /// One rank's working memory divided by N, less what every rank holds whatever N
    /// (`replicated_bytes`, counted whole): `(single − R) / N + R`.
    pub ideal_mib: Option<f64>,
    pub largest_halo_mib: f64,
    /// max working / ideal: 1 is perfect division.
    pub ratio: Option<f64>,
    /// Whether max working ≤ 1.15 × ideal + largest halo.
    pub meets_goal: Option<bool>,
    /// The same figures for live heap bytes (what the program holds, without the allocator's
    /// holes): the largest rank's, and its ratio to the one-rank live figure divided as above.
    pub max_live_mib: Option<f64>,
    pub live_ratio: Option<f64>,
    /// The most halo any rank holds at once for one layer ([`RankMemory::largest_halo_held_bytes`]).
    pub halo_held_mib: f64,
    /// Whether every rank's live working memory ≤ 1.15 × the live ideal + the halo it holds at
    /// once: issue 11's goal with its "+ halos" (the plain `live_ratio` is kept beside it).
    pub live_meets_goal: Option<bool>,
    pub secs: f64,
}

const MIB: f64 = 1024.0 * 1024.0;

/// The table of `points`: each compared with the one-rank point of the same model, mode and size.
pub fn rows(points: &[MemoryPoint]) -> Vec<StudyRow> {
    points
        .iter()
        .map(|p| {
            let one = points.iter().find(|q| q.spec == p.spec && q.ranks == 1);
            let single = one.map(|q| q.max_working() as f64);
            let single_live = one.and_then(|q| q.max_live()).map(|v| v as f64);
            let n = p.ranks as f64;
            let working = p.max_working() as f64;
            let halo = p.max_halo() as f64;
            let replicated = p.replicated_bytes as f64;
            let divide = |s: f64| (s - replicated).max(0.0) / n + replicated;
            let ideal = single.map(divide);
            let live = p.max_live().map(|v| v as f64);
            let live_ideal = single_live.map(divide);
            let live_meets_goal = live_ideal.and_then(|i| {
                p.per_rank
                    .iter()
                    .map(|r| {
                        r.live_working_bytes
                            .map(|v| v as f64 <= 1.15 * i + r.largest_halo_held_bytes as f64)
                    })
                    .collect::<Option<Vec<bool>>>()
                    .map(|ok| ok.into_iter().all(|b| b))
            });
            StudyRow {
                model: p.spec.model.name(),
                mode: if p.spec.train { "train" } else { "forward" },
                size: p.spec.size,
                ranks: p.ranks,
                grid: p.grid,
                max_working_mib: working / MIB,
                ideal_mib: ideal.map(|i| i / MIB),
                largest_halo_mib: halo / MIB,
                ratio: ideal.filter(|&i| i > 0.0).map(|i| working / i),
                meets_goal: ideal.map(|i| working <= 1.15 * i + halo),
                max_live_mib: live.map(|v| v / MIB),
                live_ratio: live
                    .zip(live_ideal)
                    .filter(|&(_, i)| i > 0.0)
                    .map(|(v, i)| v / i),
                halo_held_mib: p
                    .per_rank
                    .iter()
                    .map(|r| r.largest_halo_held_bytes)
                    .max()
                    .unwrap_or(0) as f64
                    / MIB,
                live_meets_goal,
                secs: p.per_rank.iter().map(|r| r.secs).fold(0.0, f64::max),
            }
        })
        .collect()
}

/// For each model, mode and rank count measured at two or more sizes: the largest side whose
/// working memory per rank fits `budget_bytes`, from a least-squares line of working memory against
/// pixels (`None` where the fit is not increasing).
pub fn largest_fitting(
    points: &[MemoryPoint],
    budget_bytes: f64,
) -> Vec<(MemorySpec, usize, Option<usize>)> {
    let mut out = Vec::new();
    let mut keys: Vec<(MemorySpec, usize)> = points
        .iter()
        .map(|p| (MemorySpec { size: 0, ..p.spec }, p.ranks))
        .collect();
    keys.dedup();
    keys.sort_by_key(|(s, n)| (s.model.name(), s.train, *n));
    keys.dedup();
    for (key, n) in keys {
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.ranks == n && MemorySpec { size: 0, ..p.spec } == key)
            .map(|p| (p.pixels(), p.max_working() as f64))
            .collect();
        if xy.len() < 2 {
            continue;
        }
        let m = xy.len() as f64;
        let (sx, sy) = xy.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / m, sy / m);
        let sxx: f64 = xy.iter().map(|(x, _)| (x - mx).powi(2)).sum();
        let sxy: f64 = xy.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let slope = sxy / sxx;
        let side = (slope > 0.0).then(|| {
            let pixels = ((budget_bytes - (my - slope * mx)) / slope).max(0.0);
            pixels.powf(1.0 / key.model.axes() as f64).floor() as usize
        });
        out.push((key, n, side));
    }
    out
}

/// The table as CSV.
pub fn csv(rows: &[StudyRow]) -> String {
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
    let mut s = String::from(
        "model,mode,size,ranks,grid,max_working_mib,single_over_n_mib,largest_halo_mib,ratio,meets_goal,secs,max_live_mib,live_ratio,halo_held_mib,live_meets_goal\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{}x{}x{},{:.2},{},{:.3},{},{},{:.3},{},{},{:.3},{}\n",
            r.model,
            r.mode,
            r.size,
            r.ranks,
            r.grid[0],
            r.grid[1],
            r.grid[2],
            r.max_working_mib,
            opt(r.ideal_mib),
            r.largest_halo_mib,
            r.ratio.map(|v| format!("{v:.3}")).unwrap_or_default(),
            r.meets_goal.map(|b| b.to_string()).unwrap_or_default(),
            r.secs,
            opt(r.max_live_mib),
            r.live_ratio.map(|v| format!("{v:.3}")).unwrap_or_default(),
            r.halo_held_mib,
            r.live_meets_goal.map(|b| b.to_string()).unwrap_or_default(),
        ));
    }
    s
}

/// Measures every configuration — each model, mode (`forward` and/or `train` in `modes`), size
/// (`sizes`, or the model's [`StudyModel::default_sizes`]) and rank count — as its own process
/// group of `exe` (the tessera binary's `bench spatial-memory-rank --ranks N`, so each rank's
/// memory is its own process's), one after the other. `starting` sees each configuration and its
/// rank count before it runs; a configuration that fails stops the study.
pub fn run_study(
    exe: &Path,
    models: &[StudyModel],
    sizes: &[usize],
    ranks: &[usize],
    modes: &[bool],
    mut starting: impl FnMut(&MemorySpec, usize),
) -> Result<Vec<MemoryPoint>> {
    let mut points = Vec::new();
    for &model in models {
        let sizes = match sizes {
            [] => model.default_sizes(),
            given => given,
        };
        for &train in modes {
            for &size in sizes {
                for &n in ranks {
                    let spec = MemorySpec { model, size, train };
                    starting(&spec, n);
                    points.push(measure_in_child(exe, spec, n)?);
                }
            }
        }
    }
    Ok(points)
}

/// One configuration as a process group of `exe` on `ranks` ranks: rank 0's result line.
fn measure_in_child(exe: &Path, spec: MemorySpec, ranks: usize) -> Result<MemoryPoint> {
    let what = format!(
        "{} {} {} on {ranks} rank(s)",
        spec.model.name(),
        if spec.train { "train" } else { "forward" },
        spec.size
    );
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "spatial-memory-rank", "--model", spec.model.name()])
        .args([
            "--size",
            &spec.size.to_string(),
            "--ranks",
            &ranks.to_string(),
        ]);
    if spec.train {
        cmd.arg("--train");
    }
    let o = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::io("starting a memory study configuration", exe, e))?;
    let failed = |reason: String| Error::ChildFailed {
        what: what.clone(),
        reason,
    };
    if !o.status.success() {
        return Err(failed(o.status.to_string()));
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .rev()
        // Rank 0's line, behind the launcher's `[rank 0] ` prefix on N ranks.
        .find_map(|l| l.find('{').map(|at| &l[at..]))
        .ok_or_else(|| failed("it printed no result".into()))?;
    serde_json::from_str(line).map_err(|e| failed(format!("its result is unreadable: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::testutil::on_group;

    #[test]
    fn a_configuration_that_fails_or_prints_nothing_names_itself() {
        let mut seen = Vec::new();
        let e = run_study(
            Path::new("/bin/false"),
            &[StudyModel::Cnn2d],
            &[32, 64],
            &[1, 2],
            &[false],
            |spec, n| seen.push((spec.size, n)),
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::ChildFailed { what, .. } if what == "cnn2d forward 32 on 1 rank(s)"),
            "{e}"
        );
        assert_eq!(seen, [(32, 1)]);
        // One FCN2D training step of 16 px on one rank, with `exe` in place of tessera.
        let fcn2d_with = |exe: &str| {
            run_study(
                Path::new(exe),
                &[StudyModel::Fcn2d],
                &[16],
                &[1],
                &[true],
                |_, _| {},
            )
            .unwrap_err()
        };
        // `true` succeeds and prints nothing: no result is an error, not a panic or an empty study.
        let e = fcn2d_with("/bin/true");
        assert!(
            e.to_string()
                .contains("fcn2d train 16 on 1 rank(s) failed: it printed no result"),
            "{e}"
        );
        let e = fcn2d_with("/nonexistent/tessera");
        assert!(matches!(e, Error::Io { .. }), "{e}");
    }

    fn point(model: StudyModel, size: usize, ranks: usize, working: u64) -> MemoryPoint {
        MemoryPoint {
            spec: MemorySpec {
                model,
                size,
                train: false,
            },
            ranks,
            grid: [1, ranks, 1],
            weights_bytes: 0,
            replicated_bytes: 0,
            per_rank: vec![
                RankMemory {
                    baseline_bytes: 0,
                    working_bytes: working,
                    largest_halo_bytes: 1 << 20,
                    halo_bytes: 1 << 21,
                    largest_halo_held_bytes: 1 << 19,
                    live_working_bytes: Some(working / 2),
                    secs: 0.1,
                };
                ranks
            ],
        }
    }

    #[test]
    fn rows_compare_with_one_rank_and_the_budget_fit_inverts_the_line() {
        let mib = 1u64 << 20;
        let points = [
            point(StudyModel::Cnn2d, 100, 1, 100 * mib),
            point(StudyModel::Cnn2d, 100, 2, 52 * mib),
            point(StudyModel::Cnn2d, 200, 1, 400 * mib),
            point(StudyModel::Cnn2d, 200, 2, 260 * mib),
        ];
        let r = rows(&points);
        assert_eq!(r[1].ideal_mib, Some(50.0));
        assert!((r[1].ratio.unwrap() - 1.04).abs() < 1e-9);
        // Live bytes: 26 MiB against 50 / 2.
        assert_eq!(r[1].max_live_mib, Some(26.0));
        assert!((r[1].live_ratio.unwrap() - 1.04).abs() < 1e-9);
        assert_eq!(r[1].meets_goal, Some(true));
        // 260 > 1.15 × 200 + 1.
        assert_eq!(r[3].meets_goal, Some(false));
        // Replicated gradient buffers are not divided: (400 − 100) / 2 + 100 = 250 → 260 meets it.
        let mut replicated = points.clone();
        replicated
            .iter_mut()
            .for_each(|p| p.replicated_bytes = 100 * mib);
        let r2 = rows(&replicated);
        assert_eq!(r2[3].ideal_mib, Some(250.0));
        assert_eq!(r2[3].meets_goal, Some(true));
        // Live heap against 1.15 × ideal + the halo each rank holds (0.5 MiB here): 26 MiB ≤
        // 1.15 × 25 + 0.5 is met, 130 > 1.15 × 100 + 0.5 is not.
        assert_eq!(r[1].halo_held_mib, 0.5);
        assert_eq!(r[1].live_meets_goal, Some(true));
        assert_eq!(r[3].live_meets_goal, Some(false));
        // 29 MiB live passes only with the halo allowed for (1.15 × 25 = 28.75), and only
        // where every rank's own halo covers its excess.
        let mut tight = points.clone();
        tight[1].per_rank[1].live_working_bytes = Some(29 * mib);
        assert_eq!(rows(&tight)[1].live_meets_goal, Some(true));
        tight[1].per_rank[1].largest_halo_held_bytes = mib / 8;
        assert_eq!(rows(&tight)[1].live_meets_goal, Some(false));
        assert_eq!(
            rows(&tight)[1].halo_held_mib,
            0.5,
            "rank 0's halo is the largest"
        );
        // One rank: 0.01 MiB per pixel, through the origin: 1000 MiB → 10⁵ pixels → side 316.
        let fit = largest_fitting(&points, 1000.0 * mib as f64);
        let one = fit.iter().find(|(_, n, _)| *n == 1).unwrap();
        assert_eq!(one.2, Some(316));
        assert!(
            csv(&r)
                .lines()
                .nth(2)
                .unwrap()
                .starts_with("cnn2d,forward,100,2,1x2x1,52.00,50.00")
        );
    }

    #[test]
    fn every_rank_holds_a_block_and_halos_move_only_between_ranks() {
        let spec = MemorySpec {
            model: StudyModel::Fcn2d,
            size: 64,
            train: true,
        };
        let points = on_group(2, move |comm| measure(comm.as_ref(), spec).unwrap());
        let point = points[0].clone().expect("rank 0 reports");
        assert!(points[1].is_none());
        assert_eq!(point.ranks, 2);
        assert_eq!(point.per_rank.len(), 2);
        for r in &point.per_rank {
            assert!(
                r.halo_bytes > 0 && r.largest_halo_bytes <= r.halo_bytes,
                "{r:?}"
            );
        }
        let single = on_group(1, move |comm| measure(comm.as_ref(), spec).unwrap());
        let single = single[0].clone().unwrap();
        assert_eq!(single.per_rank[0].halo_bytes, 0);
        assert_eq!(single.grid, [1, 1, 1]);
    }
}
