//! Serde configurations of the denoisers, as written in presets (`[denoiser]` tables).
//!
//! A config is plain data with defaults and a `validate` that names the offending field
//! (`denoiser.levels`); [`DenoiserConfig::build`] turns it into a live [`Denoiser`]. Field names follow
//! deepinv where it has one (`n_it_max`, `crit`, `kernel_size`); where tessera's name differs,
//! deepinv's spelling is accepted as an alias (`wv`, `level`, `non_linearity`).
//!
//! ```toml
//! [denoiser]
//! kind = "wavelet"
//! wavelet = "db4"
//! levels = 3
//! threshold = "soft"
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::gaussian::GaussianDenoiser;
use super::median::MedianFilter;
use super::tv::TvDenoiser;
use super::wavelet::{Threshold, WaveletDenoiser, WaveletKind};
use super::{Denoiser, Identity};
use crate::error::{Error, Result};
use crate::nn::{DncnnConfig, DrunetConfig, TorchScriptConfig};

/// Which denoiser a preset uses, and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DenoiserConfig {
    /// Returns its input.
    Identity,
    /// Prox of isotropic total variation (σ = `ths`).
    Tv(TvConfig),
    /// Orthogonal wavelet thresholding (σ = threshold).
    Wavelet(WaveletConfig),
    /// Median filter (σ ignored).
    Median(MedianConfig),
    /// Gaussian smoothing (σ optionally widens the blur).
    Gaussian(GaussianConfig),
    /// DRUNet (σ = noise level), native or torch engine (`crate::nn`).
    Drunet(DrunetConfig),
    /// DnCNN (σ ignored).
    Dncnn(DncnnConfig),
    /// Any TorchScript `forward(x, sigma)` model, on libtorch (the `torch` feature).
    Torchscript(TorchScriptConfig),
}

impl DenoiserConfig {
    /// The preset's `kind` tag (`tv`, `drunet`, …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            DenoiserConfig::Identity => "identity",
            DenoiserConfig::Tv(_) => "tv",
            DenoiserConfig::Wavelet(_) => "wavelet",
            DenoiserConfig::Median(_) => "median",
            DenoiserConfig::Gaussian(_) => "gaussian",
            DenoiserConfig::Drunet(_) => "drunet",
            DenoiserConfig::Dncnn(_) => "dncnn",
            DenoiserConfig::Torchscript(_) => "torchscript",
        }
    }

    /// Checks every parameter's range; the error names the field (`denoiser.<field>`).
    pub fn validate(&self) -> Result<()> {
        match self {
            DenoiserConfig::Identity => Ok(()),
            DenoiserConfig::Tv(c) => c.validate(),
            DenoiserConfig::Wavelet(c) => c.validate(),
            DenoiserConfig::Median(c) => c.validate(),
            DenoiserConfig::Gaussian(c) => c.validate(),
            DenoiserConfig::Drunet(c) => c.validate(),
            DenoiserConfig::Dncnn(c) => c.validate(),
            DenoiserConfig::Torchscript(c) => c.validate(),
        }
    }

    /// The files the config names (weights, a TorchScript model), for resolving them against the
    /// config's folder; the weights names `"random"` and `"bundled"` are not files.
    pub fn paths_mut(&mut self) -> impl Iterator<Item = &mut std::path::PathBuf> {
        match self {
            DenoiserConfig::Drunet(c) => c
                .weights
                .as_mut()
                .filter(|p| !crate::nn::bundled::is_named(p)),
            DenoiserConfig::Dncnn(c) => c
                .weights
                .as_mut()
                .filter(|p| !crate::nn::bundled::is_named(p)),
            DenoiserConfig::Torchscript(c) => Some(&mut c.model),
            DenoiserConfig::Identity
            | DenoiserConfig::Tv(_)
            | DenoiserConfig::Wavelet(_)
            | DenoiserConfig::Median(_)
            | DenoiserConfig::Gaussian(_) => None,
        }
        .into_iter()
    }

    /// This denoiser on images of `channels` channels: a one-channel DRUNet in the opponent colour
    /// space runs grey images without it (`DrunetConfig::for_image_channels`); every other config
    /// is itself (a channel mismatch is then the denoiser's error, naming it).
    pub fn for_image_channels(&self, channels: usize) -> DenoiserConfig {
        match self {
            DenoiserConfig::Drunet(c) => match c.for_image_channels(channels) {
                Some(adapted) => DenoiserConfig::Drunet(adapted),
                None => self.clone(),
            },
            _ => self.clone(),
        }
    }

    /// Validates and builds the denoiser. Its files are read as named: relative paths are relative
    /// to the working directory, so a config read from a file is resolved first
    /// (`crate::preset::Preset::load` does it for presets).
    pub fn build(&self) -> Result<Box<dyn Denoiser>> {
        let here = Path::new("");
        Ok(match self {
            DenoiserConfig::Identity => Box::new(Identity),
            DenoiserConfig::Tv(c) => Box::new(c.build()?),
            DenoiserConfig::Wavelet(c) => Box::new(c.build()?),
            DenoiserConfig::Median(c) => Box::new(c.build()?),
            DenoiserConfig::Gaussian(c) => Box::new(c.build()?),
            DenoiserConfig::Drunet(c) => c.build(here)?,
            DenoiserConfig::Dncnn(c) => c.build(here)?,
            DenoiserConfig::Torchscript(c) => c.build(here)?,
        })
    }
}

