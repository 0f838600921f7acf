//! The tiling strategies: the geometry that turns an image shape into a [`TilePlan`].
//!
//! * [`OverlapTiling`] — deepinv 0.5.0 `OverlapTilingStrategy` / `tiling_splitting_strategy`
//!   (`deepinv/distributed/utils.py`), reproduced exactly, with crop assembly or (our addition)
//!   raised-cosine blending over the same windows.
//! * [`BasicTiling`] — deepinv's `BasicStrategy` (`deepinv/distributed/strategies.py`): the image is cut
//!   into `num_splits` nearly equal, non-overlapping blocks per axis, no padding.
//!
//! Tiles are ordered row-major over the tile grid (last axis fastest), as `itertools.product` in
//! deepinv, so tile indices match deepinv's patch indices.

use super::plan::{PadMode, Span, TilePlan};
use super::{Extent, MAX_TILES, TilingStrategy};
use crate::error::{Error, Result};

/// One tile along one axis: window start (padded coordinates) and owned region (image coordinates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AxisTile {
    window: Span,
    region: Span,
}

/// deepinv's per-axis overlap geometry (`tiling_splitting_strategy`): with inner patch `p`, halo
/// `rf` and stride `s`, windows have size `T = p + 2·rf` in the image padded by `rf` on both sides
/// (`D_pad = D + 2·rf`); starts are `0, s, 2s, …` while `start + T < D_pad`, and the last start is then
/// moved to `D_pad − T` so the last window ends at the padded border. Tile `j` owns image pixels
/// `[st_j + trim_j, st_j + p)` with `trim_j = max(0, st_{j−1} + p − st_j)` (so a later tile gives up the
/// part of its inner patch the previous tile already covers).
fn overlap_axis(d: usize, p: usize, rf: usize, s: usize) -> Vec<AxisTile> {
    let tile = p + 2 * rf;
    let padded = d + 2 * rf;
    let mut starts = vec![0usize];
    while starts[starts.len() - 1] + tile < padded {
        starts.push(starts[starts.len() - 1] + s);
    }
    let last = starts.len() - 1;
    starts[last] = padded - tile;
    starts.dedup();
    let mut out = Vec::with_capacity(starts.len());
    for (j, &st) in starts.iter().enumerate() {
        let trim = if j == 0 {
            0
        } else {
            (starts[j - 1] + p).saturating_sub(st)
        };
        out.push(AxisTile {
            window: Span::new(st, tile),
            region: Span::new(st + trim, p - trim),
        });
    }
    out
}

/// Raised-cosine partition of unity over the crop regions of one axis. At each boundary `c` between
/// consecutive regions, the two tiles cross-fade over `[c − h, c + h)` with
/// `h = min(rf, ⌊L_left/2⌋, ⌊L_right/2⌋)` (`rf` is as far as a window reaches past its inner patch;
/// half the region lengths keep neighbouring fades apart, so at most two tiles overlap per axis).
/// The rising weight at the `k`-th of the `2h` pixels is `r_k = ½ − ½·cos(π(k + ½)/(2h))`, the
/// falling one `1 − r_k`; both lie strictly in (0, 1) and sum to one. Returns per tile the blended
/// region (image coordinates) and its weights.
fn blend_axis(tiles: &[AxisTile], rf: usize) -> Vec<(Span, Vec<f32>)> {
    let n = tiles.len();
    // half[j]: fade half-width at the boundary between tiles j and j+1.
    let half: Vec<usize> = (0..n.saturating_sub(1))
        .map(|j| {
            rf.min(tiles[j].region.size / 2)
                .min(tiles[j + 1].region.size / 2)
        })
        .collect();
    let ramp = |h: usize| -> Vec<f64> {
        (0..2 * h)
            .map(|k| {
                let t = std::f64::consts::PI * (k as f64 + 0.5) / (2 * h) as f64;
                0.5 - 0.5 * t.cos()
            })
            .collect()
    };
    (0..n)
        .map(|j| {
            let hl = if j > 0 { half[j - 1] } else { 0 };
            let hr = if j + 1 < n { half[j] } else { 0 };
            let r = tiles[j].region;
            let span = Span::new(r.start - hl, r.size + hl + hr);
            let mut w = vec![1.0f32; span.size];
            for (k, v) in ramp(hl).into_iter().enumerate() {
                w[k] = v as f32;
            }
            for (k, v) in ramp(hr).into_iter().enumerate() {
                w[span.size - 2 * hr + k] = (1.0 - v) as f32;
            }
            (span, w)
        })
        .collect()
}

