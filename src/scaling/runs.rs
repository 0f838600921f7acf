//! A study's runs as it reads them back: the [`Configuration`] each ran with, the [`RunMetrics`] of
//! its `metrics.json`, and speedup and efficiency against the fewest ranks of its group.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use super::performance;
use crate::dist::patch_map::TileCost;
use crate::dist::profile::IterationProfile;
use crate::error::{Error, Result};
use crate::job::RankTimes;
use crate::physics::PhysicsConfig;
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
    pub(super) fn group(&self) -> String {
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
pub(super) struct QualityIn {
    psnr_db: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct HistoryIn {
    pub(super) iteration: usize,
    pub(super) psnr_db: Option<f64>,
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
    pub(super) reconstruction: Option<QualityIn>,
    pub(super) history: Vec<HistoryIn>,
    pub ranks: Vec<RankTimes>,
    /// Measured denoiser cost per tile (tiled denoisers; empty otherwise or in older runs).
    #[serde(default)]
    pub tiles: Vec<TileCost>,
    /// Each rank's device and its memory in a run on a GPU (empty for CPU runs and older runs).
    #[serde(default)]
    pub devices: Vec<crate::job::RankDeviceUse>,
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
    pub(super) fn slowest(&self, f: impl Fn(&IterationProfile) -> f64) -> f64 {
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
    pub workload: Option<performance::Workload>,
}

/// Speedup and efficiency of one run against the run with the fewest ranks of its group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    pub base_ranks: usize,
    /// Total, gradient, denoiser.
    pub speedup: [f64; 3],
    pub efficiency: [f64; 3],
}

pub(super) fn times(m: &RunMetrics) -> [f64; 3] {
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