/// Parameters of [`TvDenoiser`] (deepinv's `TVDenoiser` names).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TvConfig {
    /// Maximum iterations, 1 ..= 100 000. Default 300 (deepinv: 1000): on a 256² test image with
    /// ths ∈ [0.03, 0.3] and τ = 0.01, 300 iterations are within 1e-3 (max abs) of the converged prox,
    /// 100 within 3e-2, 1000 within 2e-4; `crit` usually stops earlier.
    pub n_it_max: usize,
    /// Stop when the relative change of the iterate drops below this (deepinv: 1e-5), ≥ 0.
    #[serde(alias = "tol")]
    pub crit: f32,
    /// Primal step τ (deepinv: 0.01), > 0; the dual step follows from it.
    pub tau: f32,
    /// Over-relaxation ρ (deepinv: 1.99), in (0, 2).
    pub rho: f32,
}

impl Default for TvConfig {
    fn default() -> Self {
        TvConfig {
            n_it_max: 300,
            crit: 1e-5,
            tau: 0.01,
            rho: 1.99,
        }
    }
}

impl TvConfig {
    pub fn validate(&self) -> Result<()> {
        if !(1..=100_000).contains(&self.n_it_max) {
            return Err(Error::config(
                "denoiser.n_it_max",
                format!("must be in 1..=100000, got {}", self.n_it_max),
            ));
        }
        if !(self.crit >= 0.0 && self.crit.is_finite()) {
            return Err(Error::config(
                "denoiser.crit",
                format!("must be a finite number ≥ 0, got {}", self.crit),
            ));
        }
        if !(self.tau > 0.0 && self.tau.is_finite()) {
            return Err(Error::config(
                "denoiser.tau",
                format!("must be a finite number > 0, got {}", self.tau),
            ));
        }
        if !(self.rho > 0.0 && self.rho < 2.0) {
            return Err(Error::config(
                "denoiser.rho",
                format!("must be in the open interval (0, 2), got {}", self.rho),
            ));
        }
        Ok(())
    }

    pub fn build(&self) -> Result<TvDenoiser> {
        self.validate()?;
        Ok(TvDenoiser {
            n_it_max: self.n_it_max,
            crit: self.crit,
            tau: self.tau,
            rho: self.rho,
        })
    }
}

/// Parameters of [`WaveletDenoiser`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaveletConfig {
    /// Mother wavelet (deepinv's `wv`, default db8).
    #[serde(alias = "wv")]
    pub wavelet: WaveletKind,
    /// Decomposition levels (deepinv's `level`, default 3), 1 ..= 16; fewer are applied when the
    /// image is too small.
    #[serde(alias = "level")]
    pub levels: usize,
    /// Soft or hard thresholding (deepinv's `non_linearity`).
    #[serde(alias = "non_linearity")]
    pub threshold: Threshold,
}

impl Default for WaveletConfig {
    fn default() -> Self {
        WaveletConfig {
            wavelet: WaveletKind::Db8,
            levels: 3,
            threshold: Threshold::Soft,
        }
    }
}

