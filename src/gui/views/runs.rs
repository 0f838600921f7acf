//! Runs: this window's runs and the earlier ones under the output root; reopen one, compare it
//! with the run on screen (side by side and as a difference), open its folder.

use egui::{RichText, Ui};

use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::history::{Purpose, open_folder};
use crate::protocol::LogLevel;

pub struct RunsView;

impl View for RunsView {
    fn title(&self) -> &'static str {
        "Runs"
    }

    fn place(&self) -> Place {
        Place::Tab("Runs")
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        ui.horizontal(|ui| {
            match &wb.runs.root {
                Some(r) => ui.label(format!("runs in {}", r.display())),
                None => ui.label("runs of this window"),
            };
            if ui.small_button("refresh").clicked() {
                wb.rescan_runs();
            }
            if wb.runs.is_busy() {
                ui.spinner();
            }
            if wb.runs.compared.is_some() && ui.small_button("stop comparing").clicked() {
                wb.stop_comparing();
            }
        });
        if wb.runs.runs.is_empty() {
            ui.label("no complete runs yet");
            return;
        }
        let mut action = None;
        egui::ScrollArea::vertical().show(ui, |ui| {
            egui::Grid::new("runs").striped(true).show(ui, |ui| {
                for head in ["run", "preset", "ran", "PSNR / result", ""] {
                    ui.strong(head);
                }
                ui.end_row();
                for r in &wb.runs.runs {
                    let mut label = RichText::new(r.label());
                    if wb.runs.this_window.contains(&r.folder) {
                        label = label.strong();
                    }
                    if wb.runs.shown.as_ref() == Some(&r.folder) {
                        label = label.underline();
                    }
                    ui.label(label)
                        .on_hover_text(r.folder.display().to_string());
                    ui.label(&r.name);
                    ui.label(format!(
                        "{} {}{}",
                        r.iterations,
                        r.unit,
                        if r.stopped_early { " (stopped)" } else { "" }
                    ));
                    ui.label(match (&r.result, r.psnr_db) {
                        (Some(words), _) => words.clone(),
                        (None, Some(p)) => format!("{p:.2} dB"),
                        (None, None) => "—".into(),
                    });
                    ui.horizontal(|ui| {
                        if ui.small_button("reopen").clicked() {
                            action = Some((Some(Purpose::Reopen), r.folder.clone()));
                        }
                        if !r.training && ui.small_button("compare").clicked() {
                            action = Some((Some(Purpose::Compare), r.folder.clone()));
                        }
                        if ui.small_button("folder").clicked() {
                            action = Some((None, r.folder.clone()));
                        }
                    });
                    ui.end_row();
                }
            });
        });
        match action {
            // Reopening puts the run's preset in the editor, in place of the one there.
            Some((Some(Purpose::Reopen), folder)) => {
                let what = format!("run {}", folder.display());
                wb.replace_document(&what, move |wb| wb.open_run(&folder, Purpose::Reopen));
            }
            Some((Some(purpose), folder)) => wb.open_run(&folder, purpose),
            Some((None, folder)) => {
                if let Err(e) = open_folder(&folder) {
                    wb.session.log(LogLevel::Warn, e);
                }
            }
            None => {}
        }
    }
}
