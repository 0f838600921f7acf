//! Curves over iterations: quality (PSNR, objective) and per-rank timing, drawn live with egui_plot
//! (the PNG figures of reports are `crate::plot`). The plots take no mouse-wheel
//! input (the wheel scrolls what holds them; drag pans, Ctrl+wheel zooms, double-click resets), and
//! their axes never shrink to a span that hides the data's scale.

use egui::{RichText, Sense, Stroke, Ui, Vec2};
use egui_plot::{Corner, Legend, Line, LineStyle, Plot, PlotPoints};

use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::patch_map::{LOST_COLOR, rank_color_or_lost};
use crate::protocol::RankIteration;

/// The quality curves' names in their legends.
const PSNR_CURVE: &str = "PSNR of the reconstruction against the ground truth";
const OBJECTIVE_CURVE: &str = "data fidelity (the objective reported)";

/// The PSNR axis spans at least this many dB, so a converged run is not drawn as a cliff.
const MIN_PSNR_SPAN_DB: f64 = 1.0;

pub struct QualityView;

impl View for QualityView {
    fn title(&self) -> &'static str {
        "Quality"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn place(&self) -> Place {
        Place::Tab("Plots")
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let h = &wb.session.history;
        ui.horizontal(|ui| {
            ui.strong("Quality");
            match wb.session.latest_psnr() {
                Some(p) => ui.label(format!("PSNR {p:.2} dB")),
                None => ui.label("PSNR —"),
            };
        });
        if h.is_empty() {
            return;
        }
        let psnr: Vec<[f64; 2]> = h
            .iter()
            .filter_map(|p| p.psnr_db.map(|v| [p.iteration as f64, v]))
            .collect();
        let objective: Vec<[f64; 2]> = h
            .iter()
            .filter_map(|p| p.objective.map(|v| [p.iteration as f64, v]))
            .collect();
        let height = ui.available_height().max(80.0);
        let w = if objective.is_empty() {
            ui.available_width()
        } else {
            ui.available_width() / 2.0 - 4.0
        };
        ui.horizontal(|ui| {
            let (lo, hi) = psnr
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                    (a.min(p[1]), b.max(p[1]))
                });
            let pad = ((MIN_PSNR_SPAN_DB - (hi - lo)) / 2.0).max(0.0);
            let mut plot = Plot::new("psnr")
                .height(height)
                .width(w)
                .allow_scroll(false)
                .x_axis_label("iteration")
                .y_axis_label("PSNR (dB)");
            if lo.is_finite() {
                plot = plot.include_y(lo - pad).include_y(hi + pad);
            }
            // Named in a legend: a converged run's PSNR is a flat line that said nothing of what
            // it was.
            plot.legend(Legend::default().position(Corner::RightBottom))
                .show(ui, |p| {
                    p.line(Line::new(PSNR_CURVE, PlotPoints::from(psnr)))
                });
            if !objective.is_empty() {
                Plot::new("objective")
                    .height(height)
                    .width(w)
                    .allow_scroll(false)
                    .x_axis_label("iteration")
                    .y_axis_label("objective")
                    .legend(Legend::default())
                    .show(ui, |p| {
                        p.line(Line::new(OBJECTIVE_CURVE, PlotPoints::from(objective)))
                    });
            }
        });
    }
}

pub struct TimingView;