impl WaveletConfig {
    pub fn validate(&self) -> Result<()> {
        if !(1..=16).contains(&self.levels) {
            return Err(Error::config(
                "denoiser.levels",
                format!("must be in 1..=16, got {}", self.levels),
            ));
        }
        Ok(())
    }

    pub fn build(&self) -> Result<WaveletDenoiser> {
        self.validate()?;
        Ok(WaveletDenoiser {
            wavelet: self.wavelet,
            levels: self.levels,
            threshold: self.threshold,
        })
    }
}

/// Parameters of [`MedianFilter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MedianConfig {
    /// Window side in pixels, odd, 1 ..= 31 (default 3; deepinv's default is 9).
    #[serde(alias = "size")]
    pub kernel_size: usize,
}

impl Default for MedianConfig {
    fn default() -> Self {
        MedianConfig { kernel_size: 3 }
    }
}

impl MedianConfig {
    pub fn validate(&self) -> Result<()> {
        let k = self.kernel_size;
        if !(1..=31).contains(&k) || k.is_multiple_of(2) {
            return Err(Error::config(
                "denoiser.kernel_size",
                format!("must be odd and in 1..=31, got {k}"),
            ));
        }
        Ok(())
    }

    pub fn build(&self) -> Result<MedianFilter> {
        self.validate()?;
        Ok(MedianFilter {
            kernel_size: self.kernel_size,
        })
    }
}

/// Parameters of [`GaussianDenoiser`]: std in pixels = `sigma_px + px_per_sigma · σ`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaussianConfig {
    /// Standard deviation in pixels at σ = 0, 0 ..= 256 (default 1).
    pub sigma_px: f32,
    /// Extra standard deviation in pixels per unit of the call's σ, 0 ..= 1e4 (default 0: σ ignored).
    pub px_per_sigma: f32,
}

impl Default for GaussianConfig {
    fn default() -> Self {
        GaussianConfig {
            sigma_px: 1.0,
            px_per_sigma: 0.0,
        }
    }
}

