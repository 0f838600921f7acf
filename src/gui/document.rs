//! The experiment being edited: the [`Preset`], where it came from, the inputs it names as the
//! workbench holds them (the Data panel's image, loaded measurement files), and whether it may run.
//!
//! Nothing here draws. The editors change `preset` and call [`Document::edited`]; the check before
//! Run ([`Document::validate`]) goes further than the preset's own validation: the tiling is planned
//! against the real image's shape, and the files the run will read (weights, models, kernels,
//! measurements) must exist and be readable here when the backend is local.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};

use super::measured::{Measured, MeasurementFiles};
use crate::denoise::DenoiserConfig;
use crate::dist::denoise::TileAssignment;
use crate::dsn::run::DsnPreset;
use crate::error::Error;
use crate::fwi::FwiPreset;
use crate::physics::{NoiseConfig, PhysicsConfig};
use crate::preset::{ImageSource, LoadedPreset, MeasurementSource, Preset};
use crate::protocol::{InlineArray, InlineFile, MAX_FILES_BYTES, PatchMap};
use crate::tensor::Tensor;
use crate::tiling::{Extent, TilingConfig, TilingKind};
use crate::train::TrainPreset;

/// Why the edited preset cannot run, and the preset field it concerns (empty when none).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl Problem {
    fn of(e: &Error) -> Problem {
        let field = match e {
            Error::InvalidConfig { field, .. } => field.clone(),
            _ => String::new(),
        };
        Problem {
            field,
            message: e.to_string(),
        }
    }

    fn at(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem::of(&Error::config(field, message))
    }

    /// Whether it concerns `section` (a field name or a prefix such as `tiling`).
    pub fn concerns(&self, section: &str) -> bool {
        self.field == section
            || self
                .field
                .strip_prefix(section)
                .is_some_and(|rest| rest.starts_with(['.', '[']))
    }
}

/// What the loading thread sends: the array and its file's voxel size (W, H, D in metres), or why not.
type LoadedImage = Result<(Tensor, Option<[f64; 3]>), String>;

/// The Data panel's image (or volume), loaded on a helper thread for display and for remote runs.
#[derive(Default)]
pub struct DataImage {
    /// The source (with seed and dimensionality) the loaded or loading image comes from.
    source: Option<(ImageSource, u64, bool)>,
    loading: Option<Receiver<LoadedImage>>,
    /// The loaded array, `(B, C, H, W)` or `(B, C, D, H, W)`.
    pub loaded: Option<Arc<Tensor>>,
    /// The loaded file's voxel size along W, H and D in metres, where the file states it (NIfTI).
    pub voxel_m: Option<[f64; 3]>,
    pub error: Option<String>,
}

impl DataImage {
    /// Spatial shape of the loaded image (empty when none).
    pub fn spatial(&self) -> &[usize] {
        self.loaded
            .as_deref()
            .map(|t| &t.shape()[2..])
            .unwrap_or(&[])
    }

    pub fn is_loading(&self) -> bool {
        self.loading.is_some()
    }
}

/// What finished in the background since the last poll.
pub enum Loaded {
    /// The Data panel's image (its array, or why it could not be loaded).
    Image(Result<Arc<Tensor>, String>),
    /// The source has no image (measured data of an unknown image).
    NoImage,
    /// Measurement files became readable: operator index and array.
    Measurements(Vec<(usize, Arc<Tensor>)>),
}

/// The plan drawn as the patch map, and what it was planned from.
struct PlannedMap {
    key: (TilingConfig, TileAssignment, Vec<usize>, usize),
    map: Result<Arc<PatchMap>, String>,
}

/// A training experiment (what `tessera train` runs) opened instead of an imaging preset.
#[derive(Debug, Clone, PartialEq)]
// One edited preset per workbench: the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Training {
    /// A denoiser trained on noisy crops of an image, decomposed over the ranks.
    Denoiser(TrainPreset),
    /// A Multi-DSN, one domain per rank.
    Dsn(DsnPreset),
}

