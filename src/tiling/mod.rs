//! Tiling: cutting large images and volumes into patches a denoiser can take, and putting the
//! denoised patches back — deepinv 0.5.0's `deepinv.distributed` tiling (`OverlapTilingStrategy`,
//! `BasicStrategy`), plus a blended variant.
//!
//! Flow: a [`TilingStrategy`] (built from a [`TilingConfig`]) turns an image's spatial shape into a
//! [`TilePlan`]; [`TilePlan::extract`] cuts the windows of some tiles into one batch;
//! a denoiser processes that batch; [`TilePlan::assemble`] or an [`Assembler`] writes the results
//! back. The three steps take tile indices, so the distributed layer can extract on one rank,
//! denoise on whichever rank owns a tile and assemble on one rank. [`TiledDenoiser`] runs all three
//! in-process behind the [`crate::denoise::Denoiser`] trait.

mod denoiser;
mod plan;
mod strategies;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use denoiser::TiledDenoiser;
pub use plan::{Assembler, Assembly, PadMode, Span, Tile, TilePlan};
pub use strategies::{BasicTiling, OverlapTiling};

use crate::error::{Error, Result};

/// Most tiles a plan may have. Far beyond any useful tiling (a 16384² image in 64² patches has 65,536),
/// low enough that a typo such as patch size 1 (one tile per pixel: 699,392 for a 1024×683 image) is
/// refused before the tiles are made, drawn by the workbench or sent to ranks.
pub const MAX_TILES: usize = 1 << 18;

/// Turns an image's spatial shape (`H, W` or `D, H, W`) into tiles.
pub trait TilingStrategy: Send + Sync {
    /// The tiles for an image of this spatial shape; fails with a message naming the config field
    /// when the sizes do not fit the image.
    fn plan(&self, spatial: &[usize]) -> Result<TilePlan>;
    /// A short description, e.g. `overlap(patch 256, overlap 32, reflect padding)`.
    fn name(&self) -> String;
}

/// A size given once for every axis or per spatial axis (`256` or `[16, 256, 256]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Extent {
    Uniform(usize),
    PerAxis(Vec<usize>),
}

impl Extent {
    /// The value on each of `ndim` axes; a per-axis list must have exactly `ndim` entries.
    pub fn resolve(&self, field: &str, ndim: usize) -> Result<Vec<usize>> {
        match self {
            Extent::Uniform(v) => Ok(vec![*v; ndim]),
            Extent::PerAxis(v) if v.len() == ndim => Ok(v.clone()),
            Extent::PerAxis(v) => Err(Error::config(
                field,
                format!(
                    "has {} entries but the image has {ndim} spatial axes",
                    v.len()
                ),
            )),
        }
    }

    fn values(&self) -> &[usize] {
        match self {
            Extent::Uniform(v) => std::slice::from_ref(v),
            Extent::PerAxis(v) => v,
        }
    }

    /// Fails unless there is at least one entry and every entry is ≥ `min`.
    fn check_min(&self, field: &str, min: usize) -> Result<()> {
        let v = self.values();
        if v.is_empty() {
            return Err(Error::config(field, "the per-axis list is empty"));
        }
        if let Some(bad) = v.iter().find(|&&x| x < min) {
            return Err(Error::config(field, format!("must be ≥ {min}, got {bad}")));
        }
        Ok(())
    }
}

impl From<usize> for Extent {
    fn from(v: usize) -> Self {
        Extent::Uniform(v)
    }
}

impl From<Vec<usize>> for Extent {
    fn from(v: Vec<usize>) -> Self {
        Extent::PerAxis(v)
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Extent::Uniform(v) => write!(f, "{v}"),
            Extent::PerAxis(v) => write!(f, "{v:?}"),
        }
    }
}

