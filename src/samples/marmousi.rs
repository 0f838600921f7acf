//! A procedurally generated Marmousi-like velocity model (m/s): a water layer over a stack of
//! dipping, gently folded sedimentary layers whose velocity grows with depth, cut by normal faults
//! that offset the layers, and a low-velocity wedge (a pinching-out slow layer) — the features that
//! make the real Marmousi model a classic FWI test. Deterministic for a seed (its own SplitMix64
//! stream, independent of any crate's generator).

use crate::error::{Error, Result};

/// SplitMix64: a small, fixed pseudo-random stream.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

/// Velocity of the water layer.
pub const WATER_VELOCITY: f32 = 1500.0;

/// The model on `nz × nx` cells (row = depth), row-major, velocities in [1500, 4700] m/s. The water
/// layer takes the top ~6 % of the rows.
pub fn marmousi_like(nz: usize, nx: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix(seed ^ 0x6D61_726D_6F75_7369);
    let (fz, fx) = (nz as f64, nx as f64);
    let water = (0.06 * fz).round().max(1.0);
    // Horizons: depth (in rows) of the top of each layer as a function of x (in columns).
    let layers = 14;
    struct Horizon {
        base: f64,
        dip: f64,
        amp: f64,
        wavelength: f64,
        phase: f64,
    }
    let horizons: Vec<Horizon> = (0..layers)
        .map(|k| {
            let t = k as f64 / layers as f64;
            Horizon {
                base: water + (fz - water) * (t + rng.range(-0.015, 0.015)),
                // Dips steepen with depth, as in Marmousi's growth faults.
                dip: rng.range(0.05, 0.12) + 0.2 * t,
                amp: rng.range(0.01, 0.04) * fz,
                wavelength: rng.range(0.6, 1.4) * fx,
                phase: rng.range(0.0, std::f64::consts::TAU),
            }
        })
        .collect();
    let layer_v: Vec<f64> = (0..layers)
        .map(|k| {
            1700.0 + 2600.0 * (k as f64 / (layers - 1) as f64).powf(0.8) + rng.range(-180.0, 180.0)
        })
        .collect();
    // Normal faults: x = x0 + slope·z, the hanging wall (right) dropped by `throw` rows.
    let faults: Vec<(f64, f64, f64)> = (0..3)
        .map(|k| {
            (
                fx * (0.25 + 0.22 * k as f64 + rng.range(-0.04, 0.04)),
                rng.range(0.25, 0.6),
                fz * rng.range(0.03, 0.08),
            )
        })
        .collect();
    // The wedge: a slow layer between two horizons that converge towards the left.
    let wedge_top = water + 0.45 * (fz - water);
    let wedge_v = 1900.0;
    let mut v = vec![0f32; nz * nx];
    for z in 0..nz {
        for x in 0..nx {
            let (zf, xf) = (z as f64, x as f64);
            if zf < water {
                v[z * nx + x] = WATER_VELOCITY;
                continue;
            }
            let shift: f64 = faults
                .iter()
                .filter(|(x0, slope, _)| xf > x0 + slope * (zf - water))
                .map(|(_, _, throw)| throw)
                .sum();
            let ze = zf - shift;
            let depth_of = |h: &Horizon| {
                h.base
                    + h.dip * (xf - 0.5 * fx) * 0.2
                    + h.amp * (std::f64::consts::TAU * xf / h.wavelength + h.phase).sin()
            };
            let k = horizons
                .iter()
                .rposition(|h| ze >= depth_of(h))
                .unwrap_or(0);
            let top = depth_of(&horizons[k]);
            // A mild compaction gradient inside each layer.
            let mut vel = layer_v[k] + 3.0 * (ze - top).max(0.0) * 400.0 / fz;
            let thickness = 0.09 * (fz - water) * (xf / fx);
            if ze > wedge_top + 0.05 * xf * (fz / fx)
                && ze < wedge_top + 0.05 * xf * (fz / fx) + thickness
            {
                vel = wedge_v;
            }
            v[z * nx + x] = vel.clamp(1500.0, 4700.0) as f32;
        }
    }
    v
}