impl Training {
    /// Reads a preset file if it is a training preset (`Ok(None)` when it is another kind); returns
    /// it with its folder.
    pub fn load(path: &Path) -> crate::Result<Option<(Training, PathBuf)>> {
        let name = path.to_string_lossy();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        if DsnPreset::is_dsn(&text) {
            return Ok(DsnPreset::load(&name, &[])?.map(|(p, base)| (Training::Dsn(p), base)));
        }
        if TrainPreset::is_train(&text) {
            let (p, base) = TrainPreset::load(&name, &[])?;
            return Ok(Some((Training::Denoiser(p), base)));
        }
        Ok(None)
    }

    /// A bundled training preset by name (either kind).
    pub fn bundled(name: &str) -> crate::Result<Training> {
        if let Some((p, _)) = DsnPreset::load(name, &[])? {
            return Ok(Training::Dsn(p));
        }
        TrainPreset::load(name, &[]).map(|(p, _)| Training::Denoiser(p))
    }

    pub fn name(&self) -> &str {
        match self {
            Training::Denoiser(p) => &p.name,
            Training::Dsn(p) => &p.name,
        }
    }

    /// As TOML, after its own validation (parsed back).
    fn checked_toml(&self) -> crate::Result<String> {
        match self {
            Training::Denoiser(p) => {
                let toml = p.to_toml()?;
                TrainPreset::from_toml(&toml, "workbench", &[])?;
                Ok(toml)
            }
            Training::Dsn(p) => {
                let toml = p.to_toml()?;
                DsnPreset::from_toml(&toml, "workbench", &[])?;
                Ok(toml)
            }
        }
    }

    /// The files and folders the run reads, with the field naming each.
    fn inputs(&self) -> Vec<(String, PathBuf, bool)> {
        match self {
            Training::Denoiser(p) => {
                let mut v: Vec<(String, PathBuf, bool)> = p
                    .image
                    .iter()
                    .flat_map(|i| i.path.iter())
                    .map(|f| ("image.path".to_string(), f.clone(), false))
                    .collect();
                // `[[images]]`/`[[held_out]]` paths are files or folders of them.
                for (list, entries) in [("images", &p.images), ("held_out", &p.held_out)] {
                    for (i, e) in entries.iter().enumerate() {
                        if let Some(f) = &e.path {
                            v.push((format!("{list}[{i}].path"), f.clone(), f.is_dir()));
                        }
                    }
                }
                let mut d = p.denoiser.clone();
                v.extend(
                    d.paths_mut()
                        .map(|f| ("denoiser.weights".to_string(), f.clone(), false)),
                );
                v
            }
            Training::Dsn(p) => p
                .domains
                .iter()
                .enumerate()
                .filter_map(|(i, d)| {
                    let f = d.folder.clone()?;
                    Some((format!("domains[{i}].folder"), f, true))
                })
                .collect(),
        }
    }
}

/// The experiment as the editors hold it: what an edit changes, undo restores and Save writes.
#[derive(Debug, Clone, PartialEq)]
struct Edit {
    preset: Preset,
    fwi: Option<FwiPreset>,
    training: Option<Training>,
}

/// Edits kept for undo.
const MAX_UNDO: usize = 200;

/// The experiment being edited.
pub struct Document {
    /// The experiment (what Run sends and Save writes).
    pub preset: Preset,
    /// A full-waveform inversion opened instead of an imaging preset: then it is what Run sends
    /// and Save writes, and only the editors and views of its kind show.
    pub fwi: Option<FwiPreset>,
    /// A training experiment opened instead of an imaging preset (as `fwi`).
    pub training: Option<Training>,
    /// Where the preset came from (`bundled:quick` or a path).
    pub origin: String,
    /// Why the preset cannot run now, if it cannot.
    pub problem: Option<Problem>,
    /// Advice that does not stop a run (e.g. tiles that mostly compute their overlap).
    pub warnings: Vec<String>,
    pub data: DataImage,
    /// Loaded measurement files (`[measurements] paths`), read for display and remote runs.
    pub measured: MeasurementFiles,
    /// The noise model set aside while measurements are loaded (restored when simulating again).
    stashed_noise: Option<NoiseConfig>,
    planned: Option<PlannedMap>,
    /// Ranks the patch map is planned for.
    pub world: usize,
    /// The backend is remote: files named by the preset are read there, not here.
    pub remote: bool,
    /// The experiment after each edit since it was opened, the current one last.
    undo: Vec<Edit>,
    /// Edits undone, the most recent last.
    redo: Vec<Edit>,
    /// As it was opened or last saved.
    saved: Option<Edit>,
}

