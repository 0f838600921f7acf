//! Views of a full-waveform inversion: the true model, the inverted model and the gradient side by
//! side with the acquisition drawn over the models (sources coloured by the rank that modelled
//! them this epoch: the shot map), the loss and model-error curves, and per-rank timing.
//!
//! Before a run the acquisition is drawn from the edited preset (over an empty model of the right
//! proportions); during and after a run from the job's `FwiStarted` and `FwiEpoch` events.

use std::collections::HashSet;

use egui::{Color32, Pos2, Rect, RichText, Sense, Stroke, Ui, Vec2};
use egui_plot::{Line, LineStyle, Plot, PlotPoints};

use super::colour_bar;
use super::display_menu::display_menu;
use super::{Place, View};
use crate::fwi::config::ModelSource;
use crate::gui::Workbench;
use crate::gui::patch_map::rank_color;
use crate::gui::preview::Slot;
use crate::gui::session::FwiRun;
use crate::gui::viewer::Shown;
use crate::protocol::{RankEpoch, Shot};

/// What the model panes draw over the images.
struct Survey {
    /// `[nz, nx]` cells and `[dz, dx]` metres.
    shape: [usize; 2],
    spacing: [f64; 2],
    shots: Vec<Shot>,
    /// The rank that modelled each shot in the latest epoch (None: not in the batch).
    rank_of_shot: Vec<Option<usize>>,
}

impl Survey {
    /// From the job on screen, else from the edited preset (None when the preset's model size is
    /// known only from a file).
    fn of(wb: &Workbench) -> Option<Survey> {
        if let Some(run) = &wb.session.fwi {
            return Some(Survey::of_run(run));
        }
        let p = wb.doc.fwi.as_ref()?;
        let Some(ModelSource::Marmousi { nz, nx, .. }) = p.model.truth else {
            return None;
        };
        let acquisition = p.acquisition.lines(nz, nx)?.ok()?;
        Some(Survey {
            shape: [nz, nx],
            spacing: [p.model.dz_m, p.model.dx_m],
            rank_of_shot: vec![None; acquisition.shots.len()],
            shots: acquisition.shots.iter().map(Into::into).collect(),
        })
    }

    fn of_run(run: &FwiRun) -> Survey {
        let mut rank_of_shot = vec![None; run.shots.len()];
        if let Some(last) = run.history.last() {
            for r in &last.ranks {
                for &s in &r.shots {
                    if let Some(slot) = rank_of_shot.get_mut(s) {
                        *slot = Some(r.rank);
                    }
                }
            }
        }
        Survey {
            shape: run.model_shape,
            spacing: run.spacing_m,
            shots: run.shots.clone(),
            rank_of_shot,
        }
    }

    /// Height over width of the model in metres.
    fn aspect(&self) -> f32 {
        let [nz, nx] = self.shape;
        let [dz, dx] = self.spacing;
        ((nz as f64 * dz) / (nx as f64 * dx).max(1e-9)) as f32
    }
}

pub struct FwiModelView;

