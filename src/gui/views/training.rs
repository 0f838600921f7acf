//! Views of a training run (a denoiser under spatial decomposition, or a Multi-DSN), live or
//! reopened from its folder: the curves in the main area (the denoiser's loss as a PSNR; the
//! Multi-DSN's per-domain losses and held-out accuracies), per-rank compute and exchange time
//! (and memory and bytes received for a Multi-DSN) in the Training tab, and the Multi-DSN's
//! reconstructions per domain (input, full, shared-only, private-only) in their own tab.

use std::path::{Path, PathBuf};

use egui::{ColorImage, TextureHandle, TextureOptions, Ui, Vec2};
use egui_plot::{Bar, BarChart, Corner, Legend, Line, LineStyle, Plot, PlotPoints};

use super::{Place, View};
use crate::error::human_bytes;
use crate::gui::Workbench;
use crate::gui::patch_map::rank_color;
use crate::gui::session::{TrainResult, TrainRun};
use crate::protocol::TrainPlan;

/// Whether the training views concern what is on screen: a training preset is edited, or a
/// training run was reopened while an imaging preset is edited.
fn training_on_screen(wb: &Workbench) -> bool {
    wb.doc.training.is_some() || (wb.doc.is_imaging() && wb.session.training.is_some())
}

/// PSNR (dB) of a mean squared error on images in 0..1.
fn psnr_of_mse(mse: f64) -> f64 {
    -10.0 * mse.max(1e-30).log10()
}

pub struct TrainCurvesView;

impl View for TrainCurvesView {
    fn title(&self) -> &'static str {
        "Training curves"
    }

    fn place(&self) -> Place {
        Place::Main
    }

    fn applies(&self, wb: &Workbench) -> bool {
        training_on_screen(wb)
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let Some(run) = wb.session.training.as_ref() else {
            ui.heading(wb.doc.name().to_string());
            ui.label(
                "Run trains it on the backend's ranks; the loss curve (and for a Multi-DSN the \
                 held-out accuracy per domain) appears here as it trains.",
            );
            return;
        };
        let mut resume = false;
        ui.horizontal(|ui| {
            ui.heading(&run.name);
            ui.label(progress(run));
            if wb.session.resumable_run().is_some() {
                let blocker = wb.run_blocker();
                resume = ui
                    .add_enabled(blocker.is_none(), egui::Button::new("Resume"))
                    .on_hover_text(blocker.unwrap_or_else(|| {
                        "continue from the checkpoint the stop wrote, in a new run folder (the \
                         stopped one stays as it is)"
                            .into()
                    }))
                    .clicked();
            }
        });
        if resume {
            wb.resume();
            return;
        }
        if run.is_dsn() {
            dsn_curves(ui, run);
        } else {
            loss_curve(ui, run);
        }
    }
}

/// "step 40 of 400 on 2 rank(s)" and what the run ended with.
fn progress(run: &TrainRun) -> String {
    let planned = run.plan.as_ref().map(TrainPlan::length);
    let (done, unit) = match (&run.result, run.is_dsn()) {
        (Some(TrainResult::Denoiser(s)), _) => (s.steps, "steps"),
        (Some(TrainResult::Dsn(s)), _) => (s.epochs.len(), "epochs"),
        (None, true) => (run.epochs.len(), "epochs"),
        (None, false) => (run.steps.last().map_or(0, |p| p.step + 1), "steps"),
    };
    let of = planned.map(|n| format!(" of {n}")).unwrap_or_default();
    let stopped = match &run.result {
        Some(TrainResult::Denoiser(s)) if s.stopped_early => ", stopped",
        Some(TrainResult::Dsn(s)) if s.stopped_early => ", stopped",
        Some(_) => ", done",
        None => "",
    };
    format!("{unit}: {done}{of} on {} rank(s){stopped}", run.world_size)
}

