//! The editor column: one collapsible panel per part of the experiment, each in its own file.
//!
//! A panel edits the [`Workbench`]'s document (the preset and its inputs) and says whether the
//! preset changed; the workbench then checks it again. An experiment kind with sections of its own
//! (a wave-physics model, a training set-up) adds a file with an [`EditorPanel`] and one line in
//! [`editor_panels`]; `applies` hides it for presets it does not concern.

mod algorithm;
mod data;
mod denoiser;
mod distribution;
mod fwi;
mod physics;
mod presets;
mod training;

use egui::Ui;

use super::Workbench;

/// One section of the editor column.
pub trait EditorPanel {
    /// The header (tests and screen readers find the panel by it).
    fn title(&self) -> &'static str;
    /// Whether the panel concerns the experiment being edited.
    fn applies(&self, _wb: &Workbench) -> bool {
        true
    }
    /// Whether the panel starts open (settings most experiments leave alone start closed).
    fn default_open(&self) -> bool {
        true
    }
    /// Draws the panel; returns whether the preset changed.
    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) -> bool;
}

/// The panels of the editor column, top to bottom.
pub fn editor_panels() -> Vec<Box<dyn EditorPanel>> {
    vec![
        Box::new(presets::PresetsPanel),
        Box::new(data::DataPanel),
        Box::new(physics::PhysicsPanel::default()),
        Box::new(denoiser::DenoiserPanel),
        Box::new(algorithm::AlgorithmPanel),
        Box::new(distribution::DistributionPanel),
        Box::new(fwi::FwiPanel),
        Box::new(training::TrainingPanel),
    ]
}

/// Shows the document's problem under the editor it concerns (`section`: a field or its prefix).
pub(crate) fn problem_here(ui: &mut Ui, wb: &Workbench, section: &str) {
    if let Some(p) = wb.doc.problem.as_ref().filter(|p| p.concerns(section)) {
        super::widgets::field_error(ui, &p.message);
    }
}
