//! Orthogonal wavelet thresholding, deepinv's `WaveletDenoiser`: `x̂ = Ψᵀ ρ_ths(Ψ y)` with Ψ a
//! multi-level separable DWT (2-D on `(B, C, H, W)`, 3-D on `(B, C, D, H, W)`) and ρ soft or hard
//! thresholding of the detail coefficients; the coarsest approximation is left untouched.
//!
//! Boundary: periodic ("periodization" in PyWavelets). With an orthonormal filter pair, the periodic
//! transform of an even-length signal is exactly orthonormal for every length, even one shorter than
//! the filter, so soft thresholding is exactly the prox of `ths·‖Ψ·‖₁`. deepinv calls ptwt with
//! `mode="zero"`, which is not orthonormal (it adds coefficients at the borders); results therefore
//! differ from deepinv within a filter length of the borders, and agree in the interior up to the
//! usual choice of filter alignment. Alignment and odd sizes follow PyWavelets 1.9 exactly (checked in
//! the tests against `pywt.wavedec2(..., mode="periodization")`):
//!
//! * `a[k] = Σ_j h[j] x[(2k + j − (L/2 − 1)) mod n]`, `d[k]` likewise with `g[j] = (−1)^j h[L−1−j]`;
//! * an axis of odd length is first extended by repeating its last sample (one sample, at each level),
//!   and the extra sample is dropped on reconstruction — reconstruction stays exact, but energy is
//!   preserved only for sizes divisible by `2^levels`;
//! * a level is applied only while every transformed side of the current approximation is ≥ 2, so
//!   asking for more levels than the image holds is not an error: the transform stops early.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Denoiser, check_sigma, map_planes};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The mother wavelet (PyWavelets names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaveletKind {
    /// Haar (= db1), 2 taps.
    Haar,
    /// Daubechies with 4 vanishing moments, 8 taps.
    Db4,
    /// Daubechies with 8 vanishing moments, 16 taps (deepinv's default `wv="db8"`).
    #[default]
    Db8,
}

// Orthonormal scaling filters h (Σh = √2, Σh² = 1): Daubechies, "Ten Lectures on Wavelets" (1992),
// Table 6.1 (N = 4 and N = 8), in the order of PyWavelets 1.9 `pywt.Wavelet("dbN").rec_lo`
// (its `dec_lo` is the same list reversed). The unit tests check orthonormality and the vanishing
// moments, which a mistyped digit would break.
const HAAR: [f64; 2] = [
    std::f64::consts::FRAC_1_SQRT_2,
    std::f64::consts::FRAC_1_SQRT_2,
];
const DB4: [f64; 8] = [
    0.2303778133088965,
    0.7148465705529157,
    0.6308807679298589,
    -0.027983769416859854,
    -0.18703481171909309,
    0.030841381835560764,
    0.0328830116668852,
    -0.010597401785069032,
];
const DB8: [f64; 16] = [
    0.05441584224310401,
    0.31287159091429995,
    0.6756307362972898,
    0.5853546836542067,
    -0.015829105256349306,
    -0.2840155429615469,
    0.0004724845739132828,
    0.12874742662047847,
    -0.017369301001807547,
    -0.044088253930794755,
    0.013981027917398282,
    0.008746094047405777,
    -0.004870352993451574,
    -0.00039174037337694705,
    0.0006754494064505693,
    -0.00011747678412476953,
];

impl WaveletKind {
    /// The orthonormal scaling (low-pass) filter `h`.
    pub fn scaling_filter(self) -> &'static [f64] {
        match self {
            WaveletKind::Haar => &HAAR,
            WaveletKind::Db4 => &DB4,
            WaveletKind::Db8 => &DB8,
        }
    }

    /// The PyWavelets name (`haar`, `db4`, `db8`).
    pub fn name(self) -> &'static str {
        match self {
            WaveletKind::Haar => "haar",
            WaveletKind::Db4 => "db4",
            WaveletKind::Db8 => "db8",
        }
    }
}

