//! The patch map: which rank denoises which tile of an image, as plain data for display.
//!
//! Planned with the ranks' own code ([`TilingConfig::build`] and [`assign_tiles`]), so a map drawn
//! before a run is the map the run uses. `tessera serve` sends it in `Event::Started` and the
//! workbench plans it while the preset is edited, both as its protocol twin `protocol::PatchMap`. Both go through [`PatchMap::plan`], which refuses a plan of
//! more than [`crate::tiling::MAX_TILES`] tiles (the tiling planner's own limit) with the count.
//! The exact spatial decomposition (`kind = "spatial"`) has one block per rank, on the grid
//! [`crate::dist::spatial`] uses; its halos depend on the network and are not drawn.

use serde::{Deserialize, Serialize};

use super::denoise::{TileAssignment, TileTime, assign_tiles};
use crate::error::{Error, Result};
use crate::nn::Grid;
use crate::tiling::{Decomposition, TilingConfig};

/// Which tile each rank denoises, in image coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchMap {
    /// Spatial shape of the image, (H, W) or (D, H, W).
    pub spatial: Vec<usize>,
    pub tiles: Vec<PatchTile>,
}

/// One tile: the window the denoiser sees (with overlap) and the region it owns in the output,
/// both as (start, size) per spatial axis in image coordinates (windows may extend past the edge
/// where the strategy pads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchTile {
    pub window: Vec<(i64, usize)>,
    pub region: Vec<(usize, usize)>,
    pub rank: usize,
}

/// One tile's measured denoiser cost, as `metrics.json` records it: the tile of the plan, the rank
/// that denoised it, and its time summed over the run's denoiser calls ([`TileTime`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TileCost {
    pub index: usize,
    pub rank: usize,
    /// (start, size) per spatial axis, as in [`PatchTile`].
    pub window: Vec<(i64, usize)>,
    pub region: Vec<(usize, usize)>,
    /// Seconds summed over the run's denoiser calls (a batch's time split evenly by its tiles).
    pub secs: f64,
    /// Denoiser calls that included the tile (the mean per call is `secs / calls`).
    pub calls: usize,
}

impl TileCost {
    /// Mean seconds per denoiser call.
    pub fn secs_per_call(&self) -> f64 {
        self.secs / self.calls.max(1) as f64
    }
}

impl PatchMap {
    /// The measured cost of each tile: `per_rank[r]` holds the times rank `r` took (one entry per
    /// tile it denoised). A tile is listed under the rank that timed it, so a tile timed twice or
    /// on the wrong rank shows as such; an index outside the plan is an error.
    pub fn measured(&self, per_rank: &[Vec<TileTime>]) -> Result<Vec<TileCost>> {
        let mut out = Vec::new();
        for (rank, times) in per_rank.iter().enumerate() {
            for t in times {
                let tile = self.tiles.get(t.index).ok_or_else(|| {
                    Error::bad_peer_data(
                        rank,
                        format!("timed tile {} of a plan of {}", t.index, self.tiles.len()),
                    )
                })?;
                out.push(TileCost {
                    index: t.index,
                    rank,
                    window: tile.window.clone(),
                    region: tile.region.clone(),
                    secs: t.secs,
                    calls: t.calls,
                });
            }
        }
        out.sort_by_key(|c| (c.index, c.rank));
        Ok(out)
    }

    /// The tiles of an image of spatial shape `spatial` (`H, W` or `D, H, W`) on `world` ranks.
    pub fn plan(
        tiling: &TilingConfig,
        spatial: &[usize],
        world: usize,
        how: TileAssignment,
    ) -> Result<PatchMap> {
        if world == 0 {
            return Err(Error::config("ranks", "must be ≥ 1"));
        }
        let plan = match tiling.decomposition()? {
            Decomposition::Tiles(strategy) => strategy.plan(spatial)?,
            Decomposition::Spatial => return Self::blocks(tiling, spatial, world),
        };
        let owners = assign_tiles(&plan, world, how);
        let tiles = plan
            .tiles()
            .iter()
            .zip(owners)
            .map(|(t, rank)| PatchTile {
                // Windows are in padded coordinates; shift them back so they may start before 0.
                window: t
                    .window()
                    .iter()
                    .zip(plan.padding())
                    .map(|(w, (lo, _))| (w.start as i64 - *lo as i64, w.size))
                    .collect(),
                region: t.region().iter().map(|r| (r.start, r.size)).collect(),
                rank,
            })
            .collect();
        Ok(PatchMap {
            spatial: spatial.to_vec(),
            tiles,
        })
    }