/// Which tiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TilingKind {
    /// deepinv `OverlapTilingStrategy`: halo of `overlap` pixels, reflect padding, halo cropped.
    #[default]
    Overlap,
    /// deepinv `BasicStrategy`: non-overlapping blocks, no padding.
    Basic,
    /// The overlap windows, blended with raised-cosine weights over the halo instead of cropped.
    Blend,
    /// Exact spatial decomposition ("spatial (exact)"): one block per rank, halos exchanged before
    /// every layer, so the result equals the untiled network (native DnCNN and DRUNet only; runs
    /// in `dist::spatial`, not as a tile plan).
    Spatial,
}

/// Tiling as written in presets (`[denoiser.tiling]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TilingConfig {
    pub kind: TilingKind,
    /// Inner patch size (overlap/blend) or largest block size (basic); deepinv default 256.
    pub patch_size: Extent,
    /// Halo per side (overlap/blend only); `None` = 32, deepinv's default.
    pub overlap: Option<Extent>,
    /// Step between patches (overlap/blend only), 1..=patch_size; `None` = patch_size.
    pub stride: Option<Extent>,
    /// Blocks per axis (basic only); `None` = ⌈size / patch_size⌉.
    pub num_splits: Option<Extent>,
    /// Padding of the image border (overlap/blend only); `None` = reflect.
    pub pad_mode: Option<PadMode>,
    /// Patches per denoiser call; `None` = all at once.
    pub max_batch_size: Option<usize>,
    /// Ranks per spatial axis (spatial only, e.g. `[2, 2]`); `None` = chosen from the world size
    /// and the image shape.
    pub grid: Option<Vec<usize>>,
    /// Overlap/blend only: keep the number of tiles `patch_size` gives per axis but shrink the inner
    /// patch to about `⌈size / tiles⌉` (its window rounded up to a multiple of 8, which DRUNet
    /// needs to run without its crop fallback), so the tiles divide the image evenly. deepinv
    /// instead moves the last window back to the border, where it recomputes most of its neighbour
    /// (1024 px in patches of 448, halo 32: windows of 512 owning 448, 448, 128 px; even: windows
    /// of 408 owning 344, 344, 336: 64 % of the pixels denoised in 2-D). Off by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub even: bool,
}

impl Default for TilingConfig {
    fn default() -> Self {
        TilingConfig {
            kind: TilingKind::Overlap,
            patch_size: Extent::Uniform(256),
            overlap: None,
            stride: None,
            num_splits: None,
            pad_mode: None,
            max_batch_size: None,
            grid: None,
            even: false,
        }
    }
}

/// deepinv's default halo.
const DEFAULT_OVERLAP: usize = 32;

