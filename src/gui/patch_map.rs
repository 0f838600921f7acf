//! The patch map: which rank denoises which tile, drawn over the image.
//!
//! Before a run the map is planned here from the preset's [`TilingConfig`] with the same code the
//! ranks use ([`TilingConfig::build`] and [`assign_tiles`]), so what the user sees is what will run;
//! during a run the backend's [`PatchMap`] from `Started` replaces it.

use egui::{Color32, Painter, Pos2, Rect, Stroke, StrokeKind};

use crate::dist::denoise::TileAssignment;
use crate::error::Result;
use crate::protocol::PatchMap;
use crate::tiling::TilingConfig;

/// The tiles of an image of spatial shape `spatial` (`H, W` or `D, H, W`) on `world` ranks
/// ([`PatchMap::plan`], the same planner the backend uses).
pub fn plan_patch_map(
    tiling: &TilingConfig,
    spatial: &[usize],
    world: usize,
    how: TileAssignment,
) -> Result<PatchMap> {
    PatchMap::plan(tiling, spatial, world, how)
}

/// A distinct colour per rank (Tableau 10).
pub fn rank_color(rank: usize) -> Color32 {
    const PALETTE: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = PALETTE[rank % PALETTE.len()];
    Color32::from_rgb(r, g, b)
}

/// Draws the map over `image_rect`, the screen rectangle of the whole image (rows and columns are
/// the last two spatial axes; a volume's tiles are drawn once per (row, column) footprint).
/// Regions are filled with their rank's colour; windows are outlined, so overlaps show as bands
/// where outlines of neighbouring tiles cross into each other's regions.
pub fn paint(painter: &Painter, image_rect: Rect, map: &PatchMap) {
    let n = map.spatial.len();
    if n < 2 || map.spatial[n - 2] == 0 || map.spatial[n - 1] == 0 {
        return;
    }
    let (h, w) = (map.spatial[n - 2] as f32, map.spatial[n - 1] as f32);
    let to_screen = |row: f32, col: f32| {
        Pos2::new(
            image_rect.min.x + col / w * image_rect.width(),
            image_rect.min.y + row / h * image_rect.height(),
        )
    };
    let mut seen = std::collections::HashSet::new();
    for tile in &map.tiles {
        if tile.region.len() != n || tile.window.len() != n {
            continue;
        }
        let (r, c) = (tile.region[n - 2], tile.region[n - 1]);
        if !seen.insert((r, c, tile.rank)) {
            continue;
        }
        let color = rank_color(tile.rank);
        let region = Rect::from_min_max(
            to_screen(r.0 as f32, c.0 as f32),
            to_screen((r.0 + r.1) as f32, (c.0 + c.1) as f32),
        );
        painter.rect_filled(region, 0.0, color.gamma_multiply(0.28));
        let (wr, wc) = (tile.window[n - 2], tile.window[n - 1]);
        let window = Rect::from_min_max(
            to_screen(wr.0 as f32, wc.0 as f32),
            to_screen(wr.0 as f32 + wr.1 as f32, wc.0 as f32 + wc.1 as f32),
        );
        painter.rect_stroke(
            window,
            0.0,
            Stroke::new(1.0, color.gamma_multiply(0.9)),
            StrokeKind::Inside,
        );
    }
}

/// Tiles per rank, for the legend.
pub fn tiles_per_rank(map: &PatchMap) -> Vec<usize> {
    let ranks = map.tiles.iter().map(|t| t.rank + 1).max().unwrap_or(0);
    let mut counts = vec![0; ranks];
    for t in &map.tiles {
        counts[t.rank] += 1;
    }
    counts
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
        let map = plan_patch_map(&tiling, &[128, 192], 2, TileAssignment::RoundRobin).unwrap();
        assert_eq!(map.tiles.len(), 6);
        assert_eq!(tiles_per_rank(&map), vec![3, 3]);
        let owned: usize = map
            .tiles
            .iter()
            .map(|t| t.region[0].1 * t.region[1].1)
            .sum();
        assert_eq!(owned, 128 * 192, "regions tile the image exactly");
        // Overlap: the first window starts 8 px before the image (reflect padding).
        assert_eq!(map.tiles[0].window[0], (-8, 80));
        assert!(plan_patch_map(&tiling, &[128, 192], 0, TileAssignment::RoundRobin).is_err());
    }

    #[test]
    fn bad_sizes_are_errors_not_panics() {
        let tiling = TilingConfig {
            patch_size: Extent::Uniform(300),
            ..Default::default()
        };
        let e = plan_patch_map(&tiling, &[64, 64], 2, TileAssignment::CostAware).unwrap_err();
        assert!(e.to_string().contains("tiling.patch_size"), "{e}");
    }
}
