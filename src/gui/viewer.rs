//! What the image panes show: a texture per [`Slot`], the arrays a slot can be sliced from, the
//! shared zoom, pan and slice position, and each pane's display settings.
//!
//! A slot shows either the backend's latest preview (during a run) or a section of an array the
//! workbench holds: the Data panel's image, a loaded measurement file, the outputs of a finished
//! run on a local backend, or a run reopened from the history. Arrays are cut and mapped on the
//! preview worker; the UI thread only swaps textures.

use std::collections::HashMap;
use std::sync::Arc;

use egui::{ColorImage, Rect, TextureHandle, TextureOptions, Vec2};

use super::preview::{Contrast, Display, Histogram, Mapped, PaneDisplay, Pump, PumpMsg, Slot};
use super::timeline::Timeline;
use crate::protocol::{PreviewImage, Section};
use crate::tensor::Tensor;

/// A texture on screen and what it was made from.
pub struct Shown {
    pub texture: TextureHandle,
    /// The float image (downsampled to the texture), for pixel values, profiles and differences.
    pub raw: Arc<PreviewImage>,
    /// The colours on screen, for export.
    pub color: Arc<ColorImage>,
    pub range: (f32, f32),
    /// The image's own auto window (1st–99th percentile), whatever window it is drawn with: linked
    /// contrast joins these.
    pub auto_range: (f32, f32),
    pub histogram: Histogram,
    pub iteration: usize,
    pub full_size: (u32, u32),
}

/// Zoom and pan shared by the panes: `zoom` 1 fits the whole image to its pane (below 1 it is
/// drawn smaller, whole), `center` is in texture coordinates (0..1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedView {
    pub zoom: f32,
    pub center: Vec2,
}

impl Default for SharedView {
    fn default() -> Self {
        SharedView {
            zoom: 1.0,
            center: Vec2::splat(0.5),
        }
    }
}

impl SharedView {
    /// The visible part of the texture.
    pub fn uv(&self) -> Rect {
        // Below 1 the whole texture shows (the pane draws it smaller instead).
        let half = 0.5 / self.zoom.max(1.0);
        let c = Vec2::new(
            self.center.x.clamp(half, 1.0 - half),
            self.center.y.clamp(half, 1.0 - half),
        );
        Rect::from_center_size(c.to_pos2(), Vec2::splat(2.0 * half))
    }
}

/// Where volumes are cut: the axis (0 = depth, 1 = rows, 2 = columns) and a position on each axis,
/// shared by every pane.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VolumeCursor {
    pub axis: usize,
    pub index: [usize; 3],
}

pub use super::preview::AXIS_NAMES;

/// How one overlay drawn over the images shows: napari's layer visibility and opacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    pub visible: bool,
    /// 0 (transparent) to 1.
    pub opacity: f32,
}

impl Layer {
    const fn shown(opacity: f32) -> Layer {
        Layer {
            visible: true,
            opacity,
        }
    }

    /// The opacity to draw with, None when hidden (or fully transparent).
    pub fn drawn(self) -> Option<f32> {
        let opacity = self.opacity.clamp(0.0, 1.0);
        (self.visible && opacity > 0.0).then_some(opacity)
    }
}

/// The overlays over the panes, each with its visibility and opacity (the Layers menu).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layers {
    /// Which rank denoises which tile (the fill; outlines follow at twice its opacity).
    pub patch_map: Layer,
    /// The line profile.
    pub profile: Layer,
    /// The statistics box.
    pub roi: Layer,
    /// Where the orthogonal cuts cross.
    pub crosshair: Layer,
}

impl Default for Layers {
    fn default() -> Self {
        Layers {
            patch_map: Layer::shown(0.25),
            profile: Layer::shown(1.0),
            roi: Layer::shown(1.0),
            crosshair: Layer::shown(0.65),
        }
    }
}

/// What a pane's values measure; linked contrast gives panes of one quantity one window. The
/// reconstruction, ground truth, the opened image, a compared run and orthogonal cuts are of
/// one quantity (an image's intensity, or an FWI model's velocity); each measurement, the
/// difference and the gradient are quantities of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quantity {
    Image,
    Measurement(usize),
    Difference,
    Gradient,
}

