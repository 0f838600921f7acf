//! Presets: a whole experiment (image, physics stack, noise, fidelity, denoiser, tiling, algorithm,
//! outputs) as versioned TOML.
//!
//! Presets hold configs, never live objects; [`crate::job`] builds and runs them. Unknown fields are
//! rejected with the field's name, every value is range-checked by the configs' `validate`, and
//! `--set key=value` overrides are applied to the TOML tree before it is typed, so an override is
//! checked exactly like a value written in the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::denoise::DenoiserConfig;
use crate::dist::denoise::TileAssignment;
use crate::dist::physics::{GatherStrategy, SumOrder};
use crate::error::{Error, Result};
use crate::fidelity::FidelityConfig;
use crate::optim::AlgorithmConfig;
use crate::physics::{NoiseConfig, PhysicsConfig};
use crate::samples::Sample;
use crate::tiling::TilingConfig;

/// The preset format version this build reads and writes.
pub const PRESET_VERSION: u32 = 1;

/// One experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Format version; must be [`PRESET_VERSION`].
    pub version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of the simulated noise (and of generated samples).
    #[serde(default)]
    pub seed: u64,
    pub image: ImageSource,
    /// The operators; one measurement each.
    pub physics: Vec<PhysicsConfig>,
    /// Noise added to every simulated measurement.
    #[serde(default)]
    pub noise: Option<NoiseConfig>,
    #[serde(default)]
    pub fidelity: FidelityConfig,
    #[serde(default)]
    pub denoiser: Option<DenoiserConfig>,
    #[serde(default)]
    pub tiling: Option<TilingConfig>,
    pub algorithm: AlgorithmConfig,
    #[serde(default)]
    pub output: OutputConfig,
    #[serde(default)]
    pub distributed: DistributedConfig,
}

/// How the experiment is spread over ranks (ignored on one rank, where it changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributedConfig {
    /// How measurements `A(x)` are gathered.
    pub gather: GatherStrategy,
    /// `exact` (identical to one rank) or `all_reduce` (less traffic, rounding-level differences).
    pub sum_order: SumOrder,
    /// How tiles are shared among ranks.
    pub tile_assignment: TileAssignment,
}

/// Where the ground-truth image comes from: a built-in sample or a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSource {
    /// A built-in sample (exclusive with `path`).
    #[serde(default)]
    pub sample: Option<Sample>,
    /// Sample size: `[H, W]` for images, `[D, H, W]` for volumes.
    #[serde(default)]
    pub size: Option<Vec<usize>>,
    /// An image or volume file (.png, .jpg, .tif, .npy, .nii, .nii.gz), relative to the preset's folder.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Convert a colour image to one channel (mean of R, G, B).
    #[serde(default)]
    pub grayscale: bool,
    /// The name of an array sent along with the job (`tessera serve`: the image the user opened in
    /// the workbench); exclusive with `sample` and `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
}

/// What to write and what to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Output folder (relative to the working directory); `--out` overrides it.
    pub dir: Option<PathBuf>,
    /// Also write the simulated measurements as `.npy`.
    pub save_measurements: bool,
    /// Compute SSIM every N iterations (and at the last); 0 disables it.
    pub ssim_every: usize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            dir: None,
            save_measurements: true,
            ssim_every: 10,
        }
    }
}

/// The presets shipped in `presets/`, embedded in the binary so they run from anywhere.
pub const BUNDLED: &[(&str, &str)] = &[
    ("quick", include_str!("../presets/quick.toml")),
    ("multiblur", include_str!("../presets/multiblur.toml")),
    ("tomography2d", include_str!("../presets/tomography2d.toml")),
    ("tomography3d", include_str!("../presets/tomography3d.toml")),
];

/// A preset together with the folder its relative paths refer to.
#[derive(Debug, Clone)]
pub struct LoadedPreset {
    pub preset: Preset,
    /// Folder of the preset file (the working directory for bundled presets).
    pub base_dir: PathBuf,
    /// Where it came from, for messages: a path or `bundled:NAME`.
    pub origin: String,
}

impl Preset {
    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<Preset> {
        let mut value: toml::Value = toml::from_str(text)
            .map_err(|e| Error::format(origin, format!("invalid TOML: {}", e.message())))?;
        for o in overrides {
            apply_override(&mut value, o)?;
        }
        check_version(&value, origin)?;
        let preset: Preset = value.try_into().map_err(|e: toml::de::Error| {
            Error::format(origin, format!("invalid preset: {}", e.message()))
        })?;
        preset.validate()?;
        Ok(preset)
    }

