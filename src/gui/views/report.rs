//! Timing: the report of the run on screen — a local run, or a remote one once its files are
//! copied here — as the figures `tessera report` draws ([`scaling::run_figures`], one function for
//! both), rendered to images on a helper thread and shown as textures, with each rank's device and
//! its memory (peak of total, and the estimate the job was admitted with) for a run on a GPU; and
//! "Export report", which
//! writes `report.html` and its PNG files into the run folder (or a typed folder) on a helper
//! thread and says where in the window.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError, channel};

use egui::{ColorImage, TextureHandle, TextureOptions, Ui};

use super::{Place, View};
use crate::gui::Workbench;
use crate::job::RankDeviceUse;
use crate::scaling::{self, Run, RunMetrics};

/// Figures drawn off the UI thread: (stem, caption, width, height, RGB bytes), and the ranks'
/// devices of a run on a GPU.
type Drawn = (
    Vec<(String, String, usize, usize, Vec<u8>)>,
    Vec<RankDeviceUse>,
);

#[derive(Default)]
pub struct ReportView {
    /// The run whose figures are drawn or being drawn.
    folder: Option<PathBuf>,
    drawing: Option<Receiver<Result<Drawn, String>>>,
    figures: Vec<(String, String, TextureHandle)>,
    /// The ranks' devices of the run on screen (empty for a CPU run).
    devices: Vec<RankDeviceUse>,
    error: Option<String>,
    /// Typed destination of the export; empty: the run folder.
    export_to: String,
    exporting: Option<Receiver<Result<PathBuf, String>>>,
    /// The last export's outcome: the page written, or why not.
    exported: Option<Result<PathBuf, String>>,
}

/// The figures of the run in `folder`, as `tessera report` draws them.
fn draw(folder: &Path) -> Result<Drawn, String> {
    let metrics = RunMetrics::load(folder).map_err(|e| e.to_string())?;
    let devices = metrics.devices.clone();
    let run = Run {
        config: scaling::Configuration {
            size: None,
            ranks: metrics.world_size,
            threads: None,
        },
        metrics,
        workload: None,
    };
    let figures = scaling::run_figures(std::slice::from_ref(&run)).map_err(|e| e.to_string())?;
    let figures = figures
        .into_iter()
        .map(|(stem, caption, image)| {
            let (w, h) = (image.width as usize, image.height as usize);
            (stem, caption, w, h, image.data)
        })
        .collect();
    Ok((figures, devices))
}

/// One row per rank of a run on a GPU: the device, the most its buffers held of the device's
/// memory, and the estimate the job was admitted with.
fn device_rows(devices: &[RankDeviceUse]) -> Vec<[String; 4]> {
    let human = crate::error::human_bytes;
    devices
        .iter()
        .map(|d| {
            [
                format!("rank {}", d.rank),
                format!("{} ({})", d.name, d.device),
                format!("{} of {}", human(d.peak_bytes), human(d.total_bytes)),
                human(d.estimated_bytes),
            ]
        })
        .collect()
}

impl ReportView {
    /// Starts drawing the figures of `folder` (or clears them without a run on screen).
    fn show(&mut self, folder: Option<PathBuf>, wake: impl Fn() + Send + 'static) {
        self.figures.clear();
        self.devices.clear();
        self.error = None;
        self.exported = None;
        self.drawing = None;
        self.folder = folder.clone();
        let Some(folder) = folder else { return };
        let (tx, rx) = channel();
        let spawned = std::thread::Builder::new()
            .name("timing-report".into())
            .spawn(move || {
                let _ = tx.send(draw(&folder));
                wake();
            });
        match spawned {
            Ok(_) => self.drawing = Some(rx),
            Err(e) => self.error = Some(format!("cannot start drawing the figures: {e}")),
        }
    }

    fn poll(&mut self, ctx: &egui::Context) {
        if let Some(rx) = &self.drawing {
            match rx.try_recv() {
                Ok(Ok((drawn, devices))) => {
                    self.devices = devices;
                    self.figures = drawn
                        .into_iter()
                        .map(|(stem, caption, w, h, rgb)| {
                            let image = ColorImage::from_rgb([w, h], &rgb);
                            let texture = ctx.load_texture(
                                format!("timing-{stem}"),
                                image,
                                TextureOptions::LINEAR,
                            );
                            (stem, caption, texture)
                        })
                        .collect();
                    self.drawing = None;
                }
                Ok(Err(e)) => {
                    self.error = Some(e);
                    self.drawing = None;
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    self.error = Some("drawing the figures stopped unexpectedly".into());
                    self.drawing = None;
                }
            }
        }
        if let Some(rx) = &self.exporting {
            match rx.try_recv() {
                Ok(done) => {
                    self.exported = Some(done);
                    self.exporting = None;
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    self.exported = Some(Err("the export stopped unexpectedly".into()));
                    self.exporting = None;
                }
            }
        }
    }

