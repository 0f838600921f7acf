//! The study's figures: strong scaling, speedup and efficiency across runs, each run's per-rank
//! breakdown, time per iteration, PSNR and peak memory, and the patch map of measured tile costs.

use super::runs::{Run, RunMetrics, scaling, times};
use crate::dist::patch_map::TileCost;
use crate::dist::profile::IterationProfile;
use crate::error::{Error, Result};
use crate::plot::{
    Colormap, Dash, Figure, Heatmap, LineChart, Outline, Rgb, Series, StackedBars, palette,
};

/// The runs split by group (same size and threads), in order of first appearance.
pub(super) fn groups(runs: &[Run]) -> Vec<(String, Vec<usize>)> {
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

/// A rendered figure of a report: (file stem, caption, image).
pub type Captioned = (String, String, Rgb);

/// The scaling report's figures: strong scaling, speedup and efficiency across the runs, then
/// [`run_figures`] of all runs.
pub fn figures(runs: &[Run]) -> Result<Vec<Captioned>> {
    let mut out = scaling_figures(runs)?;
    out.extend(run_figures(runs)?);
    Ok(out)
}

/// Strong scaling, speedup and efficiency against the run with the fewest ranks of each group.
fn scaling_figures(runs: &[Run]) -> Result<Vec<Captioned>> {
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
pub fn run_figures(runs: &[Run]) -> Result<Vec<Captioned>> {
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
    let mut out: Vec<Captioned> = vec![
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