/// deepinv's `BasicStrategy` split of one axis into `n` blocks: sizes `⌊D/n⌋`, the first `D mod n`
/// of them one longer.
fn basic_axis(d: usize, n: usize) -> Vec<AxisTile> {
    let (size, rem) = (d / n, d % n);
    let mut start = 0;
    (0..n)
        .map(|j| {
            let len = size + usize::from(j < rem);
            let span = Span::new(start, len);
            start += len;
            AxisTile {
                window: span,
                region: span,
            }
        })
        .collect()
}

/// Cartesian product of per-axis tiles, row-major (last axis fastest).
fn product<T: Clone>(axes: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                axis.iter().map(move |t| {
                    let mut v = prefix.clone();
                    v.push(t.clone());
                    v
                })
            })
            .collect();
    }
    out
}

/// Refuses a plan of more than [`MAX_TILES`] tiles before any tile is made: `per_axis` holds the
/// tile count along each spatial axis, `field` the config field that sets them.
fn check_tile_count(per_axis: &[usize], spatial: &[usize], field: &str) -> Result<()> {
    let total = per_axis
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .unwrap_or(usize::MAX);
    if total > MAX_TILES {
        let axes: Vec<String> = per_axis.iter().map(usize::to_string).collect();
        return Err(Error::config(
            field,
            format!(
                "{total} tiles ({} along the axes of the {spatial:?} image) is more than the {MAX_TILES} \
                 a plan may have; use larger patches",
                axes.join(" × ")
            ),
        ));
    }
    Ok(())
}

fn check_image(spatial: &[usize]) -> Result<()> {
    if spatial.is_empty() || spatial.contains(&0) {
        return Err(Error::config(
            "tiling",
            format!("cannot tile an image with spatial shape {spatial:?}"),
        ));
    }
    Ok(())
}

/// Overlapping tiles with a halo (deepinv `OverlapTilingStrategy`), assembled by cropping the halo
/// (`blend == false`, exactly deepinv) or by raised-cosine blending over the halo (`blend == true`).
#[derive(Debug, Clone, PartialEq)]
pub struct OverlapTiling {
    /// Inner patch size per axis (the part a tile owns), deepinv's `patch_size`.
    pub patch_size: Extent,
    /// Halo added on each side of the inner patch, deepinv's `overlap` (the receptive-field radius).
    pub overlap: Extent,
    /// Step between inner patches; `None` = `patch_size` (deepinv's default). Must be ≤ `patch_size`.
    pub stride: Option<Extent>,
    pub pad_mode: PadMode,
    pub blend: bool,
    /// Shrink the inner patch to `⌈size / tiles⌉` on each axis, keeping the tile count that
    /// `patch_size` gives, so the tiles divide the image evenly (see `TilingConfig::even`).
    pub even: bool,
}

impl OverlapTiling {
    /// deepinv's defaults for the rest: stride = patch, reflect padding, crop assembly.
    pub fn new(patch_size: impl Into<Extent>, overlap: impl Into<Extent>) -> Self {
        OverlapTiling {
            patch_size: patch_size.into(),
            overlap: overlap.into(),
            stride: None,
            pad_mode: PadMode::Reflect,
            blend: false,
            even: false,
        }
    }

    /// Resolves the per-axis sizes for `spatial` and checks them against the image.
    fn sizes(&self, spatial: &[usize]) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        let n = spatial.len();
        let mut p = self.patch_size.resolve("tiling.patch_size", n)?;
        let rf = self.overlap.resolve("tiling.overlap", n)?;
        let s = match &self.stride {
            Some(s) => s.resolve("tiling.stride", n)?,
            None => p.clone(),
        };
        for a in 0..n {
            if p[a] == 0 {
                return Err(Error::config(
                    "tiling.patch_size",
                    format!("must be ≥ 1 on every axis, got 0 on axis {a}"),
                ));
            }
            if p[a] > spatial[a] {
                // deepinv shrinks the patch with a warning (and then fails anyway when the patch is
                // not smaller than the image); a silent change of the tiling is worse than an error.
                return Err(Error::config(
                    "tiling.patch_size",
                    format!(
                        "patch size {} on spatial axis {a} is larger than the image ({} pixels, \
                         spatial shape {spatial:?})",
                        p[a], spatial[a]
                    ),
                ));
            }
            if s[a] == 0 || s[a] > p[a] {
                return Err(Error::config(
                    "tiling.stride",
                    format!(
                        "must be in 1..={} (the patch size) on axis {a}, got {}; a larger stride \
                         leaves pixels that no tile owns",
                        p[a], s[a]
                    ),
                ));
            }
        }
        if self.even {
            if self.stride.is_some() {
                return Err(Error::config(
                    "tiling.stride",
                    "tiling.even chooses the patch size and the stride; leave tiling.stride out",
                ));
            }
            for a in 0..n {
                let tiles = overlap_axis(spatial[a], p[a], rf[a], p[a]).len();
                // Windows a multiple of 8: a U-Net such as DRUNet runs those as they are, and
                // falls back to overlapping crops (several times the work) otherwise.
                let window = (spatial[a].div_ceil(tiles) + 2 * rf[a]).next_multiple_of(8);
                p[a] = (window - 2 * rf[a]).min(p[a]).min(spatial[a]);
            }
            return Ok((p.clone(), rf, p));
        }
        Ok((p, rf, s))
    }
}

