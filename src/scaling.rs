//! Scaling studies: the runs of one preset at several rank counts (and image sizes, threads per
//! rank), read back from their `metrics.json`, tabulated as CSV and drawn as a report.
//!
//! [`study`] runs each configuration as real rank processes of the tessera binary (`tessera bench
//! scaling`) and reads the run folders back. Times come from the per-rank, per-iteration profiles
//! the job writes (`dist::profile`): a run's time for a component is the slowest rank's sum over
//! the iterations (the ranks meet at collectives every iteration, so the slowest one sets the
//! pace). Speedup is `t_base / t_N` against the configuration with the fewest ranks of the same
//! size and threads, efficiency `speedup / (N / N_base)`, as in deepinv's scaling study. [`model`]
//! extends a study past this machine; the report shows its figures beside the measured ones and
//! labels which is which.

pub mod model;
pub mod study;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::dist::patch_map::TileCost;
use crate::dist::profile::IterationProfile;
use crate::error::{Error, Result};
use crate::io;
use crate::job::RankTimes;
use crate::physics::PhysicsConfig;
use crate::plot::{Colormap, Dash, Heatmap, LineChart, Outline, Rgb, Series, StackedBars, palette};
use crate::preset::Preset;

/// One configuration of a study.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// Longest image side, `None`: the preset's own size.
    pub size: Option<usize>,
    pub ranks: usize,
    /// Threads per rank, `None`: the default placement (cores / local ranks).
    pub threads: Option<usize>,
}

impl Configuration {
    /// A folder name for the run: `n2`, `s1024-n2-t1`, …
    pub fn slug(&self) -> String {
        let mut s = String::new();
        if let Some(size) = self.size {
            let _ = write!(s, "s{size}-");
        }
        let _ = write!(s, "n{}", self.ranks);
        if let Some(t) = self.threads {
            let _ = write!(s, "-t{t}");
        }
        s
    }

    /// The group a configuration is compared within (same size and threads).
    fn group(&self) -> String {
        let mut s = match self.size {
            Some(size) => format!("S={size}"),
            None => "preset size".to_string(),
        };
        if let Some(t) = self.threads {
            let _ = write!(s, ", {t} thr/rank");
        }
        s
    }
}

