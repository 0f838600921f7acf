//! The line profile: the values of every pane on screen along the line drawn with Shift+drag.

use egui::Ui;
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::{Place, View};
use crate::gui::Workbench;

pub struct ProfileView;

impl View for ProfileView {
    fn title(&self) -> &'static str {
        "Profile"
    }

    fn place(&self) -> Place {
        Place::Tab("Profile")
    }

    /// The line is drawn on the live view's panes only.
    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging() && wb.session.training.is_none()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        if wb.viewer.profile.is_none() {
            ui.label(
                "Shift+drag across an image to draw a line; its values in every pane show here.",
            );
            return;
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
