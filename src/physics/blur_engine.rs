//! The convolution engine behind [`super::blur::Blur`] and [`super::blur::Blur3d`]: deepinv's
//! convolution with every padding, its exact adjoint, by a direct or an FFT path.
//!
//! Everything is 3-D; an image is a volume of depth 1 with a kernel of depth 1, so both operators
//! share one code path. The operator is (deepinv `physics/functional/convolution.py`, `conv2d` with
//! `correlation=False`):
//!
//! * `valid`: `y[i] = Σ_a k[a] x[i + K−1 − a]`, `i ∈ [0, N−K]` (output `N−K+1` per axis);
//! * otherwise: `y[i] = Σ_a k[a] x̃[i + c − a]`, `i ∈ [0, N)`, with the kernel centre `c = K/2`
//!   (integer division, also for even `K`) and `x̃` the padded extension of `x`: periodic
//!   (`circular`), edge value (`replicate`), mirror without repeating the edge (`reflect`) or zero
//!   (`constant`).
//!
//! Both are "pad `x` by `K−1−c` before and `c` after, then take the valid convolution", which is how
//! the direct path computes it. The adjoint is the valid correlation of the zero-padded `y` followed
//! by the adjoint of the padding, which folds every padded sample back onto the pixel it copied.
//! The FFT path computes the same linear convolution on a grid large enough to avoid wrap-around
//! (`circular` can also skip the padding and multiply spectra on the image grid itself, which the
//! cost model prefers unless a side has a large prime factor).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use rustfft::num_complex::{Complex32, Complex64};
use serde::{Deserialize, Serialize};

use super::fft::{RealFft3, fast_len};

/// How the image is extended beyond its border before convolving (deepinv's `padding` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Padding {
    /// No extension: the output shrinks by `K−1` per axis.
    #[default]
    Valid,
    /// Periodic extension; the output keeps the image size.
    Circular,
    /// Edge value repeated.
    Replicate,
    /// Mirror about the edge sample, which is not repeated (`dcb|abcd|cba`).
    Reflect,
    /// Zeros.
    Constant,
}

impl Padding {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Padding::Valid => "valid",
            Padding::Circular => "circular",
            Padding::Replicate => "replicate",
            Padding::Reflect => "reflect",
            Padding::Constant => "constant",
        }
    }
}

/// How a convolution is computed; every method gives the same operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvMethod {
    /// Direct or FFT, whichever the cost model predicts faster for the input size.
    #[default]
    Auto,
    /// Sum over the kernel taps (fast for small kernels).
    Direct,
    /// Products of spectra (fast for large kernels); kernel spectra are cached per image size.
    Fft,
}

/// Largest kernel side accepted (from a file or a Gaussian), a guard against absurd configs.
pub const MAX_KERNEL_SIDE: usize = 4097;
/// For each position of a padded axis, the index of the sample it copies (`None`: a zero).
pub(crate) type AxisMap = Vec<Option<usize>>;

/// Where sample `r` (relative to the image start, possibly outside `[0, n)`) of the extension of an
/// axis of length `n` comes from. Extensions are defined for any `r`, so kernels larger than the
/// image work for every padding (torch refuses reflect pads ≥ n; here the mirror simply repeats).
fn source_index(padding: Padding, r: isize, n: usize) -> Option<usize> {
    let n_i = n as isize;
    if (0..n_i).contains(&r) {
        return Some(r as usize);
    }
    match padding {
        Padding::Valid | Padding::Constant => None,
        Padding::Circular => Some(r.rem_euclid(n_i) as usize),
        Padding::Replicate => Some(r.clamp(0, n_i - 1) as usize),
        Padding::Reflect => {
            if n == 1 {
                return Some(0);
            }
            // Mirror about 0 and n−1 without repeating them: period 2(n−1).
            let period = 2 * (n_i - 1);
            let m = r.rem_euclid(period);
            Some(if m < n_i { m } else { period - m } as usize)
        }
    }
}

/// The map of an axis padded by `left` samples in front, extended (by `padding`) up to `ext_len`
/// samples, then zero up to `total_len`.
fn axis_map(padding: Padding, n: usize, left: usize, ext_len: usize, total_len: usize) -> AxisMap {
    (0..total_len)
        .map(|r| {
            if r < ext_len {
                source_index(padding, r as isize - left as isize, n)
            } else {
                None
            }
        })
        .collect()
}

/// Padded positions outside the copied interior `[left, left+n)`, as (padded index, source index).
fn border(map: &AxisMap, left: usize, n: usize) -> Vec<(usize, usize)> {
    map.iter()
        .enumerate()
        .filter(|&(r, _)| r < left || r >= left + n)
        .filter_map(|(r, s)| s.map(|s| (r, s)))
        .collect()
}

/// `dst` (dims of the maps) ← padded copy of `src` (`dims`), `left` = offset of the interior per axis.
fn pad(src: &[f32], dims: [usize; 3], maps: [&AxisMap; 3], left: [usize; 3], dst: &mut [f32]) {
    let [_, h, w] = dims;
    let (pd, ph, pw) = (maps[0].len(), maps[1].len(), maps[2].len());
    debug_assert_eq!(dst.len(), pd * ph * pw);
    let wb = border(maps[2], left[2], w);
    // The interior of every padded row is the source row itself (all paddings agree there).
    let interior = left[2] < pw && left[2] + w <= pw;
    dst.par_chunks_mut(pw).enumerate().for_each(|(row, out)| {
        let (z, y) = (row / ph, row % ph);
        match (maps[0][z], maps[1][y]) {
            (Some(sz), Some(sy)) => {
                let s = &src[(sz * h + sy) * w..(sz * h + sy + 1) * w];
                out.fill(0.0);
                if interior {
                    out[left[2]..left[2] + w].copy_from_slice(s);
                } else {
                    for (r, m) in maps[2].iter().enumerate() {
                        if let Some(sx) = m {
                            out[r] = s[*sx];
                        }
                    }
                    return;
                }
                for &(r, sx) in &wb {
                    out[r] = s[sx];
                }
            }
            _ => out.fill(0.0),
        }
    });
}