impl Document {
    pub fn new(loaded: LoadedPreset, world: usize) -> Document {
        let mut doc = Document {
            preset: loaded.preset.clone(),
            fwi: None,
            training: None,
            origin: String::new(),
            problem: None,
            warnings: Vec::new(),
            data: DataImage::default(),
            measured: MeasurementFiles::default(),
            stashed_noise: None,
            planned: None,
            world: world.max(1),
            remote: false,
            undo: Vec::new(),
            redo: Vec::new(),
            saved: None,
        };
        doc.set_preset(loaded, || {});
        doc
    }

    /// Opens a loaded preset. `Preset::load` made its paths (image, measurements, weights, models,
    /// kernels) absolute against the preset's folder, so the preset runs wherever the backend's
    /// working directory is and saves as what it is.
    pub fn set_preset(&mut self, loaded: LoadedPreset, wake: impl Fn() + Clone + Send + 'static) {
        self.fwi = None;
        self.training = None;
        self.preset = loaded.preset;
        self.stashed_noise = None;
        self.origin = loaded.origin;
        self.request_measurements(false, wake);
        self.edited();
        self.start_history();
    }

    /// Opens an FWI preset (its files made absolute against `base`, the preset's folder).
    pub fn set_fwi(&mut self, mut preset: FwiPreset, base: &Path, origin: String) {
        preset.resolve_paths(base);
        self.fwi = Some(preset);
        self.training = None;
        self.origin = origin;
        self.planned = None;
        self.edited();
        self.start_history();
    }

    /// Opens a training preset (its files made absolute against `base`, the preset's folder).
    pub fn set_training(&mut self, mut training: Training, base: &Path, origin: String) {
        match &mut training {
            Training::Denoiser(p) => p.resolve_paths(base),
            Training::Dsn(p) => p.resolve_paths(base),
        }
        self.training = Some(training);
        self.fwi = None;
        self.origin = origin;
        self.planned = None;
        self.edited();
        self.start_history();
    }

    fn edit(&self) -> Edit {
        Edit {
            preset: self.preset.clone(),
            fwi: self.fwi.clone(),
            training: self.training.clone(),
        }
    }

    /// A document was opened: its history starts here, and it is as saved.
    fn start_history(&mut self) {
        let now = self.edit();
        self.undo = vec![now.clone()];
        self.redo.clear();
        self.saved = Some(now);
    }

    /// Keeps the experiment as it is now for undo, when an edit changed it.
    pub fn record(&mut self) {
        let now = self.edit();
        if self.undo.last() == Some(&now) {
            return;
        }
        self.undo.push(now);
        if self.undo.len() > MAX_UNDO {
            self.undo.remove(0);
        }
        self.redo.clear();
    }

    /// Goes back to the experiment before the last edit; false when there is none.
    pub fn undo(&mut self) -> bool {
        if self.undo.len() < 2 {
            return false;
        }
        if let Some(now) = self.undo.pop() {
            self.redo.push(now);
        }
        self.restore();
        true
    }

    /// Applies the last undone edit again; false when there is none.
    pub fn redo(&mut self) -> bool {
        let Some(next) = self.redo.pop() else {
            return false;
        };
        self.undo.push(next);
        self.restore();
        true
    }

    pub fn can_undo(&self) -> bool {
        self.undo.len() > 1
    }

    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    /// Sets the editors to the newest kept state.
    fn restore(&mut self) {
        if let Some(e) = self.undo.last().cloned() {
            self.preset = e.preset;
            self.fwi = e.fwi;
            self.training = e.training;
        }
        self.edited();
    }

