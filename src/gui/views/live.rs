//! The live view: reconstruction, measurement and ground truth side by side (and, on request, their
//! difference and a compared run), with a shared zoom, pan and volume slice; per-pane contrast with
//! a histogram, colormap and channel; the value under the mouse; the patch map over the images.

use egui::{RichText, Ui, Vec2};

use super::colour_bar;
use super::display_menu::display_menu;
use super::image_pane::{Marks, Overlays, image_pane};
use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::preview::{Colormap, Slot};
use crate::gui::viewer::AXIS_NAMES;
use crate::gui::widgets::combo;

pub struct LiveView;

impl View for LiveView {
    fn title(&self) -> &'static str {
        "Live view"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging() && wb.session.training.is_none()
    }

    fn place(&self) -> Place {
        Place::Main
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        header(ui, wb);
        slice_controls(ui, wb);
        let panes = panes(wb);
        let overlay_map = if wb.viewer.show_patch_map {
            wb.patch_map().and_then(Result::ok)
        } else {
            None
        };
        let gap = 8.0;
        let n = panes.len() as f32;
        let width = ((ui.available_width() - gap * (n - 1.0)) / n).max(64.0);
        let readout_h = ui.text_style_height(&egui::TextStyle::Body) * 2.5;
        let bar_h = colour_bar::height(ui);
        let height = (ui.available_height() - readout_h - bar_h - 48.0).clamp(64.0, 2000.0);
        let mut view = wb.viewer.view;
        let mut marks = Marks {
            profile: wb.viewer.profile,
            roi: wb.viewer.roi,
        };
        let mut hover = None;
        let mut hidden_tiles = None;
        let mut clicked = None;
        ui.horizontal_top(|ui| {
            for (title, slot) in &panes {
                ui.vertical(|ui| {
                    ui.set_width(width);
                    ui.horizontal(|ui| {
                        // A long caption is cut, not allowed to push the panes off the window.
                        display_menu(ui, wb, *slot);
                        ui.add(egui::Label::new(caption(wb, title, *slot)).truncate());
                    });
                    let overlay = overlay_map
                        .as_deref()
                        .filter(|_| !matches!(slot, Slot::Measurement(_) | Slot::Difference))
                        .map(|m| (m, wb.viewer.patch_map_opacity));
                    let cross = match slot {
                        Slot::Ortho(a) => wb.viewer.ortho_cross(*a),
                        _ => None,
                    };
                    let r = image_pane(
                        ui,
                        title,
                        wb.viewer.shown.get(slot),
                        Vec2::new(width, height),
                        &mut view,
                        &mut marks,
                        Overlays {
                            map: overlay,
                            cross,
                            empty: empty_note(wb, *slot).as_deref(),
                        },
                    );
                    if let Some(uv) = r.hover_uv {
                        hover = Some((*slot, uv));
                    }
                    if let (Slot::Ortho(a), Some(uv)) = (slot, r.clicked_uv) {
                        clicked = Some((*a, uv));
                    }
                    if let Some(d) = r.overlay.filter(|d| d.drawn < d.visible) {
                        hidden_tiles = Some(d.visible);
                    }
                    match wb.viewer.shown.get(slot) {
                        Some(s) => {
                            let display = wb.viewer.display_of(*slot, wb.app_state.display);
                            let unit = if *slot == Slot::Difference {
                                "Δ intensity"
                            } else {
                                "intensity"
                            };
                            colour_bar::colour_bar(ui, s, display, unit, width);
                        }
                        None => {
                            ui.add_space(bar_h);
                        }
                    }
                });
            }
        });
        wb.viewer.view = view;
        wb.viewer.profile = marks.profile;
        wb.viewer.roi = marks.roi;
        wb.viewer.hover = hover;
        if let Some((axis, uv)) = clicked {
            wb.ortho_click(axis, uv);
        }
        if wb.viewer.ortho_source().is_none() {
            timeline(ui, wb);
        }
        readout(ui, wb, &panes);
        if let Some(n) = hidden_tiles {
            ui.label(format!(
                "patch map: {n} tiles in view, too many to draw; zoom in to see them"
            ));
        }
    }
}


