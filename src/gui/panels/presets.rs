//! Presets: the bundled ones, Open / Save (file dialogs), recent files.

use std::path::Path;

use egui::{RichText, Ui};

use super::EditorPanel;
use crate::fwi::{BUNDLED_FWI, FwiPreset};
use crate::gui::Workbench;
use crate::gui::dialogs::DialogKind;
use crate::gui::document::Training;
use crate::preset::{BUNDLED, Preset};
use crate::protocol::LogLevel;

pub struct PresetsPanel;

impl EditorPanel for PresetsPanel {
    fn title(&self) -> &'static str {
        "Presets"
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("{} ({})", wb.doc.name(), wb.doc.origin));
            if wb.doc.is_modified() {
                ui.label(RichText::new("● modified").color(ui.visuals().warn_fg_color))
                    .on_hover_text("edited since it was opened or saved: Save preset… keeps it");
            }
            if ui
                .add_enabled(wb.doc.can_undo(), egui::Button::new("undo").small())
                .on_hover_text("Ctrl+Z")
                .clicked()
            {
                wb.undo();
            }
            if ui
                .add_enabled(wb.doc.can_redo(), egui::Button::new("redo").small())
                .on_hover_text("Ctrl+Shift+Z or Ctrl+Y")
                .clicked()
            {
                wb.redo();
            }
        });
        ui.horizontal_wrapped(|ui| {
            for (name, _) in BUNDLED {
                if ui.button(*name).clicked() {
                    match Preset::load(name, &[]) {
                        Ok(p) => wb.replace_document(name, move |wb| wb.set_preset(p)),
                        Err(e) => wb.session.log(LogLevel::Error, e.to_string()),
                    }
                }
            }
            for (name, text) in BUNDLED_FWI {
                if ui
                    .button(*name)
                    .on_hover_text("full-waveform inversion")
                    .clicked()
                {
                    match FwiPreset::from_toml(text, &format!("bundled:{name}"), &[]) {
                        Ok(p) => wb.replace_document(name, move |wb| {
                            wb.set_fwi_preset(p, Path::new(""), format!("bundled:{name}"))
                        }),
                        Err(e) => wb.session.log(LogLevel::Error, e.to_string()),
                    }
                }
            }
            let training = crate::train::BUNDLED
                .iter()
                .map(|(n, _)| (*n, "train a denoiser"))
                .chain(
                    crate::dsn::run::BUNDLED
                        .iter()
                        .map(|(n, _)| (*n, "train a Multi-DSN (domain separation networks)")),
                );
            for (name, what) in training {
                if ui.button(name).on_hover_text(what).clicked() {
                    match Training::bundled(name) {
                        Ok(t) => wb.replace_document(name, move |wb| {
                            wb.set_training(t, Path::new(""), format!("bundled:{name}"))
                        }),
                        Err(e) => wb.session.log(LogLevel::Error, e.to_string()),
                    }
                }
            }
        });
        ui.horizontal(|ui| {
            if ui.button("Open preset…").clicked() {
                wb.open_dialog(DialogKind::OpenPreset);
            }
            if ui.button("Save preset…").clicked() {
                wb.open_dialog(DialogKind::SavePreset);
            }
        });
        if !wb.app_state.recent.is_empty() {
            ui.label("Recent:");
            let mut open = None;
            for p in &wb.app_state.recent {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string());
                if ui
                    .button(name)
                    .on_hover_text(p.display().to_string())
                    .clicked()
                {
                    open = Some(p.clone());
                }
            }
            if let Some(p) = open {
                let what = p.display().to_string();
                wb.replace_document(&what, move |wb| wb.open_preset_path(&p));
            }
        }
        false
    }
}