    /// Writes the report of the run on screen into the typed folder or the run folder.
    fn export(&mut self, folder: PathBuf, wake: impl Fn() + Send + 'static) {
        let typed = self.export_to.trim();
        let dest = match typed.is_empty() {
            true => folder.clone(),
            false => PathBuf::from(typed),
        };
        let (tx, rx) = channel();
        let spawned = std::thread::Builder::new()
            .name("export-report".into())
            .spawn(move || {
                let _ =
                    tx.send(scaling::write_run_report(&folder, &dest).map_err(|e| e.to_string()));
                wake();
            });
        match spawned {
            Ok(_) => {
                self.exported = None;
                self.exporting = Some(rx);
            }
            Err(e) => self.exported = Some(Err(format!("cannot start the export: {e}"))),
        }
    }
}

impl View for ReportView {
    fn title(&self) -> &'static str {
        "Timing"
    }

    fn place(&self) -> Place {
        Place::Tab("Timing")
    }

    fn applies(&self, wb: &Workbench) -> bool {
        wb.doc.is_imaging()
    }

    fn ui(&mut self, ui: &mut Ui, wb: &mut Workbench) {
        let shown = wb.runs.shown.clone();
        if shown != self.folder {
            self.show(shown, wb.waker());
        }
        self.poll(ui.ctx());
        let Some(folder) = self.folder.clone() else {
            ui.label("no finished run on screen: run one, or reopen one in Runs");
            return;
        };
        ui.horizontal(|ui| {
            ui.label(format!("run {}", folder.display()));
            if self.drawing.is_some() {
                ui.spinner();
                ui.label("drawing the figures…");
            }
        });
        ui.horizontal(|ui| {
            ui.add(
                egui::TextEdit::singleline(&mut self.export_to)
                    .hint_text("report folder (empty: the run folder)")
                    .desired_width(320.0),
            );
            let busy = self.exporting.is_some();
            let button = ui.add_enabled(!busy, egui::Button::new("Export report"));
            if button.clicked() {
                self.export(folder.clone(), wb.waker());
            }
            if busy {
                ui.spinner();
            }
        });
        match &self.exported {
            Some(Ok(page)) => {
                ui.label(format!("report written: {}", page.display()));
            }
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("export failed: {e}"));
            }
            None => {}
        }
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("no figures: {e}"));
            return;
        }
        if !self.devices.is_empty() {
            ui.strong("Device memory per rank");
            egui::Grid::new("device memory")
                .striped(true)
                .show(ui, |ui| {
                    for h in ["rank", "device", "peak of total", "estimate"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for row in device_rows(&self.devices) {
                        for cell in row {
                            ui.label(cell);
                        }
                        ui.end_row();
                    }
                });
            ui.add_space(6.0);
        }
        if !self.figures.is_empty() {
            ui.label(format!("{} figures", self.figures.len()));
        }
        for (stem, caption, texture) in &self.figures {
            let size = texture.size_vec2();
            let scale = (ui.available_width() / size.x).min(1.0);
            ui.add(egui::Image::new((texture.id(), size * scale)).alt_text(stem.clone()));
            ui.small(caption);
            ui.add_space(6.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_rows_name_the_device_and_its_memory() {
        let rows = device_rows(&[RankDeviceUse {
            rank: 1,
            name: "NVIDIA H100 80GB HBM3".into(),
            device: "cuda:0".into(),
            total_bytes: 80 << 30,
            peak_bytes: 3 << 20,
            estimated_bytes: 5 << 20,
        }]);
        let h = crate::error::human_bytes;
        assert_eq!(
            rows,
            vec![[
                "rank 1".to_string(),
                "NVIDIA H100 80GB HBM3 (cuda:0)".to_string(),
                format!("{} of {}", h(3 << 20), h(80 << 30)),
                h(5 << 20),
            ]]
        );
    }
}