/// `--set` overrides that resize the preset's sample so its longest side is `longest` pixels,
/// keeping its aspect; Gaussian blur widths scale with it (the reference study's workloads give
/// them as fractions of the image side).
pub fn size_overrides(preset: &Preset, longest: usize) -> Result<Vec<String>> {
    let size = match (&preset.image.sample, &preset.image.size) {
        (Some(_), Some(size)) if !size.is_empty() => size,
        _ => {
            return Err(Error::config(
                "--sizes",
                format!(
                    "preset `{}` does not generate a sample of a given [image] size, so it cannot be resized",
                    preset.name
                ),
            ));
        }
    };
    if longest < 8 {
        return Err(Error::config(
            "--sizes",
            format!("{longest} px is too small (at least 8)"),
        ));
    }
    let old = size.iter().copied().max().unwrap_or(1).max(1);
    let factor = longest as f64 / old as f64;
    let new: Vec<String> = size
        .iter()
        .map(|&n| ((n as f64 * factor).round() as usize).max(1).to_string())
        .collect();
    let mut out = vec![format!("image.size=[{}]", new.join(","))];
    for (i, p) in preset.physics.iter().enumerate() {
        if let PhysicsConfig::Blur(b) = p
            && let Some([a, c]) = b.sigma
        {
            let (a, c) = (a as f64 * factor, c as f64 * factor);
            out.push(format!("physics.{i}.sigma=[{a},{c}]"));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
struct QualityIn {
    psnr_db: f64,
}

#[derive(Debug, Clone, Deserialize)]
struct HistoryIn {
    iteration: usize,
    psnr_db: Option<f64>,
}

/// What a study reads from a run's `metrics.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct RunMetrics {
    /// The preset's name.
    #[serde(default)]
    pub name: String,
    /// `(B, C, H, W)` or `(B, C, D, H, W)`.
    #[serde(default)]
    pub image_shape: Vec<usize>,
    pub world_size: usize,
    pub solve_secs: f64,
    reconstruction: Option<QualityIn>,
    history: Vec<HistoryIn>,
    pub ranks: Vec<RankTimes>,
    /// Measured denoiser cost per tile (tiled denoisers; empty otherwise or in older runs).
    #[serde(default)]
    pub tiles: Vec<TileCost>,
}

impl RunMetrics {
    /// Reads `dir/metrics.json`; a run without per-iteration profiles for every rank is an error.
    pub fn load(dir: &Path) -> Result<RunMetrics> {
        let path = dir.join(crate::io::METRICS_FILE);
        if !dir.is_dir() {
            return Err(Error::format(dir, "no such run folder"));
        }
        if !path.is_file() {
            return Err(Error::format(
                &path,
                "not a finished run: its metrics file is missing",
            ));
        }
        let bytes = std::fs::read(&path).map_err(|e| Error::io("reading run metrics", &path, e))?;
        let m: RunMetrics = serde_json::from_slice(&bytes)
            .map_err(|e| Error::format(path.display().to_string(), e.to_string()))?;
        if m.ranks.len() != m.world_size || m.ranks.iter().any(|r| r.iterations.is_empty()) {
            return Err(Error::format(
                path.display().to_string(),
                format!(
                    "needs a per-iteration profile for each of its {} ranks (a run by an older tessera?)",
                    m.world_size
                ),
            ));
        }
        Ok(m)
    }

    /// The slowest rank's sum of `f` over the iterations.
    fn slowest(&self, f: impl Fn(&IterationProfile) -> f64) -> f64 {
        self.ranks
            .iter()
            .map(|r| r.iterations.iter().map(&f).sum::<f64>())
            .fold(0.0, f64::max)
    }

    pub fn total_secs(&self) -> f64 {
        self.slowest(IterationProfile::total_secs)
    }
    pub fn gradient_secs(&self) -> f64 {
        self.slowest(|i| i.gradient.secs)
    }
    pub fn denoiser_secs(&self) -> f64 {
        self.slowest(|i| i.denoiser.secs)
    }
    pub fn psnr_db(&self) -> Option<f64> {
        self.reconstruction.as_ref().map(|q| q.psnr_db)
    }
    pub fn peak_rss_bytes(&self) -> u64 {
        self.ranks
            .iter()
            .map(|r| r.peak_rss_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// A finished configuration.
#[derive(Debug, Clone)]
pub struct Run {
    pub config: Configuration,
    pub metrics: RunMetrics,
    /// The workload as the model sees it; `None`: no model for this run.
    pub workload: Option<model::Workload>,
}

/// Speedup and efficiency of one run against the run with the fewest ranks of its group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    pub base_ranks: usize,
    /// Total, gradient, denoiser.
    pub speedup: [f64; 3],
    pub efficiency: [f64; 3],
}

fn times(m: &RunMetrics) -> [f64; 3] {
    [m.total_secs(), m.gradient_secs(), m.denoiser_secs()]
}

/// Speedup and efficiency of every run (index = run).
pub fn scaling(runs: &[Run]) -> Vec<Scaling> {
    runs.iter()
        .map(|run| {
            let base = runs
                .iter()
                .filter(|b| b.config.group() == run.config.group())
                .min_by_key(|b| b.config.ranks)
                .unwrap_or(run);
            let (tb, tn) = (times(&base.metrics), times(&run.metrics));
            let ratio = run.config.ranks as f64 / base.config.ranks as f64;
            let speedup = [0, 1, 2].map(|i| tb[i] / tn[i]);
            Scaling {
                base_ranks: base.config.ranks,
                speedup,
                efficiency: speedup.map(|s| s / ratio),
            }
        })
        .collect()
}

fn csv_size(c: &Configuration) -> String {
    c.size.map_or(String::new(), |s| s.to_string())
}

fn csv_threads(r: &RankTimes) -> String {
    r.threads.to_string()
}

/// One line per run, rank and iteration.
pub fn rank_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "size,ranks,threads,rank,iteration,elapsed_s,gradient_s,gradient_comm_s,gradient_idle_s,gradient_bytes,\
         denoiser_s,denoiser_comm_s,denoiser_idle_s,denoiser_bytes,other_s,other_comm_s,other_idle_s,setup_s,setup_comm_s,setup_idle_s,peak_rss_bytes\n",
    );
    for run in runs {
        for r in &run.metrics.ranks {
            for it in &r.iterations {
                let _ = write!(
                    s,
                    "{},{},{},{},{},{:.6}",
                    csv_size(&run.config),
                    run.config.ranks,
                    csv_threads(r),
                    r.rank,
                    it.iteration,
                    it.elapsed_secs
                );
                for p in [&it.gradient, &it.denoiser] {
                    let _ = write!(
                        s,
                        ",{:.6},{:.6},{:.6},{}",
                        p.secs, p.communication_secs, p.idle_secs, p.bytes
                    );
                }
                let _ = writeln!(
                    s,
                    ",{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{}",
                    it.other.secs,
                    it.other.communication_secs,
                    it.other.idle_secs,
                    it.setup.secs,
                    it.setup.communication_secs,
                    it.setup.idle_secs,
                    it.peak_rss_bytes
                );
            }
        }
    }
    s
}

/// One line per run: times (slowest rank), speedup, efficiency, quality, memory.
pub fn summary_csv(runs: &[Run]) -> String {
    let mut s = String::from(
        "size,ranks,threads,iterations,total_s,gradient_s,denoiser_s,communication_s,idle_s,base_ranks,\
         speedup_total,speedup_gradient,speedup_denoiser,efficiency_total,efficiency_gradient,efficiency_denoiser,\
         psnr_db,peak_rss_bytes\n",
    );
    for (run, sc) in runs.iter().zip(scaling(runs)) {
        let m = &run.metrics;
        let t = times(m);
        let comm = m.slowest(IterationProfile::communication_secs);
        let idle = m.slowest(IterationProfile::idle_secs);
        let _ = writeln!(
            s,
            "{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{}",
            csv_size(&run.config),
            run.config.ranks,
            m.ranks.first().map_or(String::new(), csv_threads),
            m.ranks.first().map_or(0, |r| r.iterations.len()),
            t[0],
            t[1],
            t[2],
            comm,
            idle,
            sc.base_ranks,
            sc.speedup[0],
            sc.speedup[1],
            sc.speedup[2],
            sc.efficiency[0],
            sc.efficiency[1],
            sc.efficiency[2],
            m.psnr_db().map_or(String::new(), |p| format!("{p:.3}")),
            m.peak_rss_bytes()
        );
    }
    s
}

/// The runs split by group (same size and threads), in order of first appearance.
fn groups(runs: &[Run]) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let g = r.config.group();
        match out.iter_mut().find(|(name, _)| *name == g) {
            Some((_, members)) => members.push(i),
            None => out.push((g, vec![i])),
        }
    }
    for (_, members) in &mut out {
        members.sort_by_key(|&i| runs[i].config.ranks);
    }
    out
}

const COMPONENTS: [&str; 3] = ["total", "gradient", "denoiser"];

/// A figure of a report: (file stem, caption, image).
pub type Figure = (String, String, Rgb);

/// The scaling report's figures: strong scaling, speedup and efficiency across the runs, then
/// [`run_figures`] of all runs.
pub fn figures(runs: &[Run]) -> Result<Vec<Figure>> {
    let mut out = scaling_figures(runs)?;
    out.extend(run_figures(runs)?);
    Ok(out)
}