    /// Loads a preset by file path or bundled name, applying `--set` overrides.
    pub fn load(name_or_path: &str, overrides: &[String]) -> Result<LoadedPreset> {
        let path = Path::new(name_or_path);
        // A folder named like a bundled preset (e.g. its output folder) must not shadow it.
        if path.is_file() || (path.exists() && !path.is_dir()) {
            let text =
                std::fs::read_to_string(path).map_err(|e| Error::io("reading preset", path, e))?;
            let preset = Preset::from_toml(&text, name_or_path, overrides)?;
            let base_dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            return Ok(LoadedPreset {
                preset,
                base_dir,
                origin: name_or_path.to_string(),
            });
        }
        let name = name_or_path.trim_end_matches(".toml");
        let name = name.strip_prefix("presets/").unwrap_or(name);
        match BUNDLED.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => {
                let origin = format!("bundled:{n}");
                Ok(LoadedPreset {
                    preset: Preset::from_toml(text, &origin, overrides)?,
                    base_dir: PathBuf::from("."),
                    origin,
                })
            }
            None => Err(Error::config(
                "preset",
                format!(
                    "no preset file `{name_or_path}` and no bundled preset of that name (bundled: {})",
                    BUNDLED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The preset as TOML (what the GUI saves).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| Error::config("preset", e.to_string()))
    }

    /// Whether the experiment works on volumes.
    pub fn is_volumetric(&self) -> bool {
        self.physics.iter().any(PhysicsConfig::is_volumetric)
    }

    /// Checks every section and their consistency.
    pub fn validate(&self) -> Result<()> {
        if self.version != PRESET_VERSION {
            return Err(Error::config(
                "version",
                format!(
                    "preset version {} is not supported (this tessera reads version {PRESET_VERSION})",
                    self.version
                ),
            ));
        }
        if self.name.trim().is_empty() {
            return Err(Error::config("name", "must not be empty"));
        }
        self.image.validate(self.is_volumetric())?;
        if self.physics.is_empty() {
            return Err(Error::config(
                "physics",
                "needs at least one operator ([[physics]])",
            ));
        }
        let volumetric = self.is_volumetric();
        for (i, p) in self.physics.iter().enumerate() {
            p.validate()?;
            if p.is_volumetric() != volumetric {
                return Err(Error::config(
                    format!("physics[{i}]"),
                    "cannot mix 2-D and 3-D operators in one stack",
                ));
            }
        }
        if let Some(n) = &self.noise {
            n.validate()?;
        }
        self.fidelity.validate()?;
        if let Some(d) = &self.denoiser {
            d.validate()?;
        }
        if let Some(t) = &self.tiling {
            t.validate()?;
        }
        self.algorithm.validate()?;
        match &self.algorithm {
            AlgorithmConfig::Pnp(_) if self.denoiser.is_none() => Err(Error::config(
                "denoiser",
                "the pnp algorithm needs a [denoiser] section",
            )),
            AlgorithmConfig::Fbp(_)
                if !(self.physics.len() == 1
                    && matches!(
                        self.physics[0],
                        PhysicsConfig::Tomography(_) | PhysicsConfig::Tomography3d(_)
                    )) =>
            {
                Err(Error::config(
                    "algorithm.kind",
                    "fbp needs exactly one tomography operator",
                ))
            }
            _ => Ok(()),
        }
    }
}

impl ImageSource {
    fn validate(&self, volumetric: bool) -> Result<()> {
        if let Some(name) = &self.inline {
            if self.sample.is_some() || self.path.is_some() {
                return Err(Error::config(
                    "image.inline",
                    "give one of `sample`, `path` or `inline`",
                ));
            }
            if name.trim().is_empty() {
                return Err(Error::config("image.inline", "must name an array"));
            }
            if self.size.is_some() {
                return Err(Error::config(
                    "image.size",
                    "only applies to samples; an inline array has its own size",
                ));
            }
            return Ok(());
        }
        match (&self.sample, &self.path) {
            (Some(_), Some(_)) => Err(Error::config(
                "image",
                "give either `sample` or `path`, not both",
            )),
            (None, None) => Err(Error::config("image", "give `sample`, `path` or `inline`")),
            (Some(sample), None) => {
                if let Some(size) = &self.size {
                    let want = if volumetric { 3 } else { 2 };
                    if size.len() != want {
                        return Err(Error::config(
                            "image.size",
                            format!(
                                "needs {want} numbers for a {} experiment, got {size:?}",
                                if volumetric { "3-D" } else { "2-D" }
                            ),
                        ));
                    }
                }
                if volumetric != matches!(sample, Sample::SheppLogan3d) {
                    return Err(Error::config(
                        "image.sample",
                        format!(
                            "{sample:?} does not suit {} operators",
                            if volumetric { "3-D" } else { "2-D" }
                        ),
                    ));
                }
                Ok(())
            }
            (None, Some(_)) if self.size.is_some() => Err(Error::config(
                "image.size",
                "only applies to samples; a file has its own size",
            )),
            (None, Some(_)) => Ok(()),
        }
    }
}

fn check_version(value: &toml::Value, origin: &str) -> Result<()> {
    match value.get("version") {
        None => Err(Error::format(
            origin,
            format!("preset has no `version` field (this tessera reads version {PRESET_VERSION})"),
        )),
        Some(toml::Value::Integer(v)) if *v == PRESET_VERSION as i64 => Ok(()),
        Some(v) => Err(Error::format(
            origin,
            format!(
                "preset version {v} is not supported (this tessera reads version {PRESET_VERSION})"
            ),
        )),
    }
}

/// Applies one `dotted.key=value` override to a TOML tree. Numeric path segments index arrays
/// (`physics.0.sigma=[2,1]`); the value is read as a TOML literal, or as a string if it is not one.
pub fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<()> {
    let (key, raw) = assignment.split_once('=').ok_or_else(|| {
        Error::config(
            "--set",
            format!("`{assignment}` is not of the form key=value"),
        )
    })?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(Error::config(
            "--set",
            format!("`{assignment}` has an empty key"),
        ));
    }
    let raw = raw.trim();
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let segments: Vec<&str> = key.split('.').collect();
    let mut node = root;
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        node = match node {
            toml::Value::Table(t) => {
                if last {
                    t.insert(seg.to_string(), value);
                    return Ok(());
                }
                t.entry(seg.to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()))
            }
            toml::Value::Array(a) => {
                let idx: usize = seg.parse().map_err(|_| {
                    Error::config("--set", format!("`{key}`: `{seg}` must be an array index"))
                })?;
                let len = a.len();
                let slot = a.get_mut(idx).ok_or_else(|| {
                    Error::config(
                        "--set",
                        format!("`{key}`: index {idx} is out of range (the array has {len} items)"),
                    )
                })?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            _ => {
                return Err(Error::config(
                    "--set",
                    format!("`{key}`: `{}` is not a table", segments[..i].join(".")),
                ));
            }
        };
    }
    unreachable!("the loop returns at the last segment")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_presets_parse_and_validate() {
        for (name, text) in BUNDLED {
            Preset::from_toml(text, name, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn unknown_field_is_named() {
        let text = BUNDLED[0]
            .1
            .replace("[algorithm]", "[algorithm]\nitertions = 3");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("itertions"), "{e}");
    }

    #[test]
    fn version_is_checked() {
        let text = BUNDLED[0].1.replace("version = 1", "version = 7");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("version 7"), "{e}");
        let text = BUNDLED[0].1.replace("version = 1", "");
        let e = Preset::from_toml(&text, "t", &[]).unwrap_err().to_string();
        assert!(e.contains("no `version`"), "{e}");
    }

    #[test]
    fn overrides_are_typed_and_checked() {
        let p = Preset::from_toml(
            BUNDLED[0].1,
            "t",
            &["algorithm.iterations=3".into(), "seed=9".into()],
        )
        .unwrap();
        assert_eq!(p.algorithm.iterations(), 3);
        assert_eq!(p.seed, 9);
        let e = Preset::from_toml(BUNDLED[0].1, "t", &["algorithm.iterations=0".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("algorithm.iterations"), "{e}");
        let e = Preset::from_toml(BUNDLED[0].1, "t", &["physics.5.sigma=1".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        assert!(Preset::from_toml(BUNDLED[0].1, "t", &["novalue".into()]).is_err());
    }

    #[test]
    fn round_trips_through_toml() {
        let p = Preset::from_toml(BUNDLED[1].1, "t", &[]).unwrap();
        let again = Preset::from_toml(&p.to_toml().unwrap(), "t", &[]).unwrap();
        assert_eq!(p, again);
    }
}
