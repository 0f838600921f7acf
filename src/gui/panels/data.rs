//! Data: a built-in sample and its size, an image or volume file, or an unknown image (measured
//! data) given by its shape.

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::gui::Workbench;
use crate::gui::dialogs::DialogKind;
use crate::gui::widgets::{ERROR_COLOR, number};
use crate::preset::ImageSource;
use crate::samples::Sample;

/// The Data panel's name for `[image] shape` (no ground truth).
pub const UNKNOWN_IMAGE: &str = "none (measured data)";

pub struct DataPanel;

impl EditorPanel for DataPanel {
    fn title(&self) -> &'static str {
        "Data"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let mut changed = false;
        let volumetric = wb.doc.preset.is_volumetric();
        // An unknown image starts with the shape of the image shown so far.
        let default_shape = match wb.doc.data.loaded.as_deref() {
            Some(t) if t.shape().len() == if volumetric { 5 } else { 4 } => t.shape()[1..].to_vec(),
            _ if volumetric => vec![1, 32, 32, 32],
            _ => vec![1, 256, 256],
        };
        let img = &mut wb.doc.preset.image;
        let current = match (img.sample, &img.path) {
            (Some(s), _) => format!("{s:?}"),
            (None, Some(p)) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            _ if img.shape.is_some() => UNKNOWN_IMAGE.into(),
            _ => "none".into(),
        };
        let samples: &[(Sample, &str)] = if volumetric {
            &[(Sample::SheppLogan3d, "Shepp-Logan 3-D")]
        } else {
            &[
                (Sample::Natural, "natural image"),
                (Sample::SheppLogan, "Shepp-Logan"),
                (Sample::Astronaut, "astronaut photograph (256²)"),
            ]
        };
        egui::ComboBox::from_label("sample")
            .selected_text(current)
            .show_ui(ui, |ui| {
                for (s, name) in samples {
                    if ui.selectable_label(img.sample == Some(*s), *name).clicked() {
                        img.sample = Some(*s);
                        img.path = None;
                        img.shape = None;
                        let n = if volumetric { 3 } else { 2 };
                        if img.size.as_ref().map(Vec::len) != Some(n) {
                            img.size = Some(vec![if volumetric { 32 } else { 256 }; n]);
                        }
                        changed = true;
                    }
                }
                if ui
                    .selectable_label(img.shape.is_some(), UNKNOWN_IMAGE)
                    .on_hover_text("reconstruct loaded measurements of an image nobody has seen")
                    .clicked()
                    && img.shape.is_none()
                {
                    *img = ImageSource {
                        shape: Some(default_shape.clone()),
                        ..ImageSource::default()
                    };
                    changed = true;
                }
            });
        if let Some(shape) = &mut img.shape {
            let names: &[&str] = if volumetric {
                &["channels", "depth", "height", "width"]
            } else {
                &["channels", "height", "width"]
            };
            if shape.len() != names.len() {
                *shape = default_shape;
                changed = true;
            }
            for (d, name) in shape.iter_mut().zip(names) {
                changed |= number(ui, name, d, 1.0, 1..=16384);
            }
        }
        if img.sample.is_some() {
            let mut side = img
                .size
                .as_ref()
                .and_then(|s| s.last().copied())
                .unwrap_or(256);
            if number(ui, "size (px)", &mut side, 1.0, 8..=4096) {
                let n = if volumetric { 3 } else { 2 };
                img.size = Some(vec![side; n]);
                changed = true;
            }
        }
        if ui.button("Open image…").clicked() {
            wb.open_dialog(DialogKind::OpenData);
        }
        if wb.doc.data.is_loading() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("loading…");
            });
        } else if let Some(t) = &wb.doc.data.loaded {
            ui.label(format!("image {:?}", &t.shape()[2..]));
        }
        if let Some(e) = &wb.doc.data.error {
            ui.colored_label(ERROR_COLOR, e);
        }
        problem_here(ui, wb, "image");
        changed
    }
}
