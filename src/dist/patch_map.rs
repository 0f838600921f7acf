//! The patch map: which rank denoises which tile of an image, as plain data for display.
//!
//! Planned with the ranks' own code ([`TilingConfig::build`] and [`assign_tiles`]), so a map drawn
//! before a run is the map the run uses. `tessera serve` sends it in `Event::Started`; the workbench
//! plans it while the preset is edited. Both go through [`PatchMap::plan`], which refuses a plan of
//! more than [`crate::tiling::MAX_TILES`] tiles (the tiling planner's own limit) with the count.

use serde::{Deserialize, Serialize};

use super::denoise::{TileAssignment, assign_tiles};
use crate::error::{Error, Result};
use crate::tiling::TilingConfig;

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

impl PatchMap {
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
        let plan = tiling.build()?.plan(spatial)?;
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

    /// Tiles per rank (index = rank), for a legend.
    pub fn tiles_per_rank(&self) -> Vec<usize> {
        let ranks = self.tiles.iter().map(|t| t.rank + 1).max().unwrap_or(0);
        let mut counts = vec![0; ranks];
        for t in &self.tiles {
            counts[t.rank] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::Extent;

    #[test]
    fn planned_map_covers_the_image_and_shares_tiles() {
        let tiling = TilingConfig {
            patch_size: Extent::Uniform(64),
            overlap: Some(Extent::Uniform(8)),
            ..Default::default()
        };
        let map = PatchMap::plan(&tiling, &[128, 192], 2, TileAssignment::RoundRobin).unwrap();
        assert_eq!(map.tiles.len(), 6);
        assert_eq!(map.tiles_per_rank(), vec![3, 3]);
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
