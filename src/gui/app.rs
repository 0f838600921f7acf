//! The workbench window: the state every panel and view works on, the frame's layout, and the
//! actions they share (Run, Stop, open a preset or a file, show a run).
//!
//! The UI thread only draws and sends: a run is a [`Request::Submit`] of the preset's TOML; results
//! arrive as events through the [`Pump`], which maps images to textures off this thread. The
//! editor column is a list of [`EditorPanel`]s, the central area a list of [`View`]s (one file
//! each, in `panels/` and `views/`); the backend link lives in [`Connection`], the edited
//! experiment in [`Document`], what the panes show in [`Viewer`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use egui::{Key, KeyboardShortcut, Modifiers, Ui};

use super::backend::{Incoming, Starter};
use super::connection::{Change, Connecting, Connection};
use super::dialogs::{DialogKind, Dialogs, dropped_kind};
use super::document::{Document, Loaded};
use super::fetch::{RemoteFetch, Step};
use super::history::{Purpose, RunArrays, RunHistory};
use super::panels::{EditorPanel, editor_panels};
use super::preview::{Display, Pump, PumpMsg, PumpOut, Slot};
use super::session::{JobState, Session};
use super::settings::AppState;
use super::viewer::Viewer;
use super::views::{Place, View, views};
use crate::preset::{LoadedPreset, Preset};
use crate::protocol::{JobId, LogLevel, PatchMap, Request};

/// A callback for helper threads that asks the window for a repaint (once it has a context).
fn repaint_waker(ctx: &Arc<OnceLock<egui::Context>>) -> impl Fn() + Clone + Send + Sync + 'static {
    let ctx = ctx.clone();
    move || {
        if let Some(c) = ctx.get() {
            c.request_repaint();
        }
    }
}

const RUN: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::R);
const STOP: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Period);
const EXPORT: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::E);

/// How the workbench starts.
pub struct WorkbenchOptions {
    /// Starts a backend with N ranks (at start-up and when the user asks for a new one).
    pub starter: Starter,
    /// Start a backend on the first frame.
    pub start_backend: bool,
    /// The preset to open (default: the bundled `quick`).
    pub preset: Option<LoadedPreset>,
    /// Where the app state is persisted (None: not persisted, e.g. in tests).
    pub state_path: Option<PathBuf>,
    /// The app state to start from (loaded from `state_path` by [`super::run_workbench`]).
    pub state: AppState,
    /// Where the local backend writes its runs (listed in the run history); None: only this
    /// window's runs are listed.
    pub output_root: Option<PathBuf>,
}

/// The workbench.
pub struct Workbench {
    /// The experiment being edited and its inputs.
    pub doc: Document,
    /// What the backend said (job state, iterations, log).
    pub session: Session,
    /// Persisted settings.
    pub app_state: AppState,
    /// The runs on disk and of this window.
    pub runs: RunHistory,
    pub(crate) conn: Connection,
    pub(crate) viewer: Viewer,
    pub(crate) pump: Pump,
    dialogs: Dialogs,
    /// The Attach… window: open, and the token typed into it (kept only while it is open).
    pub(crate) attach_open: bool,
    pub(crate) attach_token: String,
    /// After a remote attach, ask the server to replay and stream its running job.
    resume_on_attach: bool,
    start_pending: bool,
    /// The tab of the strip below the images.
    tab: &'static str,
    ctx: Arc<OnceLock<egui::Context>>,
    state_path: Option<PathBuf>,
    panels: Vec<Box<dyn EditorPanel>>,
    views: Vec<Box<dyn View>>,
    /// Remote runs whose files are being copied here (see [`crate::gui::fetch`]).
    fetching: Vec<RemoteFetch>,
}

impl Workbench {
    pub fn new(options: WorkbenchOptions) -> Workbench {
        let ctx: Arc<OnceLock<egui::Context>> = Arc::default();
        let pump = Pump::start(repaint_waker(&ctx));
        let loaded = options.preset.unwrap_or_else(|| {
            Preset::load("quick", &[]).expect("the bundled quick preset is valid")
        });
        let mut wb = Workbench {
            doc: Document::new(loaded, options.state.ranks),
            session: Session::default(),
            app_state: options.state,
            runs: RunHistory::new(options.output_root),
            conn: Connection::new(options.starter),
            viewer: Viewer::new(),
            pump,
            dialogs: Dialogs::default(),
            attach_open: false,
            attach_token: String::new(),
            resume_on_attach: false,
            start_pending: options.start_backend,
            tab: "Plots",
            ctx,
            state_path: options.state_path,
            panels: editor_panels(),
            views: views(),
            fetching: Vec::new(),
        };
        wb.set_default_display(wb.app_state.display);
        wb.rescan_runs();
        wb
    }

