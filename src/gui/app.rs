//! The workbench window: panels that edit a [`Preset`], Run/Stop, and views of what the backend
//! streams back.
//!
//! The UI thread only draws and sends: a run is a [`Request::Submit`] of the preset's TOML; results
//! arrive as events through the [`Pump`], which maps previews to textures off this thread. File
//! dialogs and image loading run on their own threads and are polled each frame.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};

use egui::{
    Color32, Pos2, Rect, RichText, ScrollArea, Sense, TextureHandle, TextureOptions, Ui, Vec2,
};
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::backend::{Backend, Incoming, Link, Starter};
use super::editors::{self, Thumb};
use super::measured::{Measured, MeasurementFiles};
use super::patch_map;
use super::preview::{
    Colormap, Contrast, Display, MAX_TEXTURE_SIDE, Mapped, Pump, PumpMsg, PumpOut, Slot,
};
use super::session::{JobState, Session};
use super::settings::AppState;
use crate::physics::NoiseConfig;
use crate::preset::{BUNDLED, ImageSource, LoadedPreset, MeasurementSource, Preset};
use crate::protocol::{JobId, LogLevel, PatchMap, PreviewImage, Request};
use crate::samples::Sample;
use crate::tensor::Tensor;

/// A callback for helper threads that asks the window for a repaint (once it has a context).
fn repaint_waker(ctx: &Arc<OnceLock<egui::Context>>) -> impl Fn() + Send + Sync + 'static {
    let ctx = ctx.clone();
    move || {
        if let Some(c) = ctx.get() {
            c.request_repaint();
        }
    }
}

/// The Data panel's name for `[image] shape` (no ground truth).
const UNKNOWN_IMAGE: &str = "none (measured data)";

/// Events taken from the backend per frame.
const MAX_EVENTS_PER_FRAME: usize = 1000;

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
}

/// A texture on screen and what it was made from.
struct Shown {
    texture: TextureHandle,
    raw: Arc<PreviewImage>,
    range: (f32, f32),
    iteration: usize,
    full_size: (u32, u32),
}

/// Zoom and pan shared by the live view's images: `zoom` 1 shows the whole image, `center` is in
/// texture coordinates (0..1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedView {
    pub zoom: f32,
    pub center: Vec2,
}

impl Default for SharedView {
    fn default() -> Self {
        SharedView {
            zoom: 1.0,
            center: Vec2::splat(0.5),
        }
    }
}

impl SharedView {
    /// The visible part of the texture.
    pub fn uv(&self) -> Rect {
        let half = 0.5 / self.zoom;
        let c = Vec2::new(
            self.center.x.clamp(half, 1.0 - half),
            self.center.y.clamp(half, 1.0 - half),
        );
        Rect::from_center_size(c.to_pos2(), Vec2::splat(2.0 * half))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum DialogKind {
    OpenData,
    /// A measurement file for operator `i`.
    OpenMeasurement(usize),
    OpenPreset,
    SavePreset,
}

/// The image shown in the Data panel, loaded locally for display.
#[derive(Default)]
struct DataView {
    /// The source (with seed and dimensionality) the shown or loading image comes from.
    source: Option<(ImageSource, u64, bool)>,
    loading: Option<Receiver<Result<Tensor, String>>>,
    /// The loaded array (what a remote backend receives inline, since it cannot read our files).
    loaded: Option<Arc<Tensor>>,
    volume: Option<Arc<Tensor>>,
    /// Spatial shape of the loaded image.
    spatial: Vec<usize>,
    axis: usize,
    slice: usize,
    error: Option<String>,
}

/// Inputs of the planned patch map; it is recomputed only when they change.
type PlanKey = (String, Vec<usize>, usize);

/// The workbench.
pub struct Workbench {
    /// The experiment being edited (what Run sends and Save writes).
    pub preset: Preset,
    /// Where the preset came from (`bundled:quick` or a path).
    pub origin: String,
    /// Why the edited preset would be rejected, if it would.
    pub preset_problem: Option<String>,
    pub session: Session,
    pub app_state: AppState,
    pub view: SharedView,
    /// Show the tiles over the images.
    pub show_patch_map: bool,
    backend: Option<Box<dyn Backend>>,
    backend_label: String,
    /// Generation of the current connection; events of older ones are dropped.
    generation: u64,
    starter: Arc<Mutex<Starter>>,
    /// A backend being started on a helper thread.
    starting: Option<Receiver<crate::Result<Link>>>,
    start_pending: bool,
    /// After a remote attach, ask the server to replay and stream its running job.
    resume_on_attach: bool,
    /// The backend is remote (attached): files are sent inline.
    remote: bool,
    /// The "Attach…" window: open, and the token typed into it (kept only while it is open).
    attach_open: bool,
    attach_token: String,
    pump: Pump,
    ctx: Arc<OnceLock<egui::Context>>,
    shown: HashMap<Slot, Shown>,
    data: DataView,
    dialog: Option<(DialogKind, Receiver<Option<PathBuf>>)>,
    thumbs: Vec<Option<Thumb>>,
    planned: Option<(PlanKey, Result<PatchMap, String>)>,
    measurement: usize,
    /// Loaded measurement files (`[measurements] paths`), read for display and remote runs.
    measured: MeasurementFiles,
    /// The noise model set aside while measurements are loaded (restored when simulating again).
    stashed_noise: Option<NoiseConfig>,
    state_path: Option<PathBuf>,
}

impl Workbench {
    pub fn new(options: WorkbenchOptions) -> Workbench {
        let ctx: Arc<OnceLock<egui::Context>> = Arc::default();
        let pump = Pump::start(repaint_waker(&ctx));
        pump.send(PumpMsg::SetDisplay(options.state.display));
        let loaded = options.preset.unwrap_or_else(|| {
            Preset::load("quick", &[]).expect("the bundled quick preset is valid")
        });
        let mut wb = Workbench {
            preset: loaded.preset.clone(),
            origin: loaded.origin.clone(),
            preset_problem: None,
            session: Session::default(),
            app_state: options.state,
            view: SharedView::default(),
            show_patch_map: true,
            backend: None,
            backend_label: String::new(),
            generation: 0,
            starter: Arc::new(Mutex::new(options.starter)),
            starting: None,
            start_pending: options.start_backend,
            resume_on_attach: false,
            remote: false,
            attach_open: false,
            attach_token: String::new(),
            pump,
            ctx,
            shown: HashMap::new(),
            data: DataView::default(),
            dialog: None,
            thumbs: Vec::new(),
            planned: None,
            measurement: 0,
            measured: MeasurementFiles::default(),
            stashed_noise: None,
            state_path: options.state_path,
        };
        wb.set_preset(loaded);
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
        if let Some(r) = ctx.input(|i| i.viewport().inner_rect) {
            self.app_state.window_size = [r.width(), r.height()];
        }

        egui::Panel::top("top").show(ui, |ui| self.top_bar(ui));
        self.attach_window(&ctx);
        egui::Panel::bottom("log")
            .resizable(true)
            .default_size(120.0)
            .show(ui, |ui| self.log_panel(ui));
        egui::Panel::left("editors")
            .resizable(true)
            .default_size(330.0)
            .show(ui, |ui| {
                ScrollArea::vertical().show(ui, |ui| self.editor_panels(ui));
            });
        egui::CentralPanel::default().show(ui, |ui| {
            ScrollArea::vertical().show(ui, |ui| self.central(ui));
        });
    }

    // ---- backend ------------------------------------------------------------------------------

    /// Starts a backend on a helper thread (replacing a dead or live one); [`Self::poll`] attaches
    /// it when it is up.
    pub fn start_backend(&mut self) {
        if self.starting.is_some() {
            return;
        }
        self.drop_backend();
        self.remote = false;
        let ranks = self.app_state.ranks.max(1);
        let starter = self.starter.clone();
        let wake = self.waker();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-start-backend".into())
            .spawn(move || {
                let mut start = starter.lock().unwrap_or_else(|p| p.into_inner());
                let _ = tx.send(start(ranks));
                wake();
            })
            .expect("spawning a thread");
        self.starting = Some(rx);
        self.session.log(
            LogLevel::Info,
            format!("starting a backend with {ranks} rank(s)…"),
        );
    }

    /// Connects to a running `tessera serve` (remote attach: `host:port` through an SSH tunnel, or a
    /// Unix socket path) on a helper thread, then resumes the stream of its running job, if any.
    pub fn attach_remote(&mut self, address: &str, token: Option<String>) {
        if self.starting.is_some() {
            return;
        }
        let addr = match address.trim().parse::<crate::protocol::BackendAddr>() {
            Ok(a) => a,
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("attach: `{address}`: {e}"));
                return;
            }
        };
        self.drop_backend();
        self.app_state.attach_address = address.trim().to_string();
        let wake = self.waker();
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gui-attach".into())
            .spawn(move || {
                let link = crate::protocol::Client::connect(&addr, token).map(|client| {
                    let label = format!("attached to {addr}");
                    Box::new(super::local::ServeBackend::new(client, None, label)) as Link
                });
                let _ = tx.send(link);
                wake();
            })
            .expect("spawning a thread");
        self.starting = Some(rx);
        self.resume_on_attach = true;
        self.remote = true;
        self.session
            .log(LogLevel::Info, format!("attaching to {address}…"));
    }

