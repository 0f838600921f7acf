//! A pane's **display** menu, shared by every view that draws images: the histogram with the
//! contrast window (auto 1–99 % or typed/dragged bounds), the colormap, one channel of a colour
//! image, a reset to the window's defaults, and Export as PNG.
//!
//! The menu stays open while it is used (a click inside it — a colormap, a typed bound — does not
//! close it; a click elsewhere or Escape does), and its choices are rows of buttons rather than
//! combo boxes, whose own pop-ups a menu would take for clicks outside it.

use egui::containers::menu::{MenuButton, MenuConfig};
use egui::{Color32, PopupCloseBehavior, Ui};
use egui_plot::{Bar, BarChart, Plot, VLine};

use crate::gui::Workbench;
use crate::gui::dialogs::DialogKind;
use crate::gui::preview::{Colormap, Contrast, Slot};

/// The menu's icon (compact: a pane's caption keeps its room for the title); its accessible
/// name is "display".
pub const DISPLAY_ICON: &str = "◑";

/// The menu button of `slot`'s pane (nothing while the pane is empty).
pub fn display_menu(ui: &mut Ui, wb: &mut Workbench, slot: Slot) {
    let Some(s) = wb.viewer.shown.get(&slot) else {
        return;
    };
    // The menu edits what was chosen; the window drawn (a linked one, in auto) shows beside it.
    let before = wb.viewer.chosen_display_of(slot, wb.app_state.display);
    let drawn = wb.viewer.display_of(slot, wb.app_state.display);
    let mut d = before;
    let channels = s.raw.channels;
    let histogram = s.histogram.clone();
    let range = s.range;
    let own = wb.viewer.displays.contains_key(&slot);
    let mut export = false;
    let mut reset = false;
    let config = MenuConfig::new().close_behavior(PopupCloseBehavior::CloseOnClickOutside);
    let (button, _) = MenuButton::new(DISPLAY_ICON).config(config).ui(ui, |ui| {
        let mut auto = d.contrast == Contrast::Auto;
        if ui.checkbox(&mut auto, "auto contrast (1–99 %)").changed() {
            d.contrast = if auto {
                Contrast::Auto
            } else {
                Contrast::Range {
                    lo: range.0,
                    hi: range.1,
                }
            };
        }
        let (mut lo_v, mut hi_v) = match (d.contrast, drawn.contrast) {
            (Contrast::Range { lo, hi }, _) | (Contrast::Auto, Contrast::Range { lo, hi }) => {
                (lo, hi)
            }
            (Contrast::Auto, Contrast::Auto) => range,
        };
        Plot::new(("histogram", format!("{slot:?}")))
            .height(90.0)
            .width(260.0)
            .show_axes([true, false])
            .allow_scroll(false)
            .allow_zoom(false)
            .allow_drag(false)
            .show(ui, |p| {
                let n = histogram.counts.len().max(1);
                let bin = (histogram.hi - histogram.lo).max(f32::MIN_POSITIVE) as f64 / n as f64;
                let bars = histogram
                    .counts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        Bar::new(
                            histogram.lo as f64 + (i as f64 + 0.5) * bin,
                            (*c as f64 + 1.0).ln(),
                        )
                        .width(bin)
                    })
                    .collect();
                p.bar_chart(BarChart::new("samples (log)", bars).color(Color32::GRAY));
                p.vline(VLine::new("low", lo_v as f64).color(Color32::LIGHT_BLUE));
                p.vline(VLine::new("high", hi_v as f64).color(Color32::LIGHT_RED));
            });
        if !auto {
            let speed = ((hi_v - lo_v).abs() / 200.0).max(1e-6) as f64;
            ui.horizontal(|ui| {
                ui.label("window");
                for (name, v) in [("low", &mut lo_v), ("high", &mut hi_v)] {
                    let l = ui.label(name);
                    ui.add(
                        egui::DragValue::new(v)
                            .speed(speed)
                            .max_decimals(6)
                            .update_while_editing(false),
                    )
                    .labelled_by(l.id);
                }
            });
            d.contrast = Contrast::Range { lo: lo_v, hi: hi_v };
        }
        let colour = channels >= 3 && d.channel.is_none();
        ui.horizontal_wrapped(|ui| {
            ui.label("colormap");
            ui.add_enabled_ui(!colour, |ui| {
                for c in Colormap::ALL {
                    ui.selectable_value(&mut d.colormap, c, c.name());
                }
            })
            .response
            .on_disabled_hover_text("a colour image is shown in its colours: choose a channel");
        });
        if colour {
            ui.weak("colormaps apply to one channel: choose one below");
        }
        if channels >= 3 {
            ui.horizontal_wrapped(|ui| {
                ui.label("channel");
                for (c, name) in [
                    (None, "colour"),
                    (Some(0), "red"),
                    (Some(1), "green"),
                    (Some(2), "blue"),
                ] {
                    ui.selectable_value(&mut d.channel, c, name);
                }
            });
        }
        ui.separator();
        if own
            && ui
                .button("reset to the window's display")
                .on_hover_text("auto contrast and the colormap chosen above the panes")
                .clicked()
        {
            reset = true;
        }
        if ui.button("Export as PNG…").clicked() {
            export = true;
            ui.close();
        }
    });
    button
        .accessible_name("display")
        .on_hover_text("display: contrast, colormap, channel, export");
    if reset {
        wb.set_pane_display(slot, Default::default());
    } else if d != before {
        let pane = wb.viewer.displays.get(&slot).copied().unwrap_or_default();
        wb.set_pane_display(slot, pane.edited(before, d));
    }
    if export {
        wb.open_dialog(DialogKind::ExportPng(slot));
    }
}
