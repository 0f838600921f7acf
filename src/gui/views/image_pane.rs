//! One image pane: the texture with the shared zoom and pan (wheel zooms, drag pans, double-click
//! resets), Shift+drag draws the line profile and Ctrl+drag a statistics box, the patch map, the
//! profile line and the box drawn over it, and the pixel under the mouse reported back.

use egui::{Color32, Pos2, Rect, Sense, Stroke, Ui, Vec2};

use crate::gui::patch_map::{self, Drawn};
use crate::gui::viewer::{Layers, SharedView, Shown};
use crate::protocol::PatchMap;

/// What happened in a pane this frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct PaneResponse {
    /// Texture coordinates (0..1) of the pixel under the mouse.
    pub hover_uv: Option<Pos2>,
    /// What the patch map overlay drew, if it was drawn.
    pub overlay: Option<Drawn>,
    /// Texture coordinates of a click (without a drag).
    pub clicked_uv: Option<Pos2>,
    /// Screen pixels per pixel of the full-size image at zoom 1 (fitted to the pane).
    pub fit_scale: Option<f32>,
}

/// What the user drew over the panes (shared by every pane), in texture coordinates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Marks {
    /// The line profile: start and end.
    pub profile: Option<(Pos2, Pos2)>,
    /// The statistics box: two opposite corners.
    pub roi: Option<(Pos2, Pos2)>,
}

/// What is drawn over a pane's image.
#[derive(Default)]
pub struct Overlays<'a> {
    /// The patch map, the opacity of its fill and the ranks lost (their tiles greyed).
    pub map: Option<(&'a PatchMap, f32, &'a [usize])>,
    /// Where the other orthogonal cuts cross this one (texture coordinates).
    pub cross: Option<Pos2>,
    /// What an empty pane says (default "—").
    pub empty: Option<&'a str>,
    /// Visibility and opacity of the crosshair, the profile line and the box (the patch map's
    /// are in `map`).
    pub layers: Layers,
    /// The whole image's width in metres, where the data states its pixel size: draws a scale bar.
    pub width_m: Option<f64>,
}

/// The zoom range: 1/16 of the fitted size to 64 times it.
pub const ZOOM_RANGE: std::ops::RangeInclusive<f32> = 0.0625..=64.0;

