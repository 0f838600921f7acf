//! Moving time series between the user's sample interval and the solver's internal one (deepwave's
//! `upsample` / `downsample`, without tapering or padding): band-limited interpolation through the
//! real FFT, with the Nyquist bin of the coarse grid zeroed.
//!
//! With `n` coarse samples and ratio `r`, both maps keep the frequency bins `k < n/2` (and `n/2`
//! for odd `n` is never a bin), so `upsample = r · downsampleᵀ`: the adjoint of receiver
//! downsampling, needed to back-propagate a data residual, is `upsample / r`.

use realfft::RealFftPlanner;
use realfft::num_complex::Complex;

use crate::error::{Error, Result};

/// Upsamples each row of `traces` (`rows × n`, row-major) by `ratio` into `rows × n·ratio`.
pub fn upsample(traces: &[f64], n: usize, ratio: usize) -> Vec<f64> {
    if ratio == 1 || n == 0 {
        return traces.to_vec();
    }
    let big = n * ratio;
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(big);
    let mut input = fwd.make_input_vec();
    let mut spec = fwd.make_output_vec();
    let mut big_spec = inv.make_input_vec();
    let mut out = Vec::with_capacity(traces.len() * ratio);
    let mut row_out = inv.make_output_vec();
    let scale = 1.0 / n as f64;
    for row in traces.chunks_exact(n) {
        input.copy_from_slice(row);
        fwd.process(&mut input, &mut spec)
            .expect("lengths from the plan");
        if n.is_multiple_of(2) && spec.len() > 1 {
            *spec.last_mut().expect("non-empty") = Complex::new(0.0, 0.0);
        }
        big_spec.fill(Complex::new(0.0, 0.0));
        big_spec[..spec.len()].copy_from_slice(&spec);
        big_spec[0].im = 0.0;
        inv.process(&mut big_spec, &mut row_out)
            .expect("imaginary parts of the DC and Nyquist bins are zero");
        out.extend(row_out.iter().map(|v| v * scale));
    }
    out
}

/// Downsamples each row of `traces` (`rows × n`, `n` a multiple of `ratio`) by `ratio`.
pub fn downsample(traces: &[f64], n: usize, ratio: usize) -> Result<Vec<f64>> {
    if ratio == 1 || n == 0 {
        return Ok(traces.to_vec());
    }
    if !n.is_multiple_of(ratio) {
        return Err(Error::config(
            "resample",
            format!("{n} samples are not a multiple of the ratio {ratio}"),
        ));
    }
    let small = n / ratio;
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(small);
    let mut input = fwd.make_input_vec();
    let mut spec = fwd.make_output_vec();
    let mut small_spec = inv.make_input_vec();
    let mut row_out = inv.make_output_vec();
    let mut out = Vec::with_capacity(traces.len() / ratio);
    let scale = 1.0 / n as f64;
    let keep = small_spec.len();
    for row in traces.chunks_exact(n) {
        input.copy_from_slice(row);
        fwd.process(&mut input, &mut spec)
            .expect("lengths from the plan");
        small_spec.copy_from_slice(&spec[..keep]);
        small_spec[0].im = 0.0;
        if small.is_multiple_of(2) && keep > 1 {
            small_spec[keep - 1] = Complex::new(0.0, 0.0);
        }
        inv.process(&mut small_spec, &mut row_out)
            .expect("imaginary parts of the DC and Nyquist bins are zero");
        out.extend(row_out.iter().map(|v| v * scale));
    }
    Ok(out)
}

/// The adjoint of [`downsample`]: `upsample / ratio`.
pub fn downsample_adjoint(traces: &[f64], n_small: usize, ratio: usize) -> Vec<f64> {
    let mut up = upsample(traces, n_small, ratio);
    if ratio > 1 {
        let inv = 1.0 / ratio as f64;
        up.iter_mut().for_each(|v| *v *= inv);
    }
    up
}

/// Zero-phase low-pass of each row (`rows × n`, sampled every `dt_s`): the response
/// `1 / (1 + (f/f_c)⁸)` (a 4th-order Butterworth run forwards and backwards), applied through an
/// FFT of twice the length so the ends do not wrap. Real and even in frequency, the filter is its own
/// adjoint.
pub fn low_pass(traces: &mut [f64], n: usize, dt_s: f64, cutoff_hz: f64) {
    if n == 0 {
        return;
    }
    let m = 2 * n;
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(m);
    let inv = planner.plan_fft_inverse(m);
    let mut input = fwd.make_input_vec();
    let mut spec = fwd.make_output_vec();
    let mut out = inv.make_output_vec();
    let response: Vec<f64> = (0..spec.len())
        .map(|k| {
            let f = k as f64 / (m as f64 * dt_s);
            1.0 / (1.0 + (f / cutoff_hz).powi(8))
        })
        .collect();
    for row in traces.chunks_exact_mut(n) {
        input[..n].copy_from_slice(row);
        input[n..].fill(0.0);
        fwd.process(&mut input, &mut spec)
            .expect("lengths from the plan");
        for (s, h) in spec.iter_mut().zip(&response) {
            *s *= *h;
        }
        spec[0].im = 0.0;
        if let Some(last) = spec.last_mut() {
            last.im = 0.0;
        }
        inv.process(&mut spec, &mut out)
            .expect("DC and Nyquist are real");
        for (r, o) in row.iter_mut().zip(&out) {
            *r = o / m as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5
            })
            .collect()
    }

    #[test]
    fn up_then_down_is_identity_on_band_limited_signals() {
        for (n, r) in [(40usize, 3usize), (41, 2), (16, 5)] {
            let x: Vec<f64> = (0..n)
                .map(|i| (2.0 * std::f64::consts::PI * 3.0 * i as f64 / n as f64).sin())
                .collect();
            let up = upsample(&x, n, r);
            assert_eq!(up.len(), n * r);
            // Interpolation: the original samples are kept.
            for i in 0..n {
                assert!((up[i * r] - x[i]).abs() < 1e-12, "n {n} r {r} i {i}");
            }
            let back = downsample(&up, n * r, r).unwrap();
            for i in 0..n {
                assert!((back[i] - x[i]).abs() < 1e-12);
            }
        }
        assert!(downsample(&[0.0; 10], 10, 3).is_err());
    }

    #[test]
    fn downsample_adjoint_passes_the_dot_product_test() {
        for (m, r) in [(30usize, 3usize), (31, 4), (8, 2)] {
            let x = noise(m * r * 2, 1); // two rows
            let y = noise(m * 2, 2);
            let dx = downsample(&x, m * r, r).unwrap();
            let aty = downsample_adjoint(&y, m, r);
            let lhs: f64 = dx.iter().zip(&y).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&aty).map(|(a, b)| a * b).sum();
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0),
                "{lhs} vs {rhs}"
            );
        }
    }
}