/// `dst` (`dims`) ← adjoint of [`pad`] applied to `src` (dims of the maps): every padded sample is
/// added onto the sample it was copied from.
fn fold(src: &[f32], maps: [&AxisMap; 3], left: [usize; 3], dims: [usize; 3], dst: &mut [f32]) {
    let [_, h, w] = dims;
    let (ph, pw) = (maps[1].len(), maps[2].len());
    let inverse = |map: &AxisMap, n: usize| {
        let mut inv = vec![Vec::new(); n];
        for (r, s) in map.iter().enumerate() {
            if let Some(s) = s {
                inv[*s].push(r);
            }
        }
        inv
    };
    let (inv_z, inv_y) = (inverse(maps[0], dims[0]), inverse(maps[1], h));
    let wb = border(maps[2], left[2], w);
    let interior = left[2] < pw && left[2] + w <= pw;
    dst.par_chunks_mut(w).enumerate().for_each(|(row, out)| {
        let (z, y) = (row / h, row % h);
        out.fill(0.0);
        for &rz in &inv_z[z] {
            for &ry in &inv_y[y] {
                let s = &src[(rz * ph + ry) * pw..(rz * ph + ry + 1) * pw];
                if interior {
                    for (o, v) in out.iter_mut().zip(&s[left[2]..left[2] + w]) {
                        *o += v;
                    }
                    for &(r, sx) in &wb {
                        out[sx] += s[r];
                    }
                } else {
                    for (r, m) in maps[2].iter().enumerate() {
                        if let Some(sx) = m {
                            out[*sx] += s[r];
                        }
                    }
                }
            }
        }
    });
}

/// `acc[x] += Σ_b taps[b]·src[x+b]`, four taps per pass so each load/store of `acc` carries four
/// multiply-adds; the zipped slices carry their lengths, so the loops have no bounds checks and
/// vectorise. Needs `src.len() ≥ acc.len() + taps.len() − 1`.
#[inline]
fn accumulate_row(acc: &mut [f32], src: &[f32], taps: &[f32]) {
    let n = acc.len();
    let mut quads = taps.chunks_exact(4);
    let mut b = 0;
    for t in &mut quads {
        let (t0, t1, t2, t3) = (t[0], t[1], t[2], t[3]);
        let s0 = &src[b..b + n];
        let s1 = &src[b + 1..b + 1 + n];
        let s2 = &src[b + 2..b + 2 + n];
        let s3 = &src[b + 3..b + 3 + n];
        for ((((o, &a0), &a1), &a2), &a3) in acc.iter_mut().zip(s0).zip(s1).zip(s2).zip(s3) {
            *o += t0 * a0 + t1 * a1 + t2 * a2 + t3 * a3;
        }
        b += 4;
    }
    for &t in quads.remainder() {
        for (o, &a) in acc.iter_mut().zip(&src[b..b + n]) {
            *o += t * a;
        }
        b += 1;
    }
}

/// Valid correlation `out[i] = Σ_a taps[a]·src[i + a]` (3-D), parallel over output rows.
fn correlate_valid(
    src: &[f32],
    sdims: [usize; 3],
    taps: &[f32],
    kdims: [usize; 3],
    out: &mut [f32],
) {
    let [_, sh, sw] = sdims;
    let [kd, kh, kw] = kdims;
    let (oh, ow) = (sh + 1 - kh, sw + 1 - kw);
    out.par_chunks_mut(ow).enumerate().for_each(|(row, acc)| {
        let (z, y) = (row / oh, row % oh);
        acc.fill(0.0);
        for c in 0..kd {
            for a in 0..kh {
                let start = ((z + c) * sh + y + a) * sw;
                accumulate_row(
                    acc,
                    &src[start..start + sw],
                    &taps[(c * kh + a) * kw..(c * kh + a + 1) * kw],
                );
            }
        }
    });
}

/// Cost of a forward + inverse real FFT pair, the spectrum product and the copies, per `N·log₂N`
/// grid samples, in units of one direct multiply-add (measured on x86-64 with `examples`-style
/// timings of both paths over kernel sizes 3–15 and images 256–1024: 5–9).
const FFT_COST_PER_NLOGN: f64 = 6.0;

/// Extra cost of an FFT axis whose length has a prime factor rustfft has no butterfly for (> 31):
/// it falls back to Rader's or Bluestein's algorithm (measured ≈ 3–4× on a 683-long axis).
const SLOW_AXIS_PENALTY: f64 = 4.0;

/// Modelled cost of the FFT path on `grid` (see [`FFT_COST_PER_NLOGN`]).
fn fft_cost(grid: [usize; 3]) -> f64 {
    let n = grid.iter().product::<usize>() as f64;
    let log_sum: f64 = grid
        .iter()
        .filter(|&&m| m > 1)
        .map(|&m| {
            let penalty = if largest_prime_factor(m) > 31 {
                SLOW_AXIS_PENALTY
            } else {
                1.0
            };
            (m as f64).log2() * penalty
        })
        .sum();
    FFT_COST_PER_NLOGN * n * log_sum.max(1.0)
}

fn largest_prime_factor(mut n: usize) -> usize {
    let mut largest = 1;
    let mut p = 2;
    while p * p <= n {
        while n.is_multiple_of(p) {
            largest = p;
            n /= p;
        }
        p += 1;
    }
    largest.max(n)
}

/// A resolved [`ConvMethod`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Plan {
    Direct,
    /// Spectrum products, per axis either on the image's own length (`true`, circular padding only:
    /// no padding, the kernel wraps) or on a fast length after padding (`false`: linear convolution
    /// of the padded axis, then crop). Axes are independent, so a prime side can be padded while a
    /// power-of-two side stays as it is.
    Fft([bool; 3]),
}

impl Plan {
    /// Every axis on the image grid.
    const CIRCULAR: Plan = Plan::Fft([true; 3]);
    /// Every axis padded.
    const LINEAR: Plan = Plan::Fft([false; 3]);

    fn circular_axes(self) -> [bool; 3] {
        match self {
            Plan::Fft(c) => c,
            Plan::Direct => [false; 3],
        }
    }
}

/// Which grid and kernel placement a cached spectrum belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SpectrumKey {
    channel: usize,
    grid: [usize; 3],
    /// Per axis: kernel centred at the origin (circular) rather than starting there (linear).
    centred: [bool; 3],
}