impl View for FwiModelView {
    fn title(&self) -> &'static str {
        "Wave inversion"
    }

    fn place(&self) -> Place {
        Place::Main
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.fwi.is_some()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        header(ui, wb);
        let survey = Survey::of(wb);
        let panes = [
            ("true model", Slot::GroundTruth, true),
            ("inverted model", Slot::Reconstruction, true),
            ("gradient", Slot::Gradient, false),
        ];
        let gap = 8.0;
        let width = ((ui.available_width() - 2.0 * gap) / 3.0).max(64.0);
        let aspect = survey.as_ref().map_or(0.5, Survey::aspect);
        let bar_h = colour_bar::height(ui);
        let height = (width * aspect).clamp(32.0, (ui.available_height() - 64.0 - bar_h).max(32.0));
        let width_m = survey.as_ref().map(|s| s.shape[1] as f64 * s.spacing[1]);
        let mut hover = None;
        ui.horizontal_top(|ui| {
            for (title, slot, marks) in panes {
                ui.vertical(|ui| {
                    ui.set_width(width);
                    let caption = match wb.viewer.shown.get(&slot) {
                        Some(s) if slot != Slot::GroundTruth => {
                            format!("{title} (epoch {})", s.iteration)
                        }
                        _ => title.to_string(),
                    };
                    ui.horizontal(|ui| {
                        ui.label(caption);
                        display_menu(ui, wb, slot);
                    });
                    let shown = wb.viewer.shown.get(&slot);
                    let survey = survey.as_ref().filter(|_| marks);
                    let size = Vec2::new(width, height);
                    if let Some(h) = model_pane(ui, title, shown, size, survey, width_m, marks) {
                        hover = Some((title, h));
                    }
                    match shown {
                        Some(s) => {
                            let display = wb.viewer.display_of(slot, wb.app_state.display);
                            // The gradient is of the loss with respect to the velocity.
                            let unit = if marks { "m/s" } else { "∂loss/∂v" };
                            colour_bar::colour_bar(ui, s, display, unit, width);
                        }
                        None => {
                            ui.add_space(bar_h);
                        }
                    }
                });
            }
        });
        let readout = match (hover, survey.as_ref()) {
            (Some((title, (uv, value))), Some(s)) => {
                let [nz, nx] = s.shape;
                let [dz, dx] = s.spacing;
                let (x, z) = (uv.x as f64 * nx as f64 * dx, uv.y as f64 * nz as f64 * dz);
                let v = value.map_or("—".to_string(), |v| format!("{v:.4}"));
                format!("{title}: x {x:.0} m, depth {z:.0} m: {v}")
            }
            _ => {
                "sources: ● in the colour of the rank that modelled the shot this epoch, ○ not in \
                  the batch; receivers: ·"
                    .to_string()
            }
        };
        ui.label(RichText::new(readout).weak());
    }
}

fn header(ui: &mut Ui, wb: &Workbench) {
    ui.horizontal_wrapped(|ui| {
        ui.strong(wb.doc.name());
        let Some(run) = &wb.session.fwi else {
            if let Some(p) = &wb.doc.fwi {
                ui.label(format!(
                    "{} epochs of {} shots; not run yet",
                    p.fwi.epochs, p.fwi.batch_size
                ));
            }
            return;
        };
        let [nz, nx] = run.model_shape;
        ui.label(format!(
            "{nz}×{nx} cells, {} shots, {} internal steps per sample",
            run.shots.len(),
            run.step_ratio
        ));
        match run.history.last() {
            Some(e) => {
                ui.label(format!("epoch {}/{}", e.epoch, run.epochs));
                ui.label(format!("loss {:.4e}", e.loss));
                if let Some(m) = e.model_error {
                    ui.label(format!("model error {:.2} %", 100.0 * m));
                }
                if let Some(c) = e.cutoff_hz {
                    ui.label(format!("data low-passed at {c} Hz"));
                }
            }
            None => {
                ui.label("modelling the observed data…");
            }
        }
    });
}

