//! Serde configs of the wave physics (the `[wave]`, `[wavelet]` and `[acquisition]` sections of an
//! FWI preset): numerics of the propagator, the source wavelet and the acquisition layout.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::geometry::{Acquisition, Shot, line};
use super::solver::{GradientStrategy, SolverSettings};
use super::stencil::Accuracy;
use super::wavelet::ricker;
use crate::error::{Error, Result};

/// Float type of the propagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Half the memory traffic; what production runs use.
    #[default]
    F32,
    /// For parity checks and very long propagations.
    F64,
}

/// Absorbing layer width in cells: one for every face, or `[top, bottom, left, right]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PmlWidth {
    Uniform(usize),
    Faces([usize; 4]),
}

impl PmlWidth {
    pub fn faces(self) -> [usize; 4] {
        match self {
            PmlWidth::Uniform(w) => [w; 4],
            PmlWidth::Faces(f) => f,
        }
    }
}

/// Largest absorbing layer accepted (cells).
const MAX_PML: usize = 1000;
/// Largest number of time samples accepted.
const MAX_NT: usize = 10_000_000;

/// `[wave]`: the propagator's numerics (deepwave's `scalar` arguments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WaveConfig {
    /// Sample interval of wavelets and data (s); the solver subdivides it for stability.
    pub dt_s: f64,
    /// Samples per trace.
    pub nt: usize,
    /// Spatial order of accuracy: 2, 4, 6 or 8.
    pub accuracy: Accuracy,
    /// Absorbing layer width (cells), one number or `[top, bottom, left, right]`.
    pub pml_width: PmlWidth,
    /// Frequency the layers are tuned to; default: the wavelet's peak frequency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pml_freq_hz: Option<f64>,
    /// Velocity for the CFL condition and the layers; default: the model's maximum. Fix it in an
    /// inversion so the discretisation does not change as the model does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_vel: Option<f64>,
    /// Pressure-release surface at the top instead of an absorbing layer.
    pub free_surface: bool,
    /// How the gradient gets the forward wavefield.
    pub gradient: GradientStrategy,
    /// Steps between checkpoints with `gradient = "checkpoint"` (default: ⌈√(6·steps)⌉).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_every: Option<usize>,
    pub precision: Precision,
}

impl Default for WaveConfig {
    fn default() -> Self {
        WaveConfig {
            dt_s: 0.002,
            nt: 1000,
            accuracy: Accuracy::Four,
            pml_width: PmlWidth::Uniform(20),
            pml_freq_hz: None,
            max_vel: None,
            free_surface: false,
            gradient: GradientStrategy::default(),
            checkpoint_every: None,
            precision: Precision::F32,
        }
    }
}

impl WaveConfig {
    pub fn validate(&self) -> Result<()> {
        if !(self.dt_s.is_finite() && self.dt_s > 0.0) {
            return Err(Error::config(
                "wave.dt_s",
                format!("must be positive, got {}", self.dt_s),
            ));
        }
        if self.nt == 0 || self.nt > MAX_NT {
            return Err(Error::config(
                "wave.nt",
                format!("must be between 1 and {MAX_NT}, got {}", self.nt),
            ));
        }
        let faces = self.pml_width.faces();
        for (name, w) in ["top", "bottom", "left", "right"].iter().zip(faces) {
            if w > MAX_PML {
                return Err(Error::config(
                    "wave.pml_width",
                    format!("{name} width {w} exceeds {MAX_PML} cells"),
                ));
            }
            if w == 0 && !(self.free_surface && *name == "top") {
                return Err(Error::config(
                    "wave.pml_width",
                    format!(
                        "the {name} layer needs at least one cell (only a free surface has none)"
                    ),
                ));
            }
        }
        if let Some(f) = self.pml_freq_hz
            && !(f.is_finite() && f > 0.0)
        {
            return Err(Error::config(
                "wave.pml_freq_hz",
                format!("must be positive, got {f}"),
            ));
        }
        if let Some(v) = self.max_vel
            && !(v.is_finite() && v > 0.0)
        {
            return Err(Error::config(
                "wave.max_vel",
                format!("must be positive, got {v}"),
            ));
        }
        if self.checkpoint_every == Some(0) {
            return Err(Error::config("wave.checkpoint_every", "must be at least 1"));
        }
        Ok(())
    }

    /// The solver settings, with `default_freq_hz` (the wavelet's) for an unset `pml_freq_hz`.
    pub fn settings(&self, default_freq_hz: f64) -> SolverSettings {
        SolverSettings {
            accuracy: self.accuracy,
            pml_width: self.pml_width.faces(),
            pml_freq_hz: self.pml_freq_hz.unwrap_or(default_freq_hz),
            max_vel: self.max_vel,
            free_surface: self.free_surface,
            dt_s: self.dt_s,
            nt: self.nt,
        }
    }

