//! A performance model of a study's workload past this machine: per-rank work from the operator
//! and tile assignment the ranks' own code makes, per-unit costs measured in the study's base run,
//! and communication from the bytes each collective moves over a link of given latency and
//! bandwidth. It gives the time per iteration on N ranks (up to [`MAX_MODEL_RANKS`]) and the
//! efficiency bound that load imbalance and communication leave.
//!
//! Per iteration (the ranks meet at the gradient's sum and at the denoiser's gather):
//! `T(N) = max_r G_r + C_g(N) + max_r D_r + C_d(N) + O`, where `G_r = g · Σ_{i owned by r} wᵢ` with
//! `wᵢ` an operator's relative cost (its angles for tomography, 1 for a blur; the whole stack on
//! every rank when a fused blur stack applies its Gram kernel locally), `D_r = d · Σ_{tiles of r}
//! vₜ` with `vₜ` a tile's window volume padded to DRUNet's multiple of 8 (the untiled denoiser runs
//! on every rank), `O` the replicated rest, and `g, d, O` per unit of work per thread, scaled by
//! the base run's threads over the modelled ones. A collective that gathers `M` bytes over `N`
//! ranks takes `(N − 1)·α + M·(N − 1)/N / β` (every rank sends its share to the `N − 1` others
//! through one link); the gradient gathers one image-sized term per operator (exact order), the
//! denoiser one image.

use crate::dist::denoise::TileAssignment;
use crate::dist::patch_map::PatchMap;
use crate::dist::profile::IterationProfile;
use crate::error::{Error, Result};
use crate::physics::PhysicsConfig;
use crate::physics::stack::BlurFusion;
use crate::preset::Preset;
use crate::tiling::TilingConfig;

/// The most ranks the model predicts for.
pub const MAX_MODEL_RANKS: usize = 1024;

/// A link between two ranks: one-way latency per message and bandwidth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub latency_secs: f64,
    pub bytes_per_sec: f64,
}

impl Link {
    /// Seconds for a gather of `bytes` in all over `ranks` ranks.
    pub fn gather_secs(&self, bytes: f64, ranks: usize) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let n = ranks as f64;
        (n - 1.0) * self.latency_secs + bytes * (n - 1.0) / n / self.bytes_per_sec
    }

    /// Seconds for a ring all-reduce of `bytes` over `ranks` ranks (reduce-scatter + all-gather:
    /// `2(N − 1)` steps, each moving `bytes / N`).
    pub fn all_reduce_secs(&self, bytes: f64, ranks: usize) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let n = ranks as f64;
        2.0 * (n - 1.0) * (self.latency_secs + bytes / n / self.bytes_per_sec)
    }

    /// Least-squares fit of `t = 2(N−1)·α + 2(N−1)/N · b / β` to all-reduce times `(bytes,
    /// secs)` over `ranks` ranks. Needs two distinct sizes; a fitted latency below zero is 0.
    pub fn fit_all_reduce(ranks: usize, samples: &[(f64, f64)]) -> Result<Link> {
        if ranks < 2 {
            return Err(Error::config("link fit", "needs at least 2 ranks"));
        }
        let n = ranks as f64;
        // t = a·x + c with x = bytes, a = 2(N−1)/(N β), c = 2(N−1) α.
        let (a, c) = linear_fit(samples).ok_or_else(|| {
            Error::config("link fit", "needs all-reduce times at two or more sizes")
        })?;
        if a <= 0.0 {
            return Err(Error::config(
                "link fit",
                format!("time does not grow with size (slope {a:e} s/B): too noisy to fit"),
            ));
        }
        Ok(Link {
            latency_secs: (c / (2.0 * (n - 1.0))).max(0.0),
            bytes_per_sec: 2.0 * (n - 1.0) / (n * a),
        })
    }
}

/// Ordinary least squares `y = a·x + c`; `None` without two distinct `x`.
fn linear_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let a = sxy / sxx;
    Some((a, my - a * mx))
}

/// What the model needs to know about a workload (from its preset, at the run's size).
#[derive(Debug, Clone)]
pub struct Workload {
    /// Relative gradient cost of each operator, in operator order.
    pub operator_weights: Vec<f64>,
    /// Every rank computes the whole gradient (a fused blur stack's local Gram convolution).
    pub gradient_replicated: bool,
    /// The tiling and the image's spatial shape; `None`: the denoiser runs whole on every rank.
    pub tiling: Option<(TilingConfig, Vec<usize>)>,
    pub assignment: TileAssignment,
    /// Bytes of the iterate `(B, C, …)` as f32.
    pub image_bytes: f64,
}