    /// One block per rank of the exact spatial decomposition (window = region).
    fn blocks(tiling: &TilingConfig, spatial: &[usize], world: usize) -> Result<PatchMap> {
        tiling.validate()?;
        if !(1..=3).contains(&spatial.len()) {
            return Err(Error::config(
                "tiling.kind",
                format!("\"spatial\" needs an image with 1 to 3 spatial axes, got {spatial:?}"),
            ));
        }
        let dims = crate::nn::models::drunet::dims3(spatial);
        let axes = spatial.len();
        let grid = Grid::for_axes(tiling.grid.as_deref(), axes, world, dims, "tiling.grid")?;
        grid.check_fits(dims, "the image")?;
        let tiles = (0..grid.ranks())
            .map(|rank| {
                let block = grid.block(dims, rank);
                // The block's last `axes` axes are the image's.
                let region: Vec<(usize, usize)> = (3 - axes..3)
                    .map(|a| (block.lo[a] as usize, (block.hi[a] - block.lo[a]) as usize))
                    .collect();
                PatchTile {
                    window: region.iter().map(|&(s, n)| (s as i64, n)).collect(),
                    region,
                    rank,
                }
            })
            .collect();
        Ok(PatchMap {
            spatial: spatial.to_vec(),
            tiles,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{Extent, TilingKind};

    /// Tiles per rank, as the workbench's legend counts them.
    fn per_rank(map: &PatchMap) -> Vec<usize> {
        crate::protocol::PatchMap::from(map).tiles_per_rank()
    }

    #[test]
    fn planned_map_covers_the_image_and_shares_tiles() {
        let tiling = TilingConfig {
            patch_size: Extent::Uniform(64),
            overlap: Some(Extent::Uniform(8)),
            ..Default::default()
        };
        let map = PatchMap::plan(&tiling, &[128, 192], 2, TileAssignment::RoundRobin).unwrap();
        assert_eq!(map.tiles.len(), 6);
        assert_eq!(per_rank(&map), vec![3, 3]);
        let owned: usize = map
            .tiles
            .iter()
            .map(|t| t.region[0].1 * t.region[1].1)
            .sum();
        assert_eq!(owned, 128 * 192, "regions tile the image exactly");
        // Overlap: the first window starts 8 px before the image (reflect padding).
        assert_eq!(map.tiles[0].window[0], (-8, 80));
        assert!(PatchMap::plan(&tiling, &[128, 192], 0, TileAssignment::RoundRobin).is_err());
    }

    #[test]
    fn a_spatial_map_has_one_block_per_rank_covering_the_image() {
        for (spatial, world, grid, want) in [
            (vec![100usize, 90], 3, None, None),
            (
                vec![64, 64],
                4,
                Some(vec![2, 2]),
                Some(vec![[0usize, 32, 0, 32], [0, 32, 32, 32]]),
            ),
            (vec![8, 40, 30], 2, None, None),
        ] {
            let tiling = TilingConfig {
                kind: TilingKind::Spatial,
                grid,
                ..Default::default()
            };
            let map = PatchMap::plan(&tiling, &spatial, world, TileAssignment::RoundRobin).unwrap();
            assert_eq!(per_rank(&map), vec![1; world], "{spatial:?}");
            let volume: usize = map
                .tiles
                .iter()
                .map(|t| t.region.iter().map(|r| r.1).product::<usize>())
                .sum();
            assert_eq!(volume, spatial.iter().product::<usize>(), "{spatial:?}");
            for t in &map.tiles {
                assert!(t.region.iter().zip(&spatial).all(|(r, &n)| r.0 + r.1 <= n));
            }
            if let Some(want) = want {
                for (t, w) in map.tiles.iter().zip(want) {
                    assert_eq!(t.region, vec![(w[0], w[1]), (w[2], w[3])]);
                }
            }
        }
        let too_many = TilingConfig {
            kind: TilingKind::Spatial,
            grid: Some(vec![8, 1]),
            ..Default::default()
        };
        let e = PatchMap::plan(&too_many, &[4, 64], 8, TileAssignment::RoundRobin).unwrap_err();
        assert!(
            e.to_string().contains("tiling.grid") || e.to_string().contains("image"),
            "{e}"
        );
    }

    #[test]
    fn bad_and_absurd_sizes_are_errors_not_panics() {
        let tiling = TilingConfig {
            patch_size: Extent::Uniform(300),
            ..Default::default()
        };
        let e = PatchMap::plan(&tiling, &[64, 64], 2, TileAssignment::CostAware).unwrap_err();
        assert!(e.to_string().contains("tiling.patch_size"), "{e}");
        let one_px = TilingConfig {
            patch_size: Extent::Uniform(1),
            overlap: Some(Extent::Uniform(8)),
            ..Default::default()
        };
        let e = PatchMap::plan(&one_px, &[683, 1024], 2, TileAssignment::RoundRobin).unwrap_err();
        assert!(e.to_string().contains("699392 tiles"), "{e}");
    }
}