impl TilingStrategy for OverlapTiling {
    fn plan(&self, spatial: &[usize]) -> Result<TilePlan> {
        check_image(spatial)?;
        let (p, rf, s) = self.sizes(spatial)?;
        let axes: Vec<Vec<AxisTile>> = (0..spatial.len())
            .map(|a| overlap_axis(spatial[a], p[a], rf[a], s[a]))
            .collect();
        let per_axis: Vec<usize> = axes.iter().map(Vec::len).collect();
        check_tile_count(&per_axis, spatial, "tiling.patch_size")?;
        let padding: Vec<(usize, usize)> = rf.iter().map(|&r| (r, r)).collect();
        let tiles = if self.blend {
            let blended: Vec<Vec<(AxisTile, Span, Vec<f32>)>> = axes
                .iter()
                .zip(&rf)
                .map(|(ax, &r)| {
                    ax.iter()
                        .zip(blend_axis(ax, r))
                        .map(|(t, (span, w))| (*t, span, w))
                        .collect()
                })
                .collect();
            product(&blended)
                .into_iter()
                .map(|combo| {
                    let window = combo.iter().map(|c| c.0.window).collect();
                    let region = combo.iter().map(|c| c.1).collect();
                    let weights = combo.into_iter().map(|c| c.2).collect();
                    (window, region, Some(weights))
                })
                .collect()
        } else {
            product(&axes)
                .into_iter()
                .map(|combo| {
                    let window = combo.iter().map(|c| c.window).collect();
                    let region = combo.iter().map(|c| c.region).collect();
                    (window, region, None)
                })
                .collect()
        };
        TilePlan::new(spatial, &padding, self.pad_mode, tiles)
    }

    fn name(&self) -> String {
        let stride = match &self.stride {
            Some(s) => format!(", stride {s}"),
            None => String::new(),
        };
        format!(
            "{}(patch {}, overlap {}{stride}, {:?} padding)",
            if self.blend { "blend" } else { "overlap" },
            self.patch_size,
            self.overlap,
            self.pad_mode
        )
        .to_lowercase()
    }
}

/// Non-overlapping blocks without padding (deepinv `BasicStrategy`). With `num_splits` the split is
/// deepinv's; without it each axis gets `⌈D / patch_size⌉` blocks, so no block exceeds `patch_size`.
/// Blocks may differ by one pixel per axis; [`TilePlan::batches`] groups equal shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct BasicTiling {
    pub patch_size: Extent,
    pub num_splits: Option<Extent>,
}

impl TilingStrategy for BasicTiling {
    fn plan(&self, spatial: &[usize]) -> Result<TilePlan> {
        check_image(spatial)?;
        let n = spatial.len();
        let splits: Vec<usize> = match &self.num_splits {
            Some(e) => {
                let v = e.resolve("tiling.num_splits", n)?;
                for a in 0..n {
                    if v[a] == 0 || v[a] > spatial[a] {
                        return Err(Error::config(
                            "tiling.num_splits",
                            format!(
                                "must be in 1..={} (the image size) on axis {a}, got {}",
                                spatial[a], v[a]
                            ),
                        ));
                    }
                }
                v
            }
            None => {
                let p = self.patch_size.resolve("tiling.patch_size", n)?;
                let mut v = Vec::with_capacity(n);
                for a in 0..n {
                    if p[a] == 0 || p[a] > spatial[a] {
                        return Err(Error::config(
                            "tiling.patch_size",
                            format!(
                                "must be in 1..={} (the image size) on spatial axis {a}, got {} \
                                 (spatial shape {spatial:?})",
                                spatial[a], p[a]
                            ),
                        ));
                    }
                    v.push(spatial[a].div_ceil(p[a]));
                }
                v
            }
        };
        let field = if self.num_splits.is_some() {
            "tiling.num_splits"
        } else {
            "tiling.patch_size"
        };
        check_tile_count(&splits, spatial, field)?;
        let axes: Vec<Vec<AxisTile>> = (0..n).map(|a| basic_axis(spatial[a], splits[a])).collect();
        let tiles = product(&axes)
            .into_iter()
            .map(|combo| {
                let window = combo.iter().map(|c| c.window).collect();
                let region = combo.iter().map(|c| c.region).collect();
                (window, region, None)
            })
            .collect();
        TilePlan::new(spatial, &vec![(0, 0); n], PadMode::Zeros, tiles)
    }