/// Gaussian smoothing (standard deviation `sigma` cells, edges replicated) of an `nz × nx` field: the
/// usual FWI starting model. Rows above `keep_rows` (a water layer) are left as they are.
pub fn smooth(v: &[f32], nz: usize, nx: usize, sigma: f64, keep_rows: usize) -> Result<Vec<f32>> {
    let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    let s = gaussian_smooth(&f, nz, nx, sigma)?;
    Ok(s.iter()
        .enumerate()
        .map(|(i, &x)| if i / nx < keep_rows { v[i] } else { x as f32 })
        .collect())
}

/// Separable Gaussian smoothing (standard deviation `sigma` cells, edges replicated) of an
/// `nz × nx` field. `sigma` may be at most the field's larger side: a wider Gaussian is flat over
/// the field, and its kernel of `6·sigma` taps would cost memory and time for nothing (`sigma` =
/// 10⁹ would ask for 48 GB); the error names the largest accepted.
pub fn gaussian_smooth(f: &[f64], nz: usize, nx: usize, sigma: f64) -> Result<Vec<f64>> {
    let widest = nz.max(nx) as f64;
    // NaN is refused too: it is not at most anything.
    if sigma.is_nan() || sigma > widest {
        return Err(Error::config(
            "sigma_cells",
            format!("{sigma} cells is wider than the {nz}×{nx} model: give at most {widest}"),
        ));
    }
    if sigma <= 0.0 {
        return Ok(f.to_vec());
    }
    let radius = (3.0 * sigma).ceil() as i64;
    let kernel: Vec<f64> = (-radius..=radius)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let norm: f64 = kernel.iter().sum();
    let pass = |src: &[f64], along_x: bool| -> Vec<f64> {
        let mut out = vec![0.0; nz * nx];
        for z in 0..nz {
            for x in 0..nx {
                let mut acc = 0.0;
                for (k, w) in kernel.iter().enumerate() {
                    let d = k as i64 - radius;
                    let (zz, xx) = if along_x {
                        (z as i64, (x as i64 + d).clamp(0, nx as i64 - 1))
                    } else {
                        ((z as i64 + d).clamp(0, nz as i64 - 1), x as i64)
                    };
                    acc += w * src[zz as usize * nx + xx as usize];
                }
                out[z * nx + x] = acc / norm;
            }
        }
        out
    };
    Ok(pass(&pass(f, true), false))
}

/// Rows of water at the top of a model made by [`marmousi_like`].
pub fn water_rows(nz: usize) -> usize {
    (0.06 * nz as f64).round().max(1.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_has_water_faults_and_a_slow_wedge_and_is_deterministic() {
        let (nz, nx) = (100, 300);
        let v = marmousi_like(nz, nx, 1);
        assert_eq!(v, marmousi_like(nz, nx, 1));
        assert_ne!(v, marmousi_like(nz, nx, 2));
        assert!(
            v[..water_rows(nz) * nx]
                .iter()
                .all(|&x| x == WATER_VELOCITY)
        );
        let (lo, hi) = v
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(lo >= 1500.0 && hi <= 4700.0 && hi > 3500.0, "{lo} {hi}");
        // Velocity mostly increases with depth...
        let mean_row = |z: usize| {
            v[z * nx..(z + 1) * nx]
                .iter()
                .map(|&x| x as f64)
                .sum::<f64>()
                / nx as f64
        };
        assert!(mean_row(90) > mean_row(30) + 800.0);
        // ...but not everywhere: the wedge and faults put slow rock under fast rock.
        let inversions = (1..nz)
            .flat_map(|z| (0..nx).map(move |x| (z, x)))
            .filter(|&(z, x)| v[z * nx + x] + 150.0 < v[(z - 1) * nx + x])
            .count();
        assert!(inversions > 50, "{inversions}");
        let s = smooth(&v, nz, nx, 5.0, water_rows(nz)).unwrap();
        // Wider than the model: refused by name, not a kernel of 6·10⁹ taps.
        let err = smooth(&v, nz, nx, 1e9, 0).unwrap_err().to_string();
        assert!(
            err.contains("sigma_cells") && err.contains("at most"),
            "{err}"
        );
        assert!(
            s[..water_rows(nz) * nx]
                .iter()
                .all(|&x| x == WATER_VELOCITY)
        );
        let tv = |f: &[f32]| {
            f.windows(2)
                .map(|w| (w[1] - w[0]).abs() as f64)
                .sum::<f64>()
        };
        assert!(tv(&s) < 0.8 * tv(&v), "{} {}", tv(&s), tv(&v));
    }
}