    /// Record length (s).
    pub fn duration_s(&self) -> f64 {
        self.dt_s * self.nt as f64
    }
}

/// `[wavelet]`: the source signal, the same for every source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WaveletConfig {
    /// deepwave's `wavelets.ricker`.
    Ricker {
        freq_hz: f64,
        /// Time of the peak (s); default `1.5 / freq_hz`, which starts the wavelet near zero.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peak_time_s: Option<f64>,
        #[serde(default = "one")]
        amplitude: f64,
    },
    /// A 1-D array of `nt` samples at `dt_s` (`.npy`, or raw little-endian float32 `.bin`), relative
    /// to the preset; `freq_hz` tunes the absorbing layers.
    File { path: PathBuf, freq_hz: f64 },
}

fn one() -> f64 {
    1.0
}

impl Default for WaveletConfig {
    fn default() -> Self {
        WaveletConfig::Ricker {
            freq_hz: 10.0,
            peak_time_s: None,
            amplitude: 1.0,
        }
    }
}

impl WaveletConfig {
    pub fn validate(&self) -> Result<()> {
        let f = self.freq_hz();
        if !(f.is_finite() && f > 0.0) {
            return Err(Error::config(
                "wavelet.freq_hz",
                format!("must be positive, got {f}"),
            ));
        }
        if let WaveletConfig::Ricker {
            peak_time_s,
            amplitude,
            ..
        } = self
        {
            if let Some(p) = peak_time_s
                && !p.is_finite()
            {
                return Err(Error::config("wavelet.peak_time_s", "must be finite"));
            }
            if !(amplitude.is_finite() && *amplitude != 0.0) {
                return Err(Error::config(
                    "wavelet.amplitude",
                    format!("must be finite and non-zero, got {amplitude}"),
                ));
            }
        }
        Ok(())
    }

    /// The dominant frequency (tunes the absorbing layers; sets the default peak time).
    pub fn freq_hz(&self) -> f64 {
        match self {
            WaveletConfig::Ricker { freq_hz, .. } | WaveletConfig::File { freq_hz, .. } => *freq_hz,
        }
    }

    /// Samples of a Ricker wavelet; `None` for a file (the caller loads it).
    pub fn ricker_samples(&self, nt: usize, dt_s: f64) -> Option<Vec<f64>> {
        match self {
            WaveletConfig::Ricker {
                freq_hz,
                peak_time_s,
                amplitude,
            } => Some(
                ricker(
                    *freq_hz,
                    nt,
                    dt_s,
                    Some(peak_time_s.unwrap_or(1.5 / freq_hz)),
                )
                .into_iter()
                .map(|v| v * amplitude)
                .collect(),
            ),
            WaveletConfig::File { .. } => None,
        }
    }
}

/// `[acquisition]`: where the shots fire and record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "layout", rename_all = "snake_case", deny_unknown_fields)]
pub enum AcquisitionConfig {
    /// Shots along a line, one source each, with a line of receivers per shot.
    Lines(LinesConfig),
    /// Cells from integer `.npy` arrays of shape `(shots, n, 2)` holding `[row, col]` (deepwave's
    /// `source_locations` / `receiver_locations`), relative to the preset.
    Files {
        sources: PathBuf,
        receivers: PathBuf,
    },
}

impl Default for AcquisitionConfig {
    fn default() -> Self {
        AcquisitionConfig::Lines(LinesConfig::default())
    }
}

/// Regular lines of sources and receivers (cells: row = depth index, column = x index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinesConfig {
    pub shots: usize,
    /// Row of every source.
    pub source_depth: usize,
    /// Column of the first source and the spacing between shots (columns).
    pub first_source: usize,
    pub source_spacing: usize,
    pub receivers_per_shot: usize,
    pub receiver_depth: usize,
    /// Column of the first receiver and the spacing between receivers (columns).
    pub first_receiver: usize,
    pub receiver_spacing: usize,
    /// Receivers move with the source (`first_receiver` is then an offset from the source
    /// column, which may be negative through `receiver_offset`); otherwise a fixed spread.
    pub moving_spread: bool,
    /// With a moving spread, the first receiver's column relative to the source.
    pub receiver_offset: i64,
}

impl Default for LinesConfig {
    fn default() -> Self {
        LinesConfig {
            shots: 8,
            source_depth: 1,
            first_source: 5,
            source_spacing: 10,
            receivers_per_shot: 50,
            receiver_depth: 1,
            first_receiver: 0,
            receiver_spacing: 2,
            moving_spread: false,
            receiver_offset: 0,
        }
    }
}