/// How detail coefficients are shrunk (deepinv's `non_linearity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// `sign(c)·max(|c| − ths, 0)`: the prox of `ths·‖·‖₁`.
    #[default]
    Soft,
    /// `c` if `|c| ≥ ths`, else 0 (deepinv's `prox_l0`).
    Hard,
}

impl Threshold {
    /// Applies the shrinkage to one coefficient.
    #[inline]
    pub fn apply(self, c: f32, ths: f32) -> f32 {
        match self {
            Threshold::Soft => (c - ths).max(0.0) + (c + ths).min(0.0),
            Threshold::Hard => {
                if c.abs() < ths {
                    0.0
                } else {
                    c
                }
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Threshold::Soft => "soft",
            Threshold::Hard => "hard",
        }
    }
}

/// Wavelet-thresholding denoiser; the call's `sigma` is the threshold (deepinv's `ths`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaveletDenoiser {
    pub wavelet: WaveletKind,
    /// Requested decomposition levels (fewer are applied on small images; see the module doc).
    pub levels: usize,
    pub threshold: Threshold,
}

impl Denoiser for WaveletDenoiser {
    fn name(&self) -> String {
        format!(
            "wavelet({}, {} levels, {})",
            self.wavelet.name(),
            self.levels,
            self.threshold.name()
        )
    }

    fn denoise(&self, x: &Tensor, sigma: f32) -> Result<Tensor> {
        check_sigma("wavelet", sigma)?;
        map_planes("wavelet", x, |input, out, dims| {
            let mut coeffs = decompose(input, Grid::new(dims), self.wavelet, self.levels);
            coeffs.threshold(self.threshold, sigma);
            coeffs.reconstruct_into(out);
        })
    }
}

/// Multi-level DWT coefficients of one plane, as produced by [`wavedec`].
#[derive(Debug, Clone)]
pub struct WaveletCoeffs {
    wavelet: WaveletKind,
    /// Finest level first.
    levels: Vec<Level>,
    approx: Vec<f32>,
    approx_grid: Grid,
}

/// One level: the approximation it was computed from had shape `grid`; it was padded to `padded`
/// (even on transformed axes) and transformed in place into `buf`, with the next approximation in the
/// low corner (stale there; the next level owns it) and the details everywhere else.
#[derive(Debug, Clone)]
struct Level {
    grid: Grid,
    padded: Grid,
    buf: Vec<f32>,
}

/// A plane's shape as `[D, H, W]` (`D = 1` for images) and how many trailing axes are transformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grid {
    dims: [usize; 3],
    axes: usize,
}

impl Grid {
    fn new(spatial: &[usize]) -> Self {
        match *spatial {
            [h, w] => Grid {
                dims: [1, h, w],
                axes: 2,
            },
            [d, h, w] => Grid {
                dims: [d, h, w],
                axes: 3,
            },
            _ => unreachable!("map_planes only passes 2-D or 3-D planes"),
        }
    }
    fn len(&self) -> usize {
        self.dims.iter().product()
    }
    fn transformed(&self) -> std::ops::Range<usize> {
        3 - self.axes..3
    }
    /// Every transformed axis rounded up to even.
    fn padded(&self) -> Grid {
        let mut g = *self;
        for a in self.transformed() {
            g.dims[a] += g.dims[a] % 2;
        }
        g
    }
    /// Every transformed axis halved (call on an even grid).
    fn halved(&self) -> Grid {
        let mut g = *self;
        for a in self.transformed() {
            g.dims[a] /= 2;
        }
        g
    }
}

/// The multi-level periodic DWT of one plane `x` of shape `dims` (`[H, W]` or `[D, H, W]`): see the
/// module doc for boundary, odd sizes and how many levels are actually applied.
pub fn wavedec(
    x: &[f32],
    dims: &[usize],
    wavelet: WaveletKind,
    levels: usize,
) -> Result<WaveletCoeffs> {
    if !(dims.len() == 2 || dims.len() == 3) || dims.iter().product::<usize>() != x.len() {
        return Err(Error::config(
            "wavedec",
            format!(
                "expected 2-D or 3-D dims matching {} values, got {dims:?}",
                x.len()
            ),
        ));
    }
    Ok(decompose(x, Grid::new(dims), wavelet, levels))
}

