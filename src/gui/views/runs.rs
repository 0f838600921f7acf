//! Runs: a browser of this window's runs and the earlier ones under the output root — each with
//! a thumbnail of its reconstruction, its input and the user's notes — filtered by text, preset
//! and status; reopen one, compare it with the run on screen (side by side and as a difference),
//! open its folder, or delete it (after a confirmation).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use egui::{ColorImage, RichText, TextureHandle, Ui};

use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::history::{Purpose, RunEntry, RunFilter, StatusFilter, open_folder};
use crate::protocol::LogLevel;

#[derive(Default)]
pub struct RunsView {
    filter: RunFilter,
    /// Thumbnails on the GPU, by run folder, with the image they were made from.
    thumbnails: HashMap<PathBuf, (Arc<ColorImage>, TextureHandle)>,
    /// Notes being edited, by run folder (saved on Enter or when the field loses focus).
    editing: HashMap<PathBuf, String>,
    /// The run the confirmation asks about, and why its deletion failed (if it did).
    deleting: Option<(PathBuf, Option<String>)>,
}

enum Action {
    Open(Purpose, PathBuf),
    Folder(PathBuf),
    Notes(PathBuf, String),
}

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
        self.filter_bar(ui, &wb.runs.runs);
        let mut action = None;
        let shown: Vec<&RunEntry> = wb
            .runs
            .runs
            .iter()
            .filter(|r| self.filter.keeps(r))
            .collect();
        if shown.len() < wb.runs.runs.len() {
            ui.weak(format!(
                "{} of {} runs match",
                shown.len(),
                wb.runs.runs.len()
            ));
        }
        egui::ScrollArea::vertical().show(ui, |ui| {
            egui::Grid::new("runs").striped(true).show(ui, |ui| {
                for head in [
                    "",
                    "run",
                    "preset",
                    "input",
                    "ran",
                    "PSNR / result",
                    "notes",
                    "",
                ] {
                    ui.strong(head);
                }
                ui.end_row();
                for r in shown {
                    self.thumbnail(ui, r);
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
                    ui.label(r.input.as_deref().unwrap_or("—"));
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
                    if let Some(notes) = self.notes(ui, r) {
                        action = Some(Action::Notes(r.folder.clone(), notes));
                    }
                    ui.horizontal(|ui| {
                        if ui.small_button("reopen").clicked() {
                            action = Some(Action::Open(Purpose::Reopen, r.folder.clone()));
                        }
                        if !r.training && ui.small_button("compare").clicked() {
                            action = Some(Action::Open(Purpose::Compare, r.folder.clone()));
                        }
                        if ui.small_button("folder").clicked() {
                            action = Some(Action::Folder(r.folder.clone()));
                        }
                        if ui
                            .small_button("delete")
                            .on_hover_text("delete this run's folder (asks first)")
                            .clicked()
                        {
                            self.deleting = Some((r.folder.clone(), None));
                        }
                    });
                    ui.end_row();
                }
            });
        });
        // After the list, so a delete clicked this frame asks at once.
        self.confirm_delete(ui, wb);
        match action {
            // Reopening puts the run's preset in the editor, in place of the one there.
            Some(Action::Open(Purpose::Reopen, folder)) => {
                let what = format!("run {}", folder.display());
                wb.replace_document(&what, move |wb| wb.open_run(&folder, Purpose::Reopen));
            }
            Some(Action::Open(purpose, folder)) => wb.open_run(&folder, purpose),
            Some(Action::Folder(folder)) => {
                if let Err(e) = open_folder(&folder) {
                    wb.session.log(LogLevel::Warn, e);
                }
            }
            Some(Action::Notes(folder, notes)) if wb.save_run_notes(&folder, &notes) => {
                self.editing.remove(&folder);
            }
            Some(Action::Notes(..)) => {}
            None => {}
        }
    }
}

