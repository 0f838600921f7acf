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
use super::dialogs::{CsvExport, DialogKind, Dialogs, dropped_kind};
use super::document::{Document, Loaded};
use super::fetch::{RemoteFetch, Step};
use super::history::{Purpose, RunArrays, RunHistory, RunPreset};
use super::panels::{EditorPanel, editor_panels};
use super::preview::{Display, PaneDisplay, Pump, PumpMsg, PumpOut, Slot};
use super::session::{JobState, Session};
use super::settings::AppState;
use super::viewer::{Quantity, Viewer};
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
const UNDO: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Z);
const REDO: KeyboardShortcut =
    KeyboardShortcut::new(Modifiers::COMMAND.plus(Modifiers::SHIFT), Key::Z);
const REDO_Y: KeyboardShortcut = KeyboardShortcut::new(Modifiers::COMMAND, Key::Y);

/// An action that replaces the document, waiting for "discard changes?": what it opens, and how.
type PendingReplace = (String, Box<dyn FnOnce(&mut Workbench)>);

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
    /// The Keyboard shortcuts window (Help menu).
    pub(crate) shortcuts_open: bool,
    /// A document to open once the user agrees to discard unsaved edits (what, and how).
    pending_replace: Option<PendingReplace>,
    pub(crate) attach_token: String,
    /// After a remote attach, ask the server to replay and stream its running job.
    resume_on_attach: bool,
    /// Stop was asked for while the job was submitted but not yet accepted (it has no id to
    /// cancel yet): cancel it as soon as it is accepted.
    stop_when_accepted: bool,
    /// The next `Status` answers an attach: follow the job it says is running.
    follow_after_status: bool,
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
            shortcuts_open: false,
            pending_replace: None,
            attach_token: String::new(),
            resume_on_attach: false,
            stop_when_accepted: false,
            follow_after_status: false,
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

        egui::Panel::top("top").show(ui, |ui| {
            super::menu_bar::menu_bar(ui, self);
            super::top_bar::top_bar(ui, self);
        });
        super::top_bar::attach_window(&ctx, self);
        super::menu_bar::shortcuts_window(&ctx, &mut self.shortcuts_open);
        self.discard_window(&ctx);
        if let Some((kind, path)) = self.dialogs.ui(&ctx, self.waker()) {
            self.chosen(kind, &path);
        }
        egui::Panel::bottom("log")
            .resizable(true)
            .default_size(110.0)
            .show(ui, |ui| super::top_bar::log_panel(ui, self));
        // Wide enough for a weights path and "ranks per axis" on one line, and the same width
        // whatever the preset (the panel would otherwise take its content's width).
        egui::Panel::left("editors")
            .resizable(true)
            .default_size(400.0)
            .min_size(360.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .auto_shrink([false, false])
                    .show(ui, |ui| self.editor_column(ui));
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
        // Text fields undo their own typing; elsewhere Ctrl+Z undoes the last edit.
        if !text_focus {
            if ctx.input_mut(|i| i.consume_shortcut(&REDO) || i.consume_shortcut(&REDO_Y)) {
                self.redo();
            } else if ctx.input_mut(|i| i.consume_shortcut(&UNDO)) {
                self.undo();
            }
        }
        if ctx.input_mut(|i| i.consume_shortcut(&EXPORT))
            && self.viewer.shown.contains_key(&Slot::Reconstruction)
        {
            self.open_dialog(DialogKind::ExportPng(Slot::Reconstruction));
        }
        if !text_focus {
            // Every press counts, several in one frame (a slow frame, key repeat) too.
            let step: isize = ctx.input(|i| {
                i.events
                    .iter()
                    .map(|e| match e {
                        egui::Event::Key {
                            key: Key::PageUp,
                            pressed: true,
                            ..
                        } => 1,
                        egui::Event::Key {
                            key: Key::PageDown,
                            pressed: true,
                            ..
                        } => -1,
                        _ => 0,
                    })
                    .sum()
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
        self.session.backend_replaced();
        self.session.connected = true;
        self.session.backend = None;
        self.session
            .log(LogLevel::Info, format!("backend: {}", self.conn.label()));
        if self.doc.remote != remote {
            self.doc.remote = remote;
            self.edited();
        }
        // After a remote attach, its answer says whether a job runs there to follow.
        self.follow_after_status = std::mem::take(&mut self.resume_on_attach);
        self.send(Request::Status);
    }

    /// The server's status after a remote attach: a running job is replayed and followed in the
    /// panes (cleared for it); a finished one is not brought back — it was seen and copied when
    /// it ended, and a replay would copy it again and draw it into whatever document is open.
    fn follow_running_job(&mut self, running: Option<JobId>) {
        match running {
            Some(job) if !self.session.is_busy() => {
                self.forget_run();
                self.session.adopt_next_job = true;
                self.session
                    .log(LogLevel::Info, format!("following the server's job {job}"));
                self.send(Request::Attach { job: Some(job) });
            }
            Some(_) => {}
            None => self.session.log(
                LogLevel::Info,
                "the server runs no job now; its earlier runs stay in its output folder",
            ),
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
            self.stop_when_accepted = false;
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

    /// Asks the backend to stop the current job; its final event says whether it stopped. A job
    /// not yet accepted (Stop or Escape right after Run) is cancelled the moment it is: the
    /// press is never lost.
    pub fn stop(&mut self) {
        let state = self.session.state().clone();
        match state {
            JobState::Running { job } if self.send(Request::Cancel { job }) => {
                self.session.stopping();
                self.session
                    .log(LogLevel::Info, format!("stopping job {job}…"));
            }
            JobState::Submitted if !self.stop_when_accepted => {
                self.stop_when_accepted = true;
                self.session.log(
                    LogLevel::Info,
                    "stopping the submitted job as soon as the backend accepts it…",
                );
            }
            _ => {}
        }
    }

    /// Whether a Stop waits for the submitted job to be accepted.
    pub fn stop_pending(&self) -> bool {
        self.stop_when_accepted && *self.session.state() == JobState::Submitted
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

    /// Opens another document from the window (a preset button, a file, a run to reopen): at
    /// once, or — when the experiment on screen has unsaved edits — once the user agrees to
    /// discard them (the window asks; `what` names what would be opened).
    pub fn replace_document(&mut self, what: &str, open: impl FnOnce(&mut Workbench) + 'static) {
        if self.doc.is_modified() {
            self.pending_replace = Some((what.to_string(), Box::new(open)));
        } else {
            open(self);
        }
    }

    /// The "discard changes?" window, while a replacement waits for an answer.
    fn discard_window(&mut self, ctx: &egui::Context) {
        let Some((what, _)) = &self.pending_replace else {
            return;
        };
        let mut answer = None;
        egui::Modal::new(egui::Id::unique("discard changes?")).show(ctx, |ui| {
            ui.heading("Discard the unsaved changes?");
            ui.label(format!(
                "\"{}\" has edits that are not saved; opening {what} replaces it. Save preset… \
                 (File menu) keeps them; Ctrl+Z cannot bring them back once it is replaced.",
                self.doc.name()
            ));
            ui.horizontal(|ui| {
                if ui.button("Discard changes").clicked() {
                    answer = Some(true);
                }
                if ui.button("Cancel").clicked() {
                    answer = Some(false);
                }
            });
        });
        match answer {
            Some(true) => {
                if let Some((_, open)) = self.pending_replace.take() {
                    open(self);
                }
            }
            Some(false) => self.pending_replace = None,
            None => {}
        }
    }

    /// Another experiment was opened: forget what the last run showed (unless one is running).
    fn opened(&mut self) {
        self.viewer.new_document();
        if !self.session.is_busy() {
            self.forget_run();
            self.viewer.clear_measurements();
        }
        if self.doc.is_imaging() {
            // The image of this document, when it is the one loaded (else it is loading).
            if self.doc.data_is_current() {
                self.show_data_as_truth();
            }
        } else {
            // An FWI or training document has no image: nothing of the last one may stay.
            self.viewer.shown.remove(&Slot::Data);
            self.viewer.arrays.remove(&Slot::Data);
        }
        self.set_default_display(self.app_state.display);
        self.edited();
    }

    /// Forgets what the last run showed (its curves, panes and folder).
    fn forget_run(&mut self) {
        self.session.clear_run();
        self.viewer.clear_run();
        self.runs.shown = None;
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
        self.doc.record();
    }

    /// The patch map to draw: the running job's (from a regroup until the next iteration, the
    /// tiles as the lost ranks left them), else the document's plan.
    pub fn patch_map(&mut self) -> Option<Result<Arc<PatchMap>, String>> {
        let running =
            (self.session.ranks.orphaned_tiles.as_ref()).or(self.session.patch_map.as_ref());
        if let Some(m) = running {
            return Some(Ok(m.clone()));
        }
        self.doc.patch_map()
    }

    /// The ranks whose tiles [`Self::patch_map`] draws greyed: those the running job lost, when
    /// the map drawn is the job's (a document's plan has none).
    pub fn lost_ranks_drawn(&self) -> Vec<usize> {
        let ranks = &self.session.ranks;
        match ranks.orphaned_tiles.is_some() || self.session.patch_map.is_some() {
            true => ranks.lost.iter().map(|l| l.rank).collect(),
            false => Vec::new(),
        }
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
    /// The preset takes the file's name (its runs' folders are named after it), so a copy of
    /// `quick` saved as `my_spatial.toml` runs as `my_spatial`.
    pub fn save_preset_path(&mut self, path: &Path) {
        let old_name = self.doc.name().to_string();
        let new_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| old_name.clone());
        self.doc.rename(&new_name);
        let result = self
            .doc
            .checked_toml()
            .and_then(|t| crate::io::write_atomic(path, t.as_bytes()));
        match result {
            Ok(()) => {
                self.app_state.remember(path);
                self.remember_folder(path);
                self.doc.mark_saved(path);
                let renamed = if new_name != old_name {
                    format!(" (the preset is now named \"{new_name}\", as its runs will be)")
                } else {
                    String::new()
                };
                self.session.log(
                    LogLevel::Info,
                    format!("saved preset {}{renamed}", path.display()),
                );
            }
            Err(e) => {
                self.doc.rename(&old_name);
                self.session
                    .log(LogLevel::Error, format!("could not save the preset: {e}"));
            }
        }
    }

    /// Undoes the last edit of the experiment (Ctrl+Z).
    pub fn undo(&mut self) {
        if self.doc.undo() {
            self.after_undo();
        }
    }

    /// Applies the last undone edit again (Ctrl+Shift+Z or Ctrl+Y).
    pub fn redo(&mut self) {
        if self.doc.redo() {
            self.after_undo();
        }
    }

    fn after_undo(&mut self) {
        self.doc.request_measurements(false, self.waker());
        self.edited();
    }

    /// Uses an image or volume file as the ground truth.
    pub fn open_data_path(&mut self, path: &Path) {
        self.remember_folder(path);
        self.doc.open_data_path(path);
        // The last run reconstructed another image: its panes would stand beside this one.
        if !self.session.is_busy() {
            self.forget_run();
        }
        self.edited();
    }

    /// Uses `path` as the measurement of operator `i` (switching to loaded measurements).
    pub fn open_measurement_path(&mut self, i: usize, path: &Path) {
        self.remember_folder(path);
        self.viewer.shown.remove(&Slot::Measurement(i));
        self.viewer.arrays.remove(&Slot::Measurement(i));
        let wake = self.waker();
        self.doc.open_measurement_path(i, path, wake);
        self.edited();
    }

    /// Simulated (`false`) or loaded (`true`) measurements.
    pub fn set_measurements_loaded(&mut self, loaded: bool) {
        self.doc.set_measurements_loaded(loaded);
        if !loaded {
            self.viewer.clear_measurements();
        }
        self.edited();
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
            DialogKind::ExportCsv(what) => Some(folder.unwrap_or_default().join(format!(
                "{}-{}.csv",
                self.doc.name(),
                match what {
                    CsvExport::Profile => "profile",
                    CsvExport::Roi => "box",
                }
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
            DialogKind::OpenPreset => {
                let path = path.to_path_buf();
                let what = path.display().to_string();
                self.replace_document(&what, move |wb| wb.open_preset_path(&path));
            }
            DialogKind::SavePreset => self.save_preset_path(path),
            DialogKind::ExportPng(slot) => self.export_png(slot, path),
            DialogKind::ExportCsv(what) => self.export_csv(what, path),
        }
    }

    /// The panes of the live view with their float images (title, image), left to right.
    fn pane_images(&self) -> Vec<(String, &crate::protocol::PreviewImage)> {
        super::views::all_panes(self)
            .into_iter()
            .filter_map(|(title, slot)| Some((title, &*self.viewer.shown.get(&slot)?.raw)))
            .collect()
    }

    /// The statistics of the box drawn over the panes, if one is drawn.
    pub fn roi_report(&self) -> Option<super::roi::RoiReport> {
        let (a, b) = self.viewer.roi?;
        let raw = |slot| self.viewer.shown.get(&slot).map(|s| &*s.raw);
        let pair = raw(Slot::Reconstruction).zip(raw(Slot::GroundTruth));
        Some(super::roi::roi_report(&self.pane_images(), pair, a, b))
    }

    /// Writes the line profile (every pane, per channel) or the box's statistics to a CSV file.
    pub fn export_csv(&mut self, what: CsvExport, path: &Path) {
        let text = match what {
            CsvExport::Profile => self
                .viewer
                .profile
                .map(|(a, b)| super::roi::profile_csv(&self.pane_images(), a, b)),
            CsvExport::Roi => self.roi_report().map(|r| super::roi::roi_csv(&r)),
        };
        let Some(text) = text else {
            let what = match what {
                CsvExport::Profile => "no line profile is drawn (Shift+drag over an image)",
                CsvExport::Roi => "no box is drawn (Ctrl+drag over an image)",
            };
            self.session
                .log(LogLevel::Error, format!("nothing to export: {what}"));
            return;
        };
        let written = crate::io::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string());
        self.exported(path, written, "the table");
    }

    /// Logs how an export to `path` went (and remembers its folder for the next dialog).
    fn exported(&mut self, path: &Path, result: std::result::Result<(), String>, what: &str) {
        match result {
            Ok(()) => {
                self.remember_folder(path);
                self.session
                    .log(LogLevel::Info, format!("exported {}", path.display()));
            }
            Err(e) => self.session.log(
                LogLevel::Error,
                format!("could not export {what}: {e}: {}", path.display()),
            ),
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
        self.exported(path, result, "the view");
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
        self.sync_displays(None);
    }

    /// One pane's own display settings (the default ones remove them). With linked contrast,
    /// its contrast goes to every pane of the same quantity.
    pub fn set_pane_display(&mut self, slot: Slot, pane: PaneDisplay) {
        let before = self.viewer.displays.get(&slot).copied().unwrap_or_default();
        let linked = self.viewer.contrast_linked && pane.contrast != before.contrast;
        let set = |viewer: &mut Viewer, slot: Slot, pane: PaneDisplay| {
            if pane == PaneDisplay::default() {
                viewer.displays.remove(&slot);
            } else {
                viewer.displays.insert(slot, pane);
            }
        };
        set(&mut self.viewer, slot, pane);
        if !linked {
            self.sync_displays(Some(slot));
            return;
        }
        let quantity = Quantity::of(slot);
        for other in self.display_slots() {
            if other != slot && Quantity::of(other) == quantity {
                let mut d = self
                    .viewer
                    .displays
                    .get(&other)
                    .copied()
                    .unwrap_or_default();
                d.contrast = pane.contrast;
                set(&mut self.viewer, other, d);
            }
        }
        self.sync_displays(None);
    }

    /// Links or unlinks the panes' contrast (see [`Viewer::contrast_linked`]).
    pub fn set_contrast_linked(&mut self, linked: bool) {
        self.viewer.contrast_linked = linked;
        self.viewer.update_linked_windows();
        self.sync_displays(None);
    }

    /// Every pane back to auto contrast (each keeps its colormap and channel).
    pub fn reset_contrast(&mut self) {
        let slots: Vec<Slot> = self.viewer.displays.keys().copied().collect();
        for slot in slots {
            let mut d = self.viewer.displays[&slot];
            d.contrast = None;
            if d == PaneDisplay::default() {
                self.viewer.displays.remove(&slot);
            } else {
                self.viewer.displays.insert(slot, d);
            }
        }
        self.viewer.update_linked_windows();
        self.sync_displays(None);
    }

    /// Maps again the panes whose linked window moved (a new preview widened or narrowed it).
    fn sync_linked_windows(&mut self) {
        let changed = self.viewer.update_linked_windows();
        if changed.is_empty() {
            return;
        }
        for slot in self.display_slots() {
            if changed.contains(&Quantity::of(slot)) {
                let d = self.viewer.display_of(slot, self.app_state.display);
                self.pump.send(PumpMsg::SetDisplay(slot, d));
                if self.viewer.shown.contains_key(&slot) {
                    self.viewer
                        .remap(&self.pump, self.app_state.display, Some(slot));
                }
            }
        }
    }

    /// The slots a display can be set for: the document's panes and whatever is on screen.
    fn display_slots(&self) -> Vec<Slot> {
        let mut slots = vec![
            Slot::Reconstruction,
            Slot::GroundTruth,
            Slot::Data,
            Slot::Compare,
            Slot::Gradient,
            Slot::Difference,
        ];
        slots.extend((0..self.doc.preset.physics.len().max(1)).map(Slot::Measurement));
        for s in self.viewer.shown.keys() {
            if !slots.contains(s) {
                slots.push(*s);
            }
        }
        slots
    }

    /// Tells the pump how each pane (or `only` one) maps the previews to come, and maps what is on
    /// screen again.
    fn sync_displays(&mut self, only: Option<Slot>) {
        let default = self.app_state.display;
        for slot in self
            .display_slots()
            .into_iter()
            .filter(|s| only.is_none_or(|o| o == *s))
        {
            let d = self.viewer.display_of(slot, default);
            self.pump.send(PumpMsg::SetDisplay(slot, d));
        }
        self.viewer.remap(&self.pump, default, only);
        if only.is_none_or(|o| o == Slot::Difference) {
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

    /// The line profile of every pane on screen that shows an image, named as the pane is:
    /// `(title, [(distance px, value)])`.
    pub fn profile_curves(&self) -> Vec<(String, Vec<[f64; 2]>)> {
        super::views::all_panes(self)
            .into_iter()
            .filter_map(|(title, slot)| Some((title, self.viewer.profile_of(slot)?)))
            .collect()
    }

    /// Draws (or clears) the line profile, in texture coordinates (as Shift+drag does).
    pub fn set_profile(&mut self, line: Option<(egui::Pos2, egui::Pos2)>) {
        self.viewer.profile = line;
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
        if folder.join(crate::io::TRAIN_SUMMARY_FILE).is_file()
            && !folder.join(crate::io::METRICS_FILE).exists()
        {
            self.open_training_run(folder, purpose);
            return;
        }
        if purpose == Purpose::Reopen && self.session.is_busy() {
            self.session.log(
                LogLevel::Warn,
                "a run is in progress: reopen the run when it has ended",
            );
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

    /// Saves the notes of the run in `folder` (beside its outputs, which stay untouched); false
    /// (and the reason in the log) when they could not be saved.
    pub fn save_run_notes(&mut self, folder: &Path, notes: &str) -> bool {
        match super::history::save_notes(folder, notes) {
            Ok(()) => {
                if let Some(r) = self.runs.runs.iter_mut().find(|r| r.folder == folder) {
                    r.notes = notes.to_string();
                }
                true
            }
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("the notes were not saved: {e}"));
                false
            }
        }
    }

    /// Deletes the run in `folder` (its folder only; see [`super::history::delete_run`]) and
    /// takes it off the list.
    pub fn delete_run(&mut self, folder: &Path) -> crate::Result<()> {
        let root = self.runs.root.clone();
        if let Err(e) = super::history::delete_run(folder, root.as_deref(), &self.runs.this_window)
        {
            self.session
                .log(LogLevel::Error, format!("the run was not deleted: {e}"));
            return Err(e);
        }
        self.session.log(
            LogLevel::Info,
            format!("deleted the run {}", folder.display()),
        );
        self.runs.runs.retain(|r| r.folder != folder);
        self.runs.this_window.remove(folder);
        if self.runs.compared.as_deref() == Some(folder) {
            self.stop_comparing();
        }
        if self.runs.shown.as_deref() == Some(folder) {
            self.runs.shown = None;
        }
        Ok(())
    }

    pub fn stop_comparing(&mut self) {
        self.runs.compared = None;
        self.viewer.shown.remove(&Slot::Compare);
        self.viewer.arrays.remove(&Slot::Compare);
        self.request_difference();
    }

    fn show_run(&mut self, purpose: Purpose, mut arrays: RunArrays) {
        let display = self.app_state.display;
        if let Some(e) = &arrays.error {
            self.session.log(
                LogLevel::Warn,
                format!("run {}: {e}", arrays.folder.display()),
            );
        }
        match purpose {
            Purpose::Show | Purpose::Reopen => {
                if self.runs.shown.as_ref() != Some(&arrays.folder) {
                    return;
                }
                if purpose == Purpose::Reopen {
                    self.restore_preset(&arrays.folder, arrays.preset.take());
                    if self.session.run_dir.as_ref() != Some(&arrays.folder) {
                        // The kept previews are another run's.
                        self.viewer.timeline.clear();
                    }
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

    /// A reopened run's preset goes back into the editor (its document replaces the one on
    /// screen, so Run runs what the panes show), and the log says so.
    fn restore_preset(&mut self, folder: &Path, preset: Option<Result<RunPreset, String>>) {
        let origin = format!("run {}", folder.display());
        let name = match preset {
            Some(Ok(RunPreset::Imaging(preset))) => {
                let name = preset.name.clone();
                self.set_preset(LoadedPreset { preset, origin });
                name
            }
            Some(Ok(RunPreset::Fwi(preset))) => {
                let name = preset.name.clone();
                self.set_fwi_preset(preset, Path::new(""), origin);
                name
            }
            Some(Err(e)) => {
                self.session.log(
                    LogLevel::Warn,
                    format!(
                        "the run's preset cannot be restored ({e}); the editor keeps \"{}\"",
                        self.doc.name()
                    ),
                );
                return;
            }
            None => return,
        };
        // Opening the preset cleared the panes for it; they show this run.
        self.runs.shown = Some(folder.to_path_buf());
        self.session.log(
            LogLevel::Info,
            format!(
                "reopened {}: its preset \"{name}\" is in the editor",
                folder.display()
            ),
        );
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
        if self.viewer.contrast_linked {
            self.sync_linked_windows();
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
        if let crate::protocol::Event::Status { running, .. } = &e
            && std::mem::take(&mut self.follow_after_status)
        {
            self.follow_running_job(*running);
        }
        let was_busy = self.session.is_busy();
        let welcome = matches!(e, crate::protocol::Event::Welcome { .. });
        let accepted = matches!(e, crate::protocol::Event::Accepted { .. });
        self.session.apply(e);
        // The submitted job was accepted (or refused): a Stop that waited for it applies now.
        if *self.session.state() != JobState::Submitted
            && std::mem::take(&mut self.stop_when_accepted)
            && accepted
        {
            self.stop();
        }
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