/// Strong scaling, speedup and efficiency against the run with the fewest ranks of each group.
fn scaling_figures(runs: &[Run]) -> Result<Vec<Figure>> {
    let groups = groups(runs);
    let sc = scaling(runs);
    let several = groups.len() > 1;
    let label = |g: &str, c: &str| {
        if several {
            format!("{c} ({g})")
        } else {
            c.to_string()
        }
    };
    let ranks: Vec<f64> = runs.iter().map(|r| r.config.ranks as f64).collect();
    let lo = ranks.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ranks.iter().copied().fold(0.0, f64::max);
    // Log axes only where the rank counts span a decade or so; below that they would carry a
    // single tick label.
    let wide = hi / lo >= 8.0;
    let log = |c: LineChart| if wide { c.log_x().log_y() } else { c };
    let mut strong =
        log(LineChart::new("Strong scaling: time of the slowest rank").labels("ranks", "seconds"));
    let mut speedup = log(LineChart::new("Speedup t_base / t_N").labels("ranks", "speedup"));
    let mut efficiency = LineChart::new("Parallel efficiency speedup / (N / N_base)")
        .labels("ranks", "efficiency")
        .y_range(0.0, 1.2);
    if wide {
        efficiency = efficiency.log_x();
    }
    for (gi, (g, members)) in groups.iter().enumerate() {
        let dash = [Dash::Solid, Dash::Dashed, Dash::Dotted][gi % 3];
        for (ci, c) in COMPONENTS.iter().enumerate() {
            let pts = |f: &dyn Fn(usize) -> f64| -> Vec<(f64, f64)> {
                members
                    .iter()
                    .map(|&i| (runs[i].config.ranks as f64, f(i)))
                    .collect()
            };
            let series = |points| {
                Series::new(label(g, c), points)
                    .color(ci)
                    .dash(dash)
                    .markers()
            };
            strong = strong.series(series(pts(&|i| times(&runs[i].metrics)[ci])));
            speedup = speedup.series(series(pts(&|i| sc[i].speedup[ci])));
            efficiency = efficiency.series(series(pts(&|i| sc[i].efficiency[ci])));
        }
    }
    speedup = speedup.series(
        Series::new("ideal", vec![(lo, 1.0), (hi, hi / lo)])
            .color(7)
            .dash(Dash::Dotted),
    );

    let caption =
        "Measured on this machine; a run's time is its slowest rank's sum over the iterations.";
    Ok(vec![
        ("strong_scaling".into(), caption.into(), strong.render()?),
        (
            "speedup".into(),
            "Speedup against the run with the fewest ranks of the same size and threads.".into(),
            speedup.render()?,
        ),
        (
            "efficiency".into(),
            "Parallel efficiency; 1 is ideal.".into(),
            efficiency.render()?,
        ),
    ])
}

/// The figures of one or more runs, each rank drawn: time breakdown per rank, time per iteration
/// per rank, PSNR against time and iteration, peak memory per rank, and the patch map with
/// measured per-tile cost of the run with the most ranks that has one. The scaling report and the
/// one-run report (`tessera report`, the workbench's Timing tab) both draw these.
pub fn run_figures(runs: &[Run]) -> Result<Vec<Figure>> {
    // Per rank of every run: where its time went, and its peak memory.
    let mut categories = Vec::new();
    let mut parts = vec![Vec::new(); 6];
    let mut memory = Vec::new();
    for run in runs {
        for r in &run.metrics.ranks {
            categories.push(format!("{} r{}", run.config.slug(), r.rank));
            let sum =
                |f: &dyn Fn(&IterationProfile) -> f64| r.iterations.iter().map(f).sum::<f64>();
            parts[0].push(sum(&|i| i.gradient.compute_secs()));
            parts[1].push(sum(&|i| i.denoiser.compute_secs()));
            parts[2].push(sum(&|i| i.other.compute_secs()));
            parts[3].push(sum(&IterationProfile::communication_secs));
            parts[4].push(sum(&IterationProfile::idle_secs));
            parts[5].push(sum(&|i| i.setup.compute_secs()));
            memory.push(r.peak_rss_bytes as f64 / (1 << 20) as f64);
        }
    }
    let width = (300 + 95 * categories.len() as u32).clamp(700, 2400);
    let mut breakdown = StackedBars::new("Time per rank", "seconds")
        .categories(categories.clone())
        .size(width, 480);
    let names = [
        "gradient (compute)",
        "denoiser (compute)",
        "other (compute)",
        "communication",
        "idle at collectives",
        "algorithm set-up (compute)",
    ];
    for (name, values) in names.into_iter().zip(parts) {
        breakdown = breakdown.part(name, values);
    }
    let peak = StackedBars::new("Peak memory per rank", "MiB (peak RSS)")
        .categories(categories)
        .part("peak resident memory", memory)
        .size(width, 420);

    // Quality against time (rank 0's clock) and iteration.
    let mut by_time = LineChart::new("PSNR against time").labels("seconds", "PSNR (dB)");
    let mut by_iteration =
        LineChart::new("PSNR against iteration").labels("iteration", "PSNR (dB)");
    for (i, run) in runs.iter().enumerate() {
        let m = &run.metrics;
        let elapsed = &m.ranks[0].iterations;
        let psnr: Vec<(usize, f64)> = m
            .history
            .iter()
            .filter_map(|h| h.psnr_db.map(|p| (h.iteration, p)))
            .collect();
        let t: Vec<(f64, f64)> = psnr
            .iter()
            .filter_map(|&(k, p)| {
                elapsed
                    .iter()
                    .find(|e| e.iteration == k)
                    .map(|e| (e.elapsed_secs, p))
            })
            .collect();
        let name = run.config.slug();
        by_time = by_time.series(Series::new(name.clone(), t).color(i));
        by_iteration = by_iteration
            .series(Series::new(name, psnr.iter().map(|&(k, p)| (k as f64, p)).collect()).color(i));
    }
    // Time per iteration per rank: a slow or waiting rank, a slow first iteration.
    let mut per_iteration =
        LineChart::new("Time per iteration per rank").labels("iteration", "seconds");
    let mut k = 0;
    for (i, run) in runs.iter().enumerate() {
        let dash = [Dash::Solid, Dash::Dashed, Dash::Dotted][i % 3];
        for r in &run.metrics.ranks {
            let points = r
                .iterations
                .iter()
                .map(|it| (it.iteration as f64, it.total_secs()))
                .collect();
            per_iteration = per_iteration.series(
                Series::new(format!("{} r{}", run.config.slug(), r.rank), points)
                    .color(k)
                    .dash(dash)
                    .markers(),
            );
            k += 1;
        }
    }
    let mut out: Vec<Figure> = vec![
        ("breakdown".into(), "Each rank's time summed over the iterations: compute per phase, communication (moving data) and idle (waiting at a collective for the last rank).".into(), breakdown.render()?),
        ("iteration_times".into(), "Each rank's wall time per iteration (all phases).".into(), per_iteration.render()?),
        ("psnr_time".into(), "PSNR of the iterate after each iteration against rank 0's elapsed solve time.".into(), by_time.render()?),
        ("psnr_iteration".into(), "PSNR against iteration: identical curves mean the rank counts compute the same reconstruction.".into(), by_iteration.render()?),
        ("peak_memory".into(), "Peak resident memory of each rank process.".into(), peak.render()?),
    ];
    if let Some(run) = runs
        .iter()
        .filter(|r| !r.metrics.tiles.is_empty())
        .max_by_key(|r| r.config.ranks)
    {
        let title = format!(
            "Patch map, measured cost per tile ({}, {} tiles)",
            run.config.slug(),
            run.metrics.tiles.len()
        );
        if let Some(image) = patch_map_figure(&run.metrics, &title)? {
            out.push((
                "patch_map".into(),
                "Each tile's owned region coloured by its measured denoiser time, mean per call \
                 (a batch of tiles is timed as one call, its time split evenly among its tiles), \
                 outlined and labelled with the rank that denoised it. Magenta: no tile measured \
                 there. Volumes: the tiles crossing the central slice."
                    .into(),
                image,
            ));
        }
    }
    Ok(out)
}