    /// Whether the experiment differs from what was opened or last saved.
    pub fn is_modified(&self) -> bool {
        self.saved.as_ref() != Some(&self.edit())
    }

    /// The experiment was written to `path`: it now comes from there and counts as saved.
    pub fn mark_saved(&mut self, path: &Path) {
        self.origin = path.display().to_string();
        self.record();
        self.saved = Some(self.edit());
    }

    /// Names the experiment (what `tessera run` and the run folders call it).
    pub fn rename(&mut self, name: &str) {
        match (&mut self.training, &mut self.fwi) {
            (Some(Training::Denoiser(p)), _) => p.name = name.to_string(),
            (Some(Training::Dsn(p)), _) => p.name = name.to_string(),
            (None, Some(f)) => f.name = name.to_string(),
            (None, None) => self.preset.name = name.to_string(),
        }
    }

    /// Whether an imaging preset (not an FWI or a training experiment) is being edited.
    pub fn is_imaging(&self) -> bool {
        self.fwi.is_none() && self.training.is_none()
    }

    /// The name of the experiment being edited.
    pub fn name(&self) -> &str {
        if let Some(t) = &self.training {
            return t.name();
        }
        self.fwi.as_ref().map_or(&self.preset.name, |f| &f.name)
    }

    /// The preset as TOML after its own validation (what Save writes).
    pub fn checked_toml(&self) -> crate::Result<String> {
        if let Some(t) = &self.training {
            return t.checked_toml();
        }
        if let Some(f) = &self.fwi {
            let toml = f.to_toml()?;
            FwiPreset::from_toml(&toml, "workbench", &[])?;
            return Ok(toml);
        }
        let toml = self.preset.to_toml()?;
        Preset::from_toml(&toml, "workbench", &[])?;
        Ok(toml)
    }

    /// After any edit, image load or backend change: checks again.
    pub fn edited(&mut self) {
        self.warnings.clear();
        self.problem = self.validate().err();
    }

    /// Everything Run checks: the preset, the image, the tiling against the image's real shape,
    /// and (with a local backend) the files the run will read.
    fn validate(&mut self) -> Result<(), Problem> {
        self.checked_toml().map_err(|e| Problem::of(&e))?;
        if self.fwi.is_some() {
            // Its files are read by rank 0 of the backend, which names a missing one.
            return Ok(());
        }
        if let Some(t) = &self.training {
            // A remote backend reads its own files (paths on that machine).
            for (field, path, folder) in t.inputs().into_iter().filter(|_| !self.remote) {
                if (folder && !path.is_dir()) || (!folder && !path.is_file()) {
                    let what = if folder { "folder" } else { "file" };
                    return Err(Problem::at(
                        field,
                        format!("no such {what}: {}", path.display()),
                    ));
                }
            }
            return Ok(());
        }
        if self.preset.image.has_truth()
            && let Some(e) = &self.data.error
        {
            return Err(Problem::at(
                "image",
                format!("the image cannot be loaded: {e}"),
            ));
        }
        if let Some(Err(message)) = self.patch_map().map(|m| m.map(|_| ())) {
            // The planner's error already names its field.
            return Err(Problem {
                field: "tiling".into(),
                message,
            });
        }
        self.spatial_needs_a_native_network()?;
        self.channel_split_fits_the_image()?;
        self.tiling_warnings();
        if !self.remote {
            for (field, path) in files_read_by(&self.preset) {
                if !path.is_file() {
                    return Err(Problem::at(
                        field,
                        format!("no such file: {}", path.display()),
                    ));
                }
            }
        }
        if let Some(m) = &self.preset.measurements {
            for (i, path) in m.paths.iter().enumerate() {
                if let Some(Measured::Failed(e)) = self.measured.get(path) {
                    return Err(Problem::at(format!("measurements.paths[{i}]"), e.clone()));
                }
            }
        }
        Ok(())
    }

