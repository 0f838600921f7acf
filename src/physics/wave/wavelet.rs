//! Source wavelets: the Ricker wavelet of deepwave's `wavelets.ricker`.

/// `(1 − 2π²f²t²)·exp(−π²f²t²)` sampled at `t = i·dt − peak_time_s`, `i < nt`. deepwave's default
/// peak time is the middle of the record (`nt·dt/2`); FWI scripts usually give `1.5/f`.
pub fn ricker(freq_hz: f64, nt: usize, dt_s: f64, peak_time_s: Option<f64>) -> Vec<f64> {
    let peak = peak_time_s.unwrap_or(nt as f64 * dt_s / 2.0);
    let pi2 = std::f64::consts::PI * std::f64::consts::PI;
    let f2 = freq_hz * freq_hz;
    (0..nt)
        .map(|i| {
            let t = i as f64 * dt_s - peak;
            let t2 = t * t;
            (1.0 - 2.0 * pi2 * f2 * t2) * (-pi2 * f2 * t2).exp()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ricker_peaks_at_one_with_zero_mean() {
        let w = ricker(10.0, 400, 1e-3, Some(0.15));
        let (imax, &max) = w
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap();
        assert_eq!(imax, 150);
        assert!((max - 1.0).abs() < 1e-12);
        // Zero crossings at t = ±1/(√2·π·f).
        let tz = 1.0 / (2f64.sqrt() * std::f64::consts::PI * 10.0);
        let at = ricker(10.0, 1, 1.0, Some(-tz))[0];
        assert!(at.abs() < 1e-12);
        let mean: f64 = w.iter().sum::<f64>() * 1e-3;
        assert!(mean.abs() < 1e-6, "{mean}");
    }
}