impl TilingConfig {
    /// Checks what can be checked without an image; sizes against the image are checked by `plan`.
    pub fn validate(&self) -> Result<()> {
        self.patch_size.check_min("tiling.patch_size", 1)?;
        if let Some(o) = &self.overlap {
            o.check_min("tiling.overlap", 0)?;
        }
        if let Some(s) = &self.stride {
            s.check_min("tiling.stride", 1)?;
            let (p, sv) = (self.patch_size.values(), s.values());
            let comparable = p.len() == 1 || sv.len() == 1 || p.len() == sv.len();
            if !comparable {
                return Err(Error::config(
                    "tiling.stride",
                    format!(
                        "has {} entries but tiling.patch_size has {}",
                        sv.len(),
                        p.len()
                    ),
                ));
            }
            for a in 0..p.len().max(sv.len()) {
                let (pa, sa) = (p[a.min(p.len() - 1)], sv[a.min(sv.len() - 1)]);
                if sa > pa {
                    return Err(Error::config(
                        "tiling.stride",
                        format!(
                            "must be ≤ tiling.patch_size ({pa}), got {sa}: a larger stride leaves \
                             pixels that no tile owns"
                        ),
                    ));
                }
            }
        }
        if let Some(n) = &self.num_splits {
            n.check_min("tiling.num_splits", 1)?;
        }
        if self.max_batch_size == Some(0) {
            return Err(Error::config(
                "tiling.max_batch_size",
                "must be ≥ 1 (leave it out to denoise all patches at once)",
            ));
        }
        let only = |field: &str, set: bool, kinds: &str| -> Result<()> {
            if set {
                return Err(Error::config(
                    field,
                    format!("only applies to kind = {kinds} (kind is {:?})", self.kind)
                        .to_lowercase(),
                ));
            }
            Ok(())
        };
        match self.kind {
            TilingKind::Basic => {
                only(
                    "tiling.overlap",
                    self.overlap.is_some(),
                    "\"overlap\" or \"blend\"",
                )?;
                only(
                    "tiling.stride",
                    self.stride.is_some(),
                    "\"overlap\" or \"blend\"",
                )?;
                only(
                    "tiling.pad_mode",
                    self.pad_mode.is_some(),
                    "\"overlap\" or \"blend\"",
                )?;
                only("tiling.even", self.even, "\"overlap\" or \"blend\"")?;
            }
            TilingKind::Overlap | TilingKind::Blend => {
                only("tiling.num_splits", self.num_splits.is_some(), "\"basic\"")?;
                if self.even && self.stride.is_some() {
                    return Err(Error::config(
                        "tiling.stride",
                        "tiling.even chooses the patch size and the stride; leave tiling.stride out",
                    ));
                }
            }
            TilingKind::Spatial => {
                for (field, set) in [
                    ("tiling.overlap", self.overlap.is_some()),
                    ("tiling.stride", self.stride.is_some()),
                    ("tiling.pad_mode", self.pad_mode.is_some()),
                    ("tiling.num_splits", self.num_splits.is_some()),
                    ("tiling.max_batch_size", self.max_batch_size.is_some()),
                    ("tiling.even", self.even),
                ] {
                    only(field, set, "\"overlap\", \"blend\" or \"basic\"")?;
                }
                if let Some(g) = &self.grid
                    && (g.is_empty() || g.len() > 3 || g.contains(&0))
                {
                    return Err(Error::config(
                        "tiling.grid",
                        format!("must be 1 to 3 positive rank counts, got {g:?}"),
                    ));
                }
            }
        }
        if self.kind != TilingKind::Spatial && self.grid.is_some() {
            return Err(Error::config(
                "tiling.grid",
                "only applies to kind = \"spatial\"",
            ));
        }
        Ok(())
    }

    /// What this config decomposes an image into: a tile plan's strategy, or the exact spatial
    /// decomposition that has none. Callers match on it, so none can take "spatial" for a plan.
    pub fn decomposition(&self) -> Result<Decomposition> {
        self.validate()?;
        Ok(Decomposition::Tiles(match self.kind {
            TilingKind::Basic => Box::new(BasicTiling {
                patch_size: self.patch_size.clone(),
                num_splits: self.num_splits.clone(),
            }),
            TilingKind::Overlap | TilingKind::Blend => Box::new(OverlapTiling {
                patch_size: self.patch_size.clone(),
                overlap: self
                    .overlap
                    .clone()
                    .unwrap_or(Extent::Uniform(DEFAULT_OVERLAP)),
                stride: self.stride.clone(),
                pad_mode: self.pad_mode.unwrap_or_default(),
                blend: self.kind == TilingKind::Blend,
                even: self.even,
            }),
            TilingKind::Spatial => return Ok(Decomposition::Spatial),
        }))
    }

    /// The tile strategy this config describes; "spatial" has none (see [`Self::decomposition`]).
    pub fn build(&self) -> Result<Box<dyn TilingStrategy>> {
        match self.decomposition()? {
            Decomposition::Tiles(strategy) => Ok(strategy),
            Decomposition::Spatial => Err(Error::config(
                "tiling.kind",
                "\"spatial\" is an exact decomposition over ranks, not a tile plan: it runs \
                 a native dncnn or drunet through dist::spatial::SpatialDenoiser",
            )),
        }
    }
}