/// The levels actually applied to a plane of `grid` (see the module doc): each level's input grid
/// and that grid padded to even on the transformed axes; the next level's input is the padded grid
/// halved.
fn plan(grid: Grid, levels: usize) -> Vec<(Grid, Grid)> {
    let mut out = Vec::new();
    let mut cur = grid;
    for _ in 0..levels {
        if cur.transformed().any(|a| cur.dims[a] < 2) {
            break;
        }
        let padded = cur.padded();
        out.push((cur, padded));
        cur = padded.halved();
    }
    out
}

/// One level of the transform of a plane, for the device's twin (`device::ops::wavelet`), as
/// `[D, H, W]` (`D = 1` for images): the approximation the level starts from, that grid padded to
/// even on the transformed axes, and the padded grid halved (the next level's approximation, the
/// low corner of the level's coefficients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LevelShape {
    pub grid: [usize; 3],
    pub padded: [usize; 3],
    pub half: [usize; 3],
}

/// The levels [`WaveletDenoiser`] applies to a plane of `dims` (`[H, W]` or `[D, H, W]`).
pub(crate) fn level_shapes(dims: &[usize], levels: usize) -> Result<Vec<LevelShape>> {
    if !(dims.len() == 2 || dims.len() == 3) {
        return Err(Error::Internal(format!(
            "wavelet levels: planes of 2 or 3 axes, got {dims:?}"
        )));
    }
    Ok(plan(Grid::new(dims), levels)
        .into_iter()
        .map(|(grid, padded)| LevelShape {
            grid: grid.dims,
            padded: padded.dims,
            half: padded.halved().dims,
        })
        .collect())
}

/// The periodised analysis taps of `wavelet` for an axis of even length `n` (`n ≥ 2`), in the
/// order the CPU sums them: `(offset, h, g)` with `a[k] = Σ h·x[(2k + offset) mod n]` and
/// `d[k] = Σ g·x[…]`.
pub(crate) fn periodic_taps(wavelet: WaveletKind, n: usize) -> Vec<(usize, f32, f32)> {
    Taps::new(wavelet, n).all
}

fn decompose(x: &[f32], grid: Grid, wavelet: WaveletKind, levels: usize) -> WaveletCoeffs {
    let mut out = WaveletCoeffs {
        wavelet,
        levels: Vec::new(),
        approx: x.to_vec(),
        approx_grid: grid,
    };
    for (cur, padded) in plan(grid, levels) {
        let mut buf = vec![0.0; padded.len()];
        copy_box(&out.approx, cur, &mut buf, padded, true);
        let mut scratch = vec![0.0; buf.len()];
        for axis in padded.transformed() {
            let taps = Taps::new(wavelet, padded.dims[axis]);
            forward_axis(&buf, &mut scratch, padded.dims, axis, &taps);
            std::mem::swap(&mut buf, &mut scratch);
        }
        let half = padded.halved();
        out.approx = vec![0.0; half.len()];
        copy_box(&buf, padded, &mut out.approx, half, false);
        out.approx_grid = half;
        out.levels.push(Level {
            grid: cur,
            padded,
            buf,
        });
    }
    out
}

impl WaveletCoeffs {
    /// Number of levels actually applied.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Shape of the coarsest approximation (`[H, W]` or `[D, H, W]`).
    pub fn approx_dims(&self) -> Vec<usize> {
        self.approx_grid.dims[3 - self.approx_grid.axes..].to_vec()
    }

    /// The coarsest approximation coefficients.
    pub fn approx(&self) -> &[f32] {
        &self.approx
    }

    /// Σ of all squared coefficients (approximation and details), in f64.
    pub fn norm_sq(&self) -> f64 {
        let mut total = crate::tensor::dot(&self.approx, &self.approx);
        for level in &self.levels {
            for_each_detail_run(level.padded, |range| {
                let d = &level.buf[range];
                total += crate::tensor::dot(d, d);
            });
        }
        total
    }

