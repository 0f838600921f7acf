//! Distributed tiled denoising (deepinv's `DistributedProcessing` of a denoiser with a tiling
//! strategy): tile `i` is denoised by its owner rank — round robin (`i % world`) or a cost-aware
//! greedy assignment — and the patches are gathered so every rank assembles the same image.
//!
//! Each tile's result depends only on its own pixels, so the assembled image equals the
//! single-process [`TiledDenoiser`] result exactly, whatever the number of ranks.
//!
//! Each rank times its own denoiser calls per batch of tiles into a [`TileClock`] (rank-local, no
//! message): the job gathers the clocks once at the end, with the other timings, into the per-tile
//! cost of `metrics.json` ([`crate::dist::patch_map::TileCost`]).

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::codec;
use super::collective::Collective;
use crate::denoise::Denoiser;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tiling::{TilePlan, TiledDenoiser};

/// How tiles are shared among ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileAssignment {
    /// Tile `i` on rank `i % world` (deepinv's default).
    #[default]
    RoundRobin,
    /// Largest tiles first, each to the rank with the least work so far (by window volume).
    CostAware,
}

/// The rank that denoises each tile.
pub fn assign_tiles(plan: &TilePlan, world: usize, how: TileAssignment) -> Vec<usize> {
    let n = plan.num_tiles();
    match how {
        TileAssignment::RoundRobin => (0..n).map(|i| i % world).collect(),
        TileAssignment::CostAware => {
            let cost = |i: usize| plan.tiles()[i].window_shape().iter().product::<usize>();
            let mut order: Vec<usize> = (0..n).collect();
            // Stable sort: equal costs keep index order, so the assignment is deterministic.
            order.sort_by_key(|&i| std::cmp::Reverse(cost(i)));
            let mut load = vec![0usize; world];
            let mut owner = vec![0usize; n];
            for i in order {
                let r = (0..world).min_by_key(|&r| (load[r], r)).expect("world ≥ 1");
                load[r] += cost(i);
                owner[i] = r;
            }
            owner
        }
    }
}

/// Denoiser time of one tile on the rank that denoised it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TileTime {
    pub index: usize,
    /// Seconds summed over the tile's denoiser calls. The denoiser is called on a batch of tiles
    /// (`tiling.max_batch_size`); a batch's time is split evenly among its tiles, which share one
    /// window shape.
    pub secs: f64,
    /// Denoiser calls that included the tile (one per iteration of a PnP solve).
    pub calls: usize,
}

/// Per-tile denoiser times of this rank, accumulated over every call (index = tile).
#[derive(Debug, Default)]
pub struct TileClock(Mutex<Vec<TileTime>>);

impl TileClock {
    /// Adds one batch: `secs` shared evenly by `tiles`.
    pub fn record(&self, tiles: &[usize], secs: f64) {
        let Some(&last) = tiles.iter().max() else {
            return;
        };
        let share = secs / tiles.len() as f64;
        // Only this rank's denoiser thread records, so the lock is never contended.
        let mut times = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if times.len() <= last {
            let start = times.len();
            times.extend((start..=last).map(|index| TileTime {
                index,
                secs: 0.0,
                calls: 0,
            }));
        }
        for &i in tiles {
            times[i].secs += share;
            times[i].calls += 1;
        }
    }

    /// The tiles this rank denoised, by index.
    pub fn times(&self) -> Vec<TileTime> {
        let times = self.0.lock().unwrap_or_else(|e| e.into_inner());
        times.iter().filter(|t| t.calls > 0).copied().collect()
    }
}

/// A tiled denoiser whose tiles are spread over the ranks of a group.
pub struct DistributedTiledDenoiser {
    comm: Arc<dyn Collective>,
    tiled: TiledDenoiser,
    pub assignment: TileAssignment,
    clock: Arc<TileClock>,
}

impl DistributedTiledDenoiser {
    pub fn new(
        comm: Arc<dyn Collective>,
        tiled: TiledDenoiser,
        assignment: TileAssignment,
    ) -> Self {
        DistributedTiledDenoiser {
            comm,
            tiled,
            assignment,
            clock: Arc::default(),
        }
    }

    /// This rank's per-tile denoiser times (shared: it keeps counting while the denoiser runs).
    pub fn clock(&self) -> Arc<TileClock> {
        self.clock.clone()
    }

    /// The tile plan for `x_shape` and the owner of each tile.
    pub fn patch_map(&self, x_shape: &[usize]) -> Result<(TilePlan, Vec<usize>)> {
        let plan = self.tiled.plan(x_shape)?;
        let owners = assign_tiles(&plan, self.comm.world_size(), self.assignment);
        Ok((plan, owners))
    }

    /// Denoises only this rank's tiles (`gather = false`): `(tile index, patch)` pairs.
    pub fn denoise_local(&self, x: &Tensor, sigma: f32) -> Result<Vec<(usize, Tensor)>> {
        x.expect_rank("tiling", &[4, 5])?;
        let (plan, owners) = self.patch_map(x.shape())?;
        let mine: Vec<usize> = (0..plan.num_tiles())
            .filter(|&i| owners[i] == self.comm.rank())
            .collect();
        self.tiled
            .denoise_tiles_timed(&plan, x, &mine, sigma, &mut |tiles, secs| {
                self.clock.record(tiles, secs)
            })
    }
}

