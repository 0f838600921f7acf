//! The menu bar above the top bar: File, Edit, Job and Help, each entry with its shortcut, and
//! the list of every shortcut (Help → Keyboard shortcuts…) — so shortcuts are found in the window,
//! not only in the docs.

use egui::Ui;

use super::Workbench;
use super::dialogs::DialogKind;
use super::preview::Slot;

/// Every shortcut of the window: keys and what they do (the Help window lists them).
pub const SHORTCUTS: &[(&str, &str)] = &[
    ("Ctrl+R", "run the experiment"),
    ("Ctrl+.  or  Escape", "stop the running job"),
    ("Ctrl+Z", "undo the last edit of the experiment"),
    ("Ctrl+Shift+Z  or  Ctrl+Y", "redo"),
    ("Page Up / Page Down", "next / previous slice of a volume"),
    ("Ctrl+E", "export the reconstruction pane as PNG"),
    (
        "scroll / drag / double-click",
        "zoom / pan / fit the panes (all together)",
    ),
    (
        "F (over a pane)",
        "that pane alone, full size; again: every pane",
    ),
    ("Shift+drag", "draw a line profile (Profile tab)"),
    ("Ctrl+drag", "draw a box: its statistics (Profile tab)"),
];

/// The menu bar.
pub fn menu_bar(ui: &mut Ui, wb: &mut Workbench) {
    egui::MenuBar::new().ui(ui, |ui| {
        ui.menu_button("File", |ui| {
            if ui.button("Open preset…").clicked() {
                wb.open_dialog(DialogKind::OpenPreset);
            }
            if ui.button("Save preset…").clicked() {
                wb.open_dialog(DialogKind::SavePreset);
            }
            if wb.doc.is_imaging() && ui.button("Open image…").clicked() {
                wb.open_dialog(DialogKind::OpenData);
            }
            let can_export = wb.viewer.shown.contains_key(&Slot::Reconstruction);
            if ui
                .add_enabled(
                    can_export,
                    egui::Button::new("Export reconstruction as PNG…").shortcut_text("Ctrl+E"),
                )
                .clicked()
            {
                wb.open_dialog(DialogKind::ExportPng(Slot::Reconstruction));
            }
        });
        ui.menu_button("Edit", |ui| {
            if ui
                .add_enabled(
                    wb.doc.can_undo(),
                    egui::Button::new("Undo").shortcut_text("Ctrl+Z"),
                )
                .clicked()
            {
                wb.undo();
            }
            if ui
                .add_enabled(
                    wb.doc.can_redo(),
                    egui::Button::new("Redo").shortcut_text("Ctrl+Shift+Z"),
                )
                .clicked()
            {
                wb.redo();
            }
        });
        ui.menu_button("Job", |ui| {
            let blocker = wb.run_blocker();
            let run = ui.add_enabled(
                blocker.is_none(),
                egui::Button::new("Run").shortcut_text("Ctrl+R"),
            );
            let run = match &blocker {
                Some(why) => run.on_disabled_hover_text(why.as_str()),
                None => run,
            };
            if run.clicked() {
                wb.run();
            }
            if ui
                .add_enabled(
                    wb.session.is_busy(),
                    egui::Button::new("Stop").shortcut_text("Ctrl+."),
                )
                .clicked()
            {
                wb.stop();
            }
        });
        ui.menu_button("Help", |ui| {
            if ui.button("Keyboard shortcuts…").clicked() {
                wb.shortcuts_open = true;
            }
        });
    });
}

/// The Keyboard shortcuts window.
pub fn shortcuts_window(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new("Keyboard shortcuts")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ctx, |ui| {
            egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
                for (keys, what) in SHORTCUTS {
                    ui.monospace(*keys);
                    ui.label(*what);
                    ui.end_row();
                }
            });
        });
}
