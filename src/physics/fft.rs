//! Multi-threaded real FFTs of 1-, 2- and 3-D arrays, the engine of the FFT convolution path in
//! [`super::blur_engine`].
//!
//! An array of shape `(d0, d1, d2)` (a 2-D image is `(1, H, W)`) is transformed by a real FFT along the
//! last axis (realfft) and complex FFTs along the others (rustfft). Every complex pass runs on
//! contiguous data: after each pass the just-transformed axis is moved to the front by a cache-blocked
//! transpose, so the next axis becomes the last one. The spectrum is therefore left in a permuted
//! layout (`(d1, d2/2+1, d0)` for volumes, `(d2/2+1, d1)` for images); that is fine because a
//! convolution only multiplies spectra pointwise, and every spectrum of a given shape has the same
//! layout. The FFTs of axes of length 1 are skipped, and so are the transposes when `d0 = d1 = 1`;
//! with `d1 = 1` but `d0 > 1` the first transpose still runs (it puts `d0` last, where the `d0`
//! pass needs it contiguous). Transforms are unnormalised; callers fold `1/N` into the kernel
//! spectrum. Plans are cached per shape, process-wide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};

/// A forward and an inverse complex FFT plan of one length.
type ComplexPlans = (Arc<dyn Fft<f32>>, Arc<dyn Fft<f32>>);

/// FFT plans for one real array shape `(d0, d1, d2)`.
pub struct RealFft3 {
    shape: [usize; 3],
    r2c: Arc<dyn RealToComplex<f32>>,
    c2r: Arc<dyn ComplexToReal<f32>>,
    /// Complex plans for axes 1 and 0 (forward, inverse); `None` where the axis has length 1.
    axes: [Option<ComplexPlans>; 2],
}

/// Rows handed to one rayon task in batched passes: enough work to amortise scheduling.
const ROWS_PER_TASK: usize = 8;

impl RealFft3 {
    /// The cached plans for `shape` (every entry ≥ 1).
    pub fn get(shape: [usize; 3]) -> Arc<RealFft3> {
        static CACHE: OnceLock<Mutex<HashMap<[usize; 3], Arc<RealFft3>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(shape)
            .or_insert_with(|| Arc::new(RealFft3::plan(shape)))
            .clone()
    }

    fn plan(shape: [usize; 3]) -> RealFft3 {
        let mut real = RealFftPlanner::<f32>::new();
        let mut complex = FftPlanner::<f32>::new();
        let mut axis =
            |n: usize| (n > 1).then(|| (complex.plan_fft_forward(n), complex.plan_fft_inverse(n)));
        let axes = [axis(shape[1]), axis(shape[0])];
        RealFft3 {
            shape,
            r2c: real.plan_fft_forward(shape[2]),
            c2r: real.plan_fft_inverse(shape[2]),
            axes,
        }
    }

    /// Number of complex values in a spectrum.
    pub fn spectrum_len(&self) -> usize {
        self.shape[0] * self.shape[1] * (self.shape[2] / 2 + 1)
    }

