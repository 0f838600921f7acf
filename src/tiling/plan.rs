//! `TilePlan`: the concrete tile windows for one image shape, and the two data movements that use
//! them — cutting patches out of an image (`extract`) and putting denoised patches back (`assemble`,
//! or tile by tile with an [`Assembler`]).
//!
//! Coordinates. The image is (conceptually) padded on every spatial axis by `padding[a] = (before,
//! after)` with `pad_mode`; windows are given in those *padded* coordinates, exactly as deepinv's
//! `global_slices`. The padded image is never materialised: `extract` maps every window coordinate
//! back to a source pixel. The region a tile writes is given in *image* coordinates, and its offset
//! inside the patch is `region.start + pad_before − window.start` (deepinv's `crop_slices`).
//!
//! In crop assembly every output pixel is written by exactly one tile (a plain copy, so an identity
//! denoiser round-trips bitwise). In blend assembly tiles carry separable per-axis weights over their
//! region; contributions are accumulated in f64 and divided by the accumulated weight.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A half-open interval `start..start + size` along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub size: usize,
}

impl Span {
    pub fn new(start: usize, size: usize) -> Self {
        Span { start, size }
    }

    /// One past the last index.
    pub fn end(&self) -> usize {
        self.start + self.size
    }
}

/// How the image is extended beyond its border before windows are cut (torch `F.pad` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PadMode {
    /// Mirror without repeating the edge pixel (`…, x2, x1 | x0, x1, x2, …`); deepinv's default.
    /// Needs the padding to be shorter than the axis.
    #[default]
    Reflect,
    /// Repeat the edge pixel.
    Replicate,
    /// Zeros (torch `constant` with value 0, deepinv's fallback when reflect fails).
    Zeros,
}

/// How patches are put back together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assembly {
    /// Each output pixel is copied from the single tile that owns it.
    Crop,
    /// Each output pixel is the weighted mean of the tiles covering it.
    Blend,
}

/// One tile: where its patch is cut from, and which part of the output it produces.
#[derive(Debug, Clone, PartialEq)]
pub struct Tile {
    window: Vec<Span>,
    region: Vec<Span>,
    region_in_patch: Vec<usize>,
    weights: Option<Vec<Vec<f32>>>,
}

impl Tile {
    /// The patch window per spatial axis, in padded coordinates (deepinv's `global_slices`).
    pub fn window(&self) -> &[Span] {
        &self.window
    }

    /// The output region per axis, in image coordinates (deepinv's `target_slices` in crop mode).
    pub fn region(&self) -> &[Span] {
        &self.region
    }

    /// Where `region` starts inside the patch, per axis (deepinv's `crop_slices` start).
    pub fn region_in_patch(&self) -> &[usize] {
        &self.region_in_patch
    }

    /// Blend mode: one weight per pixel of `region`, per axis; the tile's weight at a pixel is the
    /// product over axes. `None` in crop mode.
    pub fn weights(&self) -> Option<&[Vec<f32>]> {
        self.weights.as_deref()
    }

    /// The patch shape (window sizes).
    pub fn window_shape(&self) -> Vec<usize> {
        self.window.iter().map(|s| s.size).collect()
    }
}

/// The tiles of one image shape, with the padding they assume.
#[derive(Debug, Clone, PartialEq)]
pub struct TilePlan {
    spatial: Vec<usize>,
    padding: Vec<(usize, usize)>,
    pad_mode: PadMode,
    assembly: Assembly,
    tiles: Vec<Tile>,
}

