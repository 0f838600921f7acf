//! The workbench's fonts: egui's defaults, then a subset of DejaVu Sans (`assets/fonts`, made by
//! `scripts/make-font-subset.sh`) as the last fallback of both families, so that the notation in
//! tessera's labels and error messages (Aᵀ, Σᵢ, ‖A‖², ∇f, σ ≥ 0, ⌈n/k⌉ …) draws as text, not boxes.

use egui::epaint::text::{FontInsert, FontPriority, InsertFontFamily};
use egui::{FontData, FontFamily};

/// DejaVu Sans restricted to Latin-1, Greek, sub/superscripts, punctuation, arrows and mathematical
/// symbols (the workbench uses it only for what egui's own fonts lack).
const MATH_FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-subset.ttf");

/// Adds the fallback font to `ctx` (once; later calls change nothing).
pub fn install(ctx: &egui::Context) {
    let last = |family| InsertFontFamily {
        family,
        priority: FontPriority::Lowest,
    };
    ctx.add_font(FontInsert::new(
        "DejaVuSans-subset",
        FontData::from_static(MATH_FONT),
        vec![last(FontFamily::Proportional), last(FontFamily::Monospace)],
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::FontId;

    /// Symbols that appear in tessera's text.
    const NOTATION: &str = "Aᵀy Σᵢ wᵢ‖Aᵢx − yᵢ‖² ∇f σ ≥ 0 ≤ τ → ⌈n/k⌉ ⟨x, y⟩ ∈ √ λ † ₁₂ₖₙ ×…·°";

    fn glyphs(install_fonts: bool) -> (bool, bool) {
        glyphs_of(install_fonts, NOTATION)
    }

    fn glyphs_of(install_fonts: bool, text: &str) -> (bool, bool) {
        let ctx = egui::Context::default();
        let mut found = (false, false);
        // A headless frame's texture updates have no renderer to go to.
        let frame = |f: &mut dyn FnMut(&mut egui::Ui)| {
            ctx.run_ui(egui::RawInput::default(), |ui| f(ui))
                .textures_delta
                .clear()
        };
        frame(&mut |ui| {
            if install_fonts {
                install(ui.ctx());
            }
        });
        frame(&mut |ui| {
            ui.ctx().fonts_mut(|f| {
                found = (
                    f.has_glyphs(&FontId::proportional(14.0), text),
                    f.has_glyphs(&FontId::monospace(14.0), text),
                )
            });
        });
        found
    }

    #[test]
    fn the_notation_has_glyphs_in_both_families() {
        assert_eq!(glyphs(false), (false, false), "egui's defaults lack some");
        assert_eq!(glyphs(true), (true, true));
    }

    /// The panes' icon buttons draw as icons, not boxes.
    #[test]
    fn the_pane_icons_have_glyphs() {
        let icons = [
            crate::gui::views::DISPLAY_ICON,
            crate::gui::views::FULL_ICON,
        ]
        .concat();
        assert!(glyphs_of(true, &icons).0, "{icons}");
    }
}