impl GaussianConfig {
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=256.0).contains(&self.sigma_px) {
            return Err(Error::config(
                "denoiser.sigma_px",
                format!("must be in [0, 256], got {}", self.sigma_px),
            ));
        }
        if !(0.0..=1e4).contains(&self.px_per_sigma) {
            return Err(Error::config(
                "denoiser.px_per_sigma",
                format!("must be in [0, 10000], got {}", self.px_per_sigma),
            ));
        }
        Ok(())
    }

    pub fn build(&self) -> Result<GaussianDenoiser> {
        self.validate()?;
        Ok(GaussianDenoiser {
            sigma_px: self.sigma_px,
            px_per_sigma: self.px_per_sigma,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> std::result::Result<DenoiserConfig, toml::de::Error> {
        #[derive(Deserialize)]
        struct Preset {
            denoiser: DenoiserConfig,
        }
        toml::from_str::<Preset>(s).map(|p| p.denoiser)
    }

    #[test]
    fn toml_snippets_parse_with_defaults_and_aliases() {
        let c = parse(
            "[denoiser]\nkind = \"wavelet\"\nwavelet = \"db4\"\nlevels = 2\nthreshold = \"hard\"\n",
        )
        .unwrap();
        assert_eq!(
            c,
            DenoiserConfig::Wavelet(WaveletConfig {
                wavelet: WaveletKind::Db4,
                levels: 2,
                threshold: Threshold::Hard,
            })
        );
        let c = parse(
            "[denoiser]\nkind = \"wavelet\"\nwv = \"haar\"\nlevel = 4\nnon_linearity = \"soft\"\n",
        )
        .unwrap();
        assert_eq!(
            c,
            DenoiserConfig::Wavelet(WaveletConfig {
                wavelet: WaveletKind::Haar,
                levels: 4,
                threshold: Threshold::Soft,
            })
        );
        assert_eq!(
            parse("[denoiser]\nkind = \"tv\"\nn_it_max = 50\ntol = 1e-4\n").unwrap(),
            DenoiserConfig::Tv(TvConfig {
                n_it_max: 50,
                crit: 1e-4,
                ..TvConfig::default()
            })
        );
        assert_eq!(
            parse("[denoiser]\nkind = \"median\"\n").unwrap(),
            DenoiserConfig::Median(MedianConfig::default())
        );
        assert_eq!(
            parse("[denoiser]\nkind = \"gaussian\"\nsigma_px = 2.5\n").unwrap(),
            DenoiserConfig::Gaussian(GaussianConfig {
                sigma_px: 2.5,
                px_per_sigma: 0.0
            })
        );
        assert_eq!(
            parse("[denoiser]\nkind = \"identity\"\n").unwrap(),
            DenoiserConfig::Identity
        );
    }

    #[test]
    fn serialised_configs_parse_back() {
        for c in [
            DenoiserConfig::Identity,
            DenoiserConfig::Tv(TvConfig::default()),
            DenoiserConfig::Wavelet(WaveletConfig::default()),
            DenoiserConfig::Median(MedianConfig { kernel_size: 5 }),
            DenoiserConfig::Gaussian(GaussianConfig::default()),
        ] {
            let text = toml::to_string(&c).unwrap();
            assert_eq!(
                toml::from_str::<DenoiserConfig>(&text).unwrap(),
                c,
                "{text}"
            );
        }
    }

    #[test]
    fn unknown_fields_and_values_are_rejected_by_name() {
        let e = parse("[denoiser]\nkind = \"wavelet\"\nlevles = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("levles"), "{e}");
        let e = parse("[denoiser]\nkind = \"median\"\nsigma = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sigma"), "{e}");
        let e = parse("[denoiser]\nkind = \"wavelet\"\nwavelet = \"db5\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("db5"), "{e}");
        let e = parse("[denoiser]\nkind = \"bm3d\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bm3d"), "{e}");
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: Vec<(DenoiserConfig, &str)> = vec![
            (
                DenoiserConfig::Tv(TvConfig {
                    n_it_max: 0,
                    ..Default::default()
                }),
                "denoiser.n_it_max",
            ),
            (
                DenoiserConfig::Tv(TvConfig {
                    crit: -1.0,
                    ..Default::default()
                }),
                "denoiser.crit",
            ),
            (
                DenoiserConfig::Tv(TvConfig {
                    tau: 0.0,
                    ..Default::default()
                }),
                "denoiser.tau",
            ),
            (
                DenoiserConfig::Tv(TvConfig {
                    rho: 2.0,
                    ..Default::default()
                }),
                "denoiser.rho",
            ),
            (
                DenoiserConfig::Wavelet(WaveletConfig {
                    levels: 0,
                    ..Default::default()
                }),
                "denoiser.levels",
            ),
            (
                DenoiserConfig::Median(MedianConfig { kernel_size: 4 }),
                "denoiser.kernel_size",
            ),
            (
                DenoiserConfig::Median(MedianConfig { kernel_size: 0 }),
                "denoiser.kernel_size",
            ),
            (
                DenoiserConfig::Gaussian(GaussianConfig {
                    sigma_px: f32::NAN,
                    ..Default::default()
                }),
                "denoiser.sigma_px",
            ),
            (
                DenoiserConfig::Gaussian(GaussianConfig {
                    px_per_sigma: -1.0,
                    ..Default::default()
                }),
                "denoiser.px_per_sigma",
            ),
        ];
        for (c, field) in cases {
            let e = c.build().err().expect("invalid config must not build");
            match &e {
                Error::InvalidConfig { field: f, .. } => assert_eq!(f, field, "{e}"),
                other => panic!("expected InvalidConfig for {field}, got {other}"),
            }
            assert!(c.validate().is_err());
        }
    }

    #[test]
    fn defaults_build_and_describe_themselves() {
        for c in [
            DenoiserConfig::Identity,
            DenoiserConfig::Tv(TvConfig::default()),
            DenoiserConfig::Wavelet(WaveletConfig::default()),
            DenoiserConfig::Median(MedianConfig::default()),
            DenoiserConfig::Gaussian(GaussianConfig::default()),
        ] {
            let d = c.build().unwrap();
            assert!(!d.name().is_empty());
        }
        let d = DenoiserConfig::Wavelet(WaveletConfig::default())
            .build()
            .unwrap();
        assert_eq!(d.name(), "wavelet(db8, 3 levels, soft)");
    }
}