/// Draws one model pane (`model`: a velocity model, else the gradient), named `title` for screen
/// readers, with the survey over it; returns the texture coordinates under the mouse and the value there.
fn model_pane(
    ui: &mut Ui,
    title: &str,
    shown: Option<&Shown>,
    size: Vec2,
    survey: Option<&Survey>,
    width_m: Option<f64>,
    model: bool,
) -> Option<(Pos2, Option<f32>)> {
    let (rect, response) = ui.allocate_exact_size(size, Sense::hover());
    response.widget_info(|| egui::WidgetInfo::labeled(egui::accesskit::Role::Image, true, title));
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, Color32::from_gray(24));
    let aspect = survey.map_or_else(
        || {
            shown.map_or(0.5, |s| {
                let [w, h] = s.texture.size();
                h as f32 / w.max(1) as f32
            })
        },
        Survey::aspect,
    );
    let fit = if rect.width() * aspect <= rect.height() {
        Vec2::new(rect.width(), rect.width() * aspect)
    } else {
        Vec2::new(rect.height() / aspect.max(1e-6), rect.height())
    };
    let image = Rect::from_center_size(rect.center(), fit);
    let full = Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0));
    match shown {
        Some(s) => {
            painter.image(s.texture.id(), image, full, Color32::WHITE);
            if let Some(w) = width_m {
                colour_bar::scale_bar(ui, image, w);
            }
        }
        None => {
            // The model's outline only where the acquisition is drawn over it (a frame with
            // nothing in it inside the pane's own would be a box in a box).
            if survey.is_some() {
                painter.rect_stroke(
                    image,
                    0.0,
                    Stroke::new(1.0, Color32::from_gray(70)),
                    egui::StrokeKind::Inside,
                );
            }
            let note = if model {
                "the model shows here once the run starts (Run, Ctrl+R)"
            } else {
                "the gradient shows here after the first epoch"
            };
            crate::gui::widgets::overlay(
                ui,
                image.shrink(8.0),
                egui::Label::new(RichText::new(note).color(Color32::GRAY)),
            );
        }
    }
    if let Some(s) = survey {
        draw_survey(&painter, image, s);
    }
    let p = response.hover_pos().filter(|p| image.contains(*p))?;
    let uv = Pos2::new(
        (p.x - image.min.x) / image.width(),
        (p.y - image.min.y) / image.height(),
    );
    let value = shown.and_then(|s| {
        let raw = &s.raw;
        let x = ((uv.x * raw.width as f32) as usize).min(raw.width.max(1) as usize - 1);
        let y = ((uv.y * raw.height as f32) as usize).min(raw.height.max(1) as usize - 1);
        raw.pixels
            .get((y * raw.width as usize + x) * raw.channels.max(1) as usize)
            .copied()
    });
    Some((uv, value))
}

fn draw_survey(painter: &egui::Painter, image: Rect, s: &Survey) {
    let [nz, nx] = s.shape;
    let at = |c: [usize; 2]| {
        Pos2::new(
            image.min.x + (c[1] as f32 + 0.5) / nx.max(1) as f32 * image.width(),
            image.min.y + (c[0] as f32 + 0.5) / nz.max(1) as f32 * image.height(),
        )
    };
    let receivers: HashSet<[usize; 2]> = s
        .shots
        .iter()
        .flat_map(|shot| shot.receivers.iter().copied())
        .collect();
    for c in receivers {
        painter.circle_filled(at(c), 1.0, Color32::from_gray(220));
    }
    for (shot, rank) in s.shots.iter().zip(&s.rank_of_shot) {
        for &c in &shot.sources {
            match rank {
                Some(r) => {
                    painter.circle(at(c), 3.5, rank_color(*r), Stroke::new(1.0, Color32::BLACK));
                }
                None => {
                    painter.circle_stroke(at(c), 3.0, Stroke::new(1.0, Color32::WHITE));
                }
            }
        }
    }
}

pub struct FwiCurvesView;

impl View for FwiCurvesView {
    fn title(&self) -> &'static str {
        "Loss and model error"
    }

    fn place(&self) -> Place {
        Place::Tab("Inversion")
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.fwi.is_some()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        ui.strong("Loss and model error");
        let Some(run) = wb.session.fwi.as_ref().filter(|r| !r.history.is_empty()) else {
            ui.label("no epochs yet");
            return;
        };
        let loss: PlotPoints = run
            .history
            .iter()
            .map(|e| [e.epoch as f64, e.loss])
            .collect();
        let error: Vec<[f64; 2]> = run
            .history
            .iter()
            .filter_map(|e| e.model_error.map(|m| [e.epoch as f64, 100.0 * m]))
            .collect();
        let height = ui.available_height().max(80.0);
        let w = if error.is_empty() {
            ui.available_width()
        } else {
            ui.available_width() / 2.0 - 4.0
        };
        ui.horizontal(|ui| {
            Plot::new("fwi_loss")
                .width(w)
                .height(height)
                .allow_scroll(false)
                .include_y(0.0)
                .x_axis_label("epoch")
                .y_axis_label("loss")
                .show(ui, |p| p.line(Line::new("loss", loss)));
            if !error.is_empty() {
                Plot::new("fwi_model_error")
                    .width(w)
                    .height(height)
                    .allow_scroll(false)
                    .x_axis_label("epoch")
                    .y_axis_label("model error %")
                    .show(ui, |p| {
                        p.line(Line::new("model error", PlotPoints::from(error)));
                    });
            }
        });
    }
}