    /// All detail coefficients, finest level first, in a fixed order (that of [`Self::map_details`]).
    pub fn details(&self) -> Vec<f32> {
        let mut out = Vec::new();
        for level in &self.levels {
            for_each_detail_run(level.padded, |range| {
                out.extend_from_slice(&level.buf[range])
            });
        }
        out
    }

    /// Replaces every detail coefficient `c` by `f(c)`; the approximation is untouched.
    pub fn map_details(&mut self, f: impl Fn(f32) -> f32) {
        for level in &mut self.levels {
            let buf = &mut level.buf;
            for_each_detail_run(level.padded, |range| {
                for c in &mut buf[range] {
                    *c = f(*c);
                }
            });
        }
    }

    /// Soft or hard thresholding of the details at `ths`.
    pub fn threshold(&mut self, kind: Threshold, ths: f32) {
        self.map_details(|c| kind.apply(c, ths));
    }

    /// The inverse transform: the plane, with the shape given to [`wavedec`].
    pub fn reconstruct(self) -> Vec<f32> {
        let n = self
            .levels
            .first()
            .map_or(self.approx_grid.len(), |l| l.grid.len());
        let mut out = vec![0.0; n];
        self.reconstruct_into(&mut out);
        out
    }

    fn reconstruct_into(self, out: &mut [f32]) {
        let WaveletCoeffs {
            wavelet,
            levels,
            mut approx,
            approx_grid,
        } = self;
        let mut grid = approx_grid;
        for level in levels.into_iter().rev() {
            let Level {
                grid: parent,
                padded,
                mut buf,
            } = level;
            copy_box(&approx, grid, &mut buf, padded, false);
            let mut scratch = vec![0.0; buf.len()];
            for axis in padded.transformed().rev() {
                let taps = Taps::new(wavelet, padded.dims[axis]);
                inverse_axis(&buf, &mut scratch, padded.dims, axis, &taps);
                std::mem::swap(&mut buf, &mut scratch);
            }
            approx = vec![0.0; parent.len()];
            copy_box(&buf, padded, &mut approx, parent, false);
            grid = parent;
        }
        out.copy_from_slice(&approx);
    }
}

/// Copies the box `[0, dst.dims)` ∩ `[0, src.dims)` from `src` into the low corner of `dst`; with
/// `extend`, positions of `dst` beyond `src` repeat `src`'s last sample along that axis.
fn copy_box(src: &[f32], sg: Grid, dst: &mut [f32], dg: Grid, extend: bool) {
    let [sd, sh, sw] = sg.dims;
    let [dd, dh, dw] = dg.dims;
    let (bd, bh, bw) = if extend {
        (dd, dh, dw)
    } else {
        (sd.min(dd), sh.min(dh), sw.min(dw))
    };
    let cw = sw.min(bw);
    for z in 0..bd {
        for y in 0..bh {
            let s = (z.min(sd - 1) * sh + y.min(sh - 1)) * sw;
            let d = (z * dh + y) * dw;
            dst[d..d + cw].copy_from_slice(&src[s..s + cw]);
            let last = src[s + cw - 1];
            dst[d + cw..d + bw].fill(last);
        }
    }
}

/// Calls `f` with every maximal run of detail coefficients in a level buffer of shape `padded`
/// (everything outside the low corner of half the size on every transformed axis).
fn for_each_detail_run(padded: Grid, mut f: impl FnMut(std::ops::Range<usize>)) {
    let half = padded.halved();
    let [d, h, w] = padded.dims;
    for z in 0..d {
        for y in 0..h {
            let start = (z * h + y) * w;
            let in_corner = z < half.dims[0] && y < half.dims[1];
            let from = if in_corner { half.dims[2] } else { 0 };
            if from < w {
                f(start + from..start + w);
            }
        }
    }
}