/// A convolution with one kernel per channel (or one for all), a padding and a method.
pub struct Conv {
    /// Kernels, each `kd·kh·kw` values in C order; one, or one per channel.
    kernels: Vec<Vec<f32>>,
    /// The same kernels flipped along every axis (the forward pass is a correlation with these).
    flipped: Vec<Vec<f32>>,
    kdims: [usize; 3],
    padding: Padding,
    method: ConvMethod,
    /// Kernel spectra per grid, scaled by `1/N` so a forward–inverse pair needs no extra pass.
    spectra: Mutex<HashMap<SpectrumKey, Arc<Vec<Complex32>>>>,
}

impl Conv {
    /// `kernels` must be non-empty, each of `kdims` values (checked by the callers).
    pub fn new(
        kernels: Vec<Vec<f32>>,
        kdims: [usize; 3],
        padding: Padding,
        method: ConvMethod,
    ) -> Conv {
        let flipped = kernels
            .iter()
            .map(|k| k.iter().rev().copied().collect())
            .collect();
        Conv {
            kernels,
            flipped,
            kdims,
            padding,
            method,
            spectra: Mutex::new(HashMap::new()),
        }
    }

    /// The kernels (one, or one per channel), each `kd·kh·kw` values in C order.
    pub(crate) fn kernels(&self) -> &[Vec<f32>] {
        &self.kernels
    }

    pub fn kdims(&self) -> [usize; 3] {
        self.kdims
    }

    pub fn padding(&self) -> Padding {
        self.padding
    }

    pub fn channels(&self) -> usize {
        self.kernels.len()
    }

    /// Output dims for input `dims`, or `None` when `valid` and the input is smaller than the kernel.
    pub fn out_dims(&self, dims: [usize; 3]) -> Option<[usize; 3]> {
        if self.padding != Padding::Valid {
            return Some(dims);
        }
        let mut out = [0; 3];
        for i in 0..3 {
            out[i] = (dims[i] + 1)
                .checked_sub(self.kdims[i])
                .filter(|&n| n > 0)?;
        }
        Some(out)
    }

    /// Input dims whose output has `out` dims.
    pub fn in_dims(&self, out: [usize; 3]) -> [usize; 3] {
        match self.padding {
            Padding::Valid => [0, 1, 2].map(|i| out[i] + self.kdims[i] - 1),
            _ => out,
        }
    }

    /// Samples added before the image by the padding, per axis (`K−1−K/2`).
    fn left(&self) -> [usize; 3] {
        match self.padding {
            Padding::Valid => [0; 3],
            _ => self.kdims.map(|k| k - 1 - k / 2),
        }
    }

    /// The padded (pre-valid-convolution) dims for input `dims`.
    fn padded_dims(&self, dims: [usize; 3]) -> [usize; 3] {
        match self.padding {
            Padding::Valid => dims,
            _ => [0, 1, 2].map(|i| dims[i] + self.kdims[i] - 1),
        }
    }

    /// FFT grid of the linear FFT path: the padded extent, rounded up to a fast length.
    fn linear_grid(&self, dims: [usize; 3]) -> [usize; 3] {
        self.padded_dims(dims).map(fast_len)
    }

    /// The method `Auto` resolves to for inputs of `dims`.
    pub fn resolve(&self, dims: [usize; 3]) -> ConvMethod {
        match self.plan(dims) {
            Plan::Direct => ConvMethod::Direct,
            _ => ConvMethod::Fft,
        }
    }

    /// How inputs of `dims` are convolved, by a cost model in units of one vectorised multiply-add:
    /// direct costs one per tap and output sample; FFT costs [`fft_cost`] on its grid. Circular
    /// padding has two FFT variants: products on the image grid itself (no padding, but a prime
    /// side is slow) or the padded linear path on a fast grid; the cheaper one is used.
    fn plan(&self, dims: [usize; 3]) -> Plan {
        let Some(out) = self.out_dims(dims) else {
            return Plan::Direct;
        };
        let linear = (fft_cost(self.linear_grid(dims)), Plan::LINEAR);
        let fft = if self.padding == Padding::Circular {
            // Every choice of circular (image-length) and padded axes; ties go to fewer padded axes.
            (0..8usize)
                .rev()
                .map(|bits| {
                    let plan = Plan::Fft([0, 1, 2].map(|i| bits >> i & 1 == 1));
                    (fft_cost(self.fft_grid(plan, dims)), plan)
                })
                .fold(linear, |best, c| if c.0 < best.0 { c } else { best })
        } else {
            linear
        };
        match self.method {
            ConvMethod::Direct => Plan::Direct,
            ConvMethod::Fft => fft.1,
            ConvMethod::Auto => {
                let taps: usize = self.kdims.iter().product();
                let direct = (out.iter().product::<usize>() * taps) as f64;
                if fft.0 < direct { fft.1 } else { Plan::Direct }
            }
        }
    }