impl TilePlan {
    /// Checks and assembles a plan. `tiles` are `(window, region, weights)` triples as described on
    /// [`Tile`]; either every tile has weights (blend) or none has (crop). Strategies call this; the
    /// checks guarantee that `extract` and `assemble` never index out of bounds.
    #[allow(clippy::type_complexity)]
    pub fn new(
        spatial: &[usize],
        padding: &[(usize, usize)],
        pad_mode: PadMode,
        tiles: Vec<(Vec<Span>, Vec<Span>, Option<Vec<Vec<f32>>>)>,
    ) -> Result<Self> {
        let bad = |reason: String| Error::config("tiling", reason);
        let n = spatial.len();
        if n == 0 || spatial.contains(&0) {
            return Err(bad(format!(
                "image spatial shape {spatial:?} has an empty axis"
            )));
        }
        if padding.len() != n {
            return Err(bad(format!(
                "padding has {} axes, image has {n}",
                padding.len()
            )));
        }
        for (a, (&d, &(lo, hi))) in spatial.iter().zip(padding).enumerate() {
            if pad_mode == PadMode::Reflect && lo.max(hi) >= d {
                return Err(Error::config(
                    "tiling.overlap",
                    format!(
                        "reflect padding by {} needs an image axis longer than that, but axis {a} \
                         has {d} pixels; use a smaller overlap or pad_mode = \"replicate\"/\"zeros\"",
                        lo.max(hi)
                    ),
                ));
            }
        }
        if tiles.is_empty() {
            return Err(bad("a tile plan needs at least one tile".into()));
        }
        let blend = tiles[0].2.is_some();
        let mut out = Vec::with_capacity(tiles.len());
        for (i, (window, region, weights)) in tiles.into_iter().enumerate() {
            if window.len() != n || region.len() != n {
                return Err(bad(format!("tile {i} does not have {n} axes")));
            }
            if weights.is_some() != blend {
                return Err(bad(format!(
                    "tile {i}: either every tile has blend weights or none has"
                )));
            }
            let mut region_in_patch = Vec::with_capacity(n);
            for a in 0..n {
                let (w, r, (lo, hi)) = (window[a], region[a], padding[a]);
                let padded = spatial[a] + lo + hi;
                let inside = w.size > 0
                    && w.end() <= padded
                    && r.size > 0
                    && r.end() <= spatial[a]
                    && r.start + lo >= w.start
                    && r.end() + lo <= w.end();
                if !inside {
                    return Err(bad(format!(
                        "tile {i}, axis {a}: window {w:?} (padded length {padded}) and region \
                         {r:?} (image length {}) are inconsistent",
                        spatial[a]
                    )));
                }
                region_in_patch.push(r.start + lo - w.start);
            }
            if let Some(ws) = &weights {
                let ok = ws.len() == n
                    && ws.iter().zip(&region).all(|(w, r)| {
                        w.len() == r.size && w.iter().all(|v| v.is_finite() && *v >= 0.0)
                    });
                if !ok {
                    return Err(bad(format!(
                        "tile {i}: blend weights must be finite, non-negative, one per region pixel"
                    )));
                }
            }
            out.push(Tile {
                window,
                region,
                region_in_patch,
                weights,
            });
        }
        Ok(TilePlan {
            spatial: spatial.to_vec(),
            padding: padding.to_vec(),
            pad_mode,
            assembly: if blend {
                Assembly::Blend
            } else {
                Assembly::Crop
            },
            tiles: out,
        })
    }

    /// The image's spatial shape this plan was made for.
    pub fn spatial(&self) -> &[usize] {
        &self.spatial
    }

    /// `(before, after)` padding per spatial axis.
    pub fn padding(&self) -> &[(usize, usize)] {
        &self.padding
    }

    pub fn pad_mode(&self) -> PadMode {
        self.pad_mode
    }

    pub fn assembly(&self) -> Assembly {
        self.assembly
    }

    pub fn tiles(&self) -> &[Tile] {
        &self.tiles
    }

    pub fn num_tiles(&self) -> usize {
        self.tiles.len()
    }

    /// The spatial shape of the padded image.
    pub fn padded_spatial(&self) -> Vec<usize> {
        self.spatial
            .iter()
            .zip(&self.padding)
            .map(|(d, (lo, hi))| d + lo + hi)
            .collect()
    }