impl Quantity {
    pub fn of(slot: Slot) -> Quantity {
        match slot {
            Slot::Measurement(i) => Quantity::Measurement(i),
            Slot::Difference => Quantity::Difference,
            Slot::Gradient => Quantity::Gradient,
            _ => Quantity::Image,
        }
    }
}

/// The state of the image panes.
#[derive(Default)]
pub struct Viewer {
    pub shown: HashMap<Slot, Shown>,
    /// Arrays slots are cut from (when the workbench holds them).
    pub arrays: HashMap<Slot, Arc<Tensor>>,
    pub view: SharedView,
    /// The overlays' visibility and opacity.
    pub layers: Layers,
    /// Linked contrast: panes of one [`Quantity`] share one window (a window set in one pane
    /// applies to all of them; in auto, the window spans each one's 1–99 %). Unlinked: per pane.
    pub contrast_linked: bool,
    /// The linked auto windows the panes were last mapped with, per quantity.
    linked_windows: HashMap<Quantity, (f32, f32)>,
    pub cursor: VolumeCursor,
    /// Per-pane display settings of the document on screen (the window's default applies to
    /// what a pane does not set).
    pub displays: HashMap<Slot, PaneDisplay>,
    /// Which measurement the Measurement pane shows.
    pub measurement: usize,
    /// Show reconstruction − ground truth as a fourth pane.
    pub show_difference: bool,
    /// A line profile in texture coordinates (start, end), drawn on every pane.
    pub profile: Option<(egui::Pos2, egui::Pos2)>,
    /// A box (two corners, texture coordinates) whose statistics the Profile tab shows, drawn on
    /// every pane.
    pub roi: Option<(egui::Pos2, egui::Pos2)>,
    /// The pixel under the mouse: its pane and texture coordinates.
    pub hover: Option<(Slot, egui::Pos2)>,
    /// The volume shown as three orthogonal cuts through the cursor (instead of the panes).
    pub ortho: Option<Slot>,
    /// The running job's reconstruction previews, to scrub back through.
    pub timeline: Timeline,
    /// The pane shown alone, full size (F or its "full" button toggles it).
    pub maximized: Option<Slot>,
    /// Screen pixels per image pixel at zoom 1 in the first pane with an image (last frame's).
    pub fit_scale: Option<f32>,
}

impl Viewer {
    pub fn new() -> Viewer {
        Viewer::default()
    }

    /// The display `slot` is drawn with: [`Viewer::chosen_display_of`], where linked auto contrast
    /// becomes the window its quantity shares.
    pub fn display_of(&self, slot: Slot, default: Display) -> Display {
        let d = self.chosen_display_of(slot, default);
        match self.linked_windows.get(&Quantity::of(slot)) {
            Some(&(lo, hi)) if d.contrast == Contrast::Auto && self.contrast_linked => Display {
                contrast: Contrast::Range { lo, hi },
                ..d
            },
            _ => d,
        }
    }

    /// The shared auto window of `quantity` now: from the lowest to the highest of its panes'
    /// own 1–99 % windows (None with fewer than two panes, or when unlinked).
    fn linked_window(&self, quantity: Quantity) -> Option<(f32, f32)> {
        if !self.contrast_linked {
            return None;
        }
        let mut of_quantity = self
            .shown
            .iter()
            .filter(|(slot, _)| Quantity::of(**slot) == quantity)
            .map(|(_, s)| s.auto_range);
        let first = of_quantity.next()?;
        let (window, n) = of_quantity.fold((first, 1), |((lo, hi), n), (a, b)| {
            ((lo.min(a), hi.max(b)), n + 1)
        });
        (n >= 2).then_some(window)
    }

    /// Brings the linked windows up to date with the panes on screen; returns the quantities whose
    /// window changed (their panes need mapping again).
    pub fn update_linked_windows(&mut self) -> Vec<Quantity> {
        let mut quantities: Vec<Quantity> = self.shown.keys().map(|s| Quantity::of(*s)).collect();
        quantities.extend(self.linked_windows.keys().copied());
        quantities.sort_by_key(|q| format!("{q:?}"));
        quantities.dedup();
        let mut changed = Vec::new();
        for q in quantities {
            let now = self.linked_window(q);
            if now != self.linked_windows.get(&q).copied() {
                match now {
                    Some(w) => self.linked_windows.insert(q, w),
                    None => self.linked_windows.remove(&q),
                };
                changed.push(q);
            }
        }
        changed
    }