    fn spectrum(
        &self,
        channel: usize,
        grid: [usize; 3],
        centred: [bool; 3],
    ) -> Arc<Vec<Complex32>> {
        let key = SpectrumKey {
            channel,
            grid,
            centred,
        };
        if let Some(s) = self
            .spectra
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return s.clone();
        }
        // Computed outside the lock: two threads may both compute it, harmlessly.
        let fft = RealFft3::get(grid);
        let mut placed = self.placed_kernel(channel, grid, centred);
        let scale = 1.0 / fft.real_len() as f32;
        let mut spec = fft.forward(&mut placed);
        for v in &mut spec {
            *v *= scale;
        }
        let spec = Arc::new(spec);
        self.spectra
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, spec.clone());
        spec
    }

    /// Kernel `channel` on an FFT grid: at the origin on linear axes, centred (wrapped) on circular
    /// ones; the real array whose transform, over `N`, is the kernel spectrum the FFT path uses.
    pub(crate) fn placed_kernel(
        &self,
        channel: usize,
        grid: [usize; 3],
        centred: [bool; 3],
    ) -> Vec<f32> {
        let mut placed = vec![0.0f32; grid.iter().product()];
        let [kd, kh, kw] = self.kdims;
        let centre = self.kdims.map(|k| k / 2);
        let k = &self.kernels[channel];
        for c in 0..kd {
            for a in 0..kh {
                for b in 0..kw {
                    let idx = [c, a, b];
                    // Circular: tap a sits at (a − centre) mod N, summing taps that wrap together.
                    let pos = [0, 1, 2].map(|i| {
                        if centred[i] {
                            (idx[i] as isize - centre[i] as isize).rem_euclid(grid[i] as isize)
                                as usize
                        } else {
                            idx[i]
                        }
                    });
                    placed[(pos[0] * grid[1] + pos[1]) * grid[2] + pos[2]] +=
                        k[(c * kh + a) * kw + b];
                }
            }
        }
        placed
    }

    /// The FFT path's geometry for inputs of `dims` with the given circular axes (only meaningful
    /// for circular padding; other paddings pass `[false; 3]`): what a device implementation of the
    /// same operator needs to reproduce it (`device::ops::blur_engine`).
    pub(crate) fn fft_layout(&self, dims: [usize; 3], circular_axes: [bool; 3]) -> FftLayout {
        let plan = Plan::Fft(circular_axes);
        let out_dims = self.out_dims(dims).expect("shape checked by the operator");
        let grid = self.fft_grid(plan, dims);
        let crop = self.fft_crop(plan);
        FftLayout {
            grid,
            input_maps: self.fft_maps(plan, dims),
            output_maps: [0, 1, 2].map(|i| {
                axis_map(
                    Padding::Constant,
                    out_dims[i],
                    crop[i],
                    crop[i] + out_dims[i],
                    grid[i],
                )
            }),
            crop,
            out_dims,
        }
    }

    /// Kernel index for plane `p` of an input with `channels` channels.
    fn channel_of(&self, plane: usize, channels: usize) -> usize {
        if self.kernels.len() == 1 {
            0
        } else {
            plane % channels
        }
    }

    /// `A x` for `planes` planes of `dims` (channel of plane `p` is `p % channels`).
    pub fn forward(&self, x: &[f32], planes: usize, channels: usize, dims: [usize; 3]) -> Vec<f32> {
        let out_dims = self.out_dims(dims).expect("shape checked by the operator");
        let (n_in, n_out) = (
            dims.iter().product::<usize>(),
            out_dims.iter().product::<usize>(),
        );
        let plan = self.plan(dims);
        let mut out = vec![0.0f32; planes * n_out];
        out.par_chunks_mut(n_out)
            .zip(x.par_chunks(n_in))
            .enumerate()
            .for_each(|(p, (y, x))| {
                let ch = self.channel_of(p, channels);
                match plan {
                    Plan::Direct => self.forward_direct(x, dims, ch, y),
                    fft => self.forward_fft(fft, x, dims, ch, y),
                }
            });
        out
    }

    /// `Aᵀ y` for `planes` planes of output `out_dims`.
    pub fn adjoint(
        &self,
        y: &[f32],
        planes: usize,
        channels: usize,
        out_dims: [usize; 3],
    ) -> Vec<f32> {
        let dims = self.in_dims(out_dims);
        let (n_in, n_out) = (
            dims.iter().product::<usize>(),
            out_dims.iter().product::<usize>(),
        );
        let plan = self.plan(dims);
        let mut out = vec![0.0f32; planes * n_in];
        out.par_chunks_mut(n_in)
            .zip(y.par_chunks(n_out))
            .enumerate()
            .for_each(|(p, (x, y))| {
                let ch = self.channel_of(p, channels);
                match plan {
                    Plan::Direct => self.adjoint_direct(y, dims, ch, x),
                    fft => self.adjoint_fft(fft, y, dims, ch, x),
                }
            });
        out
    }

    /// `AᵀA x` in one spectrum product (`|K̂|²`) when circular and on the FFT path; `None` otherwise.
    pub fn adjoint_forward_fused(
        &self,
        x: &[f32],
        planes: usize,
        channels: usize,
        dims: [usize; 3],
    ) -> Option<Vec<f32>> {
        if self.plan(dims) != Plan::CIRCULAR {
            return None;
        }
        let scale = dims.iter().product::<usize>() as f32;
        // k is scaled by 1/N; |k|²·N is |K̂|²/N, the one normalisation the pair needs.
        let out = self.spectral_map(x, planes, channels, dims, |s, k| *s *= k.norm_sqr() * scale);
        Some(out)
    }

    /// `(a·G + I)⁻¹ x` for this convolution `G` when it is circular and self-adjoint with a
    /// non-negative spectrum — a Gram kernel `Σ wᵢgᵢ` ([`Self::gram_kernels`]), whose centred
    /// spectrum on the image grid is `Σ wᵢ|K̂ᵢ|²` — by one transform pair per plane: circular
    /// convolutions are diagonal in Fourier, so the inverse is a division of spectra. The spectrum's
    /// real part is used (its imaginary part is the rounding of the kernel's symmetry); a negative
    /// rounding of `Ĝ` near zero is harmless for `a ≥ 0`. `None` for other paddings or `a < 0`.
    pub fn shifted_inverse(
        &self,
        x: &[f32],
        planes: usize,
        channels: usize,
        dims: [usize; 3],
        a: f32,
    ) -> Option<Vec<f32>> {
        if self.padding != Padding::Circular || !(a >= 0.0 && a.is_finite()) {
            return None;
        }
        let len = dims.iter().product::<usize>() as f64;
        // g is Ĝ/N and the inverse transform is unnormalised: divide by N·(1 + a·Ĝ).
        let out = self.spectral_map(x, planes, channels, dims, |s, g| {
            let g_hat = f64::from(g.re) * len;
            *s *= (1.0 / (len * (1.0 + f64::from(a) * g_hat))) as f32;
        });
        Some(out)
    }

    /// Per plane of `x` on its own grid: the transform, `f(sᵢ, kᵢ)` at every frequency with this
    /// convolution's centred spectrum `k` (`K̂/N`) of the plane's channel, the unnormalised inverse
    /// transform: the circular convolutions' diagonal form in Fourier.
    fn spectral_map(
        &self,
        x: &[f32],
        planes: usize,
        channels: usize,
        dims: [usize; 3],
        f: impl Fn(&mut Complex32, &Complex32) + Sync,
    ) -> Vec<f32> {
        let n = dims.iter().product::<usize>();
        let fft = RealFft3::get(dims);
        let mut out = vec![0.0f32; planes * n];
        out.par_chunks_mut(n)
            .zip(x.par_chunks(n))
            .enumerate()
            .for_each(|(p, (out, x))| {
                let k = self.spectrum(self.channel_of(p, channels), dims, [true; 3]);
                let mut spec = fft.forward(&mut x.to_vec());
                spec.par_iter_mut()
                    .zip(k.par_iter())
                    .for_each(|(s, k)| f(s, k));
                out.copy_from_slice(&fft.inverse(spec));
            });
        out
    }

    /// ‖A‖² for circular padding: the largest `|K̂|²` over the image grid and the kernels.
    pub fn circular_op_norm_sq(&self, dims: [usize; 3]) -> f64 {
        let n = dims.iter().product::<usize>() as f64;
        (0..self.kernels.len())
            .map(|ch| {
                let k = self.spectrum(ch, dims, [true; 3]);
                k.iter().map(|v| v.norm_sqr() as f64).fold(0.0, f64::max) * n * n
            })
            .fold(0.0, f64::max)
    }

    fn forward_direct(&self, x: &[f32], dims: [usize; 3], ch: usize, y: &mut [f32]) {
        let taps = &self.flipped[ch];
        if self.padding == Padding::Valid {
            return correlate_valid(x, dims, taps, self.kdims, y);
        }
        let p = self.padded_dims(dims);
        let left = self.left();
        let maps = [0, 1, 2].map(|i| axis_map(self.padding, dims[i], left[i], p[i], p[i]));
        let mut xp = vec![0.0f32; p.iter().product()];
        pad(x, dims, [&maps[0], &maps[1], &maps[2]], left, &mut xp);
        correlate_valid(&xp, p, taps, self.kdims, y);
    }

    fn adjoint_direct(&self, y: &[f32], dims: [usize; 3], ch: usize, x: &mut [f32]) {
        let out_dims = self.out_dims(dims).expect("shape checked by the operator");
        let p = self.padded_dims(dims);
        // Zero-pad y by K−1 on both sides; the valid correlation with k is then the transpose of the
        // forward's valid correlation with the flipped kernel.
        let zl = self.kdims.map(|k| k - 1);
        let zdims = [0, 1, 2].map(|i| out_dims[i] + 2 * zl[i]);
        let zmaps =
            [0, 1, 2].map(|i| axis_map(Padding::Constant, out_dims[i], zl[i], zdims[i], zdims[i]));
        let mut yz = vec![0.0f32; zdims.iter().product()];
        pad(y, out_dims, [&zmaps[0], &zmaps[1], &zmaps[2]], zl, &mut yz);
        if self.padding == Padding::Valid {
            return correlate_valid(&yz, zdims, &self.kernels[ch], self.kdims, x);
        }
        let mut xp = vec![0.0f32; p.iter().product()];
        correlate_valid(&yz, zdims, &self.kernels[ch], self.kdims, &mut xp);
        let left = self.left();
        let maps = [0, 1, 2].map(|i| axis_map(self.padding, dims[i], left[i], p[i], p[i]));
        fold(&xp, [&maps[0], &maps[1], &maps[2]], left, dims, x);
    }

    /// The FFT grid of an FFT plan for input `dims`.
    fn fft_grid(&self, plan: Plan, dims: [usize; 3]) -> [usize; 3] {
        let (circ, linear) = (plan.circular_axes(), self.linear_grid(dims));
        [0, 1, 2].map(|i| if circ[i] { dims[i] } else { linear[i] })
    }

    /// Samples added in front of the image on the FFT grid (none on circular axes).
    fn fft_left(&self, plan: Plan) -> [usize; 3] {
        let (circ, left) = (plan.circular_axes(), self.left());
        [0, 1, 2].map(|i| if circ[i] { 0 } else { left[i] })
    }

    /// Per axis, where the image's padded extension comes from on the FFT grid: itself on circular
    /// axes, the padding up to the padded length then zeros on padded ones.
    fn fft_maps(&self, plan: Plan, dims: [usize; 3]) -> [AxisMap; 3] {
        let (grid, left, p) = (
            self.fft_grid(plan, dims),
            self.fft_left(plan),
            self.padded_dims(dims),
        );
        let circ = plan.circular_axes();
        [0, 1, 2].map(|i| {
            let ext = if circ[i] { dims[i] } else { p[i] };
            axis_map(self.padding, dims[i], left[i], ext, grid[i])
        })
    }

    /// Offset of the output inside the FFT grid: `K−1` on padded axes, 0 on circular ones.
    fn fft_crop(&self, plan: Plan) -> [usize; 3] {
        let circ = plan.circular_axes();
        [0, 1, 2].map(|i| if circ[i] { 0 } else { self.kdims[i] - 1 })
    }

    /// FFT of one input plane as the forward pass sees it: the image itself (circular grid) or its
    /// padded extension on the linear grid.
    fn input_spectrum(&self, plan: Plan, x: &[f32], dims: [usize; 3]) -> Vec<Complex32> {
        let grid = self.fft_grid(plan, dims);
        let fft = RealFft3::get(grid);
        if plan == Plan::CIRCULAR {
            return fft.forward(&mut x.to_vec());
        }
        let maps = self.fft_maps(plan, dims);
        let mut xg = vec![0.0f32; fft.real_len()];
        pad(
            x,
            dims,
            [&maps[0], &maps[1], &maps[2]],
            self.fft_left(plan),
            &mut xg,
        );
        fft.forward(&mut xg)
    }

    /// `y ← A x` of one plane from the spectrum of its input ([`Self::input_spectrum`]).
    fn forward_from_spectrum(
        &self,
        plan: Plan,
        input: Spectrum<'_>,
        dims: [usize; 3],
        ch: usize,
        y: &mut [f32],
    ) {
        let grid = self.fft_grid(plan, dims);
        let fft = RealFft3::get(grid);
        let k = self.spectrum(ch, grid, plan.circular_axes());
        let spec = match input {
            Spectrum::Owned(mut spec) => {
                multiply(&mut spec, &k, false);
                spec
            }
            // The same products as `multiply`, written to a new buffer (one pass fewer than a copy).
            Spectrum::Shared(x) => {
                let mut spec = vec![Complex32::new(0.0, 0.0); x.len()];
                spec.par_chunks_mut(4096)
                    .zip(x.par_chunks(4096).zip(k.par_chunks(4096)))
                    .for_each(|(s, (x, k))| {
                        for ((s, x), k) in s.iter_mut().zip(x).zip(k) {
                            *s = *x;
                            *s *= k;
                        }
                    });
                spec
            }
        };
        let full = fft.inverse(spec);
        if plan == Plan::CIRCULAR {
            return y.copy_from_slice(&full);
        }
        // y[i] = full[i + K − 1] on padded axes.
        let out = self.out_dims(dims).expect("shape checked by the operator");
        let off = self.fft_crop(plan);
        y.par_chunks_mut(out[2]).enumerate().for_each(|(row, yr)| {
            let (z, r) = (row / out[1], row % out[1]);
            let start = ((z + off[0]) * grid[1] + r + off[1]) * grid[2] + off[2];
            yr.copy_from_slice(&full[start..start + out[2]]);
        });
    }

    /// FFT of one output plane as the adjoint pass sees it: the plane itself (circular grid) or the
    /// plane zero-padded to the linear grid at offset `K−1`.
    fn adjoint_input_spectrum(&self, plan: Plan, y: &[f32], dims: [usize; 3]) -> Vec<Complex32> {
        let grid = self.fft_grid(plan, dims);
        let fft = RealFft3::get(grid);
        if plan == Plan::CIRCULAR {
            return fft.forward(&mut y.to_vec());
        }
        let out = self.out_dims(dims).expect("shape checked by the operator");
        let off = self.fft_crop(plan);
        let zmaps = [0, 1, 2]
            .map(|i| axis_map(Padding::Constant, out[i], off[i], off[i] + out[i], grid[i]));
        let mut yg = vec![0.0f32; fft.real_len()];
        pad(y, out, [&zmaps[0], &zmaps[1], &zmaps[2]], off, &mut yg);
        fft.forward(&mut yg)
    }

    /// `x ← ` the adjoint of one plane from `conj(K̂)·Ŷ` (already multiplied, possibly summed over
    /// operators): inverse FFT, then on the linear grid the fold of the padding.
    fn adjoint_from_spectrum(
        &self,
        plan: Plan,
        spec: Vec<Complex32>,
        dims: [usize; 3],
        x: &mut [f32],
    ) {
        let grid = self.fft_grid(plan, dims);
        let g = RealFft3::get(grid).inverse(spec);
        if plan == Plan::CIRCULAR {
            return x.copy_from_slice(&g);
        }
        // g[r] for r < P is the adjoint on the padded grid; beyond P the maps say "zero", so the fold
        // ignores it.
        let maps = self.fft_maps(plan, dims);
        let left = self.fft_left(plan);
        fold(&g, [&maps[0], &maps[1], &maps[2]], left, dims, x);
    }

    fn forward_fft(&self, plan: Plan, x: &[f32], dims: [usize; 3], ch: usize, y: &mut [f32]) {
        let spec = self.input_spectrum(plan, x, dims);
        self.forward_from_spectrum(plan, Spectrum::Owned(spec), dims, ch, y);
    }

    fn adjoint_fft(&self, plan: Plan, y: &[f32], dims: [usize; 3], ch: usize, x: &mut [f32]) {
        let grid = self.fft_grid(plan, dims);
        let k = self.spectrum(ch, grid, plan.circular_axes());
        let mut spec = self.adjoint_input_spectrum(plan, y, dims);
        multiply(&mut spec, &k, true);
        self.adjoint_from_spectrum(plan, spec, dims, x);
    }
}

