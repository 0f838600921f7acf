//! The central area: the image panes on top, and below them (in a resizable strip, so plots stay
//! in view) tabs of plots, the line profile and the run history. One file per view.
//!
//! An experiment kind with views of its own (shot gathers and a loss curve for wave inversion, a
//! training curve) adds a file with a [`View`] and one line in [`views`]; a view names the tab it
//! goes in (views of one tab are laid out side by side), and `applies` hides it where it means
//! nothing.

mod colour_bar;
mod curves;
mod display_menu;
mod fwi;
mod image_pane;
mod live;
mod profile;
mod report;
mod runs;
mod training;

use egui::Ui;

pub(crate) use live::all_panes;
#[cfg(test)]
pub(crate) use {display_menu::DISPLAY_ICON, live::FULL_ICON};

use super::Workbench;

/// Where a view is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The image area (fills what the tabs leave).
    Main,
    /// A tab of the strip below the images.
    Tab(&'static str),
}

/// One view of what the backend sent (or of runs on disk).
pub trait View {
    fn title(&self) -> &'static str;
    fn place(&self) -> Place;
    /// Whether the view concerns the experiment being edited or the run on screen.
    fn applies(&self, _wb: &Workbench) -> bool {
        true
    }
    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench);
}

/// The views of the central area.
pub fn views() -> Vec<Box<dyn View>> {
    vec![
        Box::new(live::LiveView),
        Box::new(curves::QualityView),
        Box::new(curves::TimingView),
        Box::new(profile::ProfileView::default()),
        Box::new(report::ReportView::default()),
        Box::new(fwi::FwiModelView),
        Box::new(fwi::FwiCurvesView),
        Box::new(fwi::FwiRanksView),
        Box::new(training::TrainCurvesView),
        Box::new(training::TrainRanksView),
        Box::new(training::DsnReconstructionsView::default()),
        // Last: a document opens on its own kind's first tab, not on the history.
        Box::new(runs::RunsView::default()),
    ]
}