    /// Whether a backend is being started.
    pub fn backend_starting(&self) -> bool {
        self.starting.is_some()
    }

    /// Lets go of the backend; a local backend process is stopped on a helper thread.
    fn drop_backend(&mut self) {
        if let Some(old) = self.backend.take() {
            self.generation += 1;
            let _ = std::thread::Builder::new()
                .name("gui-stop-backend".into())
                .spawn(move || drop(old));
        }
    }

    /// Uses `link` as the backend from now on.
    pub fn attach(&mut self, mut link: Link) {
        self.generation += 1;
        self.backend_label = link.describe();
        let wake = self.waker();
        link.set_waker(Box::new(wake));
        self.backend = Some(link);
        self.session.connected = true;
        self.session.backend = None;
        self.session
            .log(LogLevel::Info, format!("backend: {}", self.backend_label));
        self.send(Request::Status);
        if std::mem::take(&mut self.resume_on_attach) {
            self.session.adopt_next_job = true;
            self.send(Request::Attach { job: None });
        }
    }

    /// Whether a backend is attached and alive.
    pub fn has_backend(&self) -> bool {
        self.backend.is_some()
    }

    fn send(&mut self, request: Request) -> bool {
        let Some(b) = self.backend.as_mut() else {
            self.session.log(
                LogLevel::Error,
                "no backend is running: start one with \"Start backend\"",
            );
            return false;
        };
        match b.send(request) {
            Ok(()) => true,
            Err(e) => {
                self.drop_backend();
                self.session.disconnected(&e.to_string());
                false
            }
        }
    }