    /// The display settings chosen for `slot` over the window's `default` (its display menu
    /// shows these). Signed quantities (a difference, a gradient) default to the diverging map,
    /// white at zero.
    pub fn chosen_display_of(&self, slot: Slot, default: Display) -> Display {
        let base = match slot {
            Slot::Difference | Slot::Gradient => diverging(default),
            _ => default,
        };
        self.displays
            .get(&slot)
            .map_or(base, |pane| pane.over(base))
    }

    /// The section of `tensor` the panes show now (the cursor, within the array's extent).
    pub fn section(&self, tensor: &Tensor) -> Section {
        let a = self.cursor.axis;
        let extent = tensor.shape().get(2 + a).copied().unwrap_or(1).max(1);
        Section {
            cut: Some((a, self.cursor.index[a].min(extent - 1))),
            channel: None,
        }
    }

    /// The volume shown as orthogonal cuts, while its slot holds a volume: a 2-D document (or a
    /// 2-D image opened in a volume's place) shows the ordinary panes whatever was chosen before.
    pub fn ortho_source(&self) -> Option<Slot> {
        self.ortho
            .filter(|s| self.arrays.get(s).is_some_and(|t| t.shape().len() == 5))
    }

    /// The spatial extent of the first volume held (for the slice slider), if any.
    pub fn volume_dims(&self) -> Option<[usize; 3]> {
        self.ortho_source()
            .iter()
            .chain(&[Slot::Reconstruction, Slot::GroundTruth, Slot::Data])
            .chain(self.arrays.keys())
            .filter_map(|s| self.arrays.get(s))
            .find_map(|t| match *t.shape() {
                [_, _, d, h, w] => Some([d, h, w]),
                _ => None,
            })
    }

    /// Holds `tensor` as the array of `slot` and shows its current section.
    pub fn show_array(&mut self, slot: Slot, tensor: Arc<Tensor>, pump: &Pump, default: Display) {
        if let [_, _, d, h, w] = *tensor.shape()
            && self.volume_dims().is_none()
        {
            // The first volume: start in its middle.
            self.cursor.index = [d / 2, h / 2, w / 2];
        }
        self.arrays.insert(slot, tensor.clone());
        pump.send(PumpMsg::Show {
            slot,
            section: self.section(&tensor),
            tensor,
            display: self.display_of(slot, default),
        });
        // A run's volume read back after a run: its orthogonal cuts, if they are shown.
        if self.ortho == Some(slot) {
            self.show_ortho(pump, default);
        }
    }

    /// Cuts the orthogonal views' volume along each axis through the cursor.
    pub fn show_ortho(&self, pump: &Pump, default: Display) {
        let Some((source, tensor)) = self
            .ortho_source()
            .and_then(|s| Some((s, self.arrays.get(&s)?)))
        else {
            return;
        };
        let display = self.display_of(source, default);
        for a in 0..3u8 {
            let extent = tensor
                .shape()
                .get(2 + a as usize)
                .copied()
                .unwrap_or(1)
                .max(1);
            pump.send(PumpMsg::Show {
                slot: Slot::Ortho(a),
                tensor: tensor.clone(),
                section: Section {
                    cut: Some((a as usize, self.cursor.index[a as usize].min(extent - 1))),
                    channel: None,
                },
                display,
            });
        }
    }

    /// Where the other two cuts cross orthogonal view `axis`, in its texture coordinates.
    pub fn ortho_cross(&self, axis: u8) -> Option<egui::Pos2> {
        let dims = self.volume_dims()?;
        let f = |a: usize| (self.cursor.index[a] as f32 + 0.5) / dims[a] as f32;
        Some(match axis {
            0 => egui::pos2(f(2), f(1)),
            1 => egui::pos2(f(2), f(0)),
            _ => egui::pos2(f(1), f(0)),
        })
    }

    /// The point of the volume at texture coordinates `uv` of orthogonal view `axis` (depth, row,
    /// column): the cut's own axis stays at the cursor.
    pub fn ortho_point(&self, axis: u8, uv: egui::Pos2) -> Option<[usize; 3]> {
        let dims = self.volume_dims()?;
        let at = |t: f32, a: usize| ((t * dims[a] as f32) as usize).min(dims[a] - 1);
        let mut p = self.cursor.index;
        match axis {
            0 => (p[1], p[2]) = (at(uv.y, 1), at(uv.x, 2)),
            1 => (p[0], p[2]) = (at(uv.y, 0), at(uv.x, 2)),
            _ => (p[0], p[1]) = (at(uv.y, 0), at(uv.x, 1)),
        }
        Some(p)
    }

