//! Drawing the patch map (which rank denoises which tile) over an image.
//!
//! The map itself is planned with the ranks' own code ([`crate::dist::patch_map::PatchMap::plan`]):
//! before a run by the workbench's document, during a run by the backend (`Event::Started`).
//! Drawing is bounded: only tiles in view are drawn, and at most [`MAX_DRAWN_TILES`] of them, so a
//! map of many small tiles costs a bounded number of vertices whatever its size.

use egui::{Color32, Painter, Pos2, Rect, Stroke, StrokeKind};

use crate::protocol::PatchMap;

/// Most tiles drawn in one pane per frame (about 50k vertices).
pub const MAX_DRAWN_TILES: usize = 2048;

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

/// The colour of a lost rank's tiles (`Event::Regrouped`): grey until the new owners' map
/// replaces them.
pub const LOST_COLOR: Color32 = Color32::from_gray(110);

/// The colour of rank `rank`'s tiles and lines, grey when it was lost.
pub fn rank_color_or_lost(rank: usize, lost: &[usize]) -> Color32 {
    match lost.contains(&rank) {
        true => LOST_COLOR,
        false => rank_color(rank),
    }
}

/// What [`paint`] drew.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drawn {
    /// Tiles whose footprint is in view.
    pub visible: usize,
    /// Tiles drawn (fewer than `visible` when there were too many to draw).
    pub drawn: usize,
}

/// Draws the map over `image_rect`, the screen rectangle of the whole image (rows and columns are
/// the last two spatial axes; a volume's tiles are drawn once per (row, column) footprint), clipped
/// to `clip`, the image's part on screen (a border tile's window reaches past the image, but
/// nothing is drawn outside it). Regions are filled with their rank's colour at `opacity` (0..1),
/// grey for the ranks in `lost`; windows are outlined, so overlaps show as bands where outlines
/// of neighbouring tiles cross into each other's regions.
pub fn paint(
    painter: &Painter,
    image_rect: Rect,
    clip: Rect,
    (map, lost): (&PatchMap, &[usize]),
    opacity: f32,
) -> Drawn {
    let painter = painter.with_clip_rect(painter.clip_rect().intersect(clip));
    let none = Drawn {
        visible: 0,
        drawn: 0,
    };
    let n = map.spatial.len();
    if n < 2 || map.spatial[n - 2] == 0 || map.spatial[n - 1] == 0 {
        return none;
    }
    let (h, w) = (map.spatial[n - 2] as f32, map.spatial[n - 1] as f32);
    let to_screen = |row: f32, col: f32| {
        Pos2::new(
            image_rect.min.x + col / w * image_rect.width(),
            image_rect.min.y + row / h * image_rect.height(),
        )
    };
    let mut seen = std::collections::HashSet::new();
    let visible: Vec<(Rect, Rect, usize)> = map
        .tiles
        .iter()
        .filter(|t| t.region.len() == n && t.window.len() == n)
        .filter(|t| seen.insert((t.region[n - 2], t.region[n - 1])))
        .filter_map(|t| {
            let (r, c) = (t.region[n - 2], t.region[n - 1]);
            let region = Rect::from_min_max(
                to_screen(r.0 as f32, c.0 as f32),
                to_screen((r.0 + r.1) as f32, (c.0 + c.1) as f32),
            );
            let (wr, wc) = (t.window[n - 2], t.window[n - 1]);
            let window = Rect::from_min_max(
                to_screen(wr.0 as f32, wc.0 as f32),
                to_screen(wr.0 as f32 + wr.1 as f32, wc.0 as f32 + wc.1 as f32),
            );
            window.intersects(clip).then_some((region, window, t.rank))
        })
        .collect();
    if visible.len() > MAX_DRAWN_TILES {
        return Drawn {
            visible: visible.len(),
            drawn: 0,
        };
    }
    let opacity = opacity.clamp(0.0, 1.0);
    for (region, _, rank) in &visible {
        let fill = rank_color_or_lost(*rank, lost).gamma_multiply(opacity);
        painter.rect_filled(*region, 0.0, fill);
    }
    // Outlines stay legible at low fill opacity.
    let outline = (2.0 * opacity).min(1.0);
    for (_, window, rank) in &visible {
        painter.rect_stroke(
            *window,
            0.0,
            Stroke::new(1.5, rank_color_or_lost(*rank, lost).gamma_multiply(outline)),
            StrokeKind::Inside,
        );
    }
    Drawn {
        visible: visible.len(),
        drawn: visible.len(),
    }
}