/// A timed component: its name, line style, and the seconds of one rank's iteration.
type Component = (&'static str, fn() -> LineStyle, fn(&RankIteration) -> f64);

const COMPONENTS: [Component; 3] = [
    ("gradient", || LineStyle::Solid, |r| r.gradient_secs),
    ("denoiser", LineStyle::dashed_loose, |r| r.denoiser_secs),
    ("communication", LineStyle::dotted_dense, |r| {
        r.communication_secs
    }),
];

impl View for TimingView {
    fn title(&self) -> &'static str {
        "Timing per rank"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn place(&self) -> Place {
        Place::Tab("Plots")
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        ui.strong("Timing per rank");
        let totals = wb.session.rank_totals();
        if totals.is_empty() {
            ui.label("no iterations yet");
            return;
        }
        let h = &wb.session.history;
        let names = &wb.session.ranks;
        let lost: Vec<usize> = names.lost.iter().map(|l| l.rank).collect();
        legend(ui, totals.iter().map(|t| t.rank), &lost);
        let table_h = (totals.len() as f32 + 1.5) * ui.text_style_height(&egui::TextStyle::Body);
        Plot::new("timing")
            .height((ui.available_height() - table_h - 8.0).max(80.0))
            .allow_scroll(false)
            .include_y(0.0)
            .x_axis_label("iteration")
            .y_axis_label("seconds")
            .show(ui, |p| {
                for t in &totals {
                    for (name, style, secs) in COMPONENTS {
                        let points: PlotPoints = h
                            .iter()
                            .filter_map(|it| {
                                it.ranks
                                    .iter()
                                    .find(|r| r.rank == t.rank)
                                    .map(|r| [it.iteration as f64, secs(r)])
                            })
                            .collect();
                        p.line(
                            Line::new(format!("rank {} {name}", t.rank), points)
                                .color(rank_color_or_lost(t.rank, &lost))
                                .style(style()),
                        );
                    }
                }
            });
        egui::Grid::new("timing_table")
            .striped(true)
            .show(ui, |ui| {
                for head in [
                    "rank",
                    "gradient s",
                    "denoiser s",
                    "communication s",
                    "s / iteration",
                ] {
                    ui.strong(head);
                }
                ui.end_row();
                for t in &totals {
                    match names.lost.iter().find(|l| l.rank == t.rank) {
                        Some(l) => ui.label(
                            RichText::new(format!(
                                "{} (lost; the rest went on after iteration {})",
                                t.rank, l.resumed_from
                            ))
                            .color(LOST_COLOR),
                        ),
                        None => ui.label(t.rank.to_string()),
                    };
                    ui.label(format!("{:.3}", t.gradient_secs));
                    ui.label(format!("{:.3}", t.denoiser_secs));
                    ui.label(format!("{:.3}", t.communication_secs));
                    ui.label(format!(
                        "{:.4}",
                        (t.gradient_secs + t.denoiser_secs) / t.iterations.max(1) as f64
                    ));
                    ui.end_row();
                }
            });
    }
}

/// The timing legend above the plot: each component's line style, each rank's colour (grey for
/// the ranks in `lost`).
fn legend(ui: &mut Ui, ranks: impl Iterator<Item = usize>, lost: &[usize]) {
    ui.horizontal_wrapped(|ui| {
        for (name, style, _) in COMPONENTS {
            let (rect, _) = ui.allocate_exact_size(Vec2::new(28.0, 12.0), Sense::hover());
            let stroke = Stroke::new(1.5, ui.visuals().text_color());
            let (a, b) = (rect.left_center(), rect.right_center());
            match style() {
                LineStyle::Solid => {
                    ui.painter().line_segment([a, b], stroke);
                }
                LineStyle::Dashed { length } => {
                    ui.painter()
                        .extend(egui::Shape::dashed_line(&[a, b], stroke, length, length));
                }
                LineStyle::Dotted { spacing } => {
                    ui.painter().extend(egui::Shape::dotted_line(
                        &[a, b],
                        stroke.color,
                        spacing,
                        1.0,
                    ));
                }
            }
            ui.label(name);
        }
        ui.separator();
        for rank in ranks {
            let text = match lost.contains(&rank) {
                true => format!("□ rank {rank} (lost)"),
                false => format!("■ rank {rank}"),
            };
            ui.colored_label(rank_color_or_lost(rank, lost), text);
        }
        ui.label(egui::RichText::new("(drag pans, Ctrl+wheel zooms, double-click resets)").weak());
    });
}