fn loss_curve(ui: &mut Ui, run: &TrainRun) {
    if run.steps.is_empty() {
        ui.label("no step reported yet");
        return;
    }
    let points: PlotPoints = run
        .steps
        .iter()
        .map(|p| [p.step as f64 + 1.0, psnr_of_mse(p.loss)])
        .collect();
    if let Some(last) = run.steps.last() {
        ui.label(format!(
            "training loss (MSE of the batch) {:.3e} at step {}: {:.2} dB",
            last.loss,
            last.step + 1,
            psnr_of_mse(last.loss)
        ));
    }
    Plot::new("train_loss")
        .height(ui.available_height().max(120.0))
        .allow_scroll(false)
        .x_axis_label("step")
        .y_axis_label("PSNR of the batch loss (dB)")
        .show(ui, |p| p.line(Line::new("training loss", points)));
}

fn dsn_curves(ui: &mut Ui, run: &TrainRun) {
    let Some(last) = run.epochs.last() else {
        ui.label("no epoch finished yet");
        return;
    };
    let names: Vec<String> = match (&run.plan, &run.result) {
        (Some(TrainPlan::Dsn { domains, .. }), _) => domains.clone(),
        (_, Some(TrainResult::Dsn(s))) => s.domains.clone(),
        _ => (0..last.losses.len())
            .map(|d| format!("domain {d}"))
            .collect(),
    };
    ui.label(format!(
        "epoch {}: target accuracy {:.1} % (source {:.1} %)",
        last.epoch + 1,
        100.0 * last.target_accuracy,
        100.0 * last.accuracy.first().copied().unwrap_or(0.0)
    ));
    let height = ui.available_height().max(120.0);
    let width = ui.available_width() / 2.0 - 4.0;
    let name = |d: usize| {
        names
            .get(d)
            .cloned()
            .unwrap_or_else(|| format!("domain {d}"))
    };
    ui.horizontal(|ui| {
        Plot::new("dsn_losses")
            .width(width)
            .height(height)
            .allow_scroll(false)
            .legend(Legend::default())
            .include_y(0.0)
            .x_axis_label("epoch")
            .y_axis_label("weighted loss")
            .show(ui, |p| {
                for d in 0..last.losses.len() {
                    let points: PlotPoints = run
                        .epochs
                        .iter()
                        .filter_map(|e| e.losses.get(d).map(|l| [e.epoch as f64 + 1.0, l.total()]))
                        .collect();
                    p.line(Line::new(name(d), points).color(rank_color(d)));
                }
            });
        Plot::new("dsn_accuracy")
            .width(width)
            .height(height)
            .allow_scroll(false)
            // Accuracies rise towards the top right: the legend goes where they are not.
            .legend(Legend::default().position(Corner::RightBottom))
            .include_y(0.0)
            .include_y(100.0)
            .x_axis_label("epoch")
            .y_axis_label("held-out accuracy %")
            .show(ui, |p| {
                for d in 0..last.accuracy.len() {
                    let points: PlotPoints = run
                        .epochs
                        .iter()
                        .filter_map(|e| {
                            e.accuracy.get(d).map(|a| [e.epoch as f64 + 1.0, 100.0 * a])
                        })
                        .collect();
                    p.line(Line::new(name(d), points).color(rank_color(d)));
                }
                let mean: PlotPoints = run
                    .epochs
                    .iter()
                    .map(|e| [e.epoch as f64 + 1.0, 100.0 * e.target_accuracy])
                    .collect();
                p.line(
                    Line::new("targets (mean)", mean)
                        .color(egui::Color32::LIGHT_GRAY)
                        .width(2.5)
                        .style(LineStyle::dashed_loose()),
                );
            });
    });
}

pub struct TrainRanksView;

