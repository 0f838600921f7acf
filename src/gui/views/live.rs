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
        let layers = wb.viewer.layers;
        let overlay_map = match layers.patch_map.drawn() {
            Some(_) => wb.patch_map().and_then(Result::ok),
            None => None,
        };
        let lost = wb.lost_ranks_drawn();
        let gap = 8.0;
        let readout_h = ui.text_style_height(&egui::TextStyle::Body) * 2.5;
        let bar_h = colour_bar::height(ui);
        let caption_h = ui.spacing().interact_size.y + ui.spacing().item_spacing.y;
        let timeline_h = if wb.viewer.timeline.frames().len() > 1 {
            ui.spacing().interact_size.y + ui.spacing().item_spacing.y
        } else {
            0.0
        };
        let room = Vec2::new(
            ui.available_width(),
            ui.available_height() - readout_h - timeline_h - 24.0,
        );
        let aspect = panes
            .iter()
            .find_map(|(_, s)| wb.viewer.shown.get(s))
            .map_or(1.0, |s| s.full_size.1 as f32 / s.full_size.0.max(1) as f32);
        let grid = fit_grid(panes.len(), room, aspect, gap, caption_h + bar_h);
        let mut view = wb.viewer.view;
        let mut marks = Marks {
            profile: wb.viewer.profile,
            roi: wb.viewer.roi,
        };
        let mut hover = None;
        let mut hidden_tiles = None;
        let mut clicked = None;
        let mut fit_scale = None;
        let mut toggle_full = None;
        for row in panes.chunks(grid.columns) {
            ui.horizontal_top(|ui| {
                for (title, slot) in row {
                    ui.vertical(|ui| {
                        ui.set_width(grid.pane.x);
                        pane_caption(ui, wb, title, *slot, grid.pane.x);
                        let pane_rect = egui::Rect::from_min_size(ui.cursor().min, grid.pane);
                        let overlay = overlay_map
                            .as_deref()
                            .filter(|_| !matches!(slot, Slot::Measurement(_) | Slot::Difference))
                            .map(|m| (m, layers.patch_map.opacity, lost.as_slice()));
                        let cross = match slot {
                            Slot::Ortho(a) => wb.viewer.ortho_cross(*a),
                            _ => None,
                        };
                        let r = image_pane(
                            ui,
                            title,
                            wb.viewer.shown.get(slot),
                            grid.pane,
                            &mut view,
                            &mut marks,
                            Overlays {
                                map: overlay,
                                cross,
                                empty: empty_note(wb, *slot).as_deref(),
                                layers,
                                width_m: width_m(wb, *slot),
                            },
                        );
                        if pane_controls(ui, wb, *slot, pane_rect) {
                            toggle_full = Some(*slot);
                        }
                        if let Some(uv) = r.hover_uv {
                            hover = Some((*slot, uv));
                        }
                        if let (Slot::Ortho(a), Some(uv)) = (slot, r.clicked_uv) {
                            clicked = Some((*a, uv));
                        }
                        if let Some(d) = r.overlay.filter(|d| d.drawn < d.visible) {
                            hidden_tiles = Some(d.visible);
                        }
                        fit_scale = fit_scale.or(r.fit_scale);
                        match wb.viewer.shown.get(slot) {
                            Some(s) => {
                                let display = wb.viewer.display_of(*slot, wb.app_state.display);
                                let unit = if *slot == Slot::Difference {
                                    "Δ intensity"
                                } else {
                                    "intensity"
                                };
                                colour_bar::colour_bar(ui, s, display, unit, grid.pane.x);
                            }
                            None => {
                                ui.add_space(bar_h);
                            }
                        }
                    });
                }
            });
        }
        // F over a pane shows it alone (again: every pane), unless a text field takes the key.
        let typing = ui.ctx().memory(|m| m.focused().is_some());
        if !typing && ui.input(|i| i.key_pressed(egui::Key::F)) {
            toggle_full = toggle_full
                .or(hover.map(|(s, _)| s))
                .or(wb.viewer.maximized);
        }
        if let Some(slot) = toggle_full {
            wb.viewer.maximized = match wb.viewer.maximized {
                Some(_) => None,
                None => Some(slot),
            };
        }
        wb.viewer.fit_scale = fit_scale;
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

