//! Wave inversion: the main fields of an FWI preset — the model's size and cells, the acquisition
//! (shot and receiver counts, positions and spacing), the wavelet, the propagator (accuracy, PML
//! width, time samples) and the inversion (epochs, batch size, learning rate). Everything else
//! stays as the preset file says (Save writes it all back).

use egui::Ui;

use super::{EditorPanel, problem_here};
use crate::fwi::FwiPreset;
use crate::fwi::config::ModelSource;
use crate::gui::Workbench;
use crate::gui::widgets::{combo, number};
use crate::physics::wave::config::PmlWidth;
use crate::physics::wave::{Accuracy, AcquisitionConfig, WaveletConfig};

pub struct FwiPanel;

impl EditorPanel for FwiPanel {
    fn title(&self) -> &'static str {
        "Wave inversion"
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.fwi.is_some()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool {
        let Some(p) = wb.doc.fwi.as_mut() else {
            return false;
        };
        let mut changed = model(ui, p);
        problem_here(ui, wb, "model");
        let Some(p) = wb.doc.fwi.as_mut() else {
            return changed;
        };
        changed |= acquisition(ui, &mut p.acquisition);
        problem_here(ui, wb, "acquisition");
        let Some(p) = wb.doc.fwi.as_mut() else {
            return changed;
        };
        changed |= wave(ui, p);
        problem_here(ui, wb, "wavelet");
        problem_here(ui, wb, "wave");
        let Some(p) = wb.doc.fwi.as_mut() else {
            return changed;
        };
        changed |= inversion(ui, p);
        problem_here(ui, wb, "fwi");
        changed
    }
}

fn model(ui: &mut Ui, p: &mut FwiPreset) -> bool {
    ui.strong("Model");
    let mut changed = false;
    match &mut p.model.truth {
        Some(ModelSource::Marmousi { nz, nx, seed }) => {
            ui.label("true model: generated (Marmousi-like)");
            changed |= number(ui, "depth cells", nz, 1.0, 8..=4096);
            changed |= number(ui, "width cells", nx, 1.0, 8..=16384);
            changed |= number(ui, "model seed", seed, 1.0, 0..=u64::MAX);
        }
        Some(ModelSource::File(f)) => {
            ui.label(format!("true model: {}", f.path.display()));
        }
        None => {
            ui.label("no true model (observed data from a file)");
        }
    }
    changed |= number(ui, "cell depth (m)", &mut p.model.dz_m, 0.1, 0.1..=1000.0);
    changed |= number(ui, "cell width (m)", &mut p.model.dx_m, 0.1, 0.1..=1000.0);
    changed
}

fn acquisition(ui: &mut Ui, a: &mut AcquisitionConfig) -> bool {
    ui.strong("Acquisition");
    match a {
        AcquisitionConfig::Lines(l) => {
            let mut changed = number(ui, "shots", &mut l.shots, 1.0, 1..=100_000);
            changed |= number(
                ui,
                "first source (cell)",
                &mut l.first_source,
                1.0,
                0..=16384,
            );
            changed |= number(
                ui,
                "source spacing (cells)",
                &mut l.source_spacing,
                1.0,
                0..=16384,
            );
            changed |= number(
                ui,
                "source depth (cell)",
                &mut l.source_depth,
                1.0,
                0..=4096,
            );
            changed |= number(
                ui,
                "receivers per shot",
                &mut l.receivers_per_shot,
                1.0,
                1..=100_000,
            );
            changed |= number(
                ui,
                "first receiver (cell)",
                &mut l.first_receiver,
                1.0,
                0..=16384,
            );
            changed |= number(
                ui,
                "receiver spacing (cells)",
                &mut l.receiver_spacing,
                1.0,
                0..=16384,
            );
            changed |= number(
                ui,
                "receiver depth (cell)",
                &mut l.receiver_depth,
                1.0,
                0..=4096,
            );
            changed
        }
        AcquisitionConfig::Files { sources, receivers } => {
            ui.label(format!(
                "cells from files: sources {}, receivers {}",
                sources.display(),
                receivers.display()
            ));
            false
        }
    }
}

fn wave(ui: &mut Ui, p: &mut FwiPreset) -> bool {
    ui.strong("Wavelet and propagator");
    let mut changed = match &mut p.wavelet {
        WaveletConfig::Ricker { freq_hz, .. } => {
            number(ui, "Ricker frequency (Hz)", freq_hz, 0.1, 0.1..=1000.0)
        }
        WaveletConfig::File { path, freq_hz } => {
            ui.label(format!("wavelet from {}", path.display()));
            number(ui, "frequency (Hz)", freq_hz, 0.1, 0.1..=1000.0)
        }
    };
    let w = &mut p.wave;
    changed |= combo(
        ui,
        "accuracy",
        &mut w.accuracy,
        &[
            (Accuracy::Two, "2"),
            (Accuracy::Four, "4"),
            (Accuracy::Six, "6"),
            (Accuracy::Eight, "8"),
        ],
    );
    match &mut w.pml_width {
        PmlWidth::Uniform(width) => {
            changed |= number(ui, "PML width (cells)", width, 1.0, 0..=1000);
        }
        PmlWidth::Faces(f) => {
            ui.label(format!("PML widths {f:?} (top, bottom, left, right)"));
        }
    }
    changed |= number(ui, "time samples", &mut w.nt, 1.0, 2..=1_000_000);
    changed |= number(ui, "sample interval (s)", &mut w.dt_s, 0.0001, 1e-6..=1.0);
    changed
}

fn inversion(ui: &mut Ui, p: &mut FwiPreset) -> bool {
    ui.strong("Inversion");
    let f = &mut p.fwi;
    let mut changed = number(ui, "epochs", &mut f.epochs, 1.0, 1..=100_000);
    changed |= number(ui, "shots per epoch", &mut f.batch_size, 1.0, 1..=100_000);
    changed |= number(
        ui,
        "learning rate (m/s)",
        &mut f.learning_rate,
        0.1,
        1e-6..=1e5,
    );
    if !f.stages.is_empty() {
        let stages: Vec<String> = f
            .stages
            .iter()
            .map(|s| format!("{} Hz × {}", s.cutoff_hz, s.epochs))
            .collect();
        ui.label(format!("frequency stages: {}", stages.join(", ")));
    }
    changed
}