/// Longest side of the patch map's value grid: the figure draws at most a few hundred pixels.
const PATCH_MAP_GRID: usize = 512;

/// The patch map of a run with measured tiles: each tile's owned region filled with its mean
/// denoiser milliseconds per call (colour bar from 0 to the dearest tile), outlined in its rank's colour and labelled with
/// the rank (up to 64 tiles; beyond, the outlines alone). Volumes show the tiles crossing the
/// central depth slice. `None` without measured tiles.
pub fn patch_map_figure(m: &RunMetrics, title: &str) -> Result<Option<Rgb>> {
    let Some(first) = m.tiles.first() else {
        return Ok(None);
    };
    let axes = first.region.len();
    if !(2..=3).contains(&axes) || m.tiles.iter().any(|t| t.region.len() != axes) {
        return Err(Error::config(
            "tiles",
            format!("a patch map needs tiles with 2 or 3 spatial axes, got {axes}"),
        ));
    }
    let extent = |a: usize| m.tiles.iter().map(|t| t.region[a].0 + t.region[a].1).max();
    let (h, w) = (
        extent(axes - 2).unwrap_or(1).max(1),
        extent(axes - 1).unwrap_or(1).max(1),
    );
    let mid = (axes == 3).then(|| extent(0).unwrap_or(1) / 2);
    let shown: Vec<&TileCost> = m
        .tiles
        .iter()
        .filter(|t| mid.is_none_or(|d| (t.region[0].0..t.region[0].0 + t.region[0].1).contains(&d)))
        .collect();
    let scale = (h.max(w) as f64 / PATCH_MAP_GRID as f64).max(1.0);
    let (rows, cols) = (
        ((h as f64 / scale).ceil() as usize).max(1),
        ((w as f64 / scale).ceil() as usize).max(1),
    );
    let mut values = vec![f32::NAN; rows * cols];
    for t in &shown {
        let (y, x) = (t.region[axes - 2], t.region[axes - 1]);
        let ms = (t.secs_per_call() * 1e3) as f32;
        let cells = |(start, size): (usize, usize), n: usize| {
            let lo = (start as f64 / scale).floor() as usize;
            let hi = (((start + size) as f64 / scale).ceil() as usize).min(n);
            lo..hi
        };
        for r in cells(y, rows) {
            values[r * cols..(r + 1) * cols][cells(x, cols)].fill(ms);
        }
    }
    let label = shown.len() <= 64;
    // From zero, so colours compare costs in proportion: a 4 % imbalance does not span the map.
    let dearest = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f32, f32::max);
    let mut map = Heatmap::new(title, &values, rows, cols)
        .colormap(Colormap::Magma)
        .range(0.0, dearest.max(f32::MIN_POSITIVE))
        .extent((0.0, w as f64), (0.0, h as f64))
        .labels("x (px)", "y (px)", "ms per call")
        .width(820);
    for t in &shown {
        let (y, x) = (t.region[axes - 2], t.region[axes - 1]);
        map = map.outline(Outline {
            x: (x.0 as f64, (x.0 + x.1) as f64),
            y: (y.0 as f64, (y.0 + y.1) as f64),
            color: palette(t.rank),
            width: 2,
            label: label.then(|| format!("r{}", t.rank)),
        });
    }
    map.render().map(Some)
}

