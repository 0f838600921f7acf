//! Choosing files: a small window with a typed path (always there), the system's file dialog behind
//! **Browse…** (rfd, awaited on a helper thread and polled each frame), and files dropped onto the
//! window. Where the system has no file dialog (no xdg-desktop-portal on the session bus, no
//! zenity), the window says so instead of a dialog silently not appearing.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};

use egui::Ui;

use super::preview::Slot;
use super::widgets::ERROR_COLOR;

/// What a chosen file is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DialogKind {
    OpenData,
    /// The measurement of operator `i`.
    OpenMeasurement(usize),
    OpenPreset,
    SavePreset,
    /// A pane's image as PNG.
    ExportPng(Slot),
    /// The line profile or the box's statistics as CSV.
    ExportCsv(CsvExport),
}

/// Which table a CSV export writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CsvExport {
    /// The line profile of every pane, per channel.
    Profile,
    /// The statistics box: per pane and channel, and PSNR/SSIM.
    Roi,
}

impl DialogKind {
    fn title(self) -> &'static str {
        match self {
            DialogKind::OpenData => "Open image or volume",
            DialogKind::OpenMeasurement(_) => "Open measurement",
            DialogKind::OpenPreset => "Open preset",
            DialogKind::SavePreset => "Save preset",
            DialogKind::ExportPng(_) => "Export view as PNG",
            DialogKind::ExportCsv(CsvExport::Profile) => "Export line profile as CSV",
            DialogKind::ExportCsv(CsvExport::Roi) => "Export box statistics as CSV",
        }
    }

    fn saves(self) -> bool {
        matches!(
            self,
            DialogKind::SavePreset | DialogKind::ExportPng(_) | DialogKind::ExportCsv(_)
        )
    }

    fn extensions(self) -> (&'static str, &'static [&'static str]) {
        match self {
            DialogKind::OpenMeasurement(_) => {
                ("measurements", &["npy", "nii", "gz", "tif", "tiff", "png"])
            }
            DialogKind::OpenData => (
                "images and volumes",
                &["png", "jpg", "jpeg", "tif", "tiff", "npy", "nii", "gz"],
            ),
            DialogKind::OpenPreset | DialogKind::SavePreset => ("preset", &["toml"]),
            DialogKind::ExportPng(_) => ("PNG image", &["png"]),
            DialogKind::ExportCsv(_) => ("CSV table", &["csv"]),
        }
    }
}

/// The open path window.
struct PathWindow {
    kind: DialogKind,
    text: String,
    note: Option<String>,
}

/// File choosing for the whole window (one at a time).
#[derive(Default)]
pub struct Dialogs {
    window: Option<PathWindow>,
    system: Option<Receiver<Option<PathBuf>>>,
}

/// Whether a system file dialog can appear: rfd asks xdg-desktop-portal over the session bus and
/// falls back to zenity.
pub fn system_dialog_available() -> bool {
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|v| !v.is_empty());
    let zenity = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("zenity").is_file()));
    bus || zenity
}

impl Dialogs {
    /// Opens the path window for `kind`, prefilled with `suggested` (a folder or a file name).
    pub fn open(&mut self, kind: DialogKind, suggested: Option<PathBuf>) {
        let text = suggested
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        self.window = Some(PathWindow {
            kind,
            text,
            note: None,
        });
        self.system = None;
    }

    pub fn is_open(&self) -> bool {
        self.window.is_some()
    }

    /// Draws the window; returns the chosen path when the user confirms one.
    pub fn ui(
        &mut self,
        ctx: &egui::Context,
        wake: impl Fn() + Send + 'static,
    ) -> Option<(DialogKind, PathBuf)> {
        let w = self.window.as_mut()?;
        if let Some(rx) = &self.system {
            match rx.try_recv() {
                Ok(Some(path)) => {
                    self.system = None;
                    let kind = w.kind;
                    self.window = None;
                    return Some((kind, path));
                }
                Ok(None) => {
                    self.system = None;
                    w.note = Some(
                        "The system file dialog returned no file: it was cancelled, or no file \
                         dialog service (xdg-desktop-portal or zenity) works here. Type the path \
                         instead, or drop the file onto the window."
                            .into(),
                    );
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.system = None,
            }
        }
        let mut open = true;
        let mut confirmed = false;
        let mut browse = false;
        let available = system_dialog_available();
        egui::Window::new(w.kind.title())
            .open(&mut open)
            .collapsible(false)
            .default_width(420.0)
            .show(ctx, |ui: &mut Ui| {
                let l = ui.label("path");
                let r = ui
                    .add(egui::TextEdit::singleline(&mut w.text).desired_width(400.0))
                    .labelled_by(l.id);
                if r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                    confirmed = true;
                }
                ui.horizontal(|ui| {
                    let verb = if w.kind.saves() { "Save" } else { "Open" };
                    confirmed |= ui.button(verb).clicked();
                    let b = ui.add_enabled(
                        available && self.system.is_none(),
                        egui::Button::new("Browse…"),
                    );
                    browse = b
                        .on_disabled_hover_text(
                            "no system file dialog here (xdg-desktop-portal or zenity): type the path",
                        )
                        .clicked();
                    if self.system.is_some() {
                        ui.spinner();
                    }
                });
                if !available {
                    ui.label("No system file dialog is available here: type the path, or drop a file onto the window.");
                } else if !w.kind.saves() {
                    ui.label("You can also drop a file onto the window.");
                }
                if let Some(n) = &w.note {
                    ui.colored_label(ERROR_COLOR, n);
                }
            });
        if browse {
            self.system = Some(system_dialog(w.kind, Path::new(w.text.trim()), wake));
        }
        if confirmed {
            let path = PathBuf::from(w.text.trim());
            if path.as_os_str().is_empty() || (!w.kind.saves() && !path.is_file()) {
                w.note = Some(format!("no such file: {}", path.display()));
            } else {
                let kind = w.kind;
                self.window = None;
                return Some((kind, path));
            }
        }
        if !open {
            self.window = None;
            self.system = None;
        }
        None
    }
}

/// Runs the system dialog on a helper thread, starting in `near`'s folder.
fn system_dialog(
    kind: DialogKind,
    near: &Path,
    wake: impl Fn() + Send + 'static,
) -> Receiver<Option<PathBuf>> {
    let (folder, name) = if near.is_dir() {
        (Some(near.to_path_buf()), None)
    } else {
        (
            near.parent().filter(|p| p.is_dir()).map(Path::to_path_buf),
            near.file_name().map(|n| n.to_string_lossy().into_owned()),
        )
    };
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("gui-dialog".into())
        .spawn(move || {
            let (what, extensions) = kind.extensions();
            let mut d = rfd::AsyncFileDialog::new().add_filter(what, extensions);
            if let Some(f) = folder {
                d = d.set_directory(f);
            }
            let picked = if kind.saves() {
                if let Some(n) = name {
                    d = d.set_file_name(n);
                }
                pollster::block_on(d.save_file())
            } else {
                pollster::block_on(d.pick_file())
            };
            let _ = tx.send(picked.map(|h| h.path().to_path_buf()));
            wake();
        })
        .expect("spawning a thread");
    rx
}

/// What a file dropped onto the window is taken for, by its extension: a preset, or an image or
/// volume for the Data panel.
pub fn dropped_kind(path: &Path) -> Option<DialogKind> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    if name.ends_with(".toml") {
        return Some(DialogKind::OpenPreset);
    }
    let (_, images) = DialogKind::OpenData.extensions();
    images
        .iter()
        .any(|e| name.ends_with(&format!(".{e}")))
        .then_some(DialogKind::OpenData)
}