/// What a `[tiling]` section builds.
pub enum Decomposition {
    /// Tiles: the denoiser runs on patches that the strategy's [`TilePlan`] cuts and puts back.
    Tiles(Box<dyn TilingStrategy>),
    /// The exact spatial decomposition ("spatial (exact)"): one block per rank, halos exchanged
    /// before every layer; no tile plan, it runs in `dist::spatial` (native DnCNN and DRUNet
    /// only), its grid in the config's `grid`.
    Spatial,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> std::result::Result<TilingConfig, toml::de::Error> {
        toml::from_str(s)
    }

    #[test]
    fn config_parses_scalars_and_lists() {
        let c =
            parse("kind = \"blend\"\npatch_size = [8, 64, 64]\noverlap = 4\nmax_batch_size = 2")
                .unwrap();
        assert_eq!(c.kind, TilingKind::Blend);
        assert_eq!(c.patch_size, Extent::PerAxis(vec![8, 64, 64]));
        assert_eq!(c.overlap, Some(Extent::Uniform(4)));
        c.validate().unwrap();
        assert!(parse("patch = 3").is_err(), "unknown fields are rejected");
        assert!(parse("kind = \"overlap_tiling\"").is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let cases = [
            ("patch_size = 0", "tiling.patch_size"),
            ("patch_size = []", "tiling.patch_size"),
            ("patch_size = 8\nstride = 9", "tiling.stride"),
            ("patch_size = [8, 8]\nstride = [1, 2, 3]", "tiling.stride"),
            ("stride = 0", "tiling.stride"),
            ("max_batch_size = 0", "tiling.max_batch_size"),
            ("kind = \"basic\"\noverlap = 4", "tiling.overlap"),
            ("kind = \"overlap\"\nnum_splits = 4", "tiling.num_splits"),
            ("kind = \"basic\"\nnum_splits = 0", "tiling.num_splits"),
        ];
        for (text, field) in cases {
            let err = parse(text).unwrap().validate().unwrap_err().to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn plan_errors_name_sizes() {
        let c = TilingConfig {
            patch_size: Extent::Uniform(300),
            ..Default::default()
        };
        let err = c
            .build()
            .unwrap()
            .plan(&[256, 512])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tiling.patch_size") && err.contains("300") && err.contains("256"));
        let c = TilingConfig {
            patch_size: Extent::PerAxis(vec![8, 8]),
            ..Default::default()
        };
        let err = c
            .build()
            .unwrap()
            .plan(&[16, 16, 16])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tiling.patch_size") && err.contains("3 spatial axes"));
        let c = TilingConfig {
            patch_size: Extent::Uniform(4),
            overlap: Some(Extent::Uniform(8)),
            ..Default::default()
        };
        let err = c.build().unwrap().plan(&[8, 8]).unwrap_err().to_string();
        assert!(err.contains("tiling.overlap"), "{err}");
    }

    /// "spatial" builds no tile plan: the type says so, and asking it for one is a config error
    /// naming `tiling.kind`.
    #[test]
    fn spatial_is_a_decomposition_without_a_tile_plan() {
        let spatial = parse("kind = \"spatial\"\ngrid = [2, 1]").unwrap();
        assert!(matches!(
            spatial.decomposition(),
            Ok(Decomposition::Spatial)
        ));
        assert!(matches!(
            spatial.build().err(),
            Some(Error::InvalidConfig { field, .. }) if field == "tiling.kind"
        ));
        let overlap = parse("kind = \"overlap\"\npatch_size = 8").unwrap();
        let Ok(Decomposition::Tiles(strategy)) = overlap.decomposition() else {
            panic!("overlap tiling has a tile plan");
        };
        assert!(strategy.plan(&[100, 100]).unwrap().num_tiles() > 1);
    }
}