/// Writes `rank_iterations.csv`, `summary.csv`, the figures as PNG files and `report.html` (the
/// same figures embedded, so the page stands alone) into `dir`; returns the report's path.
pub fn write_report(
    runs: &[Run],
    title: &str,
    dir: &Path,
    link: Option<model::Link>,
) -> Result<PathBuf> {
    if runs.is_empty() {
        return Err(Error::config("scaling study", "no runs to report"));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating report folder", dir, e))?;
    let rank_csv_text = rank_csv(runs);
    let summary = summary_csv(runs);
    io::write_atomic(&dir.join("rank_iterations.csv"), rank_csv_text.as_bytes())?;
    io::write_atomic(&dir.join("summary.csv"), summary.as_bytes())?;
    let mut html = String::from(
        "<p>Figures are measurements on this machine unless labelled <b>model</b>. Files: \
         summary.csv, rank_iterations.csv, model.csv (model beside measurement).</p>\n\
         <h2>Summary</h2>\n",
    );
    html.push_str(&csv_table(&summary));
    let mut figures = figures(runs)?;
    if let Some(m) = model_section(runs, link)? {
        io::write_atomic(&dir.join("model.csv"), m.csv.as_bytes())?;
        html.push_str(&m.html);
        figures.push(m.figure);
    }
    write_page(dir, title, &html, figures)
}

/// Writes the report of one finished run (`run_dir` holds its `metrics.json`) into `out`:
/// `rank_iterations.csv`, the [`run_figures`] as PNG files and `report.html` with them embedded;
/// returns the report's path. A folder that is not a finished run, or a run by a tessera that did
/// not profile its ranks, is an error naming the file.
pub fn write_run_report(run_dir: &Path, out: &Path) -> Result<PathBuf> {
    if let Some(page) = write_fwi_or_training_report(run_dir, out)? {
        return Ok(page);
    }
    let metrics = RunMetrics::load(run_dir)?;
    let run = Run {
        config: Configuration {
            size: None,
            ranks: metrics.world_size,
            threads: None,
        },
        metrics,
        workload: None,
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io("creating report folder", out, e))?;
    let runs = std::slice::from_ref(&run);
    io::write_atomic(&out.join("rank_iterations.csv"), rank_csv(runs).as_bytes())?;
    let m = &run.metrics;
    let mut ranks = String::from(
        "rank,threads,operators,tiles,gradient_s,denoiser_s,communication_s,idle_s,total_s,peak_rss_mib\n",
    );
    for r in &m.ranks {
        let sum = |f: &dyn Fn(&IterationProfile) -> f64| r.iterations.iter().map(f).sum::<f64>();
        let _ = writeln!(
            ranks,
            "{},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.1}",
            r.rank,
            r.threads,
            r.operators.len(),
            m.tiles.iter().filter(|t| t.rank == r.rank).count(),
            sum(&|i| i.gradient.secs),
            sum(&|i| i.denoiser.secs),
            sum(&IterationProfile::communication_secs),
            sum(&IterationProfile::idle_secs),
            sum(&IterationProfile::total_secs),
            r.peak_rss_bytes as f64 / (1u64 << 20) as f64,
        );
    }
    let mut html = format!(
        "<p>Run folder: {}. {} rank(s), {} iteration(s), solve {:.3} s{}. Measured on the machine \
         that ran it. File: rank_iterations.csv (per rank and iteration).</p>\n<h2>Ranks</h2>\n",
        escape(&run_dir.display().to_string()),
        m.world_size,
        m.ranks.first().map_or(0, |r| r.iterations.len()),
        m.solve_secs,
        m.psnr_db()
            .map_or(String::new(), |p| format!(", PSNR {p:.2} dB")),
    );
    html.push_str(&csv_table(&ranks));
    let title = match m.name.as_str() {
        "" => "Run report".to_string(),
        name => format!("Run report: {name}"),
    };
    write_page(out, &title, &html, run_figures(runs)?)
}

/// The report of a full-waveform inversion (its `metrics.json` lists epochs, not iterations) or of
/// a training run (`train.json`, no `metrics.json`): the loss per epoch or step, and each rank's
/// time. `None` for an imaging run.
fn write_fwi_or_training_report(run_dir: &Path, out: &Path) -> Result<Option<PathBuf>> {
    let read = |name: &str| -> Result<Option<Vec<u8>>> {
        let path = run_dir.join(name);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading", path, e)),
        }
    };
    let bad = |name: &str, e: serde_json::Error| Error::format(run_dir.join(name), e.to_string());
    let (title, about, loss, ranks) = if let Some(bytes) = read(io::METRICS_FILE)? {
        let is_fwi = serde_json::from_slice::<serde_json::Value>(&bytes)
            .is_ok_and(|v| v.get("step_ratio").is_some() && v.get("history").is_some());
        if !is_fwi {
            return Ok(None);
        }
        let m: crate::fwi::FwiSummary =
            serde_json::from_slice(&bytes).map_err(|e| bad(io::METRICS_FILE, e))?;
        let mut ranks = String::from("rank,shots,forward_s,adjoint_s,communication_s\n");
        for r in 0..m.world_size {
            let of = |f: &dyn Fn(&crate::fwi::RankEpoch) -> f64| -> f64 {
                m.history
                    .iter()
                    .flat_map(|e| &e.ranks)
                    .filter(|x| x.rank == r)
                    .map(f)
                    .sum()
            };
            let _ = writeln!(
                ranks,
                "{r},{},{:.3},{:.3},{:.3}",
                of(&|x| x.shots.len() as f64),
                of(&|x| x.forward_secs),
                of(&|x| x.adjoint_secs),
                of(&|x| x.communication_secs)
            );
        }
        let about = format!(
            "A full-waveform inversion of a {}×{} model, {} shots, {} epoch(s) on {} rank(s), \
             solve {:.1} s; model error {}.",
            m.model_shape[0],
            m.model_shape[1],
            m.shots,
            m.history.len(),
            m.world_size,
            m.solve_secs,
            m.final_model_error
                .map_or("not known (no true model)".into(), |e| format!(
                    "{:.2} %",
                    100.0 * e
                ))
        );
        let loss: Vec<(f64, f64)> = m.history.iter().map(|e| (e.epoch as f64, e.loss)).collect();
        (
            format!("FWI report: {}", m.name),
            about,
            ("epoch", loss),
            ranks,
        )
    } else if let Some(bytes) = read(crate::io::TRAIN_SUMMARY_FILE)? {
        if let Ok(t) = serde_json::from_slice::<crate::train::TrainSummary>(&bytes) {
            let mut ranks = String::from("rank,compute_s,exchange_s\n");
            for (r, (c, x)) in t.compute_secs.iter().zip(&t.exchange_secs).enumerate() {
                let _ = writeln!(ranks, "{r},{c:.3},{x:.3}");
            }
            let about = format!(
                "Training {} ({} parameters) for {} step(s) on {} rank(s).",
                t.denoiser, t.parameters, t.steps, t.ranks
            );
            let loss = t.loss.iter().map(|p| (p.step as f64, p.loss)).collect();
            (
                format!("Training report: {}", t.name),
                about,
                ("step", loss),
                ranks,
            )
        } else {
            let d: crate::dsn::run::DsnSummary = serde_json::from_slice(&bytes)
                .map_err(|e| bad(crate::io::TRAIN_SUMMARY_FILE, e))?;
            let mut ranks = String::from("rank,domains,compute_s,exchange_s\n");
            for r in &d.per_rank {
                let domains: Vec<String> = r.domains.iter().map(|x| x.to_string()).collect();
                let _ = writeln!(
                    ranks,
                    "{},{},{:.3},{:.3}",
                    r.rank,
                    domains.join(" "),
                    r.compute_secs,
                    r.exchange_secs
                );
            }
            let about = format!(
                "A Multi-DSN of {} domains for {} epoch(s) on {} rank(s); last target accuracy {}.",
                d.domains.len(),
                d.epochs.len(),
                d.ranks,
                d.epochs.last().map_or("none".into(), |e| format!(
                    "{:.1} %",
                    100.0 * e.target_accuracy
                ))
            );
            let loss = d
                .epochs
                .iter()
                .map(|e| {
                    let n = e.losses.len().max(1) as f64;
                    (
                        e.epoch as f64 + 1.0,
                        e.losses.iter().map(|l| l.total()).sum::<f64>() / n,
                    )
                })
                .collect();
            (
                format!("Training report: {}", d.name),
                about,
                ("epoch", loss),
                ranks,
            )
        }
    } else {
        return Ok(None);
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io("creating report folder", out, e))?;
    io::write_atomic(&out.join("ranks.csv"), ranks.as_bytes())?;
    let (x, points) = loss;
    let figure = crate::plot::LineChart::new("loss")
        .labels(x, "loss")
        .log_y()
        .series(crate::plot::Series::new("loss", points).markers())
        .render()?;
    let html = format!(
        "<p>Run folder: {}. {}</p>\n<h2>Ranks</h2>\n{}",
        escape(&run_dir.display().to_string()),
        escape(&about),
        csv_table(&ranks)
    );
    write_page(
        out,
        &title,
        &html,
        vec![("loss".into(), format!("loss per {x}"), figure)],
    )
    .map(Some)
}