/// The scrubber through the run's kept previews: the reconstruction pane shows the chosen
/// iteration and stays there while new previews arrive; the newest position ("live") follows them.
fn timeline(ui: &mut Ui, wb: &mut Workbench) {
    let t = &wb.viewer.timeline;
    let (Some(before), n) = (t.position(), t.frames().len()) else {
        return;
    };
    if n < 2 {
        return;
    }
    let last = n - 1;
    let mut at = before;
    let (bytes, budget) = t.bytes();
    let iteration = t.frames()[at].iteration;
    ui.horizontal(|ui| {
        let l = ui.label("iterations");
        if ui
            .add_enabled(at > 0, egui::Button::new("earlier"))
            .on_hover_text("the previous kept preview")
            .clicked()
        {
            at -= 1;
        }
        ui.add(egui::Slider::new(&mut at, 0..=last).show_value(false))
            .labelled_by(l.id)
            .on_hover_text("step back through this run's previews");
        if ui
            .add_enabled(at < last, egui::Button::new("later"))
            .on_hover_text("the next kept preview")
            .clicked()
        {
            at += 1;
        }
        if ui
            .add_enabled(at < last, egui::Button::new("live"))
            .on_hover_text("follow the newest preview again")
            .clicked()
        {
            at = last;
        }
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        let state = if before == last { "live" } else { "held" };
        ui.label(format!(
            "iteration {iteration} ({state}; {n} previews kept, {:.1} of {:.0} MiB)",
            mib(bytes),
            mib(budget)
        ))
        .on_hover_text(
            "older previews are thinned evenly to stay within the budget; \
             the whole run stays covered at a coarser step",
        );
    });
    if at != before && wb.viewer.scrub(at, &wb.pump, wb.app_state.display) {
        wb.request_difference();
    }
}
/// What an empty pane says, where "—" would leave the user guessing.
fn empty_note(wb: &Workbench, slot: Slot) -> Option<String> {
    match slot {
        Slot::Difference => wb.viewer.difference_problem(),
        Slot::Reconstruction if !wb.session.is_busy() => {
            Some("the reconstruction shows here once you Run (Ctrl+R)".into())
        }
        Slot::Ortho(_) => Some("cutting the volume…".into()),
        _ => None,
    }
}