    /// A click at texture coordinates `uv` of orthogonal view `axis` moves the other two cuts
    /// there (as in napari's and Fiji's orthogonal views).
    pub fn ortho_click(&mut self, axis: u8, uv: egui::Pos2) -> bool {
        let Some(p) = self.ortho_point(axis, uv) else {
            return false;
        };
        let before = self.cursor.index;
        self.cursor.index = p;
        before != p
    }

    /// Cuts every held volume again at the cursor (after the slider moved).
    pub fn reslice(&self, pump: &Pump, default: Display) {
        self.show_ortho(pump, default);
        for (slot, tensor) in &self.arrays {
            if tensor.shape().len() == 5 {
                pump.send(PumpMsg::Show {
                    slot: *slot,
                    tensor: tensor.clone(),
                    section: self.section(tensor),
                    display: self.display_of(*slot, default),
                });
            }
        }
    }

    /// Moves the slice on the current axis by `delta` (shortcuts); false when there is no volume.
    pub fn step_slice(&mut self, delta: isize) -> bool {
        let Some(dims) = self.volume_dims() else {
            return false;
        };
        let a = self.cursor.axis;
        let i = (self.cursor.index[a] as isize + delta).clamp(0, dims[a] as isize - 1) as usize;
        let moved = i != self.cursor.index[a];
        self.cursor.index[a] = i;
        moved
    }

    /// Maps every pane again with its display (after a contrast or colormap change).
    pub fn remap(&self, pump: &Pump, default: Display, only: Option<Slot>) {
        if only.is_none() || only == self.ortho {
            self.show_ortho(pump, default);
        }
        for (slot, s) in &self.shown {
            if only.is_some_and(|o| o != *slot) || matches!(slot, Slot::Ortho(_)) {
                continue;
            }
            let display = self.display_of(*slot, default);
            pump.send(PumpMsg::SetDisplay(*slot, display));
            let scrubbed = (*slot == Slot::Reconstruction)
                .then(|| self.timeline.pinned())
                .flatten();
            match self.arrays.get(slot).filter(|_| scrubbed.is_none()) {
                Some(t) => pump.send(PumpMsg::Show {
                    slot: *slot,
                    tensor: t.clone(),
                    section: self.section(t),
                    display,
                }),
                None => pump.send(PumpMsg::Map {
                    slot: *slot,
                    raw: s.raw.clone(),
                    display,
                }),
            }
        }
    }

    /// Forgets what a run showed (its previews, outputs and differences); the Data panel's image
    /// and loaded measurement files stay.
    pub fn clear_run(&mut self) {
        for slot in [
            Slot::Reconstruction,
            Slot::GroundTruth,
            Slot::Gradient,
            Slot::Difference,
            Slot::Compare,
            Slot::Ortho(0),
            Slot::Ortho(1),
            Slot::Ortho(2),
        ] {
            self.shown.remove(&slot);
            self.arrays.remove(&slot);
        }
        self.shown.retain(|slot, _| {
            !matches!(slot, Slot::Measurement(_)) || self.arrays.contains_key(slot)
        });
        self.profile = None;
        self.roi = None;
        self.timeline.clear();
    }

    /// Shows the timeline's frame at `index` in the reconstruction pane (the newest one follows
    /// the run again: its latest preview, or its output once it has finished). Returns whether the
    /// pane changed (the difference then needs mapping again).
    pub fn scrub(&mut self, index: usize, pump: &Pump, default: Display) -> bool {
        let display = self.display_of(Slot::Reconstruction, default);
        let Some(frame) = self.timeline.scrub_to(index).cloned() else {
            return false;
        };
        let Some(shown) = self.shown.get_mut(&Slot::Reconstruction) else {
            return false;
        };
        shown.iteration = frame.iteration;
        if self.timeline.pinned().is_none()
            && let Some(t) = self.arrays.get(&Slot::Reconstruction).cloned()
        {
            self.show_array(Slot::Reconstruction, t, pump, default);
            return true;
        }
        // The readout and the difference use the chosen frame at once; its texture follows.
        shown.raw = frame.raw.clone();
        pump.send(PumpMsg::Map {
            slot: Slot::Reconstruction,
            raw: frame.raw,
            display,
        });
        true
    }