/// The FFT path of a [`Conv`] for one input size, as plain data ([`Conv::fft_layout`]).
pub(crate) struct FftLayout {
    /// The FFT grid.
    pub grid: [usize; 3],
    /// Per grid axis, the input sample each grid position copies (`None`: zero): the padding.
    pub input_maps: [AxisMap; 3],
    /// Per grid axis, the output sample each grid position holds (`None`: zero): where the
    /// adjoint places its input.
    pub output_maps: [AxisMap; 3],
    /// Offset of the output inside the grid.
    pub crop: [usize; 3],
    pub out_dims: [usize; 3],
}

/// An input spectrum handed to the forward product: owned (consumed) or shared between operators.
enum Spectrum<'a> {
    Owned(Vec<Complex32>),
    Shared(&'a [Complex32]),
}

/// What convolutions must share to share their FFTs: circular padding, kernel dims, method and
/// number of kernels. Operators with equal keys use the same grid and the same input placement for
/// every input size, so one transform of the input serves all of them (see `physics::stack`). Ranks
/// compare their operators' keys as typed values (postcard through `dist::wire`); a key that
/// decodes but that no convolution could have ([`FusionKey::check`]) is a peer's bad data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FusionKey {
    pub kdims: [usize; 3],
    pub channels: usize,
    pub method: ConvMethod,
}