/// The periodised analysis filter pair for one even length `n`: taps `(offset, h, g)` with
/// `a[k] = Σ h·x[(2k + offset) mod n]`, `d[k] = Σ g·x[…]`; taps that land on the same offset (filter
/// longer than the signal) are summed, which keeps the transform orthonormal.
struct Taps {
    all: Vec<(usize, f32, f32)>,
    /// Taps split by the parity of their offset (used by the inverse).
    by_parity: [Vec<(usize, f32, f32)>; 2],
}

impl Taps {
    fn new(wavelet: WaveletKind, n: usize) -> Self {
        debug_assert!(n >= 2 && n.is_multiple_of(2));
        let h = wavelet.scaling_filter();
        let len = h.len();
        let shift = (len / 2 - 1) as isize;
        let mut merged = vec![(0.0f64, 0.0f64); n];
        let mut used = vec![false; n];
        for (j, &hj) in h.iter().enumerate() {
            let gj = if j % 2 == 0 { 1.0 } else { -1.0 } * h[len - 1 - j];
            let off = (j as isize - shift).rem_euclid(n as isize) as usize;
            merged[off].0 += hj;
            merged[off].1 += gj;
            used[off] = true;
        }
        let all: Vec<(usize, f32, f32)> = (0..n)
            .filter(|&o| used[o])
            .map(|o| (o, merged[o].0 as f32, merged[o].1 as f32))
            .collect();
        let by_parity = [0, 1].map(|p| all.iter().copied().filter(|t| t.0 % 2 == p).collect());
        Taps { all, by_parity }
    }
}

/// Elements per rayon task, so small planes are not split into tiny jobs.
const MIN_TASK_ELEMS: usize = 1 << 14;

/// One analysis step along `axis` of a buffer of shape `dims`: `src` → `dst` with the approximation in
/// the first half of the axis and the details in the second.
fn forward_axis(src: &[f32], dst: &mut [f32], dims: [usize; 3], axis: usize, taps: &Taps) {
    let n = dims[axis];
    let half = n / 2;
    let inner: usize = dims[axis + 1..].iter().product();
    if inner == 1 {
        // Lines are contiguous: copy each into a doubled buffer so no tap needs a modulo.
        dst.par_chunks_mut(n)
            .zip(src.par_chunks(n))
            .with_min_len((MIN_TASK_ELEMS / n).max(1))
            .for_each_init(
                || vec![0.0f32; 2 * n],
                |ext, (out, line)| {
                    ext[..n].copy_from_slice(line);
                    ext[n..].copy_from_slice(line);
                    let (a, d) = out.split_at_mut(half);
                    for k in 0..half {
                        let (mut sa, mut sd) = (0.0f32, 0.0f32);
                        for &(off, h, g) in &taps.all {
                            let v = ext[2 * k + off];
                            sa += h * v;
                            sd += g * v;
                        }
                        a[k] = sa;
                        d[k] = sd;
                    }
                },
            );
    } else {
        // Each output row is a combination of whole input rows: the inner loop runs over `inner`
        // contiguous values and vectorises.
        dst.par_chunks_mut(inner)
            .enumerate()
            .with_min_len((MIN_TASK_ELEMS / inner).max(1))
            .for_each(|(q, out)| {
                let (o, r) = (q / n, q % n);
                let (k, hi) = if r < half {
                    (r, false)
                } else {
                    (r - half, true)
                };
                out.fill(0.0);
                for &(off, h, g) in &taps.all {
                    let c = if hi { g } else { h };
                    let s = (o * n + (2 * k + off) % n) * inner;
                    for (y, &v) in out.iter_mut().zip(&src[s..s + inner]) {
                        *y += c * v;
                    }
                }
            });
    }
}

