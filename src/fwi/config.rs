//! The FWI preset: versioned TOML with `[model]`, `[acquisition]`, `[wavelet]`, `[wave]`, `[fwi]`,
//! optional `[data]` and `[output]`; unknown fields rejected by name, every value range-checked,
//! `--set key=value` overrides applied to the TOML tree before it is typed (as for imaging presets).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dist::physics::SumOrder;
use crate::error::{Error, Result};
use crate::physics::wave::{AcquisitionConfig, Precision, WaveConfig, WaveletConfig};

/// The FWI preset format version this build reads and writes.
pub const FWI_VERSION: u32 = 1;

/// The FWI presets shipped in `presets/`, embedded in the binary.
pub const BUNDLED_FWI: &[(&str, &str)] = &[(
    "fwi_marmousi",
    include_str!("../../presets/fwi_marmousi.toml"),
)];

/// One inversion experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FwiPreset {
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds the shot batches (and a generated model).
    #[serde(default)]
    pub seed: u64,
    pub model: ModelConfig,
    /// Observed data from a file instead of modelling it from the true model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ArrayFile>,
    pub acquisition: AcquisitionConfig,
    pub wavelet: WaveletConfig,
    pub wave: WaveConfig,
    pub fwi: InversionConfig,
    #[serde(default)]
    pub output: FwiOutputConfig,
    #[serde(default, skip_serializing_if = "FwiDistributedConfig::is_default")]
    pub distributed: FwiDistributedConfig,
}

/// `[distributed]` of an inversion: how far an elastic run (`--elastic`, docs/ELASTIC.md) may
/// shrink, and how often it writes its checkpoint — the keys of the same names in an imaging
/// preset's `[distributed]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FwiDistributedConfig {
    /// The fewest ranks an elastic inversion may shrink to before it stops (`None`: 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ranks: Option<usize>,
    /// Epochs between an elastic inversion's checkpoints (`None`:
    /// [`crate::preset::DEFAULT_CHECKPOINT_EVERY`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_every: Option<usize>,
}

impl FwiDistributedConfig {
    fn is_default(&self) -> bool {
        *self == FwiDistributedConfig::default()
    }
}

/// `[model]`: grid spacing, the true model (optional with loaded data) and the starting model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub dz_m: f64,
    pub dx_m: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<ModelSource>,
    pub start: StartModel,
}

/// Where a velocity model comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelSource {
    /// [`crate::samples::marmousi::marmousi_like`].
    Marmousi { nz: usize, nx: usize, seed: u64 },
    /// A file: `.npy`, raw little-endian float32 (`.bin`/`.raw`/`.f32`, with `shape`) or SEG-Y
    /// (`.segy`/`.sgy`: one trace per column, samples down in depth, unless `transpose`).
    File(ArrayFile),
}

/// A 2-D or 3-D array in a file, relative to the preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayFile {
    pub path: PathBuf,
    /// The shape of a raw file (C order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<usize>>,
    /// SEG-Y models: traces are rows (depth) instead of columns.
    #[serde(default)]
    pub transpose: bool,
}

/// The starting model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StartModel {
    /// The true model smoothed by a Gaussian of `sigma_cells`, the top `keep_rows` (water) kept.
    Smooth {
        sigma_cells: f64,
        #[serde(default)]
        keep_rows: usize,
    },
    File(ArrayFile),
}

/// One stage of frequency continuation: the data low-passed at `cutoff_hz` for `epochs` epochs,
/// optionally with its own step and gradient smoothing (low frequencies resolve only long
/// wavelengths: a smoother gradient and a smaller step keep Adam, which moves every cell by about
/// the learning rate whatever its gradient's size, from writing short-wavelength noise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub cutoff_hz: f64,
    pub epochs: usize,
    /// Adam's learning rate in this stage (default `fwi.learning_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// Gaussian smoothing of the gradient in this stage, cells (default
    /// `fwi.smooth_gradient_cells`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smooth_gradient_cells: Option<f64>,
}

/// `[fwi]`: the optimisation (the reference PyTorch loop's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InversionConfig {
    pub epochs: usize,
    /// Shots per epoch (all of them when larger than the survey).
    pub batch_size: usize,
    pub learning_rate: f64,
    pub betas: [f64; 2],
    /// Adam's ε; the seed uses 1e-22 (gradients of velocity are tiny).
    pub eps: f64,
    /// Velocity bounds applied after each step (m/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_velocity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_velocity: Option<f64>,
    /// Gaussian smoothing of the gradient (cells; 0 = none).
    pub smooth_gradient_cells: f64,
    /// Zero the gradient within this many cells of every source (0 = none).
    pub source_mask_cells: f64,
    /// Do not update the top rows (e.g. a known water layer).
    pub freeze_rows: usize,
    /// Frequency continuation, in order; epochs after the last stage use the full band.
    pub stages: Vec<Stage>,
    /// `exact` (the same model on any number of ranks) or `all_reduce` (the reference loop's float32 sum).
    pub sum_order: SumOrder,
}