/// A timed part of an epoch on one rank: its name, line style and seconds.
type Part = (&'static str, fn() -> LineStyle, fn(&RankEpoch) -> f64);

const PARTS: [Part; 3] = [
    ("forward", || LineStyle::Solid, |r| r.forward_secs),
    ("adjoint", LineStyle::dashed_loose, |r| r.adjoint_secs),
    ("communication", LineStyle::dotted_dense, |r| {
        r.communication_secs
    }),
];

pub struct FwiRanksView;

impl View for FwiRanksView {
    fn title(&self) -> &'static str {
        "Ranks"
    }

    fn place(&self) -> Place {
        Place::Tab("Inversion")
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.fwi.is_some()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        ui.strong("Timing per rank");
        let Some(run) = wb.session.fwi.as_ref().filter(|r| !r.history.is_empty()) else {
            ui.label("no epochs yet");
            return;
        };
        let world = run
            .history
            .iter()
            .flat_map(|e| e.ranks.iter().map(|r| r.rank + 1))
            .max()
            .unwrap_or(0);
        ui.horizontal_wrapped(|ui| {
            ui.label("forward solid, adjoint dashed, communication dotted;");
            for rank in 0..world {
                ui.colored_label(rank_color(rank), format!("■ rank {rank}"));
            }
        });
        let table_h = (world as f32 + 1.5) * ui.text_style_height(&egui::TextStyle::Body);
        Plot::new("fwi_timing")
            .height((ui.available_height() - table_h - 8.0).max(80.0))
            .allow_scroll(false)
            .include_y(0.0)
            .x_axis_label("epoch")
            .y_axis_label("seconds")
            .show(ui, |p| {
                for rank in 0..world {
                    for (name, style, secs) in PARTS {
                        let points: PlotPoints = run
                            .history
                            .iter()
                            .filter_map(|e| {
                                e.ranks
                                    .iter()
                                    .find(|r| r.rank == rank)
                                    .map(|r| [e.epoch as f64, secs(r)])
                            })
                            .collect();
                        p.line(
                            Line::new(format!("rank {rank} {name}"), points)
                                .color(rank_color(rank))
                                .style(style()),
                        );
                    }
                }
            });
        let last = run.history.last();
        egui::Grid::new("fwi_timing_table")
            .striped(true)
            .show(ui, |ui| {
                for head in [
                    "rank",
                    "shots this epoch",
                    "forward s",
                    "adjoint s",
                    "communication s",
                ] {
                    ui.strong(head);
                }
                ui.end_row();
                for rank in 0..world {
                    let total = |f: fn(&RankEpoch) -> f64| -> f64 {
                        run.history
                            .iter()
                            .flat_map(|e| e.ranks.iter().filter(|r| r.rank == rank))
                            .map(f)
                            .sum()
                    };
                    ui.colored_label(rank_color(rank), rank.to_string());
                    let shots = last
                        .and_then(|e| e.ranks.iter().find(|r| r.rank == rank))
                        .map(|r| {
                            r.shots
                                .iter()
                                .map(usize::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_default();
                    ui.label(shots);
                    for (_, _, f) in PARTS {
                        ui.label(format!("{:.3}", total(f)));
                    }
                    ui.end_row();
                }
            });
    }
}
