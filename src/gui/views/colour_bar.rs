//! Colour bars and scale bars under and over the panes: which colour is which value, in which
//! unit (intensity, m/s), and how long a stretch of the image is where the data has a physical
//! size (an FWI model's cells, a NIfTI volume's voxels).

use egui::{Color32, Pos2, Rect, Sense, Stroke, Ui, Vec2};

use crate::gui::preview::{Display, lut};
use crate::gui::viewer::Shown;

/// Height of a colour bar row.
pub fn height(ui: &Ui) -> f32 {
    ui.text_style_height(&egui::TextStyle::Small) + 6.0
}

/// The colour bar of a pane of `width` showing `shown` with `display`: the window's low value, the
/// colormap, the high value and `unit`. A colour image shown in its colours has no colormap: the
/// row says so.
pub fn colour_bar(ui: &mut Ui, shown: &Shown, display: Display, unit: &str, width: f32) {
    let (lo, hi) = shown.range;
    let colour = shown.raw.channels >= 3 && display.channel.is_none();
    let small = |t: String| egui::RichText::new(t).small();
    ui.horizontal(|ui| {
        ui.set_width(width);
        ui.spacing_mut().item_spacing.x = 4.0;
        if colour {
            ui.label(small(format!(
                "R, G, B {} – {} {unit}",
                value(lo),
                value(hi)
            )));
            return;
        }
        ui.label(small(value(lo)));
        // Room for the high value and the unit after the bar.
        let hi_text_w = 12.0 + 7.0 * (value(hi).len() + unit.chars().count()) as f32;
        let bar_w = (ui.available_width() - hi_text_w).clamp(24.0, 240.0);
        let (rect, _) = ui.allocate_exact_size(Vec2::new(bar_w, height(ui) - 6.0), Sense::hover());
        let colours = lut(display.colormap);
        let steps = 64;
        for k in 0..steps {
            let x0 = rect.min.x + rect.width() * k as f32 / steps as f32;
            let x1 = rect.min.x + rect.width() * (k + 1) as f32 / steps as f32;
            let c = colours[(k * 255) / (steps - 1)];
            ui.painter().rect_filled(
                Rect::from_min_max(Pos2::new(x0, rect.min.y), Pos2::new(x1 + 0.5, rect.max.y)),
                0.0,
                c,
            );
        }
        ui.painter().rect_stroke(
            rect,
            0.0,
            Stroke::new(1.0, Color32::from_gray(90)),
            egui::StrokeKind::Outside,
        );
        ui.label(small(format!("{} {unit}", value(hi))));
    });
}

/// A value with about four significant digits (1500, 0.0463, 1.2e-5).
fn value(v: f32) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A length in the unit that keeps its number between 1 and 1000 (5 µm, 0.5 → 500 mm, 50 m, 2 km).
fn length_text(length_m: f64) -> String {
    let (value, unit) = if length_m >= 1000.0 {
        (length_m / 1000.0, "km")
    } else if length_m >= 1.0 {
        (length_m, "m")
    } else if length_m >= 1e-3 {
        (length_m * 1e3, "mm")
    } else {
        (length_m * 1e6, "µm")
    };
    // Round lengths only (1, 2 or 5 times a power of ten): rounding hides 0.1 + 0.2 artefacts.
    let value = (value * 1e3).round() / 1e3;
    format!("{value} {unit}")
}

/// Draws a scale bar over `image` (the on-screen rectangle of an image `width_m` metres wide): a
/// round length near a fifth of the width, bottom left, with its length written above it.
pub fn scale_bar(ui: &mut Ui, image: Rect, width_m: f64) {
    if width_m <= 0.0 || image.width() < 40.0 {
        return;
    }
    let target = width_m / 5.0;
    let decade = 10f64.powf(target.log10().floor());
    let length_m = [5.0, 2.0, 1.0]
        .iter()
        .map(|f| f * decade)
        .find(|l| *l <= target)
        .unwrap_or(decade);
    let length_px = (length_m / width_m) as f32 * image.width();
    let y = image.max.y - 8.0;
    let x0 = image.min.x + 8.0;
    let stroke = Stroke::new(3.0, Color32::WHITE);
    let painter = ui.painter_at(image);
    painter.line_segment(
        [Pos2::new(x0, y), Pos2::new(x0 + length_px, y)],
        Stroke::new(5.0, Color32::BLACK),
    );
    painter.line_segment([Pos2::new(x0, y), Pos2::new(x0 + length_px, y)], stroke);
    let text = length_text(length_m);
    let label_rect = Rect::from_min_size(
        Pos2::new(x0, y - 22.0),
        Vec2::new(length_px.max(60.0), 16.0),
    );
    crate::gui::widgets::overlay(
        ui,
        label_rect,
        egui::Label::new(
            egui::RichText::new(text)
                .small()
                .color(Color32::WHITE)
                .background_color(Color32::from_black_alpha(140)),
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::length_text;

    #[test]
    fn lengths_are_written_in_the_unit_that_fits() {
        assert_eq!(length_text(2000.0), "2 km");
        assert_eq!(length_text(50.0), "50 m");
        assert_eq!(length_text(1.0), "1 m");
        assert_eq!(length_text(0.5), "500 mm");
        assert_eq!(length_text(0.002), "2 mm");
        assert_eq!(length_text(5e-6), "5 µm");
        assert_eq!(length_text(0.1 + 0.2 - 0.1), "200 mm");
    }
}
