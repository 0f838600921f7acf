//! Distributed tiled denoising (deepinv's `DistributedProcessing` of a denoiser with a tiling
//! strategy): tile `i` is denoised by its owner rank — round robin (`i % world`) or a cost-aware
//! greedy assignment — and the patches are gathered so every rank assembles the same image.
//!
//! Each tile's result depends only on its own pixels, so the assembled image equals the
//! single-process [`TiledDenoiser`] result exactly, whatever the number of ranks.

use std::sync::Arc;

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

/// A tiled denoiser whose tiles are spread over the ranks of a group.
pub struct DistributedTiledDenoiser {
    comm: Arc<dyn Collective>,
    tiled: TiledDenoiser,
    pub assignment: TileAssignment,
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
        }
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
        self.tiled.denoise_tiles(&plan, x, &mine, sigma)
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
            return self.tiled.denoise(x, sigma);
        }
        let local = self.denoise_local(x, sigma)?;
        let refs: Vec<(usize, &Tensor)> = local.iter().map(|(i, t)| (*i, t)).collect();
        let parts = self.comm.all_gather(&codec::encode(&refs)?)?;
        let plan = self.tiled.plan(x.shape())?;
        let mut patches = Vec::with_capacity(plan.num_tiles());
        for (rank, part) in parts.iter().enumerate() {
            for (i, patch) in codec::decode(rank, part)? {
                if i >= plan.num_tiles() {
                    return Err(Error::bad_peer_data(
                        rank,
                        format!("tile {i} of a plan of {}", plan.num_tiles()),
                    ));
                }
                patches.push((i, patch));
            }
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
