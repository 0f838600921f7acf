//! The Profile tab: the values of every pane on screen along the line drawn with Shift+drag, the
//! statistics of the box drawn with Ctrl+drag (per pane and channel, and PSNR/SSIM against the
//! ground truth inside it), and their export as CSV.

use egui::{Pos2, Ui};
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::dialogs::{CsvExport, DialogKind};
use crate::gui::roi::RoiReport;

/// What the box's report was computed from: the box and the panes' images (by address).
type ReportKey = ((Pos2, Pos2), Vec<usize>);

#[derive(Default)]
pub struct ProfileView {
    /// SSIM of a large box is too slow for every frame: the report is kept until the box or an
    /// image changes.
    report: Option<(ReportKey, RoiReport)>,
}

impl View for ProfileView {
    fn title(&self) -> &'static str {
        "Profile"
    }

    fn place(&self) -> Place {
        Place::Tab("Profile")
    }

    /// The line and the box are drawn on the live view's panes only.
    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging() && wb.session.training.is_none()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        if wb.viewer.roi.is_some() {
            self.roi_table(ui, wb);
            ui.separator();
        }
        if wb.viewer.profile.is_none() {
            ui.label(
                "Shift+drag across an image to draw a line; its values in every pane show here. \
                 Ctrl+drag draws a box: its statistics show here.",
            );
            return;
        }
        if ui.button("Export profile as CSV…").clicked() {
            wb.open_dialog(DialogKind::ExportCsv(CsvExport::Profile));
        }
        let curves = wb.profile_curves();
        Plot::new("profile")
            .height(ui.available_height().max(80.0))
            .allow_scroll(false)
            .legend(Legend::default())
            .x_axis_label("distance (px)")
            .y_axis_label("value")
            .show(ui, |p| {
                for (title, points) in curves {
                    p.line(Line::new(title, PlotPoints::from(points)));
                }
            });
    }
}

impl ProfileView {
    fn roi_table(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let Some(roi) = wb.viewer.roi else {
            return;
        };
        let images: Vec<usize> = super::all_panes(wb)
            .iter()
            .filter_map(|(_, slot)| wb.viewer.shown.get(slot))
            .map(|s| std::sync::Arc::as_ptr(&s.raw) as usize)
            .collect();
        let key = (roi, images);
        if self.report.as_ref().is_none_or(|(k, _)| *k != key) {
            self.report = wb.roi_report().map(|r| (key, r));
        }
        let Some((_, report)) = &self.report else {
            return;
        };
        ui.horizontal(|ui| {
            let place = report
                .box_px
                .map(|[x0, x1, y0, y1]| {
                    format!(
                        "box x {x0}..{x1}, y {y0}..{y1} ({}×{} px)",
                        x1 - x0,
                        y1 - y0
                    )
                })
                .unwrap_or_else(|| "the box covers no pixel".into());
            ui.strong(place);
            if ui.button("Export box statistics as CSV…").clicked() {
                wb.open_dialog(DialogKind::ExportCsv(CsvExport::Roi));
            }
        });
        egui::Grid::new("roi stats").striped(true).show(ui, |ui| {
            for h in ["pane", "channel", "mean", "std", "min", "max"] {
                ui.strong(h);
            }
            ui.end_row();
            for (title, stats) in &report.panes {
                for (ch, s) in stats.iter().enumerate() {
                    ui.label(title.split(':').next().unwrap_or(title));
                    ui.label(ch.to_string());
                    for v in [s.mean, s.std, s.min, s.max] {
                        ui.monospace(format!("{v:.4}"));
                    }
                    ui.end_row();
                }
            }
        });
        match &report.fidelity {
            Some(Ok((psnr, ssim))) => {
                let ssim = ssim.map_or("— (box under 11×11 px)".into(), |s| format!("{s:.4}"));
                ui.label(format!(
                    "in the box, reconstruction vs ground truth: PSNR {psnr:.2} dB, SSIM {ssim}"
                ));
            }
            Some(Err(why)) => {
                ui.label(format!("no PSNR/SSIM in the box: {why}"));
            }
            None => {
                ui.label("PSNR/SSIM need a reconstruction and a ground truth on screen");
            }
        }
    }
}