/// The physical width of `slot`'s whole image, where the document's data states its voxel size
/// (NIfTI) and the pane shows that data's grid: the image, the ground truth, the reconstruction and
/// their difference (a slice across W), and the orthogonal cuts (the column cut spans H).
fn width_m(wb: &Workbench, slot: Slot) -> Option<f64> {
    let [dx, dy, _] = wb.doc.data.voxel_m?;
    let spatial = wb.doc.data.spatial();
    let (extent, voxel) = match slot {
        Slot::Ortho(2) => (*spatial.iter().rev().nth(1)?, dy),
        Slot::Data
        | Slot::GroundTruth
        | Slot::Reconstruction
        | Slot::Difference
        | Slot::Ortho(_) => (*spatial.last()?, dx),
        _ => return None,
    };
    let shown = wb.viewer.shown.get(&slot)?;
    (shown.full_size.0 as usize == extent).then_some(extent as f64 * voxel)
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

/// The panes, left to right: (title, slot); only the maximized one while one is.
pub(crate) fn panes(wb: &Workbench) -> Vec<(String, Slot)> {
    let all = all_panes(wb);
    match wb.viewer.maximized {
        Some(m) if all.iter().any(|(_, s)| *s == m) => {
            all.into_iter().filter(|(_, s)| *s == m).collect()
        }
        _ => all,
    }
}

/// How N panes are laid out: columns, and the size of each pane's image area.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grid {
    pub columns: usize,
    pub pane: Vec2,
}

/// The grid of `n` panes in `room` (points) whose images (height / width = `aspect`) come out
/// largest; `chrome` is the height each row spends on its caption and colour bar. Rows and
/// columns are chosen together, so 4 panes on a wide window make a row and on a tall one a 2×2
/// grid, and no pane is pushed off the window.
pub(crate) fn fit_grid(n: usize, room: Vec2, aspect: f32, gap: f32, chrome: f32) -> Grid {
    let n = n.max(1);
    let aspect = if aspect.is_finite() && aspect > 0.0 {
        aspect
    } else {
        1.0
    };
    let pane = |columns: usize| {
        let rows = n.div_ceil(columns);
        Vec2::new(
            ((room.x - gap * (columns - 1) as f32) / columns as f32).max(64.0),
            ((room.y - rows as f32 * (chrome + gap)) / rows as f32).clamp(64.0, 2000.0),
        )
    };
    // The image's displayed width in a pane: limited by the pane's width or its height.
    let image_width = |p: Vec2| p.x.min(p.y / aspect);
    let columns = (1..=n)
        .max_by(|&a, &b| {
            image_width(pane(a))
                .total_cmp(&image_width(pane(b)))
                // Equal sizes: fewer rows.
                .then(a.cmp(&b))
        })
        .unwrap_or(n);
    Grid {
        columns,
        pane: pane(columns),
    }
}