impl FusionKey {
    /// Fails, saying why, unless a convolution could have this key: at least one kernel, every
    /// kernel side in `1..=MAX_KERNEL_SIDE`.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.channels == 0 {
            return Err("a fusion key of no kernels".into());
        }
        if let Some(k) = self
            .kdims
            .iter()
            .find(|&&k| !(1..=MAX_KERNEL_SIDE).contains(&k))
        {
            return Err(format!(
                "a fusion key with kernel side {k} (kernel {:?}; at most {MAX_KERNEL_SIDE})",
                self.kdims
            ));
        }
        Ok(())
    }
}

/// Largest Gram kernel (values per channel) a stack precomputes; beyond it (kernels of side ≳ 1000)
/// the stack applies `Σ AᵢᵀAᵢ` operator by operator.
pub const MAX_GRAM_LEN: usize = 1 << 22;

impl Conv {
    /// This convolution's [`FusionKey`]; `None` unless the padding is circular.
    pub fn fusion_key(&self) -> Option<FusionKey> {
        (self.padding == Padding::Circular).then_some(FusionKey {
            kdims: self.kdims,
            channels: self.kernels.len(),
            method: self.method,
        })
    }

    /// A convolution with `key`'s geometry and zero kernels: it places and finishes spectra (grids,
    /// padding, fold) for ranks that own no operator of a fused stack.
    pub fn template(key: FusionKey) -> Conv {
        let n = key.kdims.iter().product();
        Conv::new(
            vec![vec![0.0; n]; key.channels],
            key.kdims,
            Padding::Circular,
            key.method,
        )
    }

    /// Whether inputs of `dims` go through the FFT (and so can share transforms).
    pub fn uses_fft(&self, dims: [usize; 3]) -> bool {
        self.plan(dims) != Plan::Direct
    }

    /// Spectra of the `planes` planes of `x` (dims `dims`) on this convolution's FFT grid; every
    /// convolution with the same [`FusionKey`] accepts them. `None` on the direct path.
    pub fn input_spectra(
        &self,
        x: &[f32],
        planes: usize,
        dims: [usize; 3],
    ) -> Option<Vec<Vec<Complex32>>> {
        let plan = self.plan(dims);
        if plan == Plan::Direct {
            return None;
        }
        let n = dims.iter().product::<usize>();
        Some(
            x.par_chunks(n)
                .take(planes)
                .map(|x| self.input_spectrum(plan, x, dims))
                .collect(),
        )
    }