impl RunsView {
    /// Text, preset and status filters.
    fn filter_bar(&mut self, ui: &mut Ui, runs: &[RunEntry]) {
        let mut presets: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        presets.sort_unstable();
        presets.dedup();
        ui.horizontal(|ui| {
            let l = ui.label("filter");
            ui.add(
                egui::TextEdit::singleline(&mut self.filter.text)
                    .hint_text("folder, preset, input or notes")
                    .desired_width(200.0),
            )
            .labelled_by(l.id);
            let preset = self.filter.preset.as_deref().unwrap_or("any preset");
            egui::ComboBox::from_id_salt("runs-preset")
                .selected_text(preset)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.filter.preset, None, "any preset");
                    for p in presets {
                        ui.selectable_value(&mut self.filter.preset, Some(p.to_string()), p);
                    }
                })
                .response
                .accessible_name("preset filter");
            egui::ComboBox::from_id_salt("runs-status")
                .selected_text(self.filter.status.name())
                .show_ui(ui, |ui| {
                    for s in StatusFilter::ALL {
                        ui.selectable_value(&mut self.filter.status, s, s.name());
                    }
                })
                .response
                .accessible_name("status filter");
            if self.filter != RunFilter::default() && ui.small_button("clear filter").clicked() {
                self.filter = RunFilter::default();
            }
        });
    }

    /// The run's thumbnail (a texture made once per image).
    fn thumbnail(&mut self, ui: &mut Ui, r: &RunEntry) {
        let Some(image) = &r.thumbnail else {
            ui.label("");
            return;
        };
        let texture = match self.thumbnails.get(&r.folder) {
            Some((made_from, t)) if Arc::ptr_eq(made_from, image) => t.clone(),
            _ => {
                let t = ui.ctx().load_texture(
                    format!("thumbnail {}", r.folder.display()),
                    ColorImage::clone(image),
                    egui::TextureOptions::LINEAR,
                );
                self.thumbnails
                    .insert(r.folder.clone(), (image.clone(), t.clone()));
                t
            }
        };
        let side = crate::gui::history::THUMBNAIL_SIDE as f32;
        let [w, h] = texture.size();
        let scale = side / w.max(h).max(1) as f32;
        ui.add(egui::Image::new((
            texture.id(),
            egui::vec2(w as f32 * scale, h as f32 * scale),
        )))
        .accessible_name(format!("thumbnail of {}", r.label()));
    }

    /// The run's notes field; returns the notes to save once an edit is committed (Enter or
    /// focus elsewhere).
    fn notes(&mut self, ui: &mut Ui, r: &RunEntry) -> Option<String> {
        let text = self
            .editing
            .entry(r.folder.clone())
            .or_insert_with(|| r.notes.clone());
        let response = ui
            .add(
                egui::TextEdit::singleline(text)
                    .hint_text("notes…")
                    .desired_width(180.0),
            )
            .accessible_name(format!("notes of {}", r.label()));
        if !response.has_focus() && !response.lost_focus() && *text != r.notes {
            // Not being edited: follow the file (another window may have written it).
            *text = r.notes.clone();
        }
        (response.lost_focus() && *text != r.notes).then(|| text.clone())
    }

    /// The confirmation of a deletion, and why it failed if it did.
    fn confirm_delete(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let Some((folder, failure)) = &mut self.deleting else {
            return;
        };
        let mut close = false;
        let modal = egui::Modal::new(egui::Id::unique("delete run")).show(ui.ctx(), |ui| {
            ui.strong(format!(
                "Delete the run {}?",
                folder.file_name().unwrap_or_default().to_string_lossy()
            ));
            ui.label(format!(
                "This removes its folder and everything in it ({}); it does not go to the \
                 trash. Nothing else is touched.",
                folder.display()
            ));
            if let Some(why) = failure.as_deref() {
                ui.colored_label(ui.visuals().error_fg_color, why);
            }
            ui.horizontal(|ui| {
                if ui.button("Delete the run").clicked() {
                    match wb.delete_run(folder) {
                        Ok(()) => close = true,
                        Err(e) => *failure = Some(format!("could not delete it: {e}")),
                    }
                }
                if ui.button("Cancel").clicked() {
                    close = true;
                }
            });
        });
        if close || modal.should_close() {
            self.editing.remove(folder);
            self.thumbnails.remove(folder);
            self.deleting = None;
        }
    }
}