    /// `split_by_channel` against the loaded image's channels (the job checks it when it builds
    /// the stack; here Run says so before anything is sent).
    fn channel_split_fits_the_image(&self) -> Result<(), Problem> {
        let field = "distributed.split_by_channel";
        match (self.preset.distributed.split_by_channel, &self.data.loaded) {
            (Some(parts), Some(image)) => crate::physics::channels::ChannelPart { index: 0, parts }
                .range(image.shape()[1], field)
                .map(|_| ())
                .map_err(|e| Problem::of(&e)),
            _ => Ok(()),
        }
    }

    /// The exact spatial decomposition runs tessera's own DnCNN and DRUNet only (checked from the
    /// config: building the denoiser would read its weights on the UI thread).
    fn spatial_needs_a_native_network(&self) -> Result<(), Problem> {
        use crate::denoise::DenoiserConfig;
        use crate::nn::Engine;
        if self.preset.tiling.as_ref().map(|t| t.kind) != Some(TilingKind::Spatial) {
            return Ok(());
        }
        let native = match &self.preset.denoiser {
            Some(DenoiserConfig::Drunet(c)) => c.engine == Engine::Native,
            Some(DenoiserConfig::Dncnn(c)) => c.engine == Engine::Native,
            _ => false,
        };
        if native {
            return Ok(());
        }
        Err(Problem::at(
            "tiling",
            "\"spatial (exact)\" runs tessera's own (native) DnCNN and DRUNet only: choose one \
             of them as the denoiser, or another tiling",
        ))
    }

    /// Tiles that compute far more than they keep are allowed but worth a word.
    fn tiling_warnings(&mut self) {
        let Some(t) = &self.preset.tiling else { return };
        let (Extent::Uniform(patch), Some(Extent::Uniform(overlap))) = (&t.patch_size, &t.overlap)
        else {
            return;
        };
        let (patch, overlap) = (*patch, *overlap);
        if t.kind == TilingKind::Basic || patch == 0 {
            return;
        }
        let window = patch + 2 * overlap;
        let ratio = (window * window) as f64 / (patch * patch) as f64;
        if ratio >= 4.0 {
            self.warnings.push(format!(
                "each {patch} px tile is denoised with {overlap} px of overlap on every side: \
                 {ratio:.0}× the pixels it keeps"
            ));
        }
    }

    /// Why Run is not possible (None when it is).
    pub fn run_blocker(&self) -> Option<String> {
        if let Some(p) = &self.problem {
            return Some(p.message.clone());
        }
        if !self.is_imaging() {
            return None;
        }
        if self.data.is_loading() && self.preset.image.has_truth() {
            return Some("the image is still loading".into());
        }
        if self.measured.loading() {
            return Some("measurement files are still being read".into());
        }
        None
    }

    /// The patch map of the preset's tiling on the loaded image and `self.world` ranks (None
    /// without tiling or image); planned again only when one of its inputs changed.
    pub fn patch_map(&mut self) -> Option<Result<Arc<PatchMap>, String>> {
        if !self.is_imaging() {
            return None;
        }
        let tiling = self.preset.tiling.as_ref()?;
        let spatial = self.data.spatial();
        if spatial.is_empty() {
            return None;
        }
        let key = (
            tiling.clone(),
            self.preset.distributed.tile_assignment,
            spatial.to_vec(),
            self.world,
        );
        if self.planned.as_ref().map(|p| &p.key) != Some(&key) {
            let map = crate::dist::patch_map::PatchMap::plan(tiling, spatial, self.world, key.1)
                .map(|m| Arc::new(PatchMap::from(&m)))
                .map_err(|e| e.to_string());
            self.planned = Some(PlannedMap { key, map });
        }
        self.planned.as_ref().map(|p| p.map.clone())
    }

    /// Whether the Data panel's loaded image is the one the preset names now (not an earlier
    /// document's, with this one's still to load).
    pub fn data_is_current(&self) -> bool {
        let want = (
            &self.preset.image,
            self.preset.seed,
            self.preset.is_volumetric(),
        );
        !self.data.is_loading()
            && self
                .data
                .source
                .as_ref()
                .is_some_and(|(image, seed, volumetric)| (image, *seed, *volumetric) == want)
    }