/// Every pane of the live view, left to right (the maximized one too): (title, slot).
pub(crate) fn all_panes(wb: &Workbench) -> Vec<(String, Slot)> {
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

/// The full-size toggle's icon (compact, so that the pane's title keeps the caption's room).
pub const FULL_ICON: &str = "□";

/// A pane's caption over its whole width: the pane's name, then (weaker) what it shows — the
/// iteration, the size, a compared run's folder — which is cut first when the pane is narrow;
/// the whole caption shows on hover.
fn pane_caption(ui: &mut Ui, wb: &Workbench, title: &str, slot: Slot, width: f32) {
    let text = caption(wb, title, slot);
    let (name, detail) = match title.split_once(':') {
        Some((name, _)) => text.split_at(name.len() + 1),
        None => text.split_at(title.len()),
    };
    let font = egui::TextStyle::Body.resolve(ui.style());
    let format = |color| egui::TextFormat::simple(font.clone(), color);
    let mut job = egui::text::LayoutJob::default();
    job.append(name, 0.0, format(ui.visuals().strong_text_color()));
    job.append(detail, 0.0, format(ui.visuals().weak_text_color()));
    ui.allocate_ui_with_layout(
        Vec2::new(width, ui.spacing().interact_size.y),
        egui::Layout::left_to_right(egui::Align::Center),
        |ui| {
            ui.add(egui::Label::new(job).truncate())
                .on_hover_text(&text);
        },
    );
}

/// A pane's controls, compact icons over its top-right corner (so its caption keeps the width
/// for the title): the display menu and the full-size toggle, named "display" and "full" (or
/// "all") for screen readers and tests. Returns whether the toggle was clicked.
fn pane_controls(ui: &mut Ui, wb: &mut Workbench, slot: Slot, pane: egui::Rect) -> bool {
    let corner = egui::Rect::from_min_max(
        egui::pos2(pane.min.x, pane.min.y + 2.0),
        egui::pos2(
            pane.max.x - 2.0,
            pane.min.y + 2.0 + ui.spacing().interact_size.y,
        ),
    );
    // A child that takes no room in the column: the icons sit over the pane, not below it.
    let mut ui = ui.new_child(
        egui::UiBuilder::new()
            .max_rect(corner)
            .layout(egui::Layout::right_to_left(egui::Align::Center)),
    );
    let (name, tip) = if wb.viewer.maximized == Some(slot) {
        ("all", "show every pane again (F)")
    } else {
        ("full", "this pane alone, full size (F over a pane)")
    };
    let toggle = ui
        .add(egui::Button::new(FULL_ICON).small())
        .accessible_name(name)
        .on_hover_text(tip)
        .clicked();
    display_menu(&mut ui, wb, slot);
    toggle
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

/// The zoom level (screen pixels per image pixel, in %), 1:1 and fit.
fn zoom_controls(ui: &mut Ui, wb: &mut Workbench) {
    let scale = wb.viewer.fit_scale;
    // As wide as "zoom 10000 %" whatever the number, and there before the first image too: in
    // the wrapped header a wider label could move a control to another row, which changes the
    // panes' height, so the fit and this number, and the next frame would lay out differently
    // again (and a click aimed at the last frame would miss).
    {
        let font = egui::TextStyle::Monospace.resolve(ui.style());
        let width = ui.fonts_mut(|f| {
            f.layout_no_wrap("zoom 10000 %".to_owned(), font, egui::Color32::WHITE)
                .size()
                .x
        });
        ui.allocate_ui_with_layout(
            Vec2::new(width, ui.spacing().interact_size.y),
            egui::Layout::left_to_right(egui::Align::Center),
            |ui| {
                ui.set_min_width(width);
                let text = match scale {
                    Some(fit) => format!("zoom {:.0} %", 100.0 * fit * wb.viewer.view.zoom),
                    None => "zoom –".to_owned(),
                };
                ui.monospace(text)
                    .on_hover_text("screen pixels per image pixel (scroll zooms, drag pans)");
            },
        );
    }
    if ui
        .add_enabled(scale.is_some(), egui::Button::new("1:1").small())
        .on_hover_text("one image pixel per screen pixel")
        .clicked()
        && let Some(fit) = scale
    {
        let range = super::image_pane::ZOOM_RANGE;
        wb.viewer.view.zoom = (1.0 / fit).clamp(*range.start(), *range.end());
    }
    if ui
        .small_button("fit")
        .on_hover_text("the whole image in its pane (double-click a pane)")
        .clicked()
    {
        wb.viewer.view = Default::default();
    }
}

fn header(ui: &mut Ui, wb: &mut Workbench) {
    // Wrapped: a row wider than the window would widen the panes' area past it.
    ui.horizontal_wrapped(|ui| {
        // Each control keeps its size and goes to the next row whole: a label squeezed into the
        // end of a row would wrap letter by letter and stand taller and wider than the window.
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        ui.strong("Live view");
        zoom_controls(ui, wb);
        let n_ops = wb.doc.preset.physics.len().max(1);
        if n_ops > 1 {
            let l = ui.label("measurement #");
            ui.add(egui::DragValue::new(&mut wb.viewer.measurement).range(0..=n_ops - 1))
                .labelled_by(l.id);
        }
        layers_menu(ui, wb);
        let mut linked = wb.viewer.contrast_linked;
        if ui
            .checkbox(&mut linked, "link contrast")
            .on_hover_text(
                "one window for every pane of the same quantity: reconstruction, ground truth \
                 and a compared run share one, each measurement has its own",
            )
            .changed()
        {
            wb.set_contrast_linked(linked);
        }
        if ui
            .small_button("reset contrast")
            .on_hover_text("every pane back to auto contrast (1–99 %)")
            .clicked()
        {
            wb.reset_contrast();
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
        // Not in a scope: a scope takes the rest of the row, so the combo box could not wrap.
        egui::ComboBox::from_label("colormap")
            .selected_text(d.colormap.name())
            .show_ui(ui, |ui| {
                for c in Colormap::ALL {
                    ui.selectable_value(&mut d.colormap, c, c.name());
                }
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

/// The Layers menu: visibility and opacity of each overlay drawn over the panes (napari's layer
/// list): the patch map, the line profile, the statistics box and the orthogonal crosshair.
fn layers_menu(ui: &mut Ui, wb: &mut Workbench) {
    use egui::containers::menu::{MenuButton, MenuConfig};
    let config = MenuConfig::new().close_behavior(egui::PopupCloseBehavior::CloseOnClickOutside);
    let layers = &mut wb.viewer.layers;
    MenuButton::new("layers").config(config).ui(ui, |ui| {
        egui::Grid::new("layers").show(ui, |ui| {
            for (name, layer, tip) in [
                (
                    "patch map",
                    &mut layers.patch_map,
                    "which rank denoises which tile; the outlines follow at twice the fill's \
                     opacity",
                ),
                ("line profile", &mut layers.profile, "Shift+drag draws it"),
                ("box", &mut layers.roi, "Ctrl+drag draws it"),
                (
                    "crosshair",
                    &mut layers.crosshair,
                    "where the orthogonal cuts cross",
                ),
            ] {
                ui.checkbox(&mut layer.visible, name).on_hover_text(tip);
                let l = ui.label("opacity");
                ui.add_enabled(
                    layer.visible,
                    egui::Slider::new(&mut layer.opacity, 0.0..=1.0)
                        .step_by(0.05)
                        .fixed_decimals(2),
                )
                .labelled_by(l.id)
                .on_hover_text(format!("{name} opacity"));
                ui.end_row();
            }
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_gives_the_largest_images_and_stays_in_the_room() {
        // Four square panes on a wide, low area: one row.
        let wide = fit_grid(4, Vec2::new(1600.0, 500.0), 1.0, 8.0, 40.0);
        assert_eq!(wide.columns, 4);
        // On a tall, narrow one: 2×2.
        let tall = fit_grid(4, Vec2::new(700.0, 1000.0), 1.0, 8.0, 40.0);
        assert_eq!(tall.columns, 2);
        // Five panes never overflow the width.
        for room in [Vec2::new(900.0, 400.0), Vec2::new(600.0, 1200.0)] {
            let g = fit_grid(5, room, 0.75, 8.0, 40.0);
            let used = g.columns as f32 * g.pane.x + 8.0 * (g.columns - 1) as f32;
            assert!(used <= room.x + 0.01, "{g:?} in {room:?}");
        }
        // One pane takes the whole room.
        assert_eq!(
            fit_grid(1, Vec2::new(800.0, 600.0), 1.0, 8.0, 40.0).pane.x,
            800.0
        );
    }
}