    /// Number of real values in an array of this shape.
    pub fn real_len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Forward transform; `input` is used as scratch and left unspecified.
    pub fn forward(&self, input: &mut [f32]) -> Vec<Complex32> {
        let [d0, d1, d2] = self.shape;
        let nc = d2 / 2 + 1;
        debug_assert_eq!(input.len(), self.real_len());
        let mut spec = vec![Complex32::new(0.0, 0.0); self.spectrum_len()];
        let r2c = &self.r2c;
        input
            .par_chunks_mut(d2 * ROWS_PER_TASK)
            .zip(spec.par_chunks_mut(nc * ROWS_PER_TASK))
            .for_each_init(
                || r2c.make_scratch_vec(),
                |scratch, (rows_in, rows_out)| {
                    for (row_in, row_out) in rows_in
                        .chunks_exact_mut(d2)
                        .zip(rows_out.chunks_exact_mut(nc))
                    {
                        // Lengths are exact by construction, so the only possible error cannot occur.
                        let _ = r2c.process_with_scratch(row_in, row_out, scratch);
                    }
                },
            );
        let mut tmp = vec![Complex32::new(0.0, 0.0); spec.len()];
        // Layout (d0, d1, nc) → (nc, d0, d1): FFT along d1.
        if self.axes.iter().any(Option::is_some) {
            transpose(&spec, &mut tmp, d0 * d1, nc);
            std::mem::swap(&mut spec, &mut tmp);
            if let Some((fwd, _)) = &self.axes[0] {
                batched_fft(fwd, &mut spec, d1);
            }
        }
        // Layout (nc, d0, d1) → (d1, nc, d0): FFT along d0.
        if let Some((fwd, _)) = &self.axes[1] {
            transpose(&spec, &mut tmp, nc * d0, d1);
            std::mem::swap(&mut spec, &mut tmp);
            batched_fft(fwd, &mut spec, d0);
        }
        spec
    }

    /// Inverse transform (unnormalised) of a spectrum in [`forward`](Self::forward)'s layout; `spec`
    /// is used as scratch.
    pub fn inverse(&self, mut spec: Vec<Complex32>) -> Vec<f32> {
        let [d0, d1, d2] = self.shape;
        let nc = d2 / 2 + 1;
        debug_assert_eq!(spec.len(), self.spectrum_len());
        let mut tmp = vec![Complex32::new(0.0, 0.0); spec.len()];
        if let Some((_, inv)) = &self.axes[1] {
            batched_fft(inv, &mut spec, d0);
            transpose(&spec, &mut tmp, d1, nc * d0);
            std::mem::swap(&mut spec, &mut tmp);
        }
        if self.axes.iter().any(Option::is_some) {
            if let Some((_, inv)) = &self.axes[0] {
                batched_fft(inv, &mut spec, d1);
            }
            transpose(&spec, &mut tmp, nc, d0 * d1);
            std::mem::swap(&mut spec, &mut tmp);
        }
        drop(tmp);
        let mut out = vec![0.0f32; self.real_len()];
        let c2r = &self.c2r;
        spec.par_chunks_mut(nc * ROWS_PER_TASK)
            .zip(out.par_chunks_mut(d2 * ROWS_PER_TASK))
            .for_each_init(
                || c2r.make_scratch_vec(),
                |scratch, (rows_in, rows_out)| {
                    for (row_in, row_out) in rows_in
                        .chunks_exact_mut(nc)
                        .zip(rows_out.chunks_exact_mut(d2))
                    {
                        // The DC (and Nyquist) bins of a Hermitian spectrum are real up to rounding;
                        // realfft ignores their imaginary parts, which is what we want.
                        row_in[0].im = 0.0;
                        if d2 % 2 == 0 {
                            row_in[nc - 1].im = 0.0;
                        }
                        let _ = c2r.process_with_scratch(row_in, row_out, scratch);
                    }
                },
            );
        out
    }
}

/// In-place FFTs of every contiguous run of `len` values in `buf`, in parallel.
fn batched_fft(fft: &Arc<dyn Fft<f32>>, buf: &mut [Complex32], len: usize) {
    let scratch_len = fft.get_inplace_scratch_len();
    buf.par_chunks_mut(len * ROWS_PER_TASK).for_each_init(
        || vec![Complex32::new(0.0, 0.0); scratch_len],
        |scratch, chunk| fft.process_with_scratch(chunk, scratch),
    );
}

/// `dst` (cols × rows) ← transpose of `src` (rows × cols), cache-blocked and parallel over output rows.
fn transpose(src: &[Complex32], dst: &mut [Complex32], rows: usize, cols: usize) {
    const BLOCK: usize = 16;
    debug_assert_eq!(src.len(), rows * cols);
    dst.par_chunks_mut(BLOCK * rows)
        .enumerate()
        .for_each(|(block, chunk)| {
            let c0 = block * BLOCK;
            let ncols = chunk.len() / rows;
            for r0 in (0..rows).step_by(BLOCK) {
                let r1 = (r0 + BLOCK).min(rows);
                for c in 0..ncols {
                    let out = &mut chunk[c * rows + r0..c * rows + r1];
                    for (k, o) in out.iter_mut().enumerate() {
                        *o = src[(r0 + k) * cols + c0 + c];
                    }
                }
            }
        });
}