    /// `A x` from [`Self::input_spectra`] of `x`: the same arithmetic as [`Self::forward`], so the
    /// same bits.
    pub fn forward_from_spectra(
        &self,
        spectra: &[Vec<Complex32>],
        channels: usize,
        dims: [usize; 3],
    ) -> Vec<f32> {
        let plan = self.plan(dims);
        let n = dims.iter().product::<usize>();
        let mut out = vec![0.0f32; spectra.len() * n];
        out.par_chunks_mut(n)
            .zip(spectra.par_iter())
            .enumerate()
            .for_each(|(p, (y, s))| {
                let ch = self.channel_of(p, channels);
                self.forward_from_spectrum(plan, Spectrum::Shared(s), dims, ch, y);
            });
        out
    }

    /// `weight · conj(K̂)·Ŷ` for each plane of `y`, as interleaved (re, im) floats, planes one after
    /// another: this operator's term of `Σᵢ wᵢAᵢᵀyᵢ` before the shared inverse transform. Only on
    /// the FFT path ([`Self::uses_fft`]).
    pub fn adjoint_term(
        &self,
        y: &[f32],
        planes: usize,
        channels: usize,
        dims: [usize; 3],
        weight: f32,
    ) -> Vec<f32> {
        let plan = self.plan(dims);
        debug_assert_ne!(plan, Plan::Direct);
        let grid = self.fft_grid(plan, dims);
        let len = RealFft3::get(grid).spectrum_len();
        let n = dims.iter().product::<usize>();
        let mut out = vec![0.0f32; planes * 2 * len];
        out.par_chunks_mut(2 * len)
            .zip(y.par_chunks(n))
            .enumerate()
            .for_each(|(p, (out, y))| {
                let k = self.spectrum(self.channel_of(p, channels), grid, plan.circular_axes());
                let mut spec = self.adjoint_input_spectrum(plan, y, dims);
                multiply(&mut spec, &k, true);
                for (o, s) in out.chunks_exact_mut(2).zip(&spec) {
                    o[0] = s.re * weight;
                    o[1] = s.im * weight;
                }
            });
        out
    }

    /// Adds this operator's [`Self::adjoint_term`] to `acc` (one spectrum per plane; empty: the
    /// term becomes the sum), with the same roundings as forming the term and then adding it, so
    /// accumulating in operator order gives the bits of summing the terms in operator order.
    pub fn adjoint_accumulate(
        &self,
        y: &[f32],
        channels: usize,
        dims: [usize; 3],
        weight: f32,
        acc: &mut Vec<Vec<Complex32>>,
    ) {
        let plan = self.plan(dims);
        debug_assert_ne!(plan, Plan::Direct);
        let grid = self.fft_grid(plan, dims);
        let n = dims.iter().product::<usize>();
        let first = acc.is_empty();
        for (p, y) in y.chunks_exact(n).enumerate() {
            let k = self.spectrum(self.channel_of(p, channels), grid, plan.circular_axes());
            let mut spec = self.adjoint_input_spectrum(plan, y, dims);
            multiply(&mut spec, &k, true);
            if first {
                spec.par_iter_mut().for_each(|s| {
                    s.re *= weight;
                    s.im *= weight;
                });
                acc.push(spec);
                continue;
            }
            acc[p]
                .par_chunks_mut(4096)
                .zip(spec.par_chunks(4096))
                .for_each(|(a, s)| {
                    for (a, s) in a.iter_mut().zip(s) {
                        a.re += s.re * weight;
                        a.im += s.im * weight;
                    }
                });
        }
    }

    /// The image of accumulated spectra ([`Self::adjoint_accumulate`]), one per plane.
    pub fn adjoint_finish_spectra(&self, acc: Vec<Vec<Complex32>>, dims: [usize; 3]) -> Vec<f32> {
        let plan = self.plan(dims);
        let n = dims.iter().product::<usize>();
        let mut out = vec![0.0f32; acc.len() * n];
        out.par_chunks_mut(n)
            .zip(acc.into_par_iter())
            .for_each(|(x, spec)| self.adjoint_from_spectrum(plan, spec, dims, x));
        out
    }

    /// The image of a sum of [`Self::adjoint_term`]s: one inverse transform (and fold) per plane.
    pub fn adjoint_finish(&self, terms: &[f32], planes: usize, dims: [usize; 3]) -> Vec<f32> {
        let plan = self.plan(dims);
        let n = dims.iter().product::<usize>();
        let len = terms.len() / planes.max(1) / 2;
        let mut out = vec![0.0f32; planes * n];
        out.par_chunks_mut(n)
            .zip(terms.par_chunks(2 * len))
            .for_each(|(x, t)| {
                let spec = t
                    .chunks_exact(2)
                    .map(|c| Complex32::new(c[0], c[1]))
                    .collect();
                self.adjoint_from_spectrum(plan, spec, dims, x);
            });
        out
    }

    /// The kernels of `AᵀA` (one per kernel channel) and their dims `2K−1`, in f64: for circular
    /// padding `AᵀA` is the circular convolution with the autocorrelation
    /// `g[m] = Σ_a k[a]·k[a + m − (K−1)]`, centred at `K−1` = the centre `(2K−1)/2` that [`Conv`]
    /// uses. Computed as `IFFT(|FFT k|²)` in f64 on a grid ≥ `2K−1` (no wrap-around). `None` when a
    /// kernel would exceed [`MAX_GRAM_LEN`] values.
    pub fn gram_kernels(&self) -> Option<(Vec<Vec<f64>>, [usize; 3])> {
        let gdims = self.kdims.map(|k| 2 * k - 1);
        if gdims.iter().product::<usize>() > MAX_GRAM_LEN {
            return None;
        }
        let grid = gdims.map(fast_len);
        let total = grid.iter().product::<usize>();
        let [kd, kh, kw] = self.kdims;
        let grams = self
            .kernels
            .iter()
            .map(|k| {
                let mut buf = vec![Complex64::new(0.0, 0.0); total];
                for c in 0..kd {
                    for a in 0..kh {
                        for b in 0..kw {
                            buf[(c * grid[1] + a) * grid[2] + b].re =
                                k[(c * kh + a) * kw + b] as f64;
                        }
                    }
                }
                fft3_c64(&mut buf, grid, false);
                for v in &mut buf {
                    *v = Complex64::new(v.norm_sqr(), 0.0);
                }
                fft3_c64(&mut buf, grid, true);
                let mut g = Vec::with_capacity(gdims.iter().product());
                let lag = |m: usize, i: usize| {
                    (m as isize - (self.kdims[i] as isize - 1)).rem_euclid(grid[i] as isize)
                        as usize
                };
                for c in 0..gdims[0] {
                    for a in 0..gdims[1] {
                        for b in 0..gdims[2] {
                            let idx = (lag(c, 0) * grid[1] + lag(a, 1)) * grid[2] + lag(b, 2);
                            g.push(buf[idx].re / total as f64);
                        }
                    }
                }
                g
            })
            .collect();
        Some((grams, gdims))
    }
}