impl Workload {
    /// The workload `preset` describes (its `operators()`, tiling and image size).
    pub fn of_preset(preset: &Preset) -> Result<Workload> {
        let shape = match (&preset.image.size, &preset.image.shape) {
            (_, Some(s)) => s.clone(),
            (Some(size), None) => {
                let channels = match preset.image.sample {
                    Some(crate::samples::Sample::Natural) if !preset.image.grayscale => 3,
                    _ => 1,
                };
                std::iter::once(channels)
                    .chain(size.iter().copied())
                    .collect()
            }
            (None, None) => {
                return Err(Error::config(
                    "scaling model",
                    "needs the image's size in the preset ([image] size or shape)",
                ));
            }
        };
        let x_shape: Vec<usize> = std::iter::once(1).chain(shape.iter().copied()).collect();
        let ops = preset.operators()?;
        let built = ops
            .iter()
            .map(|p| p.build(&x_shape, None))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&dyn crate::physics::LinearPhysics> =
            built.iter().map(|b| b.as_ref()).collect();
        // A part split by channel does its share of its operator's work.
        let operator_weights = ops
            .iter()
            .map(|p| {
                let whole = match &p.config {
                    PhysicsConfig::Tomography(c) => c.angles.to_degrees().len() as f64,
                    PhysicsConfig::Tomography3d(c) => c.angles.to_degrees().len() as f64,
                    PhysicsConfig::Blur(_) | PhysicsConfig::Blur3d(_) => 1.0,
                };
                whole * p.work_fraction(x_shape[1])
            })
            .collect();
        Ok(Workload {
            operator_weights,
            gradient_replicated: BlurFusion::common_key(&refs).is_some(),
            tiling: preset.tiling.clone().map(|t| (t, shape[1..].to_vec())),
            assignment: preset.distributed.tile_assignment,
            image_bytes: 4.0 * shape.iter().product::<usize>() as f64,
        })
    }

    /// Gradient work of each of `ranks` ranks (operator `i` on rank `i % N`).
    pub fn gradient_units(&self, ranks: usize) -> Vec<f64> {
        let total: f64 = self.operator_weights.iter().sum();
        if self.gradient_replicated {
            return vec![total; ranks];
        }
        let mut units = vec![0.0; ranks];
        for (i, w) in self.operator_weights.iter().enumerate() {
            units[crate::dist::physics::owner(i, ranks)] += w;
        }
        units
    }

    /// Denoiser work of each of `ranks` ranks: padded window volumes of its tiles, as the ranks'
    /// own assignment gives them out.
    pub fn denoiser_units(&self, ranks: usize) -> Result<Vec<f64>> {
        let Some((tiling, spatial)) = &self.tiling else {
            return Ok(vec![1.0; ranks]);
        };
        let map = PatchMap::plan(tiling, spatial, ranks, self.assignment)?;
        let mut units = vec![0.0; ranks];
        for t in &map.tiles {
            units[t.rank] += t
                .window
                .iter()
                .map(|&(_, n)| n.div_ceil(8) as f64 * 8.0)
                .product::<f64>();
        }
        Ok(units)
    }

    /// Bytes gathered per iteration: (gradient, denoiser).
    pub fn gathered_bytes(&self) -> (f64, f64) {
        (
            self.operator_weights.len() as f64 * self.image_bytes,
            self.image_bytes,
        )
    }
}

/// Per-unit costs measured in one run (seconds per unit of work per iteration, times threads).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub gradient_thread_secs_per_unit: f64,
    pub denoiser_thread_secs_per_unit: f64,
    /// The replicated rest of an iteration (updates, metrics), in thread-seconds.
    pub other_thread_secs: f64,
}

/// Mean of `f` over a rank's iterations, leaving out the first when there are more (it warms
/// caches and plans).
fn per_iteration(its: &[IterationProfile], f: impl Fn(&IterationProfile) -> f64) -> f64 {
    let used = if its.len() > 1 { &its[1..] } else { its };
    used.iter().map(f).sum::<f64>() / used.len().max(1) as f64
}

impl Costs {
    /// Calibrates from a run's per-rank profiles: compute time (communication and waiting taken
    /// out) over the work the model assigns each rank.
    pub fn measure(work: &Workload, ranks: &[crate::job::RankTimes]) -> Result<Costs> {
        let n = ranks.len();
        let (g_units, d_units) = (work.gradient_units(n), work.denoiser_units(n)?);
        let (mut g, mut d, mut gu, mut du, mut o) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for r in ranks {
            let t = r.threads.max(1) as f64;
            g += t * per_iteration(&r.iterations, |i| i.gradient.compute_secs());
            d += t * per_iteration(&r.iterations, |i| i.denoiser.compute_secs());
            o += t * per_iteration(&r.iterations, |i| i.other.compute_secs());
            gu += g_units.get(r.rank).copied().unwrap_or(0.0);
            du += d_units.get(r.rank).copied().unwrap_or(0.0);
        }
        if gu <= 0.0 || du <= 0.0 {
            return Err(Error::config(
                "scaling model",
                "the run has no work to calibrate on",
            ));
        }
        Ok(Costs {
            gradient_thread_secs_per_unit: g / gu,
            denoiser_thread_secs_per_unit: d / du,
            other_thread_secs: o / n as f64,
        })
    }
}

/// The model's time per iteration on N ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub ranks: usize,
    pub threads: usize,
    /// Slowest rank's gradient compute + its gather.
    pub gradient_secs: f64,
    /// Slowest rank's denoiser compute + its gather.
    pub denoiser_secs: f64,
    pub other_secs: f64,
    pub communication_secs: f64,
    /// Mean over ranks of the time spent waiting for the slowest one.
    pub idle_secs: f64,
    pub total_secs: f64,
}