impl View for TrainRanksView {
    fn title(&self) -> &'static str {
        "Ranks"
    }

    fn place(&self) -> Place {
        Place::Tab("Training")
    }

    fn applies(&self, wb: &Workbench) -> bool {
        training_on_screen(wb)
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        ui.strong("Time per rank");
        let Some(result) = wb.session.training.as_ref().and_then(|t| t.result.as_ref()) else {
            ui.label("per-rank compute and exchange times arrive when the run ends");
            return;
        };
        let rows = RankRow::of(result);
        // The table's rows (and its header) stay in view below the bars.
        let row_h =
            ui.text_style_height(&egui::TextStyle::Body) + 2.0 * ui.spacing().item_spacing.y;
        let table_h = (rows.len() as f32 + 1.5) * row_h;
        let bars = |secs: fn(&RankRow) -> f64| -> Vec<Bar> {
            rows.iter()
                .map(|r| Bar::new(r.rank as f64, secs(r)).width(0.6))
                .collect()
        };
        let compute = BarChart::new("compute", bars(|r| r.compute_secs))
            .color(egui::Color32::from_rgb(90, 140, 220));
        let exchange = BarChart::new("exchange", bars(|r| r.exchange_secs))
            .stack_on(&[&compute])
            .color(egui::Color32::from_rgb(230, 150, 60));
        Plot::new("train_ranks")
            .height((ui.available_height() - table_h - 8.0).max(80.0))
            .allow_scroll(false)
            .legend(Legend::default())
            .include_y(0.0)
            .x_axis_label("rank")
            .y_axis_label("seconds")
            .show(ui, |p| {
                p.bar_chart(compute);
                p.bar_chart(exchange);
            });
        let dsn = matches!(result, TrainResult::Dsn(_));
        egui::Grid::new("train_ranks_table")
            .striped(true)
            .show(ui, |ui| {
                let mut heads = vec!["rank", "compute s", "exchange s", "exchange share"];
                if dsn {
                    heads.extend(["domains", "received", "peak memory"]);
                }
                for h in heads {
                    ui.strong(h);
                }
                ui.end_row();
                for r in &rows {
                    ui.colored_label(rank_color(r.rank), r.rank.to_string());
                    ui.label(format!("{:.2}", r.compute_secs));
                    ui.label(format!("{:.2}", r.exchange_secs));
                    let total = r.compute_secs + r.exchange_secs;
                    ui.label(match total > 0.0 {
                        true => format!("{:.1} %", 100.0 * r.exchange_secs / total),
                        false => "—".into(),
                    });
                    if dsn {
                        ui.label(format!("{:?}", r.domains));
                        ui.label(r.received.map(human_bytes).unwrap_or_default());
                        ui.label(r.peak.map_or("unknown".into(), human_bytes));
                    }
                    ui.end_row();
                }
            });
    }
}

/// One rank's line of the table.
struct RankRow {
    rank: usize,
    compute_secs: f64,
    exchange_secs: f64,
    domains: Vec<usize>,
    received: Option<u64>,
    peak: Option<u64>,
}

impl RankRow {
    fn of(result: &TrainResult) -> Vec<RankRow> {
        match result {
            TrainResult::Denoiser(s) => s
                .compute_secs
                .iter()
                .zip(&s.exchange_secs)
                .enumerate()
                .map(|(rank, (c, e))| RankRow {
                    rank,
                    compute_secs: *c,
                    exchange_secs: *e,
                    domains: Vec::new(),
                    received: None,
                    peak: None,
                })
                .collect(),
            TrainResult::Dsn(s) => s
                .per_rank
                .iter()
                .map(|r| RankRow {
                    rank: r.rank,
                    compute_secs: r.compute_secs,
                    exchange_secs: r.exchange_secs,
                    domains: r.domains.clone(),
                    received: Some(r.received_bytes),
                    peak: r.peak_rss_bytes,
                })
                .collect(),
        }
    }
}

/// A domain's name and its reconstructions' texture (or why it could not be read).
type DomainImage = (String, Result<TextureHandle, String>);

/// The Multi-DSN's `reconstructions/<domain>.png`, read from a run folder on this machine.
#[derive(Default)]
pub struct DsnReconstructionsView {
    /// The folder the textures were read from, and its domains' images.
    loaded: Option<(PathBuf, Vec<DomainImage>)>,
}

impl DsnReconstructionsView {
    /// The run folder here that holds the reconstructions: the reopened or fetched folder, else
    /// the live run's folder when the backend is local.
    fn folder(wb: &Workbench) -> Option<PathBuf> {
        if let Some(f) = wb
            .runs
            .shown
            .as_ref()
            .filter(|f| f.join(crate::io::TRAIN_SUMMARY_FILE).is_file())
        {
            return Some(f.clone());
        }
        let dir = wb.session.training.as_ref()?.run_dir.clone()?;
        (!wb.doc.remote && dir.is_dir()).then_some(dir)
    }