impl Default for InversionConfig {
    fn default() -> Self {
        InversionConfig {
            epochs: 20,
            batch_size: 8,
            learning_rate: 10.0,
            betas: [0.9, 0.999],
            eps: 1e-22,
            min_velocity: None,
            max_velocity: None,
            smooth_gradient_cells: 0.0,
            source_mask_cells: 0.0,
            freeze_rows: 0,
            stages: Vec::new(),
            sum_order: SumOrder::Exact,
        }
    }
}

/// `[output]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FwiOutputConfig {
    /// Output folder; `--out` overrides it (default `out/NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Write the epoch panel (and illumination) every N epochs, and at the last; 0: only the last.
    pub figures_every: usize,
}

impl Default for FwiOutputConfig {
    fn default() -> Self {
        FwiOutputConfig {
            dir: None,
            figures_every: 10,
        }
    }
}

fn positive(field: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::config(field, format!("must be positive, got {v}")))
    }
}

impl FwiPreset {
    /// Whether TOML text is an FWI preset (it has an `[fwi]` table).
    pub fn is_fwi(text: &str) -> bool {
        toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("fwi"))
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<FwiPreset> {
        let preset: FwiPreset =
            crate::preset::parse_versioned(text, origin, overrides, "FWI preset", FWI_VERSION)?;
        preset.validate()?;
        Ok(preset)
    }

    /// Loads a bundled FWI preset by name or a file that is an FWI preset; `Ok(None)` when
    /// `name_or_path` is neither (an imaging preset or nothing).
    pub fn load(
        name_or_path: &str,
        overrides: &[String],
    ) -> Result<Option<(FwiPreset, PathBuf, String)>> {
        match crate::preset::find_text(name_or_path, BUNDLED_FWI)? {
            Some(found) if Self::is_fwi(&found.text) => Ok(Some((
                Self::from_toml(&found.text, &found.origin, overrides)?,
                found.base_dir,
                found.origin,
            ))),
            _ => Ok(None),
        }
    }