    /// Uses an image or volume file as the ground truth.
    pub fn open_data_path(&mut self, path: &Path) {
        self.preset.image = ImageSource {
            path: Some(path.to_path_buf()),
            grayscale: self.preset.image.grayscale,
            ..ImageSource::default()
        };
        self.edited();
    }

    /// Uses `path` as the measurement of operator `i` (switching to loaded measurements).
    pub fn open_measurement_path(
        &mut self,
        i: usize,
        path: &Path,
        wake: impl Fn() + Clone + Send + 'static,
    ) {
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
        }
        self.edited();
    }

    /// Starts reading the preset's measurement files that are not read yet (all again if `reread`).
    pub fn request_measurements(&mut self, reread: bool, wake: impl Fn() + Clone + Send + 'static) {
        let paths: Vec<PathBuf> = self
            .preset
            .measurements
            .iter()
            .flat_map(|m| m.paths.iter().cloned())
            .collect();
        for p in paths {
            self.measured.request(&p, reread, wake.clone());
        }
    }

    /// Takes finished loads and starts loading the Data panel's image when its source changed.
    pub fn poll(&mut self, wake: impl Fn() + Send + 'static) -> Vec<Loaded> {
        let mut out = Vec::new();
        let mut changed = false;
        if let Some(rx) = &self.data.loading {
            match rx.try_recv() {
                Ok(r) => {
                    self.data.loading = None;
                    changed = true;
                    match r {
                        Ok((t, voxel_m)) => {
                            let t = Arc::new(t);
                            self.data.error = None;
                            self.data.loaded = Some(t.clone());
                            self.data.voxel_m = voxel_m;
                            out.push(Loaded::Image(Ok(t)));
                        }
                        Err(e) => {
                            self.data.loaded = None;
                            self.data.voxel_m = None;
                            self.data.error = Some(e.clone());
                            out.push(Loaded::Image(Err(e)));
                        }
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => self.data.loading = None,
            }
        }
        let want = (
            self.preset.image.clone(),
            self.preset.seed,
            self.preset.is_volumetric(),
        );
        if self.data.loading.is_none() && self.data.source.as_ref() != Some(&want) {
            self.data.source = Some(want.clone());
            changed = true;
            if want.0.has_truth() {
                let (tx, rx) = mpsc::channel();
                std::thread::Builder::new()
                    .name("gui-load".into())
                    .spawn(move || {
                        let (source, seed, volumetric) = want;
                        let voxel_m = source.path.as_deref().and_then(voxel_size_m);
                        let r = crate::job::load_image(&source, volumetric, seed)
                            .map(|t| (t, voxel_m))
                            .map_err(|e| e.to_string());
                        let _ = tx.send(r);
                        wake();
                    })
                    .expect("spawning a thread");
                self.data.loading = Some(rx);
            } else {
                self.data.loaded = None;
                self.data.voxel_m = None;
                self.data.error = None;
                out.push(Loaded::NoImage);
            }
        }
        let ready = self.measured.poll();
        if !ready.is_empty() {
            changed = true;
            if let Some(m) = &self.preset.measurements {
                let arrays = m
                    .paths
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| ready.contains(p))
                    .filter_map(|(i, p)| match self.measured.get(p) {
                        Some(Measured::Ready(t)) => Some((i, t.clone())),
                        _ => None,
                    })
                    .collect();
                out.push(Loaded::Measurements(arrays));
            }
        }
        if changed {
            self.edited();
        }
        out
    }

    /// The preset as sent to the backend. A remote backend cannot read this machine's files: an
    /// image opened from a file travels with the job (`[image] inline = "image"`) as the array the
    /// Data panel loaded, and loaded measurements as `[measurements] inline = ["measurement_0", …]`;
    /// an FWI preset's models and data travel whole, as files (read here, when Run is pressed:
    /// they are not loaded for display). Local backends and samples get the plain preset.
    pub fn submission(&self) -> Result<(String, Vec<InlineArray>, Vec<InlineFile>), String> {
        let toml = self.checked_toml().map_err(|e| e.to_string())?;
        if !self.remote || self.training.is_some() {
            // A training job reads its image files where the backend runs.
            return Ok((toml, Vec::new(), Vec::new()));
        }
        if let Some(fwi) = &self.fwi {
            let mut fwi = fwi.clone();
            // Its paths were made absolute when it was opened.
            let files: Vec<InlineFile> = fwi
                .pack_files(Path::new(""), MAX_FILES_BYTES)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(name, bytes)| InlineFile { name, bytes })
                .collect();
            if files.is_empty() {
                return Ok((toml, Vec::new(), files));
            }
            return Ok((fwi.to_toml().map_err(|e| e.to_string())?, Vec::new(), files));
        }
        let array = |name: String, t: &Tensor| InlineArray {
            name,
            shape: t.shape().to_vec(),
            data: t.data().to_vec(),
        };
        let mut preset = self.preset.clone();
        let mut arrays = Vec::new();
        if self.preset.image.path.is_some() {
            let current = self.data.source.as_ref().map(|s| &s.0) == Some(&self.preset.image);
            let loaded = match &self.data.loaded {
                Some(t) if current && !self.data.is_loading() => t.clone(),
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
            return Ok((toml, arrays, Vec::new()));
        }
        Ok((
            preset.to_toml().map_err(|e| e.to_string())?,
            arrays,
            Vec::new(),
        ))
    }
}