/// The panes, left to right: (title, slot).
pub(crate) fn panes(wb: &Workbench) -> Vec<(String, Slot)> {
    if let Some(source) = wb.viewer.ortho_source() {
        let name = source.title();
        return (0..3u8)
            .map(|a| {
                (
                    format!("{name}: {} cut", AXIS_NAMES[a as usize]),
                    Slot::Ortho(a),
                )
            })
            .collect();
    }
    let truth = if wb.viewer.shown.contains_key(&Slot::GroundTruth) {
        Slot::GroundTruth
    } else {
        Slot::Data
    };
    let truth_title = if wb.doc.preset.image.has_truth() {
        "Ground truth"
    } else {
        "Ground truth: none (measured data)"
    };
    let mut panes = vec![
        ("Reconstruction".to_string(), Slot::Reconstruction),
        (
            "Measurement".to_string(),
            Slot::Measurement(wb.viewer.measurement),
        ),
        (truth_title.to_string(), truth),
    ];
    if wb.viewer.show_difference {
        let of = if wb.viewer.shown.contains_key(&Slot::Compare) {
            "Reconstruction − compared run"
        } else {
            "Reconstruction − ground truth"
        };
        panes.push((of.to_string(), Slot::Difference));
    }
    if wb.viewer.shown.contains_key(&Slot::Compare) {
        let name = wb
            .runs
            .compared
            .as_ref()
            .and_then(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        panes.push((format!("Compared: {name}"), Slot::Compare));
    }
    panes
}

fn caption(wb: &Workbench, title: &str, slot: Slot) -> String {
    match wb.viewer.shown.get(&slot) {
        Some(s) if slot == Slot::Reconstruction && s.iteration > 0 => {
            format!("{title} (iteration {})", s.iteration)
        }
        Some(s) => format!("{title} {}×{}", s.full_size.0, s.full_size.1),
        None => title.to_string(),
    }
}

fn header(ui: &mut Ui, wb: &mut Workbench) {
    ui.horizontal(|ui| {
        ui.strong("Live view");
        if ui.small_button("reset zoom").clicked() {
            wb.viewer.view = Default::default();
        }
        let n_ops = wb.doc.preset.physics.len().max(1);
        if n_ops > 1 {
            let l = ui.label("measurement #");
            ui.add(egui::DragValue::new(&mut wb.viewer.measurement).range(0..=n_ops - 1))
                .labelled_by(l.id);
        }
        if wb.doc.preset.tiling.is_some() || wb.session.patch_map.is_some() {
            ui.checkbox(&mut wb.viewer.show_patch_map, "patch map");
            if wb.viewer.show_patch_map {
                ui.add(
                    egui::Slider::new(&mut wb.viewer.patch_map_opacity, 0.0..=1.0)
                        .text("opacity")
                        .fixed_decimals(2),
                )
                .on_hover_text("how strongly the ranks' colours tint the image");
            }
        }
        if ui
            .checkbox(&mut wb.viewer.show_difference, "difference")
            .on_hover_text("reconstruction − ground truth (or − the compared run)")
            .changed()
        {
            wb.request_difference();
        }
        let mut d = wb.app_state.display;
        let before = d;
        ui.scope(|ui| {
            combo(
                ui,
                "colormap",
                &mut d.colormap,
                &Colormap::ALL.map(|c| (c, c.name())),
            );
        })
        .response
        .on_hover_text(
            "for one-channel images; a colour image shows its colours until one channel is \
             chosen in its display menu",
        );
        if d != before {
            wb.set_default_display(d);
        }
        if wb.viewer.profile.is_some() && ui.small_button("clear profile").clicked() {
            wb.viewer.profile = None;
        }
        if wb.viewer.roi.is_some() && ui.small_button("clear box").clicked() {
            wb.viewer.roi = None;
        }
    });
}

/// Axis and slice of the volumes on screen (every pane follows).
fn slice_controls(ui: &mut Ui, wb: &mut Workbench) {
    let Some(dims) = wb.viewer.volume_dims() else {
        if wb.session.image_shape.len() == 5 {
            ui.label(
                "central slice (the backend's preview); other slices once the run's outputs \
                 can be read here",
            );
        }
        return;
    };
    let mut cursor = wb.viewer.cursor;
    let mut ortho = wb.viewer.ortho_source();
    let sources: Vec<Slot> = [
        Slot::Reconstruction,
        Slot::GroundTruth,
        Slot::Data,
        Slot::Compare,
    ]
    .into_iter()
    .filter(|s| {
        wb.viewer
            .arrays
            .get(s)
            .is_some_and(|t| t.shape().len() == 5)
    })
    .collect();
    ui.horizontal(|ui| {
        let mut on = ortho.is_some();
        if ui
            .checkbox(&mut on, "orthogonal views")
            .on_hover_text("three cuts through one point; click in one to move the others")
            .changed()
        {
            ortho = if on { sources.first().copied() } else { None };
        }
        if let Some(src) = &mut ortho {
            egui::ComboBox::from_label("of")
                .selected_text(src.title())
                .show_ui(ui, |ui| {
                    for s in &sources {
                        ui.selectable_value(src, *s, s.title());
                    }
                });
        }
        egui::ComboBox::from_label("axis")
            .selected_text(AXIS_NAMES[cursor.axis])
            .show_ui(ui, |ui| {
                for (a, name) in AXIS_NAMES.iter().enumerate() {
                    ui.selectable_value(&mut cursor.axis, a, *name);
                }
            });
        let a = cursor.axis;
        let max = dims[a] - 1;
        cursor.index[a] = cursor.index[a].min(max);
        ui.add(egui::Slider::new(&mut cursor.index[a], 0..=max).text("slice"))
            .on_hover_text("Page Up / Page Down: next / previous slice");
    });
    if ortho != wb.viewer.ortho_source() {
        wb.set_orthogonal(ortho);
    }
    if cursor != wb.viewer.cursor {
        wb.viewer.cursor = cursor;
        wb.reslice();
    }
}

/// The value(s) under the mouse in every pane at that position.
fn readout(ui: &mut Ui, wb: &Workbench, panes: &[(String, Slot)]) {
    let Some((_, uv)) = wb.viewer.hover else {
        ui.label(
            RichText::new(
                "move the mouse over an image for its values; Shift+drag for a line profile, \
                 Ctrl+drag for a box's statistics (Profile tab)",
            )
            .weak(),
        );
        return;
    };
    if let Some((Slot::Ortho(axis), uv)) = wb.viewer.hover {
        ortho_readout(ui, wb, axis, uv);
        return;
    }
    let mut parts = Vec::new();
    let mut at = None;
    for (title, slot) in panes {
        if let Some(((x, y), v)) = wb.viewer.value_at(*slot, uv) {
            at.get_or_insert((x, y));
            let values: Vec<String> = v.iter().map(|v| format!("{v:.4}")).collect();
            let short = title.split(':').next().unwrap_or(title);
            parts.push(format!("{short} {}", values.join(", ")));
        }
    }
    let Some((x, y)) = at else {
        return;
    };
    let slice = wb
        .viewer
        .volume_dims()
        .map(|_| {
            let c = wb.viewer.cursor;
            format!(" ({} {})", AXIS_NAMES[c.axis], c.index[c.axis])
        })
        .unwrap_or_default();
    let text = format!("x {x} y {y}{slice}: {}", parts.join(" | "));
    ui.add(egui::Label::new(RichText::new(text).monospace()).wrap());
}

/// In orthogonal views the point under the mouse is a point of the volume: its three coordinates
/// and the volume's value there (the cuts are of one volume, so one value).
fn ortho_readout(ui: &mut Ui, wb: &Workbench, axis: u8, uv: egui::Pos2) {
    let (Some(source), Some(point)) = (wb.viewer.ortho_source(), wb.viewer.ortho_point(axis, uv))
    else {
        return;
    };
    let Some((_, values)) = wb.viewer.value_at(Slot::Ortho(axis), uv) else {
        return;
    };
    let values: Vec<String> = values.iter().map(|v| format!("{v:.4}")).collect();
    ui.monospace(format!(
        "{} at depth {} row {} column {}: {}",
        source.title(),
        point[0],
        point[1],
        point[2],
        values.join(", ")
    ));
}