/// A CSV text as an HTML table, the first line as its header.
fn csv_table(csv: &str) -> String {
    let mut html = String::from("<table>\n");
    for (k, line) in csv.lines().enumerate() {
        let cell = if k == 0 { "th" } else { "td" };
        html.push_str("<tr>");
        for v in line.split(',') {
            let _ = write!(html, "<{cell}>{}</{cell}>", escape(v));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

/// Writes the figures as PNG files and `report.html` (title, `body` HTML, then the figures
/// embedded, so the page stands alone) into `dir`; returns the page's path.
fn write_page(dir: &Path, title: &str, body: &str, figures: Vec<Figure>) -> Result<PathBuf> {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;max-width:1900px;margin:1em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         figure{{margin:1em 0}}</style></head><body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    html.push_str(body);
    for (stem, caption, image) in figures {
        let png = dir.join(format!("{stem}.png"));
        image.write_png(&png)?;
        let bytes = std::fs::read(&png).map_err(|e| Error::io("reading figure", &png, e))?;
        let _ = writeln!(
            html,
            "<figure><img alt=\"{stem}\" src=\"data:image/png;base64,{}\"><figcaption>{}</figcaption></figure>",
            base64(&bytes),
            escape(&caption)
        );
    }
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    io::write_atomic(&path, html.as_bytes())?;
    Ok(path)
}

/// The model's part of the report: a table of model beside measurement, predictions past this
/// machine, and a figure.
struct ModelSection {
    csv: String,
    html: String,
    figure: (String, String, Rgb),
}

/// Measured seconds per iteration of the slowest rank (first iteration left out when there are
/// more), for total, gradient, denoiser.
fn measured_per_iteration(m: &RunMetrics) -> [f64; 3] {
    let slowest = |f: &dyn Fn(&IterationProfile) -> f64| {
        m.ranks
            .iter()
            .map(|r| {
                let its = &r.iterations;
                let used = if its.len() > 1 { &its[1..] } else { &its[..] };
                used.iter().map(f).sum::<f64>() / used.len().max(1) as f64
            })
            .fold(0.0, f64::max)
    };
    [
        slowest(&IterationProfile::total_secs),
        slowest(&|i| i.gradient.secs),
        slowest(&|i| i.denoiser.secs),
    ]
}

/// The link the local runs communicated over: bytes moved over time spent moving them (waiting
/// excluded), from every multi-rank run's profiles; `None` without one.
fn local_link(runs: &[&Run]) -> Option<model::Link> {
    let (mut bytes, mut secs) = (0.0, 0.0);
    for run in runs.iter().filter(|r| r.config.ranks > 1) {
        for r in &run.metrics.ranks {
            for i in &r.iterations {
                for p in [&i.gradient, &i.denoiser] {
                    bytes += p.bytes as f64;
                    secs += p.communication_secs;
                }
            }
        }
    }
    (bytes > 0.0 && secs > 0.0).then_some(model::Link {
        latency_secs: 0.0,
        bytes_per_sec: bytes / secs,
    })
}

/// Columns of `model.csv` and of the report's model tables (seconds per iteration).
const MODEL_COLUMNS: &str = "kind,group,ranks,threads,total_s,gradient_s,denoiser_s,communication_s,\
                             idle_s,efficiency_bound,measured_total_s,measured_gradient_s,\
                             measured_denoiser_s,error_total_pct";

/// Rank counts the model predicts for past the measured ones.
const MODEL_RANKS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

fn model_section(runs: &[Run], link: Option<model::Link>) -> Result<Option<ModelSection>> {
    let mut csv = format!("{MODEL_COLUMNS}\n");
    let mut html = String::from(
        "<h2>Model (per iteration)</h2>\n<p>Rows marked <b>model</b> are predicted: per-rank work from \
         the operator and tile assignment, per-unit costs calibrated on the group's run with the \
         fewest ranks, communication from the bytes each gather moves over the link. Rows marked \
         <b>model vs measured</b> put the prediction beside the measurement of the same \
         configuration (first iteration left out); error = model / measured − 1.</p>\n",
    );
    let mut chart = LineChart::new("Parallel efficiency: model past this machine, and measured")
        .labels("ranks", "efficiency")
        .y_range(0.0, 1.2)
        .log_x();
    let mut any = false;
    for (gi, (g, members)) in groups(runs).iter().enumerate() {
        let group: Vec<&Run> = members.iter().map(|&i| &runs[i]).collect();
        let base = group[0];
        let Some(work) = &base.workload else { continue };
        let costs = model::Costs::measure(work, &base.metrics.ranks)?;
        let local = local_link(&group);
        let free = model::Link {
            latency_secs: 0.0,
            bytes_per_sec: f64::INFINITY,
        };
        let here = local.unwrap_or(free);
        let past = link.or(local).unwrap_or(free);
        let _ = writeln!(
            html,
            "<h3>{}</h3>\n<p>Local link (fitted from the measured runs' bytes and communication \
             time): {}. Link past this machine: {}.</p>\n<table>\n<tr>{}</tr>",
            escape(g),
            describe_link(local),
            describe_link(Some(past)),
            MODEL_COLUMNS
                .split(',')
                .map(|c| format!("<th>{c}</th>"))
                .collect::<String>(),
        );
        let mut row = |kind: &str, p: &model::Prediction, eff: f64, measured: Option<[f64; 3]>| {
            let err = measured.map(|m| (p.total_secs / m[0] - 1.0) * 100.0);
            let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
            let cells = [
                kind.to_string(),
                g.replace(',', ";"),
                p.ranks.to_string(),
                p.threads.to_string(),
                format!("{:.4}", p.total_secs),
                format!("{:.4}", p.gradient_secs),
                format!("{:.4}", p.denoiser_secs),
                format!("{:.4}", p.communication_secs),
                format!("{:.4}", p.idle_secs),
                format!("{eff:.4}"),
                opt(measured.map(|m| m[0])),
                opt(measured.map(|m| m[1])),
                opt(measured.map(|m| m[2])),
                err.map_or(String::new(), |e| format!("{e:+.1}")),
            ];
            let _ = writeln!(csv, "{}", cells.join(","));
            html.push_str("<tr>");
            for c in &cells {
                let _ = write!(html, "<td>{}</td>", escape(c));
            }
            html.push_str("</tr>\n");
        };
        let mut measured_eff = Vec::new();
        let mut modelled_eff = Vec::new();
        let base_threads = base.metrics.ranks[0].threads.max(1);
        let t_base = model::predict(work, &costs, &here, base.config.ranks, base_threads)?;
        for run in &group {
            let threads = run.metrics.ranks[0].threads.max(1);
            let p = model::predict(work, &costs, &here, run.config.ranks, threads)?;
            let m = measured_per_iteration(&run.metrics);
            let ratio = run.config.ranks as f64 / base.config.ranks as f64;
            let eff = t_base.total_secs / p.total_secs / ratio;
            row("model vs measured", &p, eff, Some(m));
            measured_eff.push((
                run.config.ranks as f64,
                measured_per_iteration(&base.metrics)[0] / m[0] / ratio,
            ));
        }
        let one = model::predict(work, &costs, &past, 1, base_threads)?;
        for n in MODEL_RANKS {
            let p = model::predict(work, &costs, &past, n, base_threads)?;
            let eff = one.total_secs / p.total_secs / n as f64;
            row("model", &p, eff, None);
            modelled_eff.push((n as f64, eff));
        }
        html.push_str("</table>\n");
        chart = chart
            .series(
                Series::new(
                    format!("model, {base_threads} thr/rank ({g})"),
                    modelled_eff,
                )
                .color(gi)
                .dash(Dash::Dashed),
            )
            .series(
                Series::new(format!("measured ({g})"), measured_eff)
                    .color(gi)
                    .markers(),
            );
        any = true;
    }
    if !any {
        return Ok(None);
    }
    Ok(Some(ModelSection {
        csv,
        html,
        figure: (
            "model_efficiency".into(),
            "Model (dashed): the efficiency bound load imbalance and communication leave, each rank \
             with the base run's threads, against one rank; measured (markers): this machine's runs, \
             whose ranks share its cores."
                .into(),
            chart.render()?,
        ),
    }))
}

fn describe_link(link: Option<model::Link>) -> String {
    match link {
        None => "none (no multi-rank run; communication not modelled)".into(),
        Some(l) if l.bytes_per_sec.is_infinite() => "free (not modelled)".into(),
        Some(l) => format!(
            "latency {:.1} µs, {:.3} GB/s",
            l.latency_secs * 1e6,
            l.bytes_per_sec / 1e9
        ),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Standard base64 (RFC 4648, padded).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::profile::PhaseProfile;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    fn run(ranks: usize, gradient: &[f64], denoiser: &[f64]) -> Run {
        let rank = |r: usize| RankTimes {
            rank: r,
            operators: vec![],
            gradient_secs: 0.0,
            denoiser_secs: 0.0,
            communication_secs: 0.0,
            total_secs: 0.0,
            idle_secs: 0.0,
            threads: 1,
            peak_rss_bytes: 1 << 20,
            iterations: (1..=2)
                .map(|k| IterationProfile {
                    iteration: k,
                    elapsed_secs: k as f64 * (gradient[r] + denoiser[r]),
                    gradient: PhaseProfile {
                        secs: gradient[r],
                        ..Default::default()
                    },
                    denoiser: PhaseProfile {
                        secs: denoiser[r],
                        ..Default::default()
                    },
                    other: PhaseProfile::default(),
                    setup: PhaseProfile::default(),
                    peak_rss_bytes: 1 << 20,
                })
                .collect(),
        };
        Run {
            workload: None,
            config: Configuration {
                size: None,
                ranks,
                threads: None,
            },
            metrics: RunMetrics {
                name: "test".into(),
                image_shape: vec![1, 1, 64, 64],
                tiles: Vec::new(),
                world_size: ranks,
                solve_secs: 0.0,
                reconstruction: None,
                history: (1..=2)
                    .map(|k| HistoryIn {
                        iteration: k,
                        psnr_db: Some(20.0 + k as f64),
                    })
                    .collect(),
                ranks: (0..ranks).map(rank).collect(),
            },
        }
    }

    #[test]
    fn speedup_and_efficiency_follow_the_slowest_rank() {
        // 1 rank: 4 s gradient + 2 s denoiser per iteration. 2 ranks: the gradient halves on rank
        // 0 but rank 1 takes 3 s (imbalance), the denoiser halves on both.
        let runs = vec![run(1, &[4.0], &[2.0]), run(2, &[2.0, 3.0], &[1.0, 1.0])];
        let sc = scaling(&runs);
        assert_eq!(sc[0].speedup, [1.0, 1.0, 1.0]);
        assert_eq!(sc[1].base_ranks, 1);
        assert_eq!(sc[1].speedup, [12.0 / 8.0, 8.0 / 6.0, 2.0]);
        assert_eq!(sc[1].efficiency, [0.75, 8.0 / 12.0, 1.0]);
        let summary = summary_csv(&runs);
        assert_eq!(summary.lines().count(), 3);
        assert!(
            summary
                .lines()
                .nth(2)
                .unwrap()
                .starts_with(",2,1,2,8.000000,6.000000,2.000000,"),
            "{summary}"
        );
        let ranks = rank_csv(&runs);
        assert_eq!(
            ranks.lines().count(),
            1 + 2 + 2 * 2,
            "one line per rank and iteration"
        );
    }

    #[test]
    fn the_report_stands_alone() {
        let runs = vec![run(1, &[4.0], &[2.0]), run(2, &[2.0, 3.0], &[1.0, 1.0])];
        let dir = tempfile::tempdir().unwrap();
        let html =
            std::fs::read_to_string(write_report(&runs, "study <x>", dir.path(), None).unwrap())
                .unwrap();
        assert_eq!(html.matches("data:image/png;base64,").count(), 8);
        assert!(html.contains("study &lt;x&gt;"));
        for f in [
            "strong_scaling",
            "speedup",
            "efficiency",
            "breakdown",
            "iteration_times",
            "psnr_time",
            "psnr_iteration",
            "peak_memory",
        ] {
            assert!(dir.path().join(format!("{f}.png")).is_file(), "{f}");
        }
        assert!(dir.path().join("summary.csv").is_file());
    }

    #[test]
    fn the_patch_map_colours_tiles_by_measured_cost() {
        let mut r = run(2, &[1.0, 1.0], &[1.0, 1.0]);
        assert!(patch_map_figure(&r.metrics, "map").unwrap().is_none());
        // Four 32² tiles of a 64² image, 0.5 to 2 s per call.
        r.metrics.tiles = (0..4)
            .map(|i| TileCost {
                index: i,
                rank: i % 2,
                window: vec![((i / 2 * 32) as i64 - 4, 40), ((i % 2 * 32) as i64 - 4, 40)],
                region: vec![(i / 2 * 32, 32), (i % 2 * 32, 32)],
                secs: (i + 1) as f64,
                calls: 2,
            })
            .collect();
        let img = patch_map_figure(&r.metrics, "map").unwrap().unwrap();
        let count = |c: [u8; 3]| img.data.chunks(3).filter(|p| *p == c).count();
        // The colour bar runs from 0 to the dearest tile: the tiles of 0.5, 1, 1.5 and 2 s per call
        // take a quarter, half, three quarters and all of it (the colour bar only a few pixels of
        // each).
        for t in [0.25, 0.5, 0.75, 1.0] {
            let n = count(Colormap::Magma.map(t));
            assert!(n > 5000, "{n} pixels of the colour at {t}");
        }
        // Rank outlines in the ranks' colours.
        assert!(count(palette(0)) > 200 && count(palette(1)) > 200);
        let stems: Vec<String> = run_figures(std::slice::from_ref(&r))
            .unwrap()
            .into_iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(
            stems.last().map(String::as_str),
            Some("patch_map"),
            "{stems:?}"
        );
    }

    #[test]
    fn a_run_report_names_the_file_that_is_not_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_run_report(&dir.path().join("nowhere"), dir.path()).unwrap_err();
        assert!(e.to_string().starts_with("no such run folder"), "{e}");
        let e = write_run_report(dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("metrics.json"), "{e}");
        std::fs::write(dir.path().join("metrics.json"), "{\"world_size\": 1}").unwrap();
        let e = write_run_report(dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("metrics.json"), "{e}");
        assert!(!dir.path().join("report.html").exists());
    }

    #[test]
    fn sizes_scale_the_image_and_the_blurs() {
        let preset = Preset::load("multiblur", &[]).unwrap().preset;
        let o = size_overrides(&preset, 512).unwrap();
        assert_eq!(o[0], "image.size=[342,512]");
        assert_eq!(o.len(), 1 + 8);
        assert_eq!(
            o[1],
            "physics.0.sigma=[5.119999885559082,2.559999942779541]"
        );
        let resized = Preset::load("multiblur", &o).unwrap().preset;
        assert_eq!(resized.image.size, Some(vec![342, 512]));
        let e = size_overrides(&preset, 4).unwrap_err();
        assert!(e.to_string().contains("--sizes"), "{e}");
    }
}