    /// Draws one frame.
    pub fn ui(&mut self, ui: &mut Ui) {
        let ctx = ui.ctx().clone();
        self.ctx.get_or_init(|| {
            super::fonts::install(&ctx);
            ctx.clone()
        });
        if std::mem::take(&mut self.start_pending) {
            self.start_backend();
        }
        self.poll();
        self.shortcuts(&ctx);
        if let Some(r) = ctx.input(|i| i.viewport().inner_rect) {
            self.app_state.window_size = [r.width(), r.height()];
        }

        egui::Panel::top("top").show(ui, |ui| super::top_bar::top_bar(ui, self));
        super::top_bar::attach_window(&ctx, self);
        if let Some((kind, path)) = self.dialogs.ui(&ctx, self.waker()) {
            self.chosen(kind, &path);
        }
        egui::Panel::bottom("log")
            .resizable(true)
            .default_size(110.0)
            .show(ui, |ui| super::top_bar::log_panel(ui, self));
        egui::Panel::left("editors")
            .resizable(true)
            .default_size(330.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.editor_column(ui));
            });
        egui::CentralPanel::default().show(ui, |ui| self.central(ui));
    }

    fn editor_column(&mut self, ui: &mut Ui) {
        let mut panels = std::mem::take(&mut self.panels);
        let mut changed = false;
        for p in panels.iter_mut() {
            if !p.applies(self) {
                continue;
            }
            egui::CollapsingHeader::new(p.title())
                .default_open(p.default_open())
                .show(ui, |ui| changed |= p.ui(ui, self));
        }
        self.panels = panels;
        if changed {
            self.edited();
        }
        if let Some(p) = &self.doc.problem {
            super::widgets::field_error(ui, &p.message);
        }
    }

    fn central(&mut self, ui: &mut Ui) {
        if let Some(err) = self.session.error.clone() {
            egui::Frame::new()
                .fill(egui::Color32::from_rgb(90, 25, 25))
                .inner_margin(6.0)
                .show(ui, |ui| {
                    ui.horizontal_wrapped(|ui| {
                        ui.label(
                            egui::RichText::new(format!("Error: {err}"))
                                .color(egui::Color32::WHITE),
                        );
                        if !self.conn.is_live()
                            && self.conn.connecting().is_none()
                            && ui.button("Start a new backend").clicked()
                        {
                            self.start_backend();
                        }
                        if ui.button("Dismiss").clicked() {
                            self.session.error = None;
                        }
                    });
                });
        }
        let mut views = std::mem::take(&mut self.views);
        let mut tabs: Vec<&'static str> = Vec::new();
        for v in views.iter().filter(|v| v.applies(self)) {
            if let Place::Tab(t) = v.place()
                && !tabs.contains(&t)
            {
                tabs.push(t);
            }
        }
        if !tabs.contains(&self.tab) {
            self.tab = tabs.first().copied().unwrap_or("");
        }
        egui::Panel::bottom("plots")
            .resizable(true)
            .default_size(300.0)
            .show(ui, |ui| {
                ui.horizontal(|ui| {
                    for t in &tabs {
                        ui.selectable_value(&mut self.tab, t, *t);
                    }
                });
                ui.separator();
                let here: Vec<usize> = views
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.place() == Place::Tab(self.tab) && v.applies(self))
                    .map(|(i, _)| i)
                    .collect();
                let width = ui.available_width() / here.len().max(1) as f32 - 8.0;
                // Content taller than the strip scrolls inside it: a resizable panel would otherwise
                // grow to its tallest frame and keep that size, so the split would depend on history.
                egui::ScrollArea::vertical()
                    .auto_shrink([false, false])
                    .show(ui, |ui| {
                        ui.horizontal_top(|ui| {
                            for i in here {
                                ui.vertical(|ui| {
                                    ui.set_width(width);
                                    views[i].ui(ui, self);
                                });
                            }
                        });
                    });
            });
        for v in views.iter_mut().filter(|v| v.place() == Place::Main) {
            if v.applies(self) {
                v.ui(ui, self);
            }
        }
        self.views = views;
    }

    /// Ctrl+R runs, Ctrl+. or Escape stops, Page Up/Down move through slices, Ctrl+E exports the
    /// reconstruction pane; files dropped onto the window open as presets or images.
    fn shortcuts(&mut self, ctx: &egui::Context) {
        let text_focus = ctx.memory(|m| m.focused().is_some());
        if ctx.input_mut(|i| i.consume_shortcut(&RUN)) && self.run_blocker().is_none() {
            self.run();
        }
        let escape =
            !text_focus && !self.dialogs.is_open() && ctx.input(|i| i.key_pressed(Key::Escape));
        if (ctx.input_mut(|i| i.consume_shortcut(&STOP)) || escape) && self.session.is_busy() {
            self.stop();
        }
        if ctx.input_mut(|i| i.consume_shortcut(&EXPORT))
            && self.viewer.shown.contains_key(&Slot::Reconstruction)
        {
            self.open_dialog(DialogKind::ExportPng(Slot::Reconstruction));
        }
        if !text_focus {
            let step = ctx.input(|i| {
                i.key_pressed(Key::PageUp) as isize - i.key_pressed(Key::PageDown) as isize
            });
            if step != 0 && self.viewer.step_slice(step) {
                self.reslice();
            }
        }
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        for path in dropped {
            match dropped_kind(&path) {
                Some(kind) => self.chosen(kind, &path),
                None => self.session.log(
                    LogLevel::Error,
                    format!(
                        "dropped file not opened: not a preset (.toml) nor an image or volume: {}",
                        path.display()
                    ),
                ),
            }
        }
    }

    // ---- backend ------------------------------------------------------------------------------

    /// Starts a local backend on a helper thread; it replaces the current one once it is up.
    pub fn start_backend(&mut self) {
        let ranks = self.app_state.ranks.max(1);
        if self.conn.start_local(ranks, self.waker()) {
            self.resume_on_attach = false;
            self.session.log(
                LogLevel::Info,
                format!("starting a backend with {ranks} rank(s)…"),
            );
        }
    }

    /// Connects to a running `tessera serve` (remote attach) on a helper thread, then resumes the
    /// stream of its running job, if any. The current backend stays until the new one connects.
    pub fn attach_remote(&mut self, address: &str, token: Option<String>) {
        let addr = match address.trim().parse::<crate::protocol::BackendAddr>() {
            Ok(a) => a,
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("attach: `{address}`: {e}"));
                return;
            }
        };
        self.app_state.attach_address = address.trim().to_string();
        if self.conn.attach(addr, token, self.waker()) {
            self.resume_on_attach = true;
            self.session
                .log(LogLevel::Info, format!("attaching to {address}…"));
        }
    }

    /// Whether a backend is being started or attached.
    pub fn backend_starting(&self) -> bool {
        self.conn.connecting().is_some()
    }

    /// Whether a backend is attached and alive.
    pub fn has_backend(&self) -> bool {
        self.conn.is_live()
    }

    /// The live backend's label (e.g. `local backend (outputs in …)`).
    pub fn backend_label(&self) -> &str {
        self.conn.label()
    }

    /// Uses `link` as the backend from now on (tests hand one in directly).
    pub fn attach(&mut self, link: super::backend::Link) {
        self.conn.set_link(link, false, self.waker());
        self.connected(false);
    }

    fn connected(&mut self, remote: bool) {
        // Copies from the previous backend cannot complete (their staging folders go with them).
        self.fetching.clear();
        self.session.connected = true;
        self.session.backend = None;
        self.session
            .log(LogLevel::Info, format!("backend: {}", self.conn.label()));
        if self.doc.remote != remote {
            self.doc.remote = remote;
            self.edited();
        }
        self.send(Request::Status);
        if std::mem::take(&mut self.resume_on_attach) {
            self.session.adopt_next_job = true;
            self.send(Request::Attach { job: None });
        }
    }

    fn send(&mut self, request: Request) -> bool {
        match self.conn.send(request) {
            Ok(()) => true,
            Err(e) if !self.conn.is_live() && self.session.connected => {
                self.session.disconnected(&e);
                false
            }
            Err(e) => {
                self.session.log(LogLevel::Error, e);
                false
            }
        }
    }

    /// Why Run is not possible now (None when it is).
    pub fn run_blocker(&self) -> Option<String> {
        if self.session.is_busy() {
            return Some("a job is running".into());
        }
        if !self.conn.is_live() {
            return Some("no backend: start one (or attach to one)".into());
        }
        self.doc.run_blocker()
    }

    /// Submits the edited preset.
    pub fn run(&mut self) {
        if let Some(why) = self.doc.run_blocker() {
            self.session
                .log(LogLevel::Error, format!("cannot run this preset: {why}"));
            return;
        }
        let (toml, inline, files) = match self.doc.submission() {
            Ok(t) => t,
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("cannot run: {e}"));
                return;
            }
        };
        let sent = self.send(Request::Submit {
            preset_toml: toml,
            inline,
            files,
            preview_max_side: super::preview::MAX_TEXTURE_SIDE as u32,
        });
        if sent {
            self.session.submitted();
            self.viewer.clear_run();
            self.runs.shown = None;
            self.show_data_as_truth();
        }
    }

    /// Continues the stopped denoiser training on screen from its checkpoint, with the edited
    /// training preset (the backend refuses one that would compute other numbers, naming the
    /// field). The run goes into a new folder; the stopped one stays as it was.
    pub fn resume(&mut self) {
        let Some(run_dir) = self.session.resumable_run().map(Path::to_path_buf) else {
            return;
        };
        if let Some(why) = self.run_blocker() {
            self.session
                .log(LogLevel::Error, format!("cannot resume: {why}"));
            return;
        }
        let preset_toml = match self.doc.submission() {
            Ok((toml, ..)) => toml,
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("cannot resume: {e}"));
                return;
            }
        };
        let sent = self.send(Request::Resume {
            preset_toml,
            run_dir: run_dir.clone(),
            preview_max_side: super::preview::MAX_TEXTURE_SIDE as u32,
        });
        if sent {
            self.session.submitted();
            self.session.log(
                LogLevel::Info,
                format!("resuming the training stopped in {}", run_dir.display()),
            );
            self.runs.shown = None;
        }
    }

    /// Asks the backend to stop the current job; its final event says whether it stopped.
    pub fn stop(&mut self) {
        if let JobState::Running { job } = *self.session.state()
            && self.send(Request::Cancel { job })
        {
            self.session.stopping();
            self.session
                .log(LogLevel::Info, format!("stopping job {job}…"));
        }
    }

    /// The job whose events are drawn (for tests).
    pub fn current_job(&self) -> Option<JobId> {
        self.session.current_job()
    }

    // ---- the document -------------------------------------------------------------------------

    /// Opens a loaded preset in the editors; what the previous run showed is cleared.
    pub fn set_preset(&mut self, loaded: LoadedPreset) {
        let wake = self.waker();
        self.doc.set_preset(loaded, wake);
        self.opened();
    }

    /// Opens a full-waveform inversion preset (its editors and views replace the imaging ones);
    /// what the previous run showed is cleared.
    pub fn set_fwi_preset(&mut self, preset: crate::fwi::FwiPreset, base: &Path, origin: String) {
        self.doc.set_fwi(preset, base, origin);
        self.opened();
    }

    /// Opens a training experiment (a denoiser or a Multi-DSN; its editors and views replace the
    /// imaging ones); what the previous run showed is cleared.
    pub fn set_training(
        &mut self,
        training: super::document::Training,
        base: &Path,
        origin: String,
    ) {
        self.doc.set_training(training, base, origin);
        self.opened();
    }

    /// Another experiment was opened: forget what the last run showed (unless one is running).
    fn opened(&mut self) {
        if !self.session.is_busy() {
            self.session.clear_run();
            self.viewer.clear_run();
            self.viewer.clear_measurements();
            self.runs.shown = None;
        }
        self.edited();
    }

    /// After any edit: check again, and keep the views in step with the preset.
    pub fn edited(&mut self) {
        self.doc.world = self
            .session
            .backend
            .as_ref()
            .map(|b| b.world_size)
            .unwrap_or(self.app_state.ranks)
            .max(1);
        self.doc.edited();
    }

    /// The patch map to draw now: the backend's during and after a run, else planned here.
    pub fn patch_map(&mut self) -> Option<Result<Arc<PatchMap>, String>> {
        if let Some(m) = &self.session.patch_map {
            return Some(Ok(m.clone()));
        }
        self.doc.patch_map()
    }

    /// Why the edited preset cannot run, if it cannot.
    pub fn preset_problem(&self) -> Option<&str> {
        self.doc.problem.as_ref().map(|p| p.message.as_str())
    }

    /// Loads a preset file (from the dialog, a drop or the recent list); errors go to the log.
    pub fn open_preset_path(&mut self, path: &Path) {
        let name = path.to_string_lossy();
        // Training, then wave inversion, then imaging: each kind is told by its own sections.
        let opened = super::document::Training::load(path).and_then(|training| {
            if let Some((t, base)) = training {
                self.set_training(t, &base, path.display().to_string());
                return Ok("training preset");
            }
            if let Some((p, base, origin)) = crate::fwi::FwiPreset::load(&name, &[])? {
                self.set_fwi_preset(p, &base, origin);
                return Ok("FWI preset");
            }
            self.set_preset(Preset::load(&name, &[])?);
            Ok("preset")
        });
        match opened {
            Ok(kind) => {
                self.app_state.remember(path);
                self.remember_folder(path);
                self.session
                    .log(LogLevel::Info, format!("opened {kind} {}", path.display()));
            }
            Err(e) => self
                .session
                .log(LogLevel::Error, format!("could not open the preset: {e}")),
        }
    }

    /// Writes the preset as TOML (atomically), the file `tessera run` takes.
    pub fn save_preset_path(&mut self, path: &Path) {
        let result = self
            .doc
            .checked_toml()
            .and_then(|t| crate::io::write_atomic(path, t.as_bytes()));
        match result {
            Ok(()) => {
                self.app_state.remember(path);
                self.remember_folder(path);
                self.doc.origin = path.display().to_string();
                self.session
                    .log(LogLevel::Info, format!("saved preset {}", path.display()));
            }
            Err(e) => self
                .session
                .log(LogLevel::Error, format!("could not save the preset: {e}")),
        }
    }

    /// Uses an image or volume file as the ground truth.
    pub fn open_data_path(&mut self, path: &Path) {
        self.remember_folder(path);
        self.doc.open_data_path(path);
    }

    /// Uses `path` as the measurement of operator `i` (switching to loaded measurements).
    pub fn open_measurement_path(&mut self, i: usize, path: &Path) {
        self.remember_folder(path);
        self.viewer.shown.remove(&Slot::Measurement(i));
        self.viewer.arrays.remove(&Slot::Measurement(i));
        let wake = self.waker();
        self.doc.open_measurement_path(i, path, wake);
    }

    /// Simulated (`false`) or loaded (`true`) measurements.
    pub fn set_measurements_loaded(&mut self, loaded: bool) {
        self.doc.set_measurements_loaded(loaded);
        if !loaded {
            self.viewer.clear_measurements();
        }
    }

    /// Whether measurement files are still being read.
    pub fn measurements_loading(&self) -> bool {
        self.doc.measured.loading()
    }

    /// Whether the Data panel's image is still loading.
    pub fn data_loading(&self) -> bool {
        self.doc.data.is_loading()
    }

    /// The error of the last Data panel load, if it failed.
    pub fn data_error(&self) -> Option<&str> {
        self.doc.data.error.as_deref()
    }

    /// Opens the path window for a file of `kind`.
    pub fn open_dialog(&mut self, kind: DialogKind) {
        let folder = self.app_state.last_folder.clone();
        let suggested = match kind {
            DialogKind::SavePreset => Some(
                folder
                    .unwrap_or_default()
                    .join(format!("{}.toml", self.doc.name())),
            ),
            DialogKind::ExportPng(slot) => Some(folder.unwrap_or_default().join(format!(
                "{}-{}.png",
                self.doc.name(),
                format!("{slot:?}").to_lowercase()
            ))),
            _ => folder.map(|f| {
                let mut s = f.into_os_string();
                s.push("/");
                PathBuf::from(s)
            }),
        };
        self.dialogs.open(kind, suggested);
    }

    /// Whether the file window is open.
    pub fn dialog_open(&self) -> bool {
        self.dialogs.is_open()
    }

    /// A file was chosen (typed, picked or dropped).
    fn chosen(&mut self, kind: DialogKind, path: &Path) {
        match kind {
            DialogKind::OpenData => self.open_data_path(path),
            DialogKind::OpenMeasurement(i) => self.open_measurement_path(i, path),
            DialogKind::OpenPreset => self.open_preset_path(path),
            DialogKind::SavePreset => self.save_preset_path(path),
            DialogKind::ExportPng(slot) => self.export_png(slot, path),
        }
    }

    /// Writes a pane's image, as shown (contrast and colormap applied), to a PNG file.
    pub fn export_png(&mut self, slot: Slot, path: &Path) {
        let Some(s) = self.viewer.shown.get(&slot) else {
            self.session
                .log(LogLevel::Error, "nothing to export: the pane is empty");
            return;
        };
        let [w, h] = s.color.size;
        let rgba: Vec<u8> = s.color.pixels.iter().flat_map(|c| c.to_array()).collect();
        let result = image::RgbaImage::from_raw(w as u32, h as u32, rgba)
            .ok_or_else(|| "the pane's image has an inconsistent size".to_string())
            .and_then(|img| {
                let mut bytes = Vec::new();
                img.write_to(
                    &mut std::io::Cursor::new(&mut bytes),
                    image::ImageFormat::Png,
                )
                .map_err(|e| e.to_string())?;
                crate::io::write_atomic(path, &bytes).map_err(|e| e.to_string())
            });
        match result {
            Ok(()) => {
                self.remember_folder(path);
                self.session
                    .log(LogLevel::Info, format!("exported {}", path.display()));
            }
            Err(e) => self.session.log(
                LogLevel::Error,
                format!("could not export the view: {e}: {}", path.display()),
            ),
        }
    }

    /// A callback that asks for a repaint (for helper threads).
    pub(crate) fn waker(&self) -> impl Fn() + Clone + Send + Sync + 'static {
        repaint_waker(&self.ctx)
    }

    fn remember_folder(&mut self, path: &Path) {
        if let Some(dir) = path.parent() {
            self.app_state.last_folder = Some(dir.to_path_buf());
        }
        self.save_state();
    }

    /// Persists the app state (errors only logged: losing the window size is no reason to stop).
    pub fn save_state(&mut self) {
        if let Some(path) = &self.state_path
            && let Err(e) = self.app_state.save(path)
        {
            self.session.log(
                LogLevel::Warn,
                format!("could not save the workbench state: {e}"),
            );
        }
    }

    // ---- what the panes show ------------------------------------------------------------------

    /// The default display (colormap, contrast) of panes without their own.
    pub fn set_default_display(&mut self, display: Display) {
        self.app_state.display = display;
        for slot in [
            Slot::Reconstruction,
            Slot::GroundTruth,
            Slot::Data,
            Slot::Compare,
        ] {
            let d = self.viewer.display_of(slot, display);
            self.pump.send(PumpMsg::SetDisplay(slot, d));
        }
        // A gradient has a sign: white is zero.
        let d = self
            .viewer
            .display_of(Slot::Gradient, super::viewer::diverging(display));
        self.pump.send(PumpMsg::SetDisplay(Slot::Gradient, d));
        self.viewer.remap(&self.pump, display, None);
    }

    /// One pane's display.
    pub fn set_pane_display(&mut self, slot: Slot, display: Display) {
        self.viewer.displays.insert(slot, display);
        if let Slot::Measurement(_) = slot {
            self.pump.send(PumpMsg::SetDisplay(slot, display));
        }
        self.viewer
            .remap(&self.pump, self.app_state.display, Some(slot));
        if slot == Slot::Difference {
            self.request_difference();
        }
    }

    /// Cuts every held volume at the (moved) cursor.
    pub fn reslice(&mut self) {
        self.viewer.reslice(&self.pump, self.app_state.display);
    }

    /// Shows `source`'s volume as three orthogonal cuts through the cursor (None: the panes).
    pub fn set_orthogonal(&mut self, source: Option<Slot>) {
        self.viewer.ortho = source;
        for a in 0..3 {
            self.viewer.shown.remove(&Slot::Ortho(a));
        }
        self.viewer.show_ortho(&self.pump, self.app_state.display);
    }

    /// A click in orthogonal view `axis` at texture coordinates `uv` moves the other cuts there.
    pub fn ortho_click(&mut self, axis: u8, uv: egui::Pos2) {
        if self.viewer.ortho_click(axis, uv) {
            self.reslice();
        }
    }

    pub fn request_difference(&mut self) {
        self.viewer
            .request_difference(&self.pump, self.app_state.display);
    }

    /// The panes' state (for tests): which slots show an image, and the volume cursor.
    pub fn viewer(&self) -> &Viewer {
        &self.viewer
    }

    /// Moves the volume slice (as the slider does).
    pub fn set_slice(&mut self, axis: usize, index: usize) {
        self.viewer.cursor.axis = axis.min(2);
        self.viewer.cursor.index[axis.min(2)] = index;
        self.reslice();
    }

    /// The iteration and size of the reconstruction on screen.
    pub fn shown_reconstruction(&self) -> Option<(usize, [usize; 2])> {
        self.shown(Slot::Reconstruction)
    }

    /// The iteration (epoch) and texture size a pane shows, if any (for tests).
    pub fn shown(&self, slot: Slot) -> Option<(usize, [usize; 2])> {
        self.viewer
            .shown
            .get(&slot)
            .map(|s| (s.iteration, s.texture.size()))
    }

    /// Size of measurement `i`'s texture on screen.
    pub fn shown_measurement(&self, i: usize) -> Option<[usize; 2]> {
        self.viewer
            .shown
            .get(&Slot::Measurement(i))
            .map(|s| s.texture.size())
    }

    /// Size of the Data panel's texture on screen.
    pub fn shown_data_size(&self) -> Option<[usize; 2]> {
        self.viewer.shown.get(&Slot::Data).map(|s| s.texture.size())
    }

    /// Before a run's ground truth arrives, the Data panel's image stands in for it.
    fn show_data_as_truth(&mut self) {
        if !self.doc.is_imaging() {
            return;
        }
        if let Some(t) = self.doc.data.loaded.clone() {
            self.viewer
                .show_array(Slot::Data, t, &self.pump, self.app_state.display);
        }
    }

    // ---- runs ---------------------------------------------------------------------------------

    pub fn rescan_runs(&mut self) {
        let wake = self.waker();
        self.runs.rescan(wake);
    }

    /// Reads a run's arrays to show it (reopen) or to compare the run on screen with it.
    pub fn open_run(&mut self, folder: &Path, purpose: Purpose) {
        if folder.join("train.json").is_file() && !folder.join("metrics.json").exists() {
            self.open_training_run(folder, purpose);
            return;
        }
        let wake = self.waker();
        self.runs.open(folder, purpose, wake);
    }

    /// Shows a training run's curves, per-rank times and reconstructions from its `train.json`
    /// (a few kB, read here). Keeps what the live run knew about its plan when it is that run.
    fn open_training_run(&mut self, folder: &Path, purpose: Purpose) {
        if purpose == Purpose::Compare {
            self.session.log(
                LogLevel::Warn,
                "a training run has no image to compare: reopen it instead",
            );
            return;
        }
        if self.session.is_busy() {
            self.session.log(
                LogLevel::Warn,
                "a run is in progress: reopen the training run when it has ended",
            );
            return;
        }
        match crate::gui::session::TrainRun::reopened(folder) {
            Ok(mut run) => {
                if let Some(live) = self
                    .session
                    .training
                    .as_ref()
                    .filter(|t| t.name == run.name)
                {
                    run.plan = live.plan.clone();
                }
                self.session.training = Some(run);
                self.runs.shown = Some(folder.to_path_buf());
            }
            Err(e) => self
                .session
                .log(LogLevel::Error, format!("cannot reopen the run: {e}")),
        }
    }

    pub fn stop_comparing(&mut self) {
        self.runs.compared = None;
        self.viewer.shown.remove(&Slot::Compare);
        self.viewer.arrays.remove(&Slot::Compare);
        self.request_difference();
    }

    fn show_run(&mut self, purpose: Purpose, arrays: RunArrays) {
        let display = self.app_state.display;
        if let Some(e) = &arrays.error {
            self.session.log(
                LogLevel::Warn,
                format!("run {}: {e}", arrays.folder.display()),
            );
        }
        match purpose {
            Purpose::Show => {
                if self.runs.shown.as_ref() != Some(&arrays.folder) {
                    return;
                }
                for (slot, t) in [
                    (Slot::Reconstruction, arrays.reconstruction),
                    (Slot::GroundTruth, arrays.ground_truth),
                ] {
                    if let Some(t) = t {
                        self.viewer.show_array(slot, t, &self.pump, display);
                    }
                }
                for (i, t) in arrays.measurements {
                    self.viewer
                        .show_array(Slot::Measurement(i), t, &self.pump, display);
                }
            }
            Purpose::Compare => {
                if self.runs.compared.as_ref() != Some(&arrays.folder) {
                    return;
                }
                if let Some(t) = arrays.reconstruction {
                    self.viewer
                        .show_array(Slot::Compare, t, &self.pump, display);
                    self.viewer.show_difference = true;
                }
            }
        }
    }

    // ---- incoming -----------------------------------------------------------------------------

    /// Takes what the backend, the pump and the loaders have ready (never blocks).
    fn poll(&mut self) {
        match self.conn.poll(&self.pump, self.waker()) {
            Some(Change::Connected { remote, .. }) => self.connected(remote),
            Some(Change::Failed { what, error }) => {
                self.resume_on_attach = false;
                let what = match what {
                    Connecting::Remote(a) => format!("could not attach to {a}"),
                    Connecting::Local(_) => "could not start a backend".into(),
                };
                let kept = if self.conn.is_live() {
                    format!(" (still using {})", self.conn.label())
                } else {
                    String::new()
                };
                self.session
                    .log(LogLevel::Error, format!("{what}: {error}{kept}"));
            }
            None => {}
        }
        let generation = self.conn.generation();
        let mut difference = false;
        for out in self.pump.drain() {
            match out {
                PumpOut::Incoming(g, _) if g != generation => {}
                PumpOut::Incoming(_, Incoming::Event(e)) => self.apply(e),
                PumpOut::Incoming(_, Incoming::Disconnected(reason)) => {
                    if self.conn.is_live() {
                        self.conn.drop_link();
                        self.session.disconnected(&reason);
                    }
                }
                PumpOut::Mapped(m) => {
                    if let Some((g, job)) = m.job
                        && (g != generation || self.session.current_job() != Some(job))
                    {
                        continue;
                    }
                    if let Some(ctx) = self.ctx.get().cloned() {
                        difference |= self.viewer.apply(m, &ctx);
                    }
                }
            }
        }
        if difference {
            self.request_difference();
        }
        let wake = self.waker();
        for loaded in self.doc.poll(wake) {
            let display = self.app_state.display;
            match loaded {
                Loaded::Image(Ok(t)) => {
                    self.viewer.show_array(Slot::Data, t, &self.pump, display);
                }
                Loaded::Image(Err(e)) => {
                    self.viewer.shown.remove(&Slot::Data);
                    self.viewer.arrays.remove(&Slot::Data);
                    self.session
                        .log(LogLevel::Error, format!("could not load the image: {e}"));
                }
                Loaded::NoImage => {
                    self.viewer.shown.remove(&Slot::Data);
                    self.viewer.arrays.remove(&Slot::Data);
                }
                Loaded::Measurements(arrays) => {
                    for (i, t) in arrays {
                        self.viewer
                            .show_array(Slot::Measurement(i), t, &self.pump, display);
                    }
                }
            }
        }
        for (purpose, arrays) in self.runs.poll() {
            self.show_run(purpose, arrays);
        }
    }

    /// One backend event: the session's state, and what follows from it here.
    fn apply(&mut self, e: crate::protocol::Event) {
        if self.fetch_step(&e) {
            return;
        }
        let was_busy = self.session.is_busy();
        let welcome = matches!(e, crate::protocol::Event::Welcome { .. });
        self.session.apply(e);
        if welcome {
            // The world size the patch map is planned for.
            self.edited();
        }
        let ended = matches!(
            self.session.state(),
            JobState::Finished { .. } | JobState::Cancelled { .. }
        );
        if was_busy && ended {
            // The run's folder: listed in the history, and (when its files are readable here, as
            // with a local backend) its arrays become the panes' sources, so volumes can be sliced.
            if let Some(folder) = self.session.run_dir.clone() {
                if self.conn.is_remote() {
                    // The files are on the server's machine: copy them here first.
                    self.start_fetch(&folder);
                } else {
                    self.runs.this_window.insert(folder.clone());
                    if folder.is_dir() {
                        self.open_run(&folder, Purpose::Show);
                    }
                }
            }
            self.rescan_runs();
        }
    }

    /// Copies the finished remote run in `run_dir` (its outputs as the session lists them) into
    /// the output root (or the temporary folder), one chunk per request.
    fn start_fetch(&mut self, run_dir: &Path) {
        let Some(job) = self.session.current_job() else {
            return;
        };
        // Paths inside the run folder (a training run's reconstructions are in a sub-folder).
        let names: Vec<PathBuf> = self
            .session
            .outputs
            .iter()
            .filter_map(|p| p.strip_prefix(run_dir).ok().map(PathBuf::from))
            .collect();
        let root = self
            .runs
            .root
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("tessera-fetched-runs"));
        match RemoteFetch::start(job, run_dir, &names, &root) {
            Ok(Some((fetch, first))) => {
                self.session.log(
                    LogLevel::Info,
                    format!(
                        "copying the run's {} file(s) from the server into {}",
                        names.len(),
                        fetch.dest().display()
                    ),
                );
                self.fetching.push(fetch);
                self.send(first);
            }
            Ok(None) => {}
            Err(e) => self
                .session
                .log(LogLevel::Error, format!("cannot copy the run here: {e}")),
        }
    }

    /// Feeds `e` to the fetches in progress; true when it was one's (and is used up).
    fn fetch_step(&mut self, e: &crate::protocol::Event) -> bool {
        let Some((i, step)) =
            self.fetching
                .iter_mut()
                .enumerate()
                .find_map(|(i, f)| match f.on_event(e) {
                    Step::Ignored => None,
                    step => Some((i, step)),
                })
        else {
            return false;
        };
        match step {
            Step::Ignored => {}
            Step::Next(request) => {
                self.send(request);
            }
            Step::Done(folder) => {
                self.fetching.remove(i);
                self.session.log(
                    LogLevel::Info,
                    format!("the run is here: {}", folder.display()),
                );
                self.runs.this_window.insert(folder.clone());
                self.open_run(&folder, Purpose::Show);
                self.rescan_runs();
            }
            Step::Failed(why) => {
                self.fetching.remove(i);
                self.session
                    .log(LogLevel::Error, format!("copying the run failed: {why}"));
            }
        }
        true
    }
}