    /// Every file the preset reads: models, data, acquisition arrays, wavelet.
    pub fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut paths = Vec::new();
        if let Some(ModelSource::File(f)) = &mut self.model.truth {
            paths.push(&mut f.path);
        }
        if let StartModel::File(f) = &mut self.model.start {
            paths.push(&mut f.path);
        }
        if let Some(f) = &mut self.data {
            paths.push(&mut f.path);
        }
        if let AcquisitionConfig::Files { sources, receivers } = &mut self.acquisition {
            paths.push(sources);
            paths.push(receivers);
        }
        if let WaveletConfig::File { path, .. } = &mut self.wavelet {
            paths.push(path);
        }
        paths
    }

    /// Makes the files the preset reads absolute against `base`, so it runs the same from any
    /// working directory (the workbench sends what it opened to a backend on this machine).
    pub fn resolve_paths(&mut self, base: &Path) {
        for p in self.paths_mut() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Reads every file the preset names (relative ones against `base_dir`) so that they can travel
    /// with the job to a server that cannot see this machine's files: each path becomes the bare
    /// name the file travels under (`<i>-<file name>`, so two `model.npy` from different folders
    /// stay apart), which the server resolves in a folder of the job's own. Returns the names and
    /// bytes in the preset's order; more than `max_bytes` in all is refused before it is sent.
    pub fn pack_files(
        &mut self,
        base_dir: &Path,
        max_bytes: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut sent: Vec<(PathBuf, String)> = Vec::new();
        let mut total = 0usize;
        for (i, p) in self.paths_mut().into_iter().enumerate() {
            let path = crate::io::resolve(base_dir, p.as_path());
            // The same file named twice travels once.
            if let Some((_, name)) = sent.iter().find(|(q, _)| *q == path) {
                *p = PathBuf::from(name);
                continue;
            }
            let bytes = std::fs::read(&path)
                .map_err(|e| Error::io("reading a file of the preset", &path, e))?;
            total = total.saturating_add(bytes.len());
            if total > max_bytes {
                return Err(Error::config(
                    "preset files",
                    format!(
                        "the files this FWI preset names add up to more than the {} MiB one job can carry to a server; copy them to the server and name them by absolute path there (at {})",
                        max_bytes >> 20,
                        path.display()
                    ),
                ));
            }
            let file_name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "file".into());
            let name = format!("{i}-{file_name}");
            *p = PathBuf::from(&name);
            sent.push((path, name.clone()));
            files.push((name, bytes));
        }
        Ok(files)
    }

    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::config("preset", e.to_string()))
    }

    /// Checks every section and their consistency.
    pub fn validate(&self) -> Result<()> {
        if self.version != FWI_VERSION {
            return Err(Error::config(
                "version",
                format!("FWI preset version {} is not supported", self.version),
            ));
        }
        if self.name.trim().is_empty() {
            return Err(Error::config("name", "must not be empty"));
        }
        if self.distributed.min_ranks == Some(0) {
            return Err(Error::config("distributed.min_ranks", "must be at least 1"));
        }
        if self.distributed.checkpoint_every == Some(0) {
            return Err(Error::config(
                "distributed.checkpoint_every",
                "must be at least 1 (epochs between checkpoints)",
            ));
        }
        positive("model.dz_m", self.model.dz_m)?;
        positive("model.dx_m", self.model.dx_m)?;
        if let Some(ModelSource::Marmousi { nz, nx, .. }) = &self.model.truth
            && (*nz < 8 || *nx < 8 || nz * nx > 1 << 26)
        {
            return Err(Error::config(
                "model.truth",
                format!(
                    "a generated model needs 8..=2²⁶ cells and at least 8 per axis, got {nz}×{nx}"
                ),
            ));
        }
        match (&self.model.truth, &self.model.start, &self.data) {
            (None, StartModel::Smooth { .. }, _) => {
                return Err(Error::config(
                    "model.start",
                    "smoothing needs a true model ([model.truth])",
                ));
            }
            (None, _, None) => {
                return Err(Error::config(
                    "data",
                    "without a true model the observed data must be loaded ([data] path = ...)",
                ));
            }
            _ => {}
        }
        if let StartModel::Smooth { sigma_cells, .. } = &self.model.start
            && !(sigma_cells.is_finite() && *sigma_cells >= 0.0)
        {
            return Err(Error::config(
                "model.start.sigma_cells",
                format!("must be ≥ 0, got {sigma_cells}"),
            ));
        }
        self.acquisition.validate()?;
        self.wavelet.validate()?;
        self.wave.validate()?;
        let f = &self.fwi;
        if f.epochs == 0 {
            return Err(Error::config("fwi.epochs", "needs at least one epoch"));
        }
        if f.batch_size == 0 {
            return Err(Error::config(
                "fwi.batch_size",
                "needs at least one shot per epoch",
            ));
        }
        positive("fwi.learning_rate", f.learning_rate)?;
        positive("fwi.eps", f.eps)?;
        for (i, b) in f.betas.iter().enumerate() {
            if !(0.0..1.0).contains(b) {
                return Err(Error::config(
                    format!("fwi.betas[{i}]"),
                    format!("must be in [0, 1), got {b}"),
                ));
            }
        }
        if let (Some(lo), Some(hi)) = (f.min_velocity, f.max_velocity)
            && !(lo > 0.0 && lo < hi)
        {
            return Err(Error::config(
                "fwi.min_velocity",
                format!("bounds [{lo}, {hi}] are empty or not positive"),
            ));
        }
        for (name, v) in [
            ("fwi.smooth_gradient_cells", f.smooth_gradient_cells),
            ("fwi.source_mask_cells", f.source_mask_cells),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(name, format!("must be ≥ 0, got {v}")));
            }
        }
        let nyquist = 0.5 / self.wave.dt_s;
        let mut staged = 0;
        for (i, s) in f.stages.iter().enumerate() {
            positive(&format!("fwi.stages[{i}].cutoff_hz"), s.cutoff_hz)?;
            if let Some(lr) = s.learning_rate {
                positive(&format!("fwi.stages[{i}].learning_rate"), lr)?;
            }
            if let Some(v) = s.smooth_gradient_cells
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(Error::config(
                    format!("fwi.stages[{i}].smooth_gradient_cells"),
                    format!("must be ≥ 0, got {v}"),
                ));
            }
            if s.cutoff_hz >= nyquist {
                return Err(Error::config(
                    format!("fwi.stages[{i}].cutoff_hz"),
                    format!(
                        "{} Hz is not below the data's Nyquist frequency {nyquist} Hz",
                        s.cutoff_hz
                    ),
                ));
            }
            if s.epochs == 0 {
                return Err(Error::config(
                    format!("fwi.stages[{i}].epochs"),
                    "a stage needs at least one epoch (leave the stage out instead)",
                ));
            }
            staged += s.epochs;
        }
        if staged > f.epochs {
            return Err(Error::config(
                "fwi.stages",
                format!(
                    "the stages take {staged} epochs but fwi.epochs is {}",
                    f.epochs
                ),
            ));
        }
        if f.sum_order == SumOrder::AllReduce && self.wave.precision == Precision::F64 {
            return Err(Error::config(
                "fwi.sum_order",
                "all_reduce sums in float32; use sum_order = \"exact\" with precision = \"f64\"",
            ));
        }
        Ok(())
    }

    /// The continuation stage `epoch` (0-based) is in, if any.
    pub fn stage_at(&self, epoch: usize) -> Option<&Stage> {
        let mut end = 0;
        self.fwi.stages.iter().find(|s| {
            end += s.epochs;
            epoch < end
        })
    }

    /// The low-pass cut-off of `epoch` (0-based), if it is in a continuation stage.
    pub fn cutoff_at(&self, epoch: usize) -> Option<f64> {
        self.stage_at(epoch).map(|s| s.cutoff_hz)
    }

    /// Adam's learning rate and the gradient smoothing (cells) of `epoch` (0-based).
    pub fn step_at(&self, epoch: usize) -> (f64, f64) {
        let stage = self.stage_at(epoch);
        (
            stage
                .and_then(|s| s.learning_rate)
                .unwrap_or(self.fwi.learning_rate),
            stage
                .and_then(|s| s.smooth_gradient_cells)
                .unwrap_or(self.fwi.smooth_gradient_cells),
        )
    }
}