impl Denoiser for DistributedTiledDenoiser {
    fn name(&self) -> String {
        format!(
            "{} on {} rank(s)",
            self.tiled.name(),
            self.comm.world_size()
        )
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        if self.comm.world_size() == 1 {
            return self
                .tiled
                .denoise_timed(x, sigma, &mut |tiles, secs| self.clock.record(tiles, secs));
        }
        let local = self.denoise_local(x, sigma)?;
        let refs: Vec<(usize, &Tensor)> = local.iter().map(|(i, t)| (*i, t)).collect();
        let parts = self.comm.all_gather(&codec::encode(&refs)?)?;
        let (plan, owners) = self.patch_map(x.shape())?;
        let mut patches = Vec::with_capacity(plan.num_tiles());
        let mut arrived = vec![false; plan.num_tiles()];
        for (rank, part) in parts.iter().enumerate() {
            for (i, patch) in codec::decode(rank, part)? {
                // A rank sends the tiles it owns, each once: anything else is its bad data.
                if owners.get(i) != Some(&rank) || std::mem::replace(&mut arrived[i], true) {
                    return Err(Error::bad_peer_data(
                        rank,
                        format!(
                            "tile {i} of a plan of {}, not its own or sent twice",
                            plan.num_tiles()
                        ),
                    ));
                }
                patches.push((i, patch));
            }
        }
        if let Some(i) = arrived.iter().position(|a| !a) {
            return Err(Error::bad_peer_data(owners[i], format!("sent no tile {i}")));
        }
        // `assemble` applies tiles in index order, so blended sums do not depend on who sent what.
        plan.assemble(&patches, x.shape())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::testutil::on_group;
    use crate::tiling::TilingConfig;

    /// A pointwise but position-independent denoiser: each tile's result depends only on its pixels.
    struct Affine;
    impl Denoiser for Affine {
        fn name(&self) -> String {
            "affine".into()
        }
        fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
            let mut y = x.clone();
            y.map_inplace(|v| 0.5 * v * v + sigma);
            Ok(y)
        }
    }

    fn tiled(kind: &str) -> TiledDenoiser {
        let overlap = if kind == "basic" { "" } else { "overlap = 2\n" };
        let text = format!("kind = \"{kind}\"\npatch_size = 8\n{overlap}max_batch_size = 3");
        let cfg: TilingConfig = toml::from_str(&text).unwrap();
        TiledDenoiser::from_config(Box::new(Affine), &cfg).unwrap()
    }

    #[test]
    fn n_ranks_equal_the_single_process_tiled_result() {
        for (kind, shape) in [
            ("overlap", vec![2, 3, 19, 23]),
            ("blend", vec![1, 1, 17, 16]),
            ("basic", vec![1, 2, 9, 10, 11]),
        ] {
            let x = Tensor::from_fn(&shape, |i| ((i * 7919) % 251) as f32 / 251.0);
            let want = tiled(kind).denoise(&x, 0.1).unwrap();
            for world in [1, 2, 3] {
                for assignment in [TileAssignment::RoundRobin, TileAssignment::CostAware] {
                    let got = on_group(world, |comm| {
                        DistributedTiledDenoiser::new(comm, tiled(kind), assignment)
                            .denoise(&x, 0.1)
                            .unwrap()
                    });
                    for g in got {
                        assert_eq!(g, want, "{kind}, {world} ranks, {assignment:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_tile_is_timed_once_per_call_on_its_owner() {
        let x = Tensor::from_fn(&[1, 1, 19, 23], |i| i as f32 / 437.0);
        for world in [1, 2, 3] {
            let got = on_group(world, |comm| {
                let d = DistributedTiledDenoiser::new(
                    comm,
                    tiled("overlap"),
                    TileAssignment::CostAware,
                );
                d.denoise(&x, 0.1).unwrap();
                d.denoise(&x, 0.1).unwrap();
                let (_, owners) = d.patch_map(x.shape()).unwrap();
                (owners, d.clock().times())
            });
            let owners = &got[0].0;
            let mut seen = vec![0; owners.len()];
            for (rank, (_, times)) in got.iter().enumerate() {
                for t in times {
                    assert_eq!(
                        owners[t.index], rank,
                        "tile {} timed on rank {rank}",
                        t.index
                    );
                    assert_eq!(t.calls, 2, "tile {}: one call per denoise", t.index);
                    assert!(t.secs >= 0.0 && t.secs.is_finite());
                    seen[t.index] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{world} ranks: {seen:?}");
        }
    }

    #[test]
    fn a_batch_is_shared_evenly_by_its_tiles() {
        let clock = TileClock::default();
        clock.record(&[3, 1], 0.5);
        clock.record(&[1], 0.25);
        assert_eq!(
            clock.times(),
            vec![
                TileTime {
                    index: 1,
                    secs: 0.5,
                    calls: 2
                },
                TileTime {
                    index: 3,
                    secs: 0.25,
                    calls: 1
                },
            ]
        );
    }

    #[test]
    fn more_ranks_than_tiles_leaves_some_idle() {
        let x = Tensor::from_fn(&[1, 1, 8, 8], |i| i as f32 / 64.0);
        let want = tiled("overlap").denoise(&x, 0.0).unwrap();
        let got = on_group(3, |comm| {
            let d =
                DistributedTiledDenoiser::new(comm, tiled("overlap"), TileAssignment::RoundRobin);
            (
                d.denoise_local(&x, 0.0).unwrap().len(),
                d.denoise(&x, 0.0).unwrap(),
            )
        });
        let total: usize = got.iter().map(|g| g.0).sum();
        assert_eq!(total, tiled("overlap").plan(x.shape()).unwrap().num_tiles());
        assert!(got.iter().any(|g| g.0 == 0), "some rank owns no tile");
        for (_, y) in got {
            assert_eq!(y, want);
        }
    }
}