/// The files a run reads besides the image and measurements, with the preset field naming each.
fn files_read_by(preset: &Preset) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    for (i, op) in preset.physics.iter().enumerate() {
        let kernel = match op {
            PhysicsConfig::Blur(c) => c.kernel_file.as_ref(),
            PhysicsConfig::Blur3d(c) => c.kernel_file.as_ref(),
            PhysicsConfig::Tomography(_) | PhysicsConfig::Tomography3d(_) => None,
        };
        if let Some(k) = kernel {
            files.push((format!("physics[{i}].kernel_file"), k.clone()));
        }
    }
    match &preset.denoiser {
        // "random" and "bundled" name weights, not files.
        Some(DenoiserConfig::Drunet(c)) => files.extend(
            c.weights
                .clone()
                .filter(|w| !crate::nn::bundled::is_named(w))
                .map(|w| ("denoiser.weights".into(), w)),
        ),
        Some(DenoiserConfig::Dncnn(c)) => files.extend(
            c.weights
                .clone()
                .filter(|w| !crate::nn::bundled::is_named(w))
                .map(|w| ("denoiser.weights".into(), w)),
        ),
        Some(DenoiserConfig::Torchscript(c)) => {
            files.push(("denoiser.model".into(), c.model.clone()))
        }
        _ => {}
    }
    if let Some(p) = &preset.image.path {
        files.push(("image.path".into(), p.clone()));
    }
    files
}

/// The voxel size a file states (NIfTI's header), for scale bars; none for other kinds, or where
/// the header cannot say (the image's own load reports a broken file).
fn voxel_size_m(path: &Path) -> Option<[f64; 3]> {
    (crate::io::FileKind::from_path(path) == Some(crate::io::FileKind::Nifti))
        .then(|| {
            crate::io::nifti::peek_nifti_voxel_size_m(path)
                .ok()
                .flatten()
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The editor shows a config error under the field it names; a bug or a peer's bad data is no
    /// field's fault and shows under none (a rank out of range was once a config error "peer").
    #[test]
    fn only_config_errors_are_placed_under_an_editor_field() {
        let bug = crate::dist::collective::check_rank(3, 2, "peer").unwrap_err();
        let peer = Error::bad_peer_data(1, "unreadable output shapes");
        for e in [bug, peer] {
            let p = Problem::of(&e);
            assert_eq!(p.field, "", "{e}");
            for section in ["peer", "physics", "tiling", "denoiser", "image", "gather"] {
                assert!(!p.concerns(section), "{e} placed under {section}");
            }
        }
        let config = Problem::of(&Error::config("tiling.stride", "must be ≥ 1"));
        assert!(config.concerns("tiling") && config.concerns("tiling.stride"));
    }
}