    /// Another document was opened: besides its run (when none is running, `clear_run`), the
    /// panes forget how the previous document was viewed — orthogonal cuts, the slice, zoom and
    /// each pane's display — since its dimensionality and quantities may differ.
    pub fn new_document(&mut self) {
        self.ortho = None;
        for a in 0..3 {
            self.shown.remove(&Slot::Ortho(a));
        }
        self.cursor = VolumeCursor::default();
        self.view = SharedView::default();
        self.maximized = None;
        self.displays.clear();
        self.linked_windows.clear();
        self.profile = None;
        self.roi = None;
        self.hover = None;
    }

    /// Forgets the measurement panes (when measurements are simulated again).
    pub fn clear_measurements(&mut self) {
        self.shown.retain(|s, _| !matches!(s, Slot::Measurement(_)));
        self.arrays
            .retain(|s, _| !matches!(s, Slot::Measurement(_)));
    }

    /// Puts a mapped image on screen. Returns whether a reconstruction or ground truth changed
    /// (the difference image then needs mapping again).
    pub fn apply(&mut self, m: Mapped, ctx: &egui::Context) -> bool {
        let options = TextureOptions::NEAREST;
        if m.job.is_some() && m.slot == Slot::Reconstruction {
            self.timeline.push(m.iteration, m.raw.clone());
            if self.timeline.pinned().is_some() && self.shown.contains_key(&m.slot) {
                // Scrubbed back: the pane stays on the chosen iteration.
                return false;
            }
        }
        match self.shown.get_mut(&m.slot) {
            Some(s) => {
                // Re-mappings and sections of a run's outputs keep the iteration they show.
                if m.job.is_some() {
                    s.iteration = m.iteration;
                }
                s.full_size = m.full_size;
                s.texture.set(ColorImage::clone(&m.color), options);
                s.color = m.color;
                s.raw = m.raw;
                s.range = m.range;
                s.auto_range = m.auto_range;
                s.histogram = m.histogram;
            }
            None => {
                let texture = ctx.load_texture(
                    format!("{:?}", m.slot),
                    ColorImage::clone(&m.color),
                    options,
                );
                self.shown.insert(
                    m.slot,
                    Shown {
                        texture,
                        raw: m.raw,
                        color: m.color,
                        range: m.range,
                        auto_range: m.auto_range,
                        histogram: m.histogram,
                        iteration: m.iteration,
                        full_size: m.full_size,
                    },
                );
            }
        }
        matches!(
            m.slot,
            Slot::Reconstruction | Slot::GroundTruth | Slot::Compare
        )
    }

    /// The two sides of the difference: the reconstruction, and the compared run when one is
    /// open, else the ground truth.
    fn difference_sides(&self) -> (Slot, Slot) {
        let other = if self.shown.contains_key(&Slot::Compare) {
            Slot::Compare
        } else {
            Slot::GroundTruth
        };
        (Slot::Reconstruction, other)
    }

    /// Why the difference cannot be formed although both sides are on screen (their sizes or
    /// channels differ), in words for the empty pane.
    pub fn difference_problem(&self) -> Option<String> {
        let (a, b) = self.difference_sides();
        let (sa, sb) = (self.shown.get(&a)?, self.shown.get(&b)?);
        let shape = |s: &Shown| {
            let c = s.raw.channels.max(1);
            let channels = if c == 1 {
                String::new()
            } else {
                format!("×{c}")
            };
            format!("{}×{}{channels}", s.full_size.0, s.full_size.1)
        };
        let same = (sa.raw.width, sa.raw.height, sa.raw.channels)
            == (sb.raw.width, sb.raw.height, sb.raw.channels);
        (!same).then(|| {
            format!(
                "no difference: the {} is {} and the {} {}",
                a.title(),
                shape(sa),
                b.title(),
                shape(sb)
            )
        })
    }

