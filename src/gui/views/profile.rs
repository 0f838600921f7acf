//! The line profile: the values of every pane along the line drawn with Shift+drag.

use egui::Ui;
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::{Place, View};
use crate::gui::Workbench;
use crate::gui::preview::Slot;

pub struct ProfileView;

impl View for ProfileView {
    fn title(&self) -> &'static str {
        "Profile"
    }

    fn place(&self) -> Place {
        Place::Tab("Profile")
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        if wb.viewer.profile.is_none() {
            ui.label(
                "Shift+drag across an image to draw a line; its values in every pane show here.",
            );
            return;
        }
        let slots = [
            ("reconstruction", Slot::Reconstruction),
            ("ground truth", Slot::GroundTruth),
            ("image", Slot::Data),
            ("compared run", Slot::Compare),
            ("difference", Slot::Difference),
        ];
        Plot::new("profile")
            .height(ui.available_height().max(80.0))
            .allow_scroll(false)
            .legend(Legend::default())
            .x_axis_label("distance (px)")
            .y_axis_label("value")
            .show(ui, |p| {
                for (name, slot) in slots {
                    if let Some(points) = wb.viewer.profile_of(slot) {
                        p.line(Line::new(name, PlotPoints::from(points)));
                    }
                }
            });
    }
}