/// The adjoint (= inverse) of [`forward_axis`]: `x[m] = Σ_{taps, off ≡ m mod 2} h·a[k] + g·d[k]` with
/// `k = ((m − off) mod n) / 2`.
fn inverse_axis(src: &[f32], dst: &mut [f32], dims: [usize; 3], axis: usize, taps: &Taps) {
    let n = dims[axis];
    let half = n / 2;
    let inner: usize = dims[axis + 1..].iter().product();
    if inner == 1 {
        dst.par_chunks_mut(n)
            .zip(src.par_chunks(n))
            .with_min_len((MIN_TASK_ELEMS / n).max(1))
            .for_each_init(
                || vec![0.0f32; 2 * n],
                |ext, (out, line)| {
                    // ext = [a, a, d, d]: index (m + n − off)/2 < n never wraps.
                    let (a, d) = line.split_at(half);
                    ext[..half].copy_from_slice(a);
                    ext[half..n].copy_from_slice(a);
                    ext[n..n + half].copy_from_slice(d);
                    ext[n + half..].copy_from_slice(d);
                    let (ea, ed) = ext.split_at(n);
                    for (m, x) in out.iter_mut().enumerate() {
                        let mut s = 0.0f32;
                        for &(off, h, g) in &taps.by_parity[m % 2] {
                            let k = (m + n - off) / 2;
                            s += h * ea[k] + g * ed[k];
                        }
                        *x = s;
                    }
                },
            );
    } else {
        dst.par_chunks_mut(inner)
            .enumerate()
            .with_min_len((MIN_TASK_ELEMS / inner).max(1))
            .for_each(|(q, out)| {
                let (o, m) = (q / n, q % n);
                out.fill(0.0);
                for &(off, h, g) in &taps.by_parity[m % 2] {
                    let k = ((m + n - off) / 2) % half;
                    let sa = (o * n + k) * inner;
                    let sd = (o * n + half + k) * inner;
                    let rows = src[sa..sa + inner].iter().zip(&src[sd..sd + inner]);
                    for (y, (&va, &vd)) in out.iter_mut().zip(rows) {
                        *y += h * va + g * vd;
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_orthonormal_with_vanishing_moments() {
        for (kind, moments) in [
            (WaveletKind::Haar, 1),
            (WaveletKind::Db4, 4),
            (WaveletKind::Db8, 8),
        ] {
            let h = kind.scaling_filter();
            let len = h.len();
            assert!(
                (h.iter().sum::<f64>() - 2f64.sqrt()).abs() < 1e-12,
                "{kind:?}"
            );
            // Σ h[j] h[j + 2m] = δ_m: orthonormality of the integer shifts.
            for m in 0..len / 2 {
                let s: f64 = (0..len - 2 * m).map(|j| h[j] * h[j + 2 * m]).sum();
                let want = if m == 0 { 1.0 } else { 0.0 };
                assert!((s - want).abs() < 1e-12, "{kind:?} shift {m}: {s}");
            }
            // The high-pass g[j] = (−1)^j h[L−1−j] annihilates polynomials of degree < moments
            // (centred abscissae keep the sums well conditioned, so a wrong digit shows).
            let centre = (len as f64 - 1.0) / 2.0;
            for p in 0..moments {
                let s: f64 = (0..len)
                    .map(|j| {
                        let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                        sign * h[len - 1 - j] * (j as f64 - centre).powi(p)
                    })
                    .sum();
                assert!(
                    s.abs() < 1e-10 * centre.max(1.0).powi(p),
                    "{kind:?} p={p}: {s}"
                );
            }
        }
    }

    #[test]
    fn short_signals_fold_the_filter() {
        // On n = 2 every Daubechies filter folds to Haar.
        let t = Taps::new(WaveletKind::Db8, 2);
        assert_eq!(t.all.len(), 2);
        for &(_, h, g) in &t.all {
            assert!((h.abs() - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
            assert!((g.abs() - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        }
    }

    #[test]
    fn levels_stop_when_a_side_reaches_one() {
        let x = vec![1.0; 7 * 9];
        let c = wavedec(&x, &[7, 9], WaveletKind::Db4, 10).unwrap();
        // 7×9 → 4×5 → 2×3 → 1×2 (as pywt.wavedec2 with mode="periodization").
        assert_eq!(c.levels(), 3);
        assert_eq!(c.approx_dims(), vec![1, 2]);
        assert!(wavedec(&x, &[7, 8], WaveletKind::Db4, 1).is_err());
    }
}
