//! C-PML absorbing profiles (Pasalic & McGarry 2010), as deepwave's `setup_pml` builds them.
//!
//! Along one axis of `n` padded cells, a face of width `w` cells starts at
//! `start₀ = fd_pad + w₀` (and ends at `start₁ = n − 1 − fd_pad − w₁`). With the fraction
//! `f = clamp(distance / w, 0, 1)` into the layer, the damping and frequency shift (per time step)
//! are `σ = −3·ln(0.001)/(2w)·f² · v_max·dt/Δ` and `α = π(1 − f)·f_pml·dt`; then `a = e^{−(σ+α)}`
//! (zero outside the layer) and `b = σ/(σ+α)·(e^{−(σ+α)} − 1)`. The solver also needs `db/dx`,
//! taken with the same first-derivative stencil as the wavefield.

use super::stencil::{Accuracy, first_derivative};

/// Reflection coefficient the profile is designed for (deepwave's `r_val`).
const R_VAL: f64 = 0.001;
/// Polynomial degree of the damping profile (deepwave's `n_power`).
const N_POWER: i32 = 2;

/// The `a`, `b` and `db/dx` profiles along one axis (padded length).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub db: Vec<f64>,
}

/// Profiles for one axis of `n` padded cells with face widths `widths` (cells; 0 = no layer),
/// `fd_pad` guard cells outside each face, grid spacing `spacing_m`, internal time step `dt_s`.
pub fn profile(
    n: usize,
    widths: [usize; 2],
    accuracy: Accuracy,
    spacing_m: f64,
    dt_s: f64,
    max_vel: f64,
    freq_hz: f64,
) -> Profile {
    let fd_pad = accuracy.radius();
    let start = [
        (fd_pad + widths[0]) as f64,
        n as f64 - 1.0 - (fd_pad + widths[1]) as f64,
    ];
    let velocity_scale = max_vel * dt_s.abs() / spacing_m;
    let frequency_scale = freq_hz * dt_s.abs();
    let mut a = vec![0.0; n];
    let mut b = vec![0.0; n];
    for i in 0..n {
        let x = i as f64;
        let mut sigma_shape = 0.0;
        let mut fraction = 0.0f64;
        for (side, &w) in widths.iter().enumerate() {
            if w == 0 {
                continue;
            }
            let distance = if side == 0 {
                start[0] - x
            } else {
                x - start[1]
            };
            let f = (distance / w as f64).clamp(0.0, 1.0);
            let sigma0 = -((1 + N_POWER) as f64) * R_VAL.ln() / (2.0 * w as f64);
            sigma_shape += sigma0 * f.powi(N_POWER);
            fraction = fraction.max(f);
        }
        let alpha_shape = std::f64::consts::PI * (1.0 - fraction);
        let sigma = sigma_shape * velocity_scale;
        let alpha = alpha_shape * frequency_scale;
        let total = sigma + alpha;
        let ratio = (sigma / if total == 0.0 { 1.0 } else { total }).clamp(0.0, 1.0);
        a[i] = if fraction != 0.0 { (-total).exp() } else { 0.0 };
        b[i] = ratio * (-total).exp_m1().clamp(-1.0, 0.0);
    }
    let db = first_derivative(&b, accuracy, 1.0 / spacing_m);
    Profile { a, b, db }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_is_zero_inside_and_damps_towards_the_edges() {
        let p = profile(60, [10, 12], Accuracy::Four, 10.0, 1e-3, 3000.0, 15.0);
        // Interior: no damping, no memory term.
        for i in 12 + 1..60 - 2 - 12 - 1 {
            assert_eq!(p.a[i], 0.0, "a at {i}");
            assert_eq!(p.b[i], 0.0, "b at {i}");
        }
        // In the layer: 0 < a < 1, −1 < b < 0, damping grows towards the outer edge.
        assert!(p.a[5] > 0.0 && p.a[5] < 1.0);
        assert!(p.b[2] < p.b[8] && p.b[8] < 0.0);
        assert!(p.b[57] < p.b[50] && p.b[50] < 0.0);
        // db/dx is the stencil derivative of b and vanishes in the outermost fd_pad cells.
        assert_eq!(p.db[0], 0.0);
        assert_eq!(p.db[59], 0.0);
        assert!(p.db[8] > 0.0);
    }
}