    /// Asks for the difference image when both of its sides are on screen (a stale one is taken
    /// down when they no longer match).
    pub fn request_difference(&mut self, pump: &Pump, default: Display) {
        if !self.show_difference {
            return;
        }
        if self.difference_problem().is_some() {
            self.shown.remove(&Slot::Difference);
            return;
        }
        let (a, b) = self.difference_sides();
        if let (Some(a), Some(b)) = (self.shown.get(&a), self.shown.get(&b)) {
            pump.send(PumpMsg::Difference {
                a: a.raw.clone(),
                b: b.raw.clone(),
                display: self.display_of(Slot::Difference, default),
            });
        }
    }

    /// The value(s) of `slot` at texture coordinates `uv`, with the pixel's coordinates in the
    /// full image (x, y).
    pub fn value_at(&self, slot: Slot, uv: egui::Pos2) -> Option<((u32, u32), Vec<f32>)> {
        let s = self.shown.get(&slot)?;
        let r = &s.raw;
        if !(0.0..1.0).contains(&uv.x) || !(0.0..1.0).contains(&uv.y) || r.width == 0 {
            return None;
        }
        let (x, y) = (
            (uv.x * r.width as f32) as usize,
            (uv.y * r.height as f32) as usize,
        );
        let c = r.channels.max(1) as usize;
        let at = (y * r.width as usize + x) * c;
        let values = r.pixels.get(at..at + c)?.to_vec();
        let full = (
            (uv.x * s.full_size.0 as f32) as u32,
            (uv.y * s.full_size.1 as f32) as u32,
        );
        Some((full, values))
    }

    /// Samples of `slot` along the profile line (first channel), one per texture pixel crossed.
    pub fn profile_of(&self, slot: Slot) -> Option<Vec<[f64; 2]>> {
        let (a, b) = self.profile?;
        Some(profile_along(&self.shown.get(&slot)?.raw, a, b))
    }
}

/// The default display for a difference: the diverging map, centred on zero.
pub fn diverging(default: Display) -> Display {
    Display {
        colormap: super::preview::Colormap::Diverging,
        ..default
    }
}

/// `(distance in pixels, value)` along the segment `a`–`b` (texture coordinates, 0..1) of `image`'s
/// first channel, about one sample per pixel (2 to 4096); samples outside the image are left out.
pub fn profile_along(image: &PreviewImage, a: egui::Pos2, b: egui::Pos2) -> Vec<[f64; 2]> {
    super::roi::profile_samples(image, a, b)
        .into_iter()
        .map(|(d, v)| [d, v[0] as f64])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::pos2;

    /// A 10×4 image whose value is its column (first channel) and −1 in the second channel.
    fn ramp(channels: u8) -> PreviewImage {
        let (w, h) = (10u32, 4u32);
        PreviewImage {
            width: w,
            height: h,
            channels,
            slice: None,
            pixels: (0..w * h)
                .flat_map(|i| std::iter::once((i % w) as f32).chain((1..channels).map(|_| -1.0)))
                .collect(),
        }
    }

    #[test]
    fn a_profile_reads_the_first_channel_along_the_line() {
        for channels in [1, 3] {
            let image = ramp(channels);
            // Across the middle row, edge to edge: one sample per pixel, the column's value.
            let p = profile_along(&image, pos2(0.0, 0.6), pos2(0.999, 0.6));
            assert_eq!(p.len(), 10, "{p:?}");
            for (k, [d, v]) in p.iter().enumerate() {
                assert_eq!(*v, k as f64, "channels {channels}: {p:?}");
                assert!((d - k as f64 * 9.99 / 9.0).abs() < 1e-4, "{p:?}");
            }
            // Down one column: constant.
            let p = profile_along(&image, pos2(0.35, 0.0), pos2(0.35, 0.99));
            assert!(p.len() >= 2 && p.iter().all(|[_, v]| *v == 3.0), "{p:?}");
        }
    }

    #[test]
    fn a_profile_leaves_out_what_is_outside_the_image() {
        let image = ramp(1);
        let p = profile_along(&image, pos2(-0.5, 0.5), pos2(0.45, 0.5));
        assert!(!p.is_empty());
        assert!(p.iter().all(|[d, v]| *d > 4.0 && *v <= 4.0), "{p:?}");
        assert!(profile_along(&image, pos2(1.5, 0.5), pos2(2.0, 0.5)).is_empty());
        // A point: two samples of the same pixel.
        let p = profile_along(&image, pos2(0.25, 0.25), pos2(0.25, 0.25));
        assert_eq!(p, vec![[0.0, 2.0], [0.0, 2.0]]);
    }
}