impl AcquisitionConfig {
    pub fn validate(&self) -> Result<()> {
        match self {
            AcquisitionConfig::Lines(l) => {
                if l.shots == 0 {
                    return Err(Error::config(
                        "acquisition.shots",
                        "needs at least one shot",
                    ));
                }
                if l.receivers_per_shot == 0 {
                    return Err(Error::config(
                        "acquisition.receivers_per_shot",
                        "needs at least one receiver",
                    ));
                }
                if l.shots > 1 && l.source_spacing == 0 {
                    return Err(Error::config(
                        "acquisition.source_spacing",
                        "must be at least 1 with several shots",
                    ));
                }
                if l.receivers_per_shot > 1 && l.receiver_spacing == 0 {
                    return Err(Error::config(
                        "acquisition.receiver_spacing",
                        "must be at least 1 with several receivers",
                    ));
                }
                Ok(())
            }
            AcquisitionConfig::Files { sources, receivers } => {
                if sources.as_os_str().is_empty() || receivers.as_os_str().is_empty() {
                    return Err(Error::config(
                        "acquisition",
                        "give both `sources` and `receivers` files",
                    ));
                }
                Ok(())
            }
        }
    }

    /// The shots of a line layout on an `nz × nx` model (`None` for files, which the caller loads
    /// with [`acquisition_from_cells`]).
    pub fn lines(&self, nz: usize, nx: usize) -> Option<Result<Acquisition>> {
        let AcquisitionConfig::Lines(l) = self else {
            return None;
        };
        Some((|| {
            let sources = line(
                [l.source_depth, l.first_source],
                [0, l.source_spacing as i64],
                l.shots,
                nz,
                nx,
            )?;
            let fixed = if l.moving_spread {
                None
            } else {
                Some(line(
                    [l.receiver_depth, l.first_receiver],
                    [0, l.receiver_spacing as i64],
                    l.receivers_per_shot,
                    nz,
                    nx,
                )?)
            };
            let shots = sources
                .into_iter()
                .map(|s| {
                    let receivers = match &fixed {
                        Some(r) => r.clone(),
                        None => {
                            let first = s[1] as i64 + l.receiver_offset;
                            if first < 0 {
                                return Err(Error::config(
                                    "acquisition.receiver_offset",
                                    format!("the first receiver of the shot at column {} is at column {first}", s[1]),
                                ));
                            }
                            line(
                                [l.receiver_depth, first as usize],
                                [0, l.receiver_spacing as i64],
                                l.receivers_per_shot,
                                nz,
                                nx,
                            )?
                        }
                    };
                    Ok(Shot {
                        sources: vec![s],
                        receivers,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let acq = Acquisition { shots };
            acq.validate(nz, nx)?;
            Ok(acq)
        })())
    }
}

/// Shots from `(shots, n, 2)` cell arrays (values as read from `.npy`, converted to f64).
pub fn acquisition_from_cells(
    sources: (&[usize], &[f64]),
    receivers: (&[usize], &[f64]),
) -> Result<Acquisition> {
    let cells = |(shape, data): (&[usize], &[f64]), what: &str| -> Result<Vec<Vec<[usize; 2]>>> {
        if shape.len() != 3 || shape[2] != 2 {
            return Err(Error::config(
                format!("acquisition.{what}"),
                format!("expected shape (shots, n, 2), got {shape:?}"),
            ));
        }
        let (n_shots, n) = (shape[0], shape[1]);
        (0..n_shots)
            .map(|s| {
                (0..n)
                    .map(|i| {
                        let at = |k: usize| data[(s * n + i) * 2 + k];
                        let (r, c) = (at(0), at(1));
                        if !(r >= 0.0 && c >= 0.0 && r.fract() == 0.0 && c.fract() == 0.0) {
                            return Err(Error::config(
                                format!("acquisition.{what}"),
                                format!("cell {i} of shot {s} is [{r}, {c}]; cells are non-negative integers"),
                            ));
                        }
                        Ok([r as usize, c as usize])
                    })
                    .collect()
            })
            .collect()
    };
    let src = cells(sources, "sources")?;
    let rec = cells(receivers, "receivers")?;
    if src.len() != rec.len() {
        return Err(Error::config(
            "acquisition",
            format!(
                "{} shots of sources but {} of receivers",
                src.len(),
                rec.len()
            ),
        ));
    }
    Ok(Acquisition {
        shots: src
            .into_iter()
            .zip(rec)
            .map(|(sources, receivers)| Shot { sources, receivers })
            .collect(),
    })
}