/// Predicts an iteration on `ranks` ranks of `threads` threads each.
pub fn predict(
    work: &Workload,
    costs: &Costs,
    link: &Link,
    ranks: usize,
    threads: usize,
) -> Result<Prediction> {
    if ranks == 0 || ranks > MAX_MODEL_RANKS {
        return Err(Error::config(
            "scaling model",
            format!("ranks must be in 1..={MAX_MODEL_RANKS}, got {ranks}"),
        ));
    }
    let t = threads.max(1) as f64;
    let g: Vec<f64> = work
        .gradient_units(ranks)
        .iter()
        .map(|u| u * costs.gradient_thread_secs_per_unit / t)
        .collect();
    let d: Vec<f64> = work
        .denoiser_units(ranks)?
        .iter()
        .map(|u| u * costs.denoiser_thread_secs_per_unit / t)
        .collect();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (bg, bd) = work.gathered_bytes();
    let (cg, cd) = (link.gather_secs(bg, ranks), link.gather_secs(bd, ranks));
    let other = costs.other_thread_secs / t;
    let gradient = max(&g) + cg;
    let denoiser = max(&d) + cd;
    Ok(Prediction {
        ranks,
        threads,
        gradient_secs: gradient,
        denoiser_secs: denoiser,
        other_secs: other,
        communication_secs: cg + cd,
        idle_secs: (max(&g) - mean(&g)) + (max(&d) - mean(&d)),
        total_secs: gradient + denoiser + other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(ops: usize, weights: f64) -> Workload {
        Workload {
            operator_weights: vec![weights; ops],
            gradient_replicated: false,
            tiling: None,
            assignment: TileAssignment::RoundRobin,
            image_bytes: 4e6,
        }
    }

    #[test]
    fn one_operator_on_two_ranks_leaves_one_idle_and_a_split_does_not() {
        let costs = Costs {
            gradient_thread_secs_per_unit: 1.0,
            denoiser_thread_secs_per_unit: 0.0,
            other_thread_secs: 0.0,
        };
        let free = Link {
            latency_secs: 0.0,
            bytes_per_sec: f64::INFINITY,
        };
        let whole = predict(&work(1, 100.0), &costs, &free, 2, 1).unwrap();
        assert_eq!(whole.gradient_secs, 100.0);
        assert_eq!(whole.idle_secs, 50.0);
        let split = predict(&work(8, 12.5), &costs, &free, 2, 1).unwrap();
        assert_eq!(split.gradient_secs, 50.0);
        assert_eq!(split.idle_secs, 0.0);
        // 3 ranks: 3 + 3 + 2 operators.
        assert_eq!(work(8, 1.0).gradient_units(3), vec![3.0, 3.0, 2.0]);
    }

    #[test]
    fn gathers_cost_latency_and_bandwidth() {
        let link = Link {
            latency_secs: 1e-3,
            bytes_per_sec: 1e9,
        };
        assert_eq!(link.gather_secs(1e9, 1), 0.0);
        assert!((link.gather_secs(1e9, 4) - (3e-3 + 0.75)).abs() < 1e-12);
    }

    #[test]
    fn the_link_fit_recovers_latency_and_bandwidth() {
        let truth = Link {
            latency_secs: 2e-4,
            bytes_per_sec: 1.25e8,
        };
        let samples: Vec<(f64, f64)> = [4e3, 6.4e4, 1e6, 8e6]
            .iter()
            .map(|&b| (b, truth.all_reduce_secs(b, 3)))
            .collect();
        let fit = Link::fit_all_reduce(3, &samples).unwrap();
        assert!(
            (fit.latency_secs / truth.latency_secs - 1.0).abs() < 1e-6,
            "{fit:?}"
        );
        assert!(
            (fit.bytes_per_sec / truth.bytes_per_sec - 1.0).abs() < 1e-6,
            "{fit:?}"
        );
        assert!(Link::fit_all_reduce(3, &samples[..1]).is_err());
    }

    #[test]
    fn the_bundled_workloads_model_their_assignment() {
        let tomo = Preset::load("scaling_tomo2d", &[]).unwrap().preset;
        let w = Workload::of_preset(&tomo).unwrap();
        assert_eq!(
            w.operator_weights,
            [13.0, 13.0, 13.0, 13.0, 12.0, 12.0, 12.0, 12.0]
        );
        assert!(!w.gradient_replicated);
        assert_eq!(w.gradient_units(2), vec![50.0, 50.0]);
        let colour = Preset::load("scaling_colour", &[]).unwrap().preset;
        let w = Workload::of_preset(&colour).unwrap();
        assert!(
            w.gradient_replicated,
            "8 circular blurs of one size share FFTs"
        );
        assert_eq!(w.image_bytes, 4.0 * 3.0 * 512.0 * 768.0);
        let units = w.denoiser_units(2).unwrap();
        assert!(units.iter().all(|&u| u > 0.0), "{units:?}");
    }
}