/// Unnormalised complex FFT of a C-order 3-D array in f64, along every axis longer than 1.
fn fft3_c64(buf: &mut [Complex64], dims: [usize; 3], inverse: bool) {
    let mut planner = rustfft::FftPlanner::<f64>::new();
    let [d0, d1, d2] = dims;
    let mut line = Vec::new();
    for (axis, len, stride) in [(2, d2, 1), (1, d1, d2), (0, d0, d1 * d2)] {
        if len < 2 {
            continue;
        }
        let fft = if inverse {
            planner.plan_fft_inverse(len)
        } else {
            planner.plan_fft_forward(len)
        };
        // Starts of every line along `axis`.
        let starts: Vec<usize> = (0..buf.len())
            .filter(|&i| (i / stride) % dims[axis] == 0)
            .collect();
        for s in starts {
            line.clear();
            line.extend((0..len).map(|j| buf[s + j * stride]));
            fft.process(&mut line);
            for (j, v) in line.iter().enumerate() {
                buf[s + j * stride] = *v;
            }
        }
    }
}

/// `spec ← spec · k` (or `· conj(k)` for the adjoint), in parallel.
fn multiply(spec: &mut [Complex32], k: &[Complex32], conjugate: bool) {
    spec.par_chunks_mut(4096)
        .zip(k.par_chunks(4096))
        .for_each(|(s, k)| {
            if conjugate {
                s.iter_mut().zip(k).for_each(|(s, k)| *s *= k.conj());
            } else {
                s.iter_mut().zip(k).for_each(|(s, k)| *s *= k);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn circular_plan_avoids_prime_grids() {
        let conv =
            |padding, method| Conv::new(vec![vec![0.0; 71 * 71]], [1, 71, 71], padding, method);
        let c = conv(Padding::Circular, ConvMethod::Auto);
        // 683 is prime: the padded linear path on 756 × 1120 wins over the image grid.
        // 683 is prime: that axis is padded (to 756), the 1024 axis stays circular.
        assert_eq!(c.plan([1, 683, 1024]), Plan::Fft([true, false, true]));
        assert_eq!(c.plan([1, 768, 1024]), Plan::CIRCULAR);
        assert_eq!(
            conv(Padding::Reflect, ConvMethod::Auto).plan([1, 683, 1024]),
            Plan::LINEAR
        );
        assert_eq!(
            conv(Padding::Circular, ConvMethod::Direct).plan([1, 683, 1024]),
            Plan::Direct
        );
        let small = Conv::new(
            vec![vec![0.0; 9]],
            [1, 3, 3],
            Padding::Reflect,
            ConvMethod::Auto,
        );
        assert_eq!(small.plan([1, 512, 512]), Plan::Direct);
        assert_eq!(largest_prime_factor(683), 683);
        assert_eq!(largest_prime_factor(756), 7);
    }

    #[test]
    fn extensions_match_torch_pad() {
        // torch.nn.functional.pad([0,1,2,3,4], (3,3), mode) for each mode.
        let n = 5;
        let ext = |p| (-3..8).map(|r| source_index(p, r, n)).collect::<Vec<_>>();
        let s = |v: &[usize]| v.iter().map(|&i| Some(i)).collect::<Vec<_>>();
        assert_eq!(
            ext(Padding::Circular),
            s(&[2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2])
        );
        assert_eq!(
            ext(Padding::Replicate),
            s(&[0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 4])
        );
        assert_eq!(ext(Padding::Reflect), s(&[3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1]));
        assert_eq!(ext(Padding::Constant)[..3], [None, None, None]);
    }

    #[test]
    fn accumulate_row_matches_naive() {
        let src: Vec<f32> = (0..40).map(|i| (i as f32 * 0.7).sin()).collect();
        for k in 1..10 {
            let taps: Vec<f32> = (0..k).map(|i| 1.0 + i as f32).collect();
            let mut acc = vec![0.5f32; 40 - k + 1];
            accumulate_row(&mut acc, &src, &taps);
            for (x, a) in acc.iter().enumerate() {
                let want: f32 = 0.5 + (0..k).map(|b| taps[b] * src[x + b]).sum::<f32>();
                assert!((a - want).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn pad_and_fold_are_adjoint() {
        let dims = [2, 3, 4];
        let left = [1, 2, 3];
        let total = [5, 9, 11];
        for padding in [
            Padding::Circular,
            Padding::Replicate,
            Padding::Reflect,
            Padding::Constant,
        ] {
            let maps =
                [0, 1, 2].map(|i| axis_map(padding, dims[i], left[i], total[i] - 1, total[i]));
            let m = [&maps[0], &maps[1], &maps[2]];
            let x: Vec<f32> = (0..24).map(|i| (i as f32 * 1.3).cos()).collect();
            let v: Vec<f32> = (0..5 * 9 * 11).map(|i| (i as f32 * 0.41).sin()).collect();
            let mut px = vec![0.0; v.len()];
            pad(&x, dims, m, left, &mut px);
            let mut fv = vec![0.0; x.len()];
            fold(&v, m, left, dims, &mut fv);
            let lhs: f64 = px.iter().zip(&v).map(|(a, b)| (a * b) as f64).sum();
            let rhs: f64 = x.iter().zip(&fv).map(|(a, b)| (a * b) as f64).sum();
            assert!((lhs - rhs).abs() < 1e-4, "{padding:?}: {lhs} vs {rhs}");
        }
    }
}