    /// Submits the edited preset.
    pub fn run(&mut self) {
        let toml = match self.checked_toml() {
            Ok(t) => t,
            Err(e) => {
                self.session
                    .log(LogLevel::Error, format!("cannot run this preset: {e}"));
                return;
            }
        };
        let (toml, inline) = match self.inline_for_remote(toml) {
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
            preview_max_side: MAX_TEXTURE_SIDE as u32,
        });
        if sent {
            self.session.submitted();
            self.shown
                .retain(|slot, _| matches!(slot, Slot::Data | Slot::GroundTruth));
            self.shown.remove(&Slot::GroundTruth);
        }
    }

    /// A remote backend cannot read this machine's files: an image opened from a file travels with
    /// the job (`[image] inline = "image"`) as the array the Data panel loaded, and loaded
    /// measurements as `[measurements] inline = ["measurement_0", …]`. Local backends and samples
    /// keep the plain preset.
    fn inline_for_remote(
        &self,
        toml: String,
    ) -> Result<(String, Vec<crate::protocol::InlineArray>), String> {
        if !self.remote {
            return Ok((toml, Vec::new()));
        }
        let array = |name: String, t: &Tensor| crate::protocol::InlineArray {
            name,
            shape: t.shape().to_vec(),
            data: t.data().to_vec(),
        };
        let mut preset = self.preset.clone();
        let mut arrays = Vec::new();
        if self.preset.image.path.is_some() {
            let loaded = match (&self.data.source, &self.data.loaded) {
                (Some((source, _, _)), Some(t)) if *source == self.preset.image => t.clone(),
                _ => return Err("the image is still loading (or failed to load)".into()),
            };
            preset.image = ImageSource {
                // The loaded array is already converted.
                inline: Some("image".into()),
                ..ImageSource::default()
            };
            arrays.push(array("image".into(), &loaded));
        }
        if let Some(m) = &mut preset.measurements
            && !m.paths.is_empty()
        {
            for (i, path) in m.paths.iter().enumerate() {
                let name = format!("measurement_{i}");
                match self.measured.get(path) {
                    Some(Measured::Ready(t)) => arrays.push(array(name.clone(), t)),
                    Some(Measured::Failed(e)) => {
                        return Err(format!("measurement #{i} could not be read: {e}"));
                    }
                    _ => return Err(format!("measurement #{i} is still being read")),
                }
                m.inline.push(name);
            }
            m.paths.clear();
        }
        if arrays.is_empty() {
            return Ok((toml, arrays));
        }
        Ok((preset.to_toml().map_err(|e| e.to_string())?, arrays))
    }

    /// Asks the backend to stop the current job.
    pub fn stop(&mut self) {
        if let JobState::Running { job } = *self.session.state()
            && self.send(Request::Cancel { job })
        {
            self.session.cancelled();
            self.session
                .log(LogLevel::Info, format!("stopping job {job}…"));
        }
    }

    /// The preset as TOML after a full validation (what Run sends and Save writes).
    pub fn checked_toml(&self) -> crate::Result<String> {
        let toml = self.preset.to_toml()?;
        Preset::from_toml(&toml, "workbench", &[])?;
        Ok(toml)
    }

    // ---- presets ------------------------------------------------------------------------------

    /// Opens a loaded preset in the editors. `Preset::load` made its paths absolute, so the preset
    /// runs wherever the backend's working directory is.
    pub fn set_preset(&mut self, loaded: LoadedPreset) {
        self.preset = loaded.preset;
        self.stashed_noise = None;
        self.request_measurements(false);
        self.origin = loaded.origin;
        self.thumbs.clear();
        self.edited();
    }

    /// Loads a preset file (from the dialog or the recent list); errors go to the log and banner.
    pub fn open_preset_path(&mut self, path: &Path) {
        match Preset::load(&path.to_string_lossy(), &[]) {
            Ok(loaded) => {
                self.app_state.remember(path);
                self.remember_folder(path);
                self.session
                    .log(LogLevel::Info, format!("opened preset {}", path.display()));
                self.set_preset(loaded);
            }
            Err(e) => self
                .session
                .log(LogLevel::Error, format!("could not open the preset: {e}")),
        }
    }

    /// Writes the preset as TOML (atomically), the file `tessera run` takes.
    pub fn save_preset_path(&mut self, path: &Path) {
        let result = self
            .checked_toml()
            .and_then(|t| crate::io::write_atomic(path, t.as_bytes()));
        match result {
            Ok(()) => {
                self.app_state.remember(path);
                self.remember_folder(path);
                self.origin = path.display().to_string();
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
        self.preset.image = ImageSource {
            path: Some(path.to_path_buf()),
            grayscale: self.preset.image.grayscale,
            ..ImageSource::default()
        };
        self.edited();
    }

    /// Uses `path` as the measurement of operator `i` (switching to loaded measurements).
    pub fn open_measurement_path(&mut self, i: usize, path: &Path) {
        self.remember_folder(path);
        if self.preset.measurements.is_none() {
            self.set_measurements_loaded(true);
        }
        let n = self.preset.physics.len();
        if let Some(m) = &mut self.preset.measurements
            && i < n
        {
            m.paths.resize_with(n, PathBuf::new);
            m.paths[i] = path.to_path_buf();
        }
        self.shown.remove(&Slot::Measurement(i));
        let wake = self.waker();
        self.measured.request(path, true, wake);
        self.edited();
    }

    /// Simulated (`false`) or loaded (`true`) measurements. Loading sets the noise model aside (it
    /// only applies to simulation) and brings it back when simulating again.
    pub fn set_measurements_loaded(&mut self, loaded: bool) {
        if loaded == self.preset.measurements.is_some() {
            return;
        }
        if loaded {
            self.stashed_noise = self.preset.noise.take();
            self.preset.measurements = Some(MeasurementSource {
                paths: vec![PathBuf::new(); self.preset.physics.len()],
                inline: Vec::new(),
            });
        } else {
            self.preset.measurements = None;
            if self.preset.noise.is_none() {
                self.preset.noise = self.stashed_noise.take();
            }
            self.shown
                .retain(|slot, _| !matches!(slot, Slot::Measurement(_)));
        }
        self.edited();
    }

    /// Whether measurement files are still being read.
    pub fn measurements_loading(&self) -> bool {
        self.measured.loading()
    }

    /// Starts reading the preset's measurement files that are not read yet.
    fn request_measurements(&mut self, reread: bool) {
        let paths: Vec<PathBuf> = self
            .preset
            .measurements
            .iter()
            .flat_map(|m| m.paths.iter().cloned())
            .collect();
        for p in paths {
            let wake = self.waker();
            self.measured.request(&p, reread, wake);
        }
    }

    /// Shows the ready measurement files in their Measurement panes.
    fn show_measurements(&mut self, ready: &[PathBuf]) {
        let Some(m) = &self.preset.measurements else {
            return;
        };
        for (i, p) in m.paths.iter().enumerate() {
            if !ready.contains(p) {
                continue;
            }
            let Some(Measured::Ready(t)) = self.measured.get(p) else {
                continue;
            };
            self.pump.send(PumpMsg::Show {
                slot: Slot::Measurement(i),
                tensor: t.clone(),
                display: self.app_state.display,
            });
        }
    }

    /// A callback that asks for a repaint (for helper threads).
    fn waker(&self) -> impl Fn() + Send + Sync + 'static {
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

    /// After any edit: re-validate.
    fn edited(&mut self) {
        self.preset_problem = self.checked_toml().err().map(|e| e.to_string());
    }

    fn open_dialog(&mut self, kind: DialogKind) {
        if self.dialog.is_some() {
            return;
        }
        let folder = self.app_state.last_folder.clone();
        let name = format!("{}.toml", self.preset.name);
        let (tx, rx) = mpsc::channel();
        let wake = self.waker();
        std::thread::Builder::new()
            .name("gui-dialog".into())
            .spawn(move || {
                let mut d = rfd::AsyncFileDialog::new();
                if let Some(f) = folder {
                    d = d.set_directory(f);
                }
                let picked = match kind {
                    DialogKind::OpenMeasurement(_) => pollster::block_on(
                        d.add_filter("measurements", &["npy", "nii", "gz", "tif", "tiff", "png"])
                            .pick_file(),
                    ),
                    DialogKind::OpenData => pollster::block_on(
                        d.add_filter(
                            "images and volumes",
                            &["png", "jpg", "jpeg", "tif", "tiff", "npy", "nii", "gz"],
                        )
                        .pick_file(),
                    ),
                    DialogKind::OpenPreset => {
                        pollster::block_on(d.add_filter("preset", &["toml"]).pick_file())
                    }
                    DialogKind::SavePreset => pollster::block_on(d.set_file_name(name).save_file()),
                };
                let _ = tx.send(picked.map(|h| h.path().to_path_buf()));
                wake();
            })
            .expect("spawning a thread");
        self.dialog = Some((kind, rx));
    }

    // ---- incoming -----------------------------------------------------------------------------

    /// Takes what the backend, the pump, the dialog and the image loader have ready (never blocks).
    fn poll(&mut self) {
        if let Some(rx) = &self.starting {
            match rx.try_recv() {
                Ok(Ok(link)) => {
                    self.starting = None;
                    self.attach(link);
                }
                Ok(Err(e)) => {
                    self.starting = None;
                    let what = if std::mem::take(&mut self.resume_on_attach) {
                        "could not attach"
                    } else {
                        "could not start a backend"
                    };
                    self.session.log(LogLevel::Error, format!("{what}: {e}"));
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.starting = None,
            }
        }
        // Events are moved (previews are not copied) into the worker, in order; a bounded number
        // per frame keeps a flood from stalling the frame.
        if let Some(b) = self.backend.as_mut() {
            for _ in 0..MAX_EVENTS_PER_FRAME {
                match b.try_recv() {
                    Some(e) => self.pump.send(PumpMsg::Incoming(self.generation, e)),
                    None => break,
                }
            }
        }
        for out in self.pump.drain() {
            match out {
                PumpOut::Incoming(g, _) if g != self.generation => {}
                PumpOut::Incoming(_, Incoming::Event(e)) => self.session.apply(e),
                PumpOut::Incoming(_, Incoming::Disconnected(reason)) => {
                    if self.backend.is_some() {
                        self.drop_backend();
                        self.session.disconnected(&reason);
                    }
                }
                PumpOut::Mapped(m) => self.show_mapped(m),
            }
        }
        if let Some((kind, rx)) = &self.dialog {
            let kind = *kind;
            match rx.try_recv() {
                Ok(picked) => {
                    self.dialog = None;
                    if let Some(path) = picked {
                        match kind {
                            DialogKind::OpenData => self.open_data_path(&path),
                            DialogKind::OpenMeasurement(i) => self.open_measurement_path(i, &path),
                            DialogKind::OpenPreset => self.open_preset_path(&path),
                            DialogKind::SavePreset => self.save_preset_path(&path),
                        }
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.dialog = None,
            }
        }
        self.poll_data();
        let ready = self.measured.poll();
        if !ready.is_empty() {
            self.show_measurements(&ready);
        }
    }

    fn show_mapped(&mut self, m: Mapped) {
        if let Some((g, job)) = m.job {
            let current = self.session.current_job();
            if g != self.generation || current != Some(job) {
                return;
            }
        }
        let Some(ctx) = self.ctx.get().cloned() else {
            return;
        };
        match self.shown.get_mut(&m.slot) {
            Some(s) => {
                // Re-mappings (contrast changes) keep the iteration they show.
                if m.job.is_some() || m.slot == Slot::Data {
                    s.iteration = m.iteration;
                    s.full_size = m.full_size;
                }
                s.texture.set(m.color, TextureOptions::LINEAR);
                s.raw = m.raw;
                s.range = m.range;
            }
            None => {
                let texture =
                    ctx.load_texture(format!("{:?}", m.slot), m.color, TextureOptions::LINEAR);
                self.shown.insert(
                    m.slot,
                    Shown {
                        texture,
                        raw: m.raw,
                        range: m.range,
                        iteration: m.iteration,
                        full_size: m.full_size,
                    },
                );
            }
        }
    }

    /// Starts loading the Data panel's image when the source changed; takes a finished load.
    fn poll_data(&mut self) {
        if let Some(rx) = &self.data.loading {
            match rx.try_recv() {
                Ok(Ok(t)) => {
                    self.data.loading = None;
                    self.data.error = None;
                    self.data.spatial = t.shape()[2..].to_vec();
                    let t = Arc::new(t);
                    self.data.loaded = Some(t.clone());
                    if t.shape().len() == 5 {
                        let v = t;
                        self.data.axis = 0;
                        self.data.slice = v.shape()[2] / 2;
                        self.data.volume = Some(v.clone());
                        self.pump.send(PumpMsg::Slice {
                            volume: v,
                            axis: 0,
                            index: self.data.slice,
                            display: self.app_state.display,
                        });
                    } else {
                        self.data.volume = None;
                        self.pump.send(PumpMsg::Show {
                            slot: Slot::Data,
                            tensor: t,
                            display: self.app_state.display,
                        });
                    }
                }
                Ok(Err(e)) => {
                    self.data.loading = None;
                    self.shown.remove(&Slot::Data);
                    self.data.spatial.clear();
                    self.data.error = Some(e.clone());
                    self.session
                        .log(LogLevel::Error, format!("could not load the image: {e}"));
                }
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => self.data.loading = None,
            }
        }
        let want = (
            self.preset.image.clone(),
            self.preset.seed,
            self.preset.is_volumetric(),
        );
        if self.data.source.as_ref() == Some(&want) {
            return;
        }
        self.data.source = Some(want.clone());
        if !want.0.has_truth() {
            // Measured data of an unknown image: nothing to load or show.
            self.data.loaded = None;
            self.data.volume = None;
            self.data.spatial.clear();
            self.data.error = None;
            self.shown.remove(&Slot::Data);
            return;
        }
        let (tx, rx) = mpsc::channel();
        let wake = self.waker();
        std::thread::Builder::new()
            .name("gui-load".into())
            .spawn(move || {
                let (source, seed, volumetric) = want;
                let r =
                    crate::job::load_image(&source, volumetric, seed).map_err(|e| e.to_string());
                let _ = tx.send(r);
                wake();
            })
            .expect("spawning a thread");
        self.data.loading = Some(rx);
    }

    /// Whether the Data panel's image is still loading.
    pub fn data_loading(&self) -> bool {
        self.data.loading.is_some()
    }

    /// The error of the last Data panel load, if it failed.
    pub fn data_error(&self) -> Option<&str> {
        self.data.error.as_deref()
    }

    /// The iteration and size of the reconstruction on screen.
    pub fn shown_reconstruction(&self) -> Option<(usize, [usize; 2])> {
        self.shown
            .get(&Slot::Reconstruction)
            .map(|s| (s.iteration, s.texture.size()))
    }

    /// Size of measurement `i`'s texture on screen.
    pub fn shown_measurement(&self, i: usize) -> Option<[usize; 2]> {
        self.shown
            .get(&Slot::Measurement(i))
            .map(|s| s.texture.size())
    }

    /// Size of the Data panel's texture on screen.
    pub fn shown_data_size(&self) -> Option<[usize; 2]> {
        self.shown.get(&Slot::Data).map(|s| s.texture.size())
    }

    fn set_display(&mut self, display: Display) {
        self.app_state.display = display;
        self.pump.send(PumpMsg::SetDisplay(display));
        if let Some(v) = &self.data.volume {
            self.pump.send(PumpMsg::Slice {
                volume: v.clone(),
                axis: self.data.axis,
                index: self.data.slice,
                display,
            });
        }
        for (slot, s) in &self.shown {
            if *slot == Slot::Data && self.data.volume.is_some() {
                continue;
            }
            self.pump.send(PumpMsg::Map {
                slot: *slot,
                raw: s.raw.clone(),
                display,
            });
        }
    }

    // ---- panels -------------------------------------------------------------------------------

    fn top_bar(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.heading("tessera");
            ui.separator();
            let color = if self.backend.is_some() {
                Color32::from_rgb(60, 180, 75)
            } else {
                Color32::GRAY
            };
            let (dot, _) = ui.allocate_exact_size(Vec2::splat(12.0), Sense::hover());
            ui.painter().circle_filled(dot.center(), 5.0, color);
            let status = match (&self.backend, &self.session.backend) {
                (Some(_), Some(info)) => format!(
                    "{} — {} rank(s) over {}",
                    self.backend_label, info.world_size, info.transport
                ),
                (Some(_), None) => self.backend_label.clone(),
                (None, _) => "no backend".to_string(),
            };
            ui.label(status);
            let ranks_label = ui.label("ranks");
            ui.add(egui::DragValue::new(&mut self.app_state.ranks).range(1..=64))
                .labelled_by(ranks_label.id);
            let start = if self.backend.is_some() {
                "Restart backend"
            } else {
                "Start backend"
            };
            if self.starting.is_some() {
                ui.spinner();
            } else {
                if ui.button(start).clicked() {
                    self.start_backend();
                }
                if ui.button("Attach…").clicked() {
                    self.attach_open = true;
                }
            }
            ui.separator();
            let busy = self.session.is_busy();
            let can_run = !busy && self.backend.is_some() && self.preset_problem.is_none();
            if ui.add_enabled(can_run, egui::Button::new("Run")).clicked() {
                self.run();
            }
            if ui.add_enabled(busy, egui::Button::new("Stop")).clicked() {
                self.stop();
            }
            ui.label(self.job_status());
        });
    }

    /// "Attach…": the address of a running `tessera serve` and its token.
    fn attach_window(&mut self, ctx: &egui::Context) {
        if !self.attach_open {
            return;
        }
        let mut open = true;
        let mut connect = false;
        egui::Window::new("Attach to a backend")
            .open(&mut open)
            .collapsible(false)
            .show(ctx, |ui| {
                ui.label(
                    "A backend started with `tessera serve --listen HOST:PORT --token-file F` \
                     (through an SSH tunnel: ssh -L 7341:localhost:7341 cluster), or a Unix socket path.",
                );
                let addr_label = ui.label("address");
                ui.text_edit_singleline(&mut self.app_state.attach_address)
                    .labelled_by(addr_label.id);
                let token_label = ui.label("token");
                ui.add(egui::TextEdit::singleline(&mut self.attach_token).password(true))
                    .labelled_by(token_label.id);
                connect = ui.button("Connect").clicked();
            });
        if connect {
            let address = self.app_state.attach_address.clone();
            let token = std::mem::take(&mut self.attach_token);
            let token = (!token.trim().is_empty()).then(|| token.trim().to_string());
            self.attach_remote(&address, token);
            open = false;
        }
        if !open {
            self.attach_token.clear();
        }
        self.attach_open = open;
    }

    fn job_status(&self) -> String {
        let progress = self
            .session
            .history
            .last()
            .map(|p| format!(" {}/{}", p.iteration, self.session.iterations_planned))
            .unwrap_or_default();
        match self.session.state() {
            JobState::Idle => "idle".into(),
            JobState::Submitted => "submitted…".into(),
            JobState::Running { job } => format!("job {job} running{progress}"),
            JobState::Finished { job } => format!("job {job} finished{progress}"),
            JobState::Cancelled { job } => format!("job {job} stopped{progress}"),
            JobState::Failed { .. } => "failed".into(),
        }
    }

    fn log_panel(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.strong("Log");
            if ui.small_button("clear").clicked() {
                self.session.log.clear();
            }
        });
        // Only the visible rows are laid out, so a long log costs nothing per frame.
        let row_height = ui.text_style_height(&egui::TextStyle::Monospace);
        let lines = &self.session.log;
        ScrollArea::vertical()
            .stick_to_bottom(true)
            .auto_shrink([false, false])
            .show_rows(ui, row_height, lines.len(), |ui, rows| {
                for line in &lines[rows] {
                    let color = match line.level {
                        LogLevel::Info => ui.visuals().text_color(),
                        LogLevel::Warn => Color32::from_rgb(220, 160, 40),
                        LogLevel::Error => Color32::from_rgb(230, 70, 70),
                    };
                    ui.label(RichText::new(&line.text).color(color).monospace());
                }
            });
    }

    fn editor_panels(&mut self, ui: &mut Ui) {
        let mut changed = false;
        egui::CollapsingHeader::new("Presets")
            .default_open(true)
            .show(ui, |ui| self.presets_panel(ui));
        egui::CollapsingHeader::new("Data")
            .default_open(true)
            .show(ui, |ui| changed |= self.data_panel(ui));
        egui::CollapsingHeader::new("Physics")
            .default_open(true)
            .show(ui, |ui| {
                changed |= editors::physics_stack(
                    ui,
                    &mut self.preset.physics,
                    &mut self.thumbs,
                    self.preset.measurements.as_mut().map(|m| &mut m.paths),
                );
                self.measurements_panel(ui);
            });
        egui::CollapsingHeader::new("Denoiser and tiling")
            .default_open(true)
            .show(ui, |ui| {
                changed |= editors::denoiser(ui, &mut self.preset.denoiser);
                changed |= editors::tiling(
                    ui,
                    &mut self.preset.tiling,
                    &mut self.preset.distributed.tile_assignment,
                );
                if self.preset.tiling.is_some() {
                    ui.checkbox(&mut self.show_patch_map, "show patch map");
                    self.patch_map_legend(ui);
                }
            });
        egui::CollapsingHeader::new("Algorithm")
            .default_open(true)
            .show(ui, |ui| {
                changed |= editors::algorithm(ui, &mut self.preset.algorithm)
            });
        if changed {
            self.edited();
        }
        if let Some(p) = &self.preset_problem {
            ui.colored_label(Color32::from_rgb(230, 70, 70), p.as_str());
        }
    }

    /// Simulated measurements (with the noise editor) or one loaded file per operator.
    fn measurements_panel(&mut self, ui: &mut Ui) {
        let was = self.preset.measurements.is_some();
        let mut loaded = was;
        ui.horizontal(|ui| {
            ui.label("Measurements:");
            ui.radio_value(&mut loaded, false, "simulated");
            ui.radio_value(&mut loaded, true, "loaded");
        });
        if loaded != was {
            self.set_measurements_loaded(loaded);
        }
        let Some(m) = &self.preset.measurements else {
            if editors::noise(ui, &mut self.preset.noise) {
                self.edited();
            }
            return;
        };
        let mut pick = None;
        for (i, path) in m.paths.iter().enumerate() {
            ui.horizontal(|ui| {
                if ui
                    .small_button(format!("Load #{i}…"))
                    .on_hover_text(format!("the measurement of operator #{i}"))
                    .clicked()
                {
                    pick = Some(i);
                }
                let text = self.measured.describe(path);
                match self.measured.get(path) {
                    Some(Measured::Failed(_)) => {
                        ui.colored_label(Color32::from_rgb(230, 70, 70), text)
                    }
                    _ => ui.label(text),
                }
                .on_hover_text(path.display().to_string());
            });
        }
        if let Some(i) = pick {
            self.open_dialog(DialogKind::OpenMeasurement(i));
        }
    }

    fn presets_panel(&mut self, ui: &mut Ui) {
        ui.label(format!("{} ({})", self.preset.name, self.origin));
        ui.horizontal_wrapped(|ui| {
            for (name, _) in BUNDLED {
                if ui.button(*name).clicked() {
                    match Preset::load(name, &[]) {
                        Ok(p) => self.set_preset(p),
                        Err(e) => self.session.log(LogLevel::Error, e.to_string()),
                    }
                }
            }
        });
        ui.horizontal(|ui| {
            if ui.button("Open preset…").clicked() {
                self.open_dialog(DialogKind::OpenPreset);
            }
            if ui.button("Save preset…").clicked() {
                self.open_dialog(DialogKind::SavePreset);
            }
        });
        if !self.app_state.recent.is_empty() {
            ui.label("Recent:");
            let mut open = None;
            for p in &self.app_state.recent {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string());
                if ui
                    .button(name)
                    .on_hover_text(p.display().to_string())
                    .clicked()
                {
                    open = Some(p.clone());
                }
            }
            if let Some(p) = open {
                self.open_preset_path(&p);
            }
        }
    }

    fn data_panel(&mut self, ui: &mut Ui) -> bool {
        let mut changed = false;
        let volumetric = self.preset.is_volumetric();
        let img = &mut self.preset.image;
        let current = match (img.sample, &img.path) {
            (Some(s), _) => format!("{s:?}"),
            (None, Some(p)) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            _ if img.shape.is_some() => UNKNOWN_IMAGE.into(),
            _ => "none".into(),
        };
        // An unknown image starts with the shape of the image shown so far.
        let default_shape = match self.data.loaded.as_deref() {
            Some(t) if t.shape().len() == if volumetric { 5 } else { 4 } => t.shape()[1..].to_vec(),
            _ if volumetric => vec![1, 32, 32, 32],
            _ => vec![1, 256, 256],
        };
        let samples: &[(Sample, &str)] = if volumetric {
            &[(Sample::SheppLogan3d, "Shepp-Logan 3-D")]
        } else {
            &[
                (Sample::Natural, "natural image"),
                (Sample::SheppLogan, "Shepp-Logan"),
            ]
        };
        egui::ComboBox::from_label("sample")
            .selected_text(current)
            .show_ui(ui, |ui| {
                for (s, name) in samples {
                    if ui.selectable_label(img.sample == Some(*s), *name).clicked() {
                        img.sample = Some(*s);
                        img.path = None;
                        img.shape = None;
                        let n = if volumetric { 3 } else { 2 };
                        if img.size.as_ref().map(Vec::len) != Some(n) {
                            img.size = Some(vec![if volumetric { 32 } else { 256 }; n]);
                        }
                        changed = true;
                    }
                }
                if ui
                    .selectable_label(img.shape.is_some(), UNKNOWN_IMAGE)
                    .on_hover_text("reconstruct loaded measurements of an image nobody has seen")
                    .clicked()
                    && img.shape.is_none()
                {
                    *img = ImageSource {
                        shape: Some(default_shape.clone()),
                        ..ImageSource::default()
                    };
                    changed = true;
                }
            });
        if let Some(shape) = &mut img.shape {
            let names: &[&str] = if volumetric {
                &["channels", "depth", "height", "width"]
            } else {
                &["channels", "height", "width"]
            };
            if shape.len() != names.len() {
                *shape = default_shape;
                changed = true;
            }
            for (d, name) in shape.iter_mut().zip(names) {
                changed |= ui
                    .horizontal(|ui| {
                        let l = ui.label(*name);
                        ui.add(egui::DragValue::new(d).range(1..=16384))
                            .labelled_by(l.id)
                            .changed()
                    })
                    .inner;
            }
        }
        if img.sample.is_some() {
            let mut side = img
                .size
                .as_ref()
                .and_then(|s| s.last().copied())
                .unwrap_or(256);
            let label = ui.label("size (px)");
            if ui
                .add(egui::DragValue::new(&mut side).range(8..=4096))
                .labelled_by(label.id)
                .changed()
            {
                let n = if volumetric { 3 } else { 2 };
                img.size = Some(vec![side; n]);
                changed = true;
            }
        }
        if ui.button("Open image…").clicked() {
            self.open_dialog(DialogKind::OpenData);
        }
        if self.data.loading.is_some() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("loading…");
            });
        } else if !self.data.spatial.is_empty() {
            ui.label(format!("image {:?}", self.data.spatial));
        }
        if let Some(e) = &self.data.error {
            ui.colored_label(Color32::from_rgb(230, 70, 70), e);
        }
        if let Some(v) = self.data.volume.clone() {
            let dims = [v.shape()[2], v.shape()[3], v.shape()[4]];
            let mut axis = self.data.axis;
            let mut slice = self.data.slice;
            egui::ComboBox::from_label("axis")
                .selected_text(["depth", "rows", "columns"][axis])
                .show_ui(ui, |ui| {
                    for (a, n) in ["depth", "rows", "columns"].iter().enumerate() {
                        ui.selectable_value(&mut axis, a, *n);
                    }
                });
            slice = slice.min(dims[axis] - 1);
            ui.add(egui::Slider::new(&mut slice, 0..=dims[axis] - 1).text("slice"));
            if (axis, slice) != (self.data.axis, self.data.slice) {
                self.data.axis = axis;
                self.data.slice = slice;
                self.pump.send(PumpMsg::Slice {
                    volume: v,
                    axis,
                    index: slice,
                    display: self.app_state.display,
                });
            }
        }
        ui.separator();
        let mut d = self.app_state.display;
        let mut auto = d.contrast == Contrast::Auto;
        if ui.checkbox(&mut auto, "auto contrast").changed() {
            d.contrast = if auto {
                Contrast::Auto
            } else {
                let (lo, hi) = self
                    .shown
                    .get(&Slot::Data)
                    .map(|s| s.range)
                    .unwrap_or((0.0, 1.0));
                Contrast::Range { lo, hi }
            };
        }
        if let Contrast::Range { lo, hi } = &mut d.contrast {
            let l = ui.label("window");
            ui.horizontal(|ui| {
                ui.add(egui::DragValue::new(lo).speed(0.01))
                    .labelled_by(l.id);
                ui.add(egui::DragValue::new(hi).speed(0.01))
                    .labelled_by(l.id);
            });
        }
        egui::ComboBox::from_label("colormap")
            .selected_text(d.colormap.name())
            .show_ui(ui, |ui| {
                for c in Colormap::ALL {
                    ui.selectable_value(&mut d.colormap, c, c.name());
                }
            });
        if d != self.app_state.display {
            self.set_display(d);
        }
        changed
    }

    /// The patch map to draw now: the backend's during a run, else planned here.
    fn patch_map(&mut self) -> Option<Result<PatchMap, String>> {
        if let Some(m) = &self.session.patch_map {
            return Some(Ok(m.clone()));
        }
        let tiling = self.preset.tiling.as_ref()?;
        if self.data.spatial.is_empty() {
            return None;
        }
        let world = self
            .session
            .backend
            .as_ref()
            .map(|b| b.world_size)
            .unwrap_or(self.app_state.ranks)
            .max(1);
        let key: PlanKey = (
            format!("{tiling:?}{:?}", self.preset.distributed.tile_assignment),
            self.data.spatial.clone(),
            world,
        );
        if self.planned.as_ref().map(|(k, _)| k) != Some(&key) {
            let map = patch_map::plan_patch_map(
                tiling,
                &self.data.spatial,
                world,
                self.preset.distributed.tile_assignment,
            )
            .map_err(|e| e.to_string());
            self.planned = Some((key, map));
        }
        self.planned.as_ref().map(|(_, m)| m.clone())
    }

    fn patch_map_legend(&mut self, ui: &mut Ui) {
        match self.patch_map() {
            Some(Ok(map)) => {
                ui.horizontal_wrapped(|ui| {
                    ui.label(format!("{} tiles:", map.tiles.len()));
                    for (rank, n) in patch_map::tiles_per_rank(&map).iter().enumerate() {
                        ui.label(
                            RichText::new(format!("rank {rank}: {n}"))
                                .color(patch_map::rank_color(rank)),
                        );
                    }
                });
            }
            Some(Err(e)) => {
                ui.colored_label(Color32::from_rgb(230, 70, 70), e);
            }
            None => {}
        }
    }

    fn central(&mut self, ui: &mut Ui) {
        if let Some(err) = self.session.error.clone() {
            egui::Frame::new()
                .fill(Color32::from_rgb(90, 25, 25))
                .inner_margin(6.0)
                .show(ui, |ui| {
                    ui.horizontal_wrapped(|ui| {
                        ui.label(RichText::new(format!("Error: {err}")).color(Color32::WHITE));
                        if self.backend.is_none()
                            && self.starting.is_none()
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
        self.live_view(ui);
        ui.separator();
        self.curves(ui);
        ui.separator();
        self.timing(ui);
    }

    fn live_view(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.strong("Live view");
            if ui.small_button("reset zoom").clicked() {
                self.view = SharedView::default();
            }
            let n_ops = self.preset.physics.len().max(1);
            if n_ops > 1 {
                let l = ui.label("measurement #");
                ui.add(egui::DragValue::new(&mut self.measurement).range(0..=n_ops - 1))
                    .labelled_by(l.id);
            }
        });
        let map = if self.show_patch_map {
            self.patch_map().and_then(Result::ok)
        } else {
            None
        };
        let gt_slot = if self.shown.contains_key(&Slot::GroundTruth) {
            Slot::GroundTruth
        } else {
            Slot::Data
        };
        let truth_title = if self.preset.image.has_truth() {
            "Ground truth"
        } else {
            "Ground truth: none (measured data)"
        };
        let panes = [
            ("Reconstruction", Slot::Reconstruction),
            ("Measurement", Slot::Measurement(self.measurement)),
            (truth_title, gt_slot),
        ];
        let width = ((ui.available_width() - 16.0) / 3.0).max(64.0);
        let mut view = self.view;
        ui.horizontal_top(|ui| {
            for (title, slot) in panes {
                ui.vertical(|ui| {
                    ui.set_width(width);
                    let caption = match self.shown.get(&slot) {
                        Some(s) if slot == Slot::Reconstruction => {
                            format!("{title} (iteration {})", s.iteration)
                        }
                        Some(s) => format!("{title} {}×{}", s.full_size.0, s.full_size.1),
                        None => title.to_string(),
                    };
                    ui.label(caption);
                    let overlay = map
                        .as_ref()
                        .filter(|_| slot != Slot::Measurement(self.measurement));
                    image_pane(ui, self.shown.get(&slot), width, &mut view, overlay);
                });
            }
        });
        self.view = view;
    }

    fn curves(&mut self, ui: &mut Ui) {
        let h = &self.session.history;
        ui.horizontal(|ui| {
            ui.strong("Quality");
            match self.session.latest_psnr() {
                Some(p) => ui.label(format!("PSNR {p:.2} dB")),
                None => ui.label("PSNR —"),
            };
        });
        if h.is_empty() {
            return;
        }
        let psnr: PlotPoints = h
            .iter()
            .filter_map(|p| p.psnr_db.map(|v| [p.iteration as f64, v]))
            .collect();
        let objective: Vec<[f64; 2]> = h
            .iter()
            .filter_map(|p| p.objective.map(|v| [p.iteration as f64, v]))
            .collect();
        let w = if objective.is_empty() {
            ui.available_width()
        } else {
            ui.available_width() / 2.0 - 4.0
        };
        ui.horizontal(|ui| {
            Plot::new("psnr")
                .height(160.0)
                .width(w)
                .x_axis_label("iteration")
                .y_axis_label("PSNR (dB)")
                .show(ui, |p| p.line(Line::new("PSNR", psnr)));
            if !objective.is_empty() {
                Plot::new("objective")
                    .height(160.0)
                    .width(w)
                    .x_axis_label("iteration")
                    .y_axis_label("objective")
                    .show(ui, |p| {
                        p.line(Line::new("objective", PlotPoints::from(objective)))
                    });
            }
        });
    }

    fn timing(&mut self, ui: &mut Ui) {
        ui.strong("Timing per rank");
        let totals = self.session.rank_totals();
        if totals.is_empty() {
            ui.label("no iterations yet");
            return;
        }
        let h = &self.session.history;
        Plot::new("timing")
            .height(180.0)
            .x_axis_label("iteration")
            .y_axis_label("seconds")
            .legend(Legend::default())
            .show(ui, |p| {
                for t in &totals {
                    let color = patch_map::rank_color(t.rank);
                    let series = |f: fn(&crate::protocol::RankIteration) -> f64| -> PlotPoints {
                        h.iter()
                            .filter_map(|it| {
                                it.ranks
                                    .iter()
                                    .find(|r| r.rank == t.rank)
                                    .map(|r| [it.iteration as f64, f(r)])
                            })
                            .collect()
                    };
                    p.line(
                        Line::new(
                            format!("rank {} gradient", t.rank),
                            series(|r| r.gradient_secs),
                        )
                        .color(color),
                    );
                    p.line(
                        Line::new(
                            format!("rank {} denoiser", t.rank),
                            series(|r| r.denoiser_secs),
                        )
                        .color(color)
                        .style(egui_plot::LineStyle::dashed_loose()),
                    );
                    p.line(
                        Line::new(
                            format!("rank {} communication", t.rank),
                            series(|r| r.communication_secs),
                        )
                        .color(color)
                        .style(egui_plot::LineStyle::dotted_dense()),
                    );
                }
            });
        egui::Grid::new("timing_table")
            .striped(true)
            .show(ui, |ui| {
                for head in [
                    "rank",
                    "gradient s",
                    "denoiser s",
                    "communication s",
                    "s / iteration",
                ] {
                    ui.strong(head);
                }
                ui.end_row();
                for t in &totals {
                    ui.label(t.rank.to_string());
                    ui.label(format!("{:.3}", t.gradient_secs));
                    ui.label(format!("{:.3}", t.denoiser_secs));
                    ui.label(format!("{:.3}", t.communication_secs));
                    ui.label(format!(
                        "{:.4}",
                        (t.gradient_secs + t.denoiser_secs) / t.iterations.max(1) as f64
                    ));
                    ui.end_row();
                }
            });
        if !self.session.outputs.is_empty() {
            ui.label(format!(
                "outputs: {}",
                self.session
                    .outputs
                    .first()
                    .and_then(|p| p.parent())
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ));
        }
    }

    /// The job whose events are drawn (for tests).
    pub fn current_job(&self) -> Option<JobId> {
        self.session.current_job()
    }
}

/// Draws one image of the live view with the shared zoom and pan, and the patch map over it.
fn image_pane(
    ui: &mut Ui,
    shown: Option<&Shown>,
    width: f32,
    view: &mut SharedView,
    map: Option<&PatchMap>,
) {
    let aspect = shown
        .map(|s| {
            let [w, h] = s.texture.size();
            h as f32 / w.max(1) as f32
        })
        .unwrap_or(1.0);
    let size = Vec2::new(width, (width * aspect).min(600.0));
    let (rect, response) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, Color32::from_gray(24));
    let Some(s) = shown else {
        painter.text(
            rect.center(),
            egui::Align2::CENTER_CENTER,
            "—",
            egui::FontId::proportional(16.0),
            Color32::GRAY,
        );
        return;
    };
    if response.hovered() {
        let scroll = ui.input(|i| i.smooth_scroll_delta.y);
        if scroll != 0.0 {
            view.zoom = (view.zoom * (scroll * 0.003).exp()).clamp(1.0, 64.0);
        }
    }
    if response.dragged() {
        let d = response.drag_delta();
        view.center -= Vec2::new(d.x / rect.width(), d.y / rect.height()) / view.zoom;
    }
    if response.double_clicked() {
        *view = SharedView::default();
    }
    let uv = view.uv();
    painter.image(s.texture.id(), rect, uv, Color32::WHITE);
    if let Some(map) = map {
        // The whole image's rectangle on screen, given the visible uv window.
        let to_screen = |u: f32, v: f32| {
            Pos2::new(
                rect.min.x + (u - uv.min.x) / uv.width() * rect.width(),
                rect.min.y + (v - uv.min.y) / uv.height() * rect.height(),
            )
        };
        let image_rect = Rect::from_min_max(to_screen(0.0, 0.0), to_screen(1.0, 1.0));
        patch_map::paint(&painter, image_rect, map);
    }
}