    fn load(
        ctx: &egui::Context,
        run: &TrainRun,
        folder: &Path,
    ) -> Vec<(String, Result<TextureHandle, String>)> {
        let Some(TrainResult::Dsn(s)) = &run.result else {
            return Vec::new();
        };
        let here = TrainRun {
            run_dir: Some(folder.to_path_buf()),
            ..run.clone()
        };
        s.domains
            .iter()
            .zip(&s.reconstructions)
            .map(|(name, p)| {
                let texture = here
                    .output_path(p)
                    .ok_or_else(|| format!("{} is not in the run folder", p.display()))
                    .and_then(|path| {
                        // A few kB: a grid of small images.
                        let img = image::open(&path)
                            .map_err(|e| format!("{}: {e}", path.display()))?
                            .to_rgb8();
                        let size = [img.width() as usize, img.height() as usize];
                        let color = ColorImage::from_rgb(size, img.as_raw());
                        Ok(ctx.load_texture(
                            format!("dsn-reconstruction-{name}"),
                            color,
                            TextureOptions::NEAREST,
                        ))
                    });
                (name.clone(), texture)
            })
            .collect()
    }
}

impl View for DsnReconstructionsView {
    fn title(&self) -> &'static str {
        "Reconstructions"
    }

    fn place(&self) -> Place {
        Place::Tab("Reconstructions")
    }

    fn applies(&self, wb: &Workbench) -> bool {
        training_on_screen(wb)
            && (matches!(
                wb.doc.training,
                Some(crate::gui::document::Training::Dsn(_))
            ) || wb.session.training.as_ref().is_some_and(TrainRun::is_dsn))
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let (Some(run), Some(folder)) = (wb.session.training.as_ref(), Self::folder(wb)) else {
            self.loaded = None;
            ui.label(match wb.doc.remote {
                true => "the reconstructions appear once the run's files are copied here",
                false => "the reconstructions appear when the run ends",
            });
            return;
        };
        if run.result.is_none() {
            ui.label("the reconstructions appear when the run ends");
            return;
        }
        if self.loaded.as_ref().map(|(f, _)| f) != Some(&folder) {
            let textures = Self::load(ui.ctx(), run, &folder);
            self.loaded = Some((folder.clone(), textures));
        }
        let Some((_, textures)) = &self.loaded else {
            return;
        };
        ui.label(format!(
            "held-out images per domain, rows: {}",
            crate::dsn::run::RECONSTRUCTION_ROWS.join(" · ")
        ));
        // The domains' grids side by side, each scaled to its share of the tab as it is now (a
        // fixed size cut wide grids off at the tab's edge): whole, under its name.
        let spacing = ui.spacing().item_spacing;
        let name_h = ui.text_style_height(&egui::TextStyle::Body) + spacing.y;
        let domains = textures.len().max(1) as f32;
        let room = Vec2::new(
            ui.available_width() / domains - spacing.x,
            ui.available_height() - name_h - 2.0 * spacing.y,
        );
        egui::ScrollArea::vertical().show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                for (name, texture) in textures {
                    ui.vertical(|ui| {
                        ui.strong(name);
                        match texture {
                            Ok(t) => {
                                let size = t.size_vec2();
                                ui.add(
                                    egui::Image::new((t.id(), fit(size, room)))
                                        .alt_text(format!("reconstructions of {name}")),
                                );
                            }
                            Err(e) => {
                                ui.colored_label(ui.visuals().error_fg_color, e);
                            }
                        }
                    });
                }
            });
        });
    }
}

/// The size `image` is drawn at to fit whole in `room`: shrunk as needed, enlarged at most
/// [`MAX_ZOOM`] times (whole pixels of a small grid stay recognisable), never below a few pixels.
fn fit(image: Vec2, room: Vec2) -> Vec2 {
    let scale = (room.x / image.x).min(room.y / image.y).min(MAX_ZOOM);
    image * scale.max(MIN_SIDE_PX / image.min_elem())
}

/// The largest enlargement of a domain's reconstructions.
const MAX_ZOOM: f32 = 8.0;

/// The shortest side a domain's reconstructions are drawn with, however small the tab.
const MIN_SIDE_PX: f32 = 16.0;