    /// Splits `indices` into groups that can be stacked into one denoiser batch: tiles with the same
    /// window shape (groups in order of first appearance, indices in their given order), at most
    /// `max_batch_size` tiles each (`None`: unlimited). Overlap and blend plans have one window
    /// shape; basic plans may have up to two sizes per axis. Out-of-range indices form their own
    /// group, which `extract` then rejects.
    pub fn batches(&self, indices: &[usize], max_batch_size: Option<usize>) -> Vec<Vec<usize>> {
        let cap = max_batch_size.unwrap_or(usize::MAX).max(1);
        let mut by_shape: Vec<(Option<Vec<usize>>, Vec<usize>)> = Vec::new();
        for &i in indices {
            let shape = self.tiles.get(i).map(|t| t.window_shape());
            match by_shape.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, g)) => g.push(i),
                None => by_shape.push((shape, vec![i])),
            }
        }
        by_shape
            .into_iter()
            .flat_map(|(_, g)| g.chunks(cap).map(<[usize]>::to_vec).collect::<Vec<_>>())
            .collect()
    }

    /// Per image pixel (row-major over `spatial`), the sum over tiles of the tile's weight there:
    /// the number of owning tiles in crop mode (exactly 1 for a valid plan), ≈ 1 in blend mode.
    pub fn coverage(&self) -> Vec<f64> {
        let mut sum = vec![0.0f64; self.spatial.iter().product()];
        for tile in &self.tiles {
            for row in RowCopy::for_tile(tile, &self.spatial, &tile.window_shape()) {
                for k in 0..row.len {
                    sum[row.dst + k] += row.weight(tile, k);
                }
            }
        }
        sum
    }

    fn check_tile_indices(&self, op: &str, indices: &[usize]) -> Result<Vec<usize>> {
        let first = indices
            .first()
            .ok_or_else(|| Error::config(op, "no tile indices given"))?;
        let mut shape = None;
        for &i in indices {
            let tile = self.tiles.get(i).ok_or_else(|| {
                Error::config(
                    op,
                    format!(
                        "tile index {i} out of range (plan has {})",
                        self.tiles.len()
                    ),
                )
            })?;
            let s = tile.window_shape();
            match &shape {
                None => shape = Some(s),
                Some(prev) if *prev != s => {
                    return Err(Error::config(
                        op,
                        format!(
                            "tiles {first} and {i} have different window shapes {prev:?} and \
                             {s:?}; group indices with TilePlan::batches"
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(shape.unwrap_or_default())
    }

    fn check_image_shape(&self, op: &str, shape: &[usize]) -> Result<()> {
        if shape.len() != self.spatial.len() + 2 || shape[2..] != self.spatial[..] {
            let mut expected = vec![shape.first().copied().unwrap_or(1)];
            expected.push(shape.get(1).copied().unwrap_or(1));
            expected.extend_from_slice(&self.spatial);
            return Err(Error::shape(op, &expected, shape));
        }
        Ok(())
    }

    /// Cuts the windows of tiles `indices` out of `x` `(B, C, spatial…)` (padding on the fly) and
    /// stacks them as `(n·B, C, window…)`, tile-major: batch row `k·B + b` is tile `indices[k]` of
    /// image `b` — the order of deepinv's `torch.cat(patches, dim=0)`. All tiles must share a window
    /// shape (see [`TilePlan::batches`]).
    pub fn extract(&self, x: &Tensor, indices: &[usize]) -> Result<Tensor> {
        self.check_image_shape("tiling.extract", x.shape())?;
        let window = self.check_tile_indices("tiling.extract", indices)?;
        let (batch, channels) = (x.shape()[0], x.shape()[1]);
        let planes = batch * channels;
        let win_len: usize = window.iter().product();
        let mut shape = vec![indices.len() * batch, channels];
        shape.extend_from_slice(&window);
        let mut out = vec![0.0f32; indices.len() * planes * win_len];
        if out.is_empty() {
            return Tensor::from_vec(&shape, out);
        }
        out.par_chunks_mut(planes * win_len)
            .zip(indices.par_iter())
            .for_each(|(dst, &i)| {
                let gather =
                    Gather::new(&self.tiles[i], &self.spatial, &self.padding, self.pad_mode);
                for (p, dst_plane) in dst.chunks_exact_mut(win_len).enumerate() {
                    gather.copy(x.plane(p), dst_plane);
                }
            });
        Tensor::from_vec(&shape, out)
    }

    /// Puts denoised patches back into an image of shape `out_shape` `(B, C, spatial…)`. Each pair is
    /// `(tile index, patch (B, C, window…))`, in any order; every tile must appear exactly once. The
    /// pairs are applied in tile order, so the result does not depend on the order given.
    pub fn assemble(&self, patches: &[(usize, Tensor)], out_shape: &[usize]) -> Result<Tensor> {
        let mut order: Vec<usize> = (0..patches.len()).collect();
        order.sort_by_key(|&k| patches[k].0);
        let mut asm = Assembler::new(self, out_shape)?;
        for k in order {
            asm.add(patches[k].0, &patches[k].1)?;
        }
        asm.finish()
    }

    /// A streaming assembler for an output of shape `out_shape`.
    pub fn assembler(&self, out_shape: &[usize]) -> Result<Assembler<'_>> {
        Assembler::new(self, out_shape)
    }
}

/// Per-axis source index of every window position: `None` is a zero (outside, `Zeros` mode).
fn source_map(window: Span, pad_before: usize, len: usize, mode: PadMode) -> Vec<Option<usize>> {
    let (n, pad) = (len as isize, pad_before as isize);
    (window.start..window.end())
        .map(|q| {
            let i = q as isize - pad;
            if (0..n).contains(&i) {
                return Some(i as usize);
            }
            match mode {
                // torch reflect: index −k ↦ k, n−1+k ↦ n−1−k (valid while the pad is < n).
                PadMode::Reflect => Some(if i < 0 { -i } else { 2 * (n - 1) - i } as usize),
                PadMode::Replicate => Some(i.clamp(0, n - 1) as usize),
                PadMode::Zeros => None,
            }
        })
        .collect()
}

/// Row-major strides of a spatial shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// Visits every multi-index of the box `dims` in row-major order.
fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; dims.len()];
    loop {
        f(&idx);
        let mut a = dims.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            idx[a] += 1;
            if idx[a] < dims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// How to fill one window (one plane) from the source plane.
struct Gather {
    /// Per window row (all axes but the last): offset of the source row, `None` for a zero row.
    rows: Vec<Option<usize>>,
    inner: Inner,
    row_len: usize,
}

enum Inner {
    /// The last axis reads a contiguous source run starting here.
    Contiguous(usize),
    /// The last axis gathers these source indices (edge tiles).
    Mapped(Vec<Option<usize>>),
}

impl Gather {
    fn new(tile: &Tile, spatial: &[usize], padding: &[(usize, usize)], mode: PadMode) -> Self {
        let n = spatial.len();
        let maps: Vec<Vec<Option<usize>>> = (0..n)
            .map(|a| source_map(tile.window[a], padding[a].0, spatial[a], mode))
            .collect();
        let src_strides = strides(spatial);
        let outer: Vec<usize> = tile.window[..n - 1].iter().map(|s| s.size).collect();
        let mut rows = Vec::with_capacity(outer.iter().product());
        for_each_index(&outer, |idx| {
            let mut off = Some(0usize);
            for (a, &i) in idx.iter().enumerate() {
                off = off.and_then(|o| maps[a][i].map(|s| o + s * src_strides[a]));
            }
            rows.push(off);
        });
        let last = &maps[n - 1];
        let contiguous = last
            .iter()
            .enumerate()
            .all(|(k, m)| *m == last[0].map(|s| s + k));
        let inner = match last[0] {
            Some(s) if contiguous => Inner::Contiguous(s),
            _ => Inner::Mapped(last.clone()),
        };
        Gather {
            rows,
            inner,
            row_len: tile.window[n - 1].size,
        }
    }

    fn copy(&self, src: &[f32], dst: &mut [f32]) {
        for (row, d) in self.rows.iter().zip(dst.chunks_exact_mut(self.row_len)) {
            match (row, &self.inner) {
                (None, _) => d.fill(0.0),
                (Some(o), Inner::Contiguous(s)) => {
                    d.copy_from_slice(&src[o + s..o + s + self.row_len])
                }
                (Some(o), Inner::Mapped(m)) => {
                    for (v, k) in d.iter_mut().zip(m) {
                        *v = k.map_or(0.0, |k| src[o + k]);
                    }
                }
            }
        }
    }
}

/// One row (last axis) of a tile's region: where it goes in the output plane and comes from in the
/// patch plane.
struct RowCopy {
    dst: usize,
    src: usize,
    len: usize,
    /// Blend: product of the weights of the outer axes at this row.
    outer_weight: f64,
}

impl RowCopy {
    fn for_tile(tile: &Tile, spatial: &[usize], window: &[usize]) -> Vec<RowCopy> {
        let n = spatial.len();
        let (out_s, win_s) = (strides(spatial), strides(window));
        let outer: Vec<usize> = tile.region[..n - 1].iter().map(|s| s.size).collect();
        let mut rows = Vec::with_capacity(outer.iter().product());
        for_each_index(&outer, |idx| {
            let mut dst = tile.region[n - 1].start;
            let mut src = tile.region_in_patch[n - 1];
            let mut w = 1.0f64;
            for (a, &i) in idx.iter().enumerate() {
                dst += (tile.region[a].start + i) * out_s[a];
                src += (tile.region_in_patch[a] + i) * win_s[a];
                if let Some(ws) = &tile.weights {
                    w *= ws[a][i] as f64;
                }
            }
            rows.push(RowCopy {
                dst,
                src,
                len: tile.region[n - 1].size,
                outer_weight: w,
            });
        });
        rows
    }

    /// The tile's weight at element `k` of this row (1 in crop mode).
    fn weight(&self, tile: &Tile, k: usize) -> f64 {
        match &tile.weights {
            Some(ws) => self.outer_weight * ws[ws.len() - 1][k] as f64,
            None => 1.0,
        }
    }
}

/// Assembles an output tile by tile (e.g. as patches arrive from other ranks).
///
/// Crop plans copy each tile's region straight into the f32 output. Blend plans accumulate
/// `Σ wᵢ·patchᵢ` in f64 and divide by the plan's `Σ wᵢ` in [`Assembler::finish`]; the f64 sum makes
/// an identity round trip bitwise exact, and the result is independent of arrival order up to f64
/// rounding (use [`TilePlan::assemble`] for a fixed order).
pub struct Assembler<'p> {
    plan: &'p TilePlan,
    out_shape: Vec<usize>,
    out: Vec<f32>,
    acc: Vec<f64>,
    received: Vec<bool>,
}

impl<'p> Assembler<'p> {
    pub fn new(plan: &'p TilePlan, out_shape: &[usize]) -> Result<Self> {
        plan.check_image_shape("tiling.assemble", out_shape)?;
        let numel: usize = out_shape.iter().product();
        let blend = plan.assembly == Assembly::Blend;
        Ok(Assembler {
            plan,
            out_shape: out_shape.to_vec(),
            out: if blend { Vec::new() } else { vec![0.0; numel] },
            // −0.0 is the identity of f64 addition, so a −0.0 pixel stays −0.0 (bitwise round trip).
            acc: if blend { vec![-0.0; numel] } else { Vec::new() },
            received: vec![false; plan.tiles.len()],
        })
    }

    /// Adds one denoised patch `(B, C, window…)` of tile `index`.
    pub fn add(&mut self, index: usize, patch: &Tensor) -> Result<()> {
        self.add_batch(&[index], patch)
    }

    /// Adds a denoised batch `(n·B, C, window…)` in [`TilePlan::extract`]'s order.
    pub fn add_batch(&mut self, indices: &[usize], batch: &Tensor) -> Result<()> {
        let window = self.plan.check_tile_indices("tiling.assemble", indices)?;
        let mut expected = vec![indices.len() * self.out_shape[0], self.out_shape[1]];
        expected.extend_from_slice(&window);
        batch.expect_shape("tiling.assemble", &expected)?;
        for &i in indices {
            if self.received[i] {
                return Err(Error::Internal(format!(
                    "tiling.assemble: tile {i} was added twice"
                )));
            }
        }
        let tile_len = batch.numel() / indices.len().max(1);
        for (k, &i) in indices.iter().enumerate() {
            self.write_tile(i, &batch.data()[k * tile_len..(k + 1) * tile_len]);
            self.received[i] = true;
        }
        Ok(())
    }

    /// Tiles not added yet.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.received.len())
            .filter(|&i| !self.received[i])
            .collect()
    }

    fn write_tile(&mut self, index: usize, data: &[f32]) {
        let tile = &self.plan.tiles[index];
        let window = tile.window_shape();
        let win_len: usize = window.iter().product();
        let plane_len: usize = self.plan.spatial.iter().product();
        let rows = RowCopy::for_tile(tile, &self.plan.spatial, &window);
        let patches = data.par_chunks_exact(win_len);
        match self.plan.assembly {
            Assembly::Crop => self
                .out
                .par_chunks_exact_mut(plane_len)
                .zip(patches)
                .for_each(|(out, src)| {
                    for r in &rows {
                        out[r.dst..r.dst + r.len].copy_from_slice(&src[r.src..r.src + r.len]);
                    }
                }),
            Assembly::Blend => self
                .acc
                .par_chunks_exact_mut(plane_len)
                .zip(patches)
                .for_each(|(acc, src)| {
                    let inner = tile
                        .weights
                        .as_ref()
                        .map_or(&[][..], |ws| &ws[ws.len() - 1]);
                    for r in &rows {
                        let acc = &mut acc[r.dst..r.dst + r.len];
                        let src = &src[r.src..r.src + r.len];
                        for ((a, &v), &wk) in acc.iter_mut().zip(src).zip(inner) {
                            let w = r.outer_weight * wk as f64;
                            // Zero weights are skipped so they cannot turn a −0.0 sum into +0.0.
                            if w > 0.0 {
                                *a += w * v as f64;
                            }
                        }
                    }
                }),
        }
    }

    /// The assembled output; fails if a tile is missing.
    pub fn finish(self) -> Result<Tensor> {
        let missing = self.missing();
        if !missing.is_empty() {
            return Err(Error::Internal(format!(
                "tiling.assemble: {} of {} tiles were never added (first: {})",
                missing.len(),
                self.received.len(),
                missing[0]
            )));
        }
        match self.plan.assembly {
            Assembly::Crop => Tensor::from_vec(&self.out_shape, self.out),
            Assembly::Blend => {
                let weight_sum = self.plan.coverage();
                let plane_len = weight_sum.len();
                let mut out = vec![0.0f32; self.acc.len()];
                out.par_chunks_exact_mut(plane_len)
                    .zip(self.acc.par_chunks_exact(plane_len))
                    .for_each(|(o, a)| {
                        for ((o, a), w) in o.iter_mut().zip(a).zip(&weight_sum) {
                            *o = (a / w) as f32;
                        }
                    });
                Tensor::from_vec(&self.out_shape, out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_map_matches_torch() {
        // torch.nn.functional.pad(arange(4), (2, 2), mode="reflect") = [2, 1, 0, 1, 2, 3, 2, 1]
        let m = source_map(Span::new(0, 8), 2, 4, PadMode::Reflect);
        let got: Vec<usize> = m.into_iter().map(Option::unwrap).collect();
        assert_eq!(got, vec![2, 1, 0, 1, 2, 3, 2, 1]);
        let r = source_map(Span::new(0, 8), 2, 4, PadMode::Replicate);
        let got: Vec<usize> = r.into_iter().map(Option::unwrap).collect();
        assert_eq!(got, vec![0, 0, 0, 1, 2, 3, 3, 3]);
        let z = source_map(Span::new(1, 3), 2, 4, PadMode::Zeros);
        assert_eq!(z, vec![None, Some(0), Some(1)]);
    }

    #[test]
    fn extract_pads_on_the_fly() {
        // 1×1×3×3 image 0..9, one 5×5 window over a reflect-padded (by 1) image.
        let plan = TilePlan::new(
            &[3, 3],
            &[(1, 1), (1, 1)],
            PadMode::Reflect,
            vec![(
                vec![Span::new(0, 5), Span::new(0, 5)],
                vec![Span::new(0, 3), Span::new(0, 3)],
                None,
            )],
        )
        .unwrap();
        let x = Tensor::from_fn(&[1, 1, 3, 3], |i| i as f32);
        let p = plan.extract(&x, &[0]).unwrap();
        assert_eq!(p.shape(), &[1, 1, 5, 5]);
        assert_eq!(&p.data()[..5], &[4.0, 3.0, 4.0, 5.0, 4.0]);
        assert_eq!(&p.data()[5..10], &[1.0, 0.0, 1.0, 2.0, 1.0]);
        assert_eq!(plan.tiles()[0].region_in_patch(), &[1, 1]);
    }

    #[test]
    fn inconsistent_plans_are_rejected() {
        let window_too_far = TilePlan::new(
            &[4],
            &[(0, 0)],
            PadMode::Zeros,
            vec![(vec![Span::new(1, 4)], vec![Span::new(1, 3)], None)],
        );
        assert!(window_too_far.is_err());
        let reflect_too_wide = TilePlan::new(
            &[2],
            &[(2, 2)],
            PadMode::Reflect,
            vec![(vec![Span::new(0, 6)], vec![Span::new(0, 2)], None)],
        );
        let msg = reflect_too_wide.unwrap_err().to_string();
        assert!(msg.contains("tiling.overlap"), "{msg}");
    }

    #[test]
    fn batches_split_on_shape_and_size() {
        let plan = TilePlan::new(
            &[5],
            &[(0, 0)],
            PadMode::Zeros,
            vec![
                (vec![Span::new(0, 2)], vec![Span::new(0, 2)], None),
                (vec![Span::new(2, 2)], vec![Span::new(2, 2)], None),
                (vec![Span::new(4, 1)], vec![Span::new(4, 1)], None),
            ],
        )
        .unwrap();
        assert_eq!(plan.batches(&[0, 2, 1], None), vec![vec![0, 1], vec![2]]);
        assert_eq!(
            plan.batches(&[0, 1, 2], Some(1)),
            vec![vec![0], vec![1], vec![2]]
        );
        assert!(plan.extract(&Tensor::zeros(&[1, 1, 5]), &[1, 2]).is_err());
    }
}