/// Smallest `n' ≥ n` whose prime factors are 2, 3, 5 and 7 (sizes rustfft handles fastest).
pub fn fast_len(n: usize) -> usize {
    let mut m = n.max(1);
    loop {
        let mut r = m;
        for p in [2, 3, 5, 7] {
            while r.is_multiple_of(p) {
                r /= p;
            }
        }
        if r == 1 {
            return m;
        }
        m += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive DFT power: Parseval says Σ|X|² over the full spectrum = N Σ|x|²; with the half spectrum we
    /// instead check that inverse(forward(x)) = N·x for awkward shapes (primes, ones, odd/even).
    #[test]
    fn round_trip_recovers_input() {
        for shape in [
            [1, 1, 7],
            [1, 5, 8],
            [3, 1, 6],
            [2, 7, 5],
            [4, 6, 9],
            [1, 13, 1],
        ] {
            let fft = RealFft3::get(shape);
            let n = fft.real_len();
            let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3).collect();
            let spec = fft.forward(&mut x.clone());
            let back = fft.inverse(spec);
            for (a, b) in x.iter().zip(&back) {
                assert!((a * n as f32 - b).abs() < 1e-3 * n as f32, "{shape:?}");
            }
        }
    }

    /// The product of two spectra is the circular convolution of the arrays (the property the
    /// convolution engine relies on, whatever the spectrum's layout), against the direct sum, on
    /// shapes with axes of length 1 in every position (`(d0, 1, d2)` once moved `d0` wrongly).
    #[test]
    fn spectrum_products_are_circular_convolutions() {
        for shape in [
            [3, 1, 6],
            [4, 1, 1],
            [1, 5, 7],
            [1, 1, 8],
            [2, 3, 5],
            [5, 4, 1],
        ] {
            let fft = RealFft3::get(shape);
            let n = fft.real_len();
            let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3).collect();
            let k: Vec<f32> = (0..n).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.2).collect();
            let (sx, sk) = (fft.forward(&mut x.clone()), fft.forward(&mut k.clone()));
            let product = sx.iter().zip(&sk).map(|(a, b)| a * b).collect();
            let got = fft.inverse(product);
            let [d0, d1, d2] = shape;
            for (i, &g) in got.iter().enumerate() {
                let (a, b, c) = (i / (d1 * d2), i / d2 % d1, i % d2);
                let mut want = 0.0f64;
                for (j, &xj) in x.iter().enumerate() {
                    let (p, q, r) = (j / (d1 * d2), j / d2 % d1, j % d2);
                    let s = ((a + d0 - p) % d0 * d1 + (b + d1 - q) % d1) * d2 + (c + d2 - r) % d2;
                    want += xj as f64 * k[s] as f64;
                }
                let want = want * n as f64;
                assert!(
                    (g as f64 - want).abs() < 1e-4 * n as f64,
                    "{shape:?} at {i}: {g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn dc_bin_is_the_sum() {
        let shape = [3, 4, 5];
        let fft = RealFft3::get(shape);
        let x: Vec<f32> = (0..60).map(|i| i as f32 * 0.1).collect();
        let sum: f32 = x.iter().sum();
        let spec = fft.forward(&mut x.clone());
        assert!((spec[0].re - sum).abs() < 1e-3 && spec[0].im.abs() < 1e-3);
    }

    #[test]
    fn fast_len_is_smooth_and_minimal() {
        assert_eq!(fast_len(683), 686);
        assert_eq!(fast_len(1024), 1024);
        assert_eq!(fast_len(11), 12);
        assert_eq!(fast_len(1), 1);
    }
}