/// Draws a pane of `size` (named `title` for screen readers and tests); `view` and `marks` are
/// shared with the other panes.
pub fn image_pane(
    ui: &mut Ui,
    title: &str,
    shown: Option<&Shown>,
    size: Vec2,
    view: &mut SharedView,
    marks: &mut Marks,
    overlays: Overlays<'_>,
) -> PaneResponse {
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    response.widget_info(|| egui::WidgetInfo::labeled(egui::accesskit::Role::Image, true, title));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, Color32::from_gray(24));
    let mut out = PaneResponse::default();
    let Some(s) = shown else {
        // A label (not painted text), so screen readers and tests read it too.
        let note = egui::RichText::new(overlays.empty.unwrap_or("—")).color(Color32::GRAY);
        ui.scope_builder(
            egui::UiBuilder::new().max_rect(rect.shrink(8.0)).layout(
                egui::Layout::centered_and_justified(egui::Direction::TopDown),
            ),
            |ui| ui.label(note),
        );
        return out;
    };
    // The image keeps its aspect ratio inside the pane.
    let [tw, th] = s.texture.size();
    let aspect = th as f32 / tw.max(1) as f32;
    let fit = if rect.width() * aspect <= rect.height() {
        Vec2::new(rect.width(), rect.width() * aspect)
    } else {
        Vec2::new(rect.height() / aspect.max(1e-6), rect.height())
    };
    out.fit_scale = Some(fit.x * ui.pixels_per_point() / s.full_size.0.max(1) as f32);
    // Zoomed out below the fit, the whole image is drawn smaller.
    let image = Rect::from_center_size(rect.center(), fit * view.zoom.min(1.0));
    let uv = view.uv();
    let to_uv = |p: Pos2| {
        Pos2::new(
            uv.min.x + (p.x - image.min.x) / image.width() * uv.width(),
            uv.min.y + (p.y - image.min.y) / image.height() * uv.height(),
        )
    };
    let to_screen = |u: f32, v: f32| {
        Pos2::new(
            image.min.x + (u - uv.min.x) / uv.width() * image.width(),
            image.min.y + (v - uv.min.y) / uv.height() * image.height(),
        )
    };
    let (shift, command) = ui.input(|i| (i.modifiers.shift, i.modifiers.command));
    if response.hovered() {
        let scroll = ui.input(|i| i.smooth_scroll_delta.y);
        if scroll != 0.0 {
            view.zoom =
                (view.zoom * (scroll * 0.003).exp()).clamp(*ZOOM_RANGE.start(), *ZOOM_RANGE.end());
        }
    }
    // A drag starts once the pointer has moved a few points; the line (or box) starts where it
    // was pressed.
    if response.drag_started()
        && (shift || command)
        && let Some(p) = ui
            .input(|i| i.pointer.press_origin())
            .or(response.interact_pointer_pos())
    {
        let start = to_uv(p);
        if shift {
            marks.profile = Some((start, start));
        } else {
            marks.roi = Some((start, start));
        }
    }
    if response.dragged() {
        let p = response.interact_pointer_pos();
        match (
            shift,
            command,
            marks.profile.as_mut(),
            marks.roi.as_mut(),
            p,
        ) {
            (true, _, Some((_, end)), _, Some(p)) => *end = to_uv(p),
            (false, true, _, Some((_, end)), Some(p)) => *end = to_uv(p),
            _ => {
                let d = response.drag_delta();
                view.center -= Vec2::new(d.x / image.width(), d.y / image.height()) / view.zoom;
            }
        }
    }
    if response.double_clicked() {
        *view = SharedView::default();
    }
    painter.image(s.texture.id(), image, uv, Color32::WHITE);
    if let Some(p) = response.hover_pos().filter(|p| image.contains(*p)) {
        out.hover_uv = Some(to_uv(p));
    }
    if response.clicked()
        && let Some(p) = response
            .interact_pointer_pos()
            .filter(|p| image.contains(*p))
    {
        out.clicked_uv = Some(to_uv(p));
    }
    if let (Some(c), Some(opacity)) = (overlays.cross, overlays.layers.crosshair.drawn()) {
        let stroke = Stroke::new(1.0, Color32::from_rgb(0, 255, 255).gamma_multiply(opacity));
        let p = to_screen(c.x, c.y);
        painter.hline(image.x_range(), p.y, stroke);
        painter.vline(p.x, image.y_range(), stroke);
    }
    if let Some((map, opacity, lost)) = overlays.map {
        let whole = Rect::from_min_max(to_screen(0.0, 0.0), to_screen(1.0, 1.0));
        out.overlay = Some(patch_map::paint(
            &painter,
            whole,
            image,
            (map, lost),
            opacity,
        ));
    }
    if let (Some((a, b)), Some(opacity)) = (marks.roi, overlays.layers.roi.drawn()) {
        painter.rect_stroke(
            Rect::from_two_pos(to_screen(a.x, a.y), to_screen(b.x, b.y)),
            0.0,
            Stroke::new(1.5, Color32::from_rgb(0, 220, 255).gamma_multiply(opacity)),
            egui::StrokeKind::Middle,
        );
    }
    if let (Some((a, b)), Some(opacity)) = (marks.profile, overlays.layers.profile.drawn()) {
        painter.line_segment(
            [to_screen(a.x, a.y), to_screen(b.x, b.y)],
            Stroke::new(2.0, Color32::YELLOW.gamma_multiply(opacity)),
        );
    }
    if let Some(width_m) = overlays.width_m {
        // The bar measures what is in view: zoomed in, that is a part of the image's width.
        super::colour_bar::scale_bar(ui, image, width_m * f64::from(uv.width()));
    }
    out
}