    fn name(&self) -> String {
        match &self.num_splits {
            Some(s) => format!("basic({s} splits)"),
            None => format!("basic(patch {})", self.patch_size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_tiles_keep_deepinvs_count_and_divide_the_image() {
        // deepinv: 1024 px in patches of 448 with halo 32 → windows of 512 owning 448, 448, 128.
        let deepinv = overlap_axis(1024, 448, 32, 448);
        let owned: Vec<usize> = deepinv.iter().map(|t| t.region.size).collect();
        assert_eq!(owned, [448, 448, 128]);
        let even = OverlapTiling {
            even: true,
            ..OverlapTiling::new(448, 32)
        };
        let (p, rf, s) = even.sizes(&[1024, 700]).unwrap();
        assert_eq!(
            (p.clone(), rf, s.clone()),
            (vec![344, 352], vec![32, 32], vec![344, 352])
        );
        let axis = overlap_axis(1024, p[0], 32, s[0]);
        let owned: Vec<usize> = axis.iter().map(|t| t.region.size).collect();
        assert_eq!(
            owned,
            [344, 344, 336],
            "three tiles, owning within 8 px of each other"
        );
        // ⌈1024/3⌉ = 342 + 2·32 = 406, rounded up to a multiple of 8.
        assert!(axis.iter().all(|t| t.window.size == 408));
        // Owned regions tile the axis exactly.
        let mut next = 0;
        for t in &axis {
            assert_eq!(t.region.start, next);
            next += t.region.size;
        }
        assert_eq!(next, 1024);
        // A patch as large as the image stays one tile.
        let one = OverlapTiling {
            even: true,
            ..OverlapTiling::new(64, 8)
        };
        assert_eq!(one.sizes(&[64]).unwrap().0, vec![64]);
    }

    #[test]
    fn absurd_plans_are_refused_with_their_tile_count() {
        // Patch 1 on a 1024×683 image: one tile per pixel.
        let e = OverlapTiling::new(1, 8).plan(&[683, 1024]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("tiling.patch_size")
                && msg.contains("699392 tiles")
                && msg.contains("683 × 1024"),
            "{msg}"
        );
        let basic = BasicTiling {
            patch_size: Extent::Uniform(1),
            num_splits: None,
        };
        assert!(basic.plan(&[683, 1024]).is_err());
        // Just under the limit is a plan (512 × 512 tiles).
        let ok = BasicTiling {
            patch_size: Extent::Uniform(2),
            num_splits: None,
        };
        assert_eq!(ok.plan(&[1024, 1024]).unwrap().num_tiles(), MAX_TILES);
    }

    #[test]
    fn overlap_axis_matches_deepinv_by_hand() {
        // D=23, p=8, rf=2: D_pad=27, T=12, starts 0, 8, 16 → last moved to 15.
        let t = overlap_axis(23, 8, 2, 8);
        let starts: Vec<usize> = t.iter().map(|t| t.window.start).collect();
        assert_eq!(starts, vec![0, 8, 15]);
        let regions: Vec<(usize, usize)> =
            t.iter().map(|t| (t.region.start, t.region.end())).collect();
        assert_eq!(regions, vec![(0, 8), (8, 16), (16, 23)]);
        // patch == image: a single tile.
        assert_eq!(overlap_axis(16, 16, 3, 16).len(), 1);
    }

    #[test]
    fn blend_weights_are_a_partition_of_unity() {
        for (d, p, rf, s) in [(23, 8, 2, 8), (40, 7, 5, 3), (9, 9, 4, 9), (50, 10, 0, 10)] {
            let tiles = overlap_axis(d, p, rf, s);
            let mut sum = vec![0.0f64; d];
            for (span, w) in blend_axis(&tiles, rf) {
                assert!(w.iter().all(|&v| v > 0.0 && v <= 1.0));
                for (k, v) in w.iter().enumerate() {
                    sum[span.start + k] += *v as f64;
                }
            }
            assert!(
                sum.iter().all(|s| (s - 1.0).abs() < 1e-6),
                "{d} {p} {rf} {s}: {sum:?}"
            );
        }
    }

    #[test]
    fn basic_axis_matches_deepinv() {
        // deepinv: 23 into 3 → 8, 8, 7.
        let t = basic_axis(23, 3);
        let r: Vec<(usize, usize)> = t.iter().map(|t| (t.region.start, t.region.size)).collect();
        assert_eq!(r, vec![(0, 8), (8, 8), (16, 7)]);
    }
}
