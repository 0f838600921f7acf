//! The losses of domain separation networks (Bousmalis et al., "Domain Separation Networks",
//! NeurIPS 2016) with their gradients: scale-invariant MSE for the reconstruction, the soft
//! subspace-orthogonality difference loss between shared and private codes, and the maximum mean
//! discrepancy between the shared codes of two domains. Values and gradients are computed in f64
//! whatever the scalar type, in one fixed order (no dependence on threads or ranks).
//!
//! Where the paper leaves details open, the authors' released implementation
//! (`tensorflow/models`, `research/domain_separation/losses.py`) decides: the difference loss
//! centres and L2-normalises the codes and averages the squared correlations; the MMD uses a sum of
//! Gaussian kernels `k(a, b) = Σ_σ exp(−‖a − b‖² / (2σ))` over a wide range of bandwidths.

use crate::error::{Error, Result};
use crate::float::Float;

/// The bandwidths of the released implementation's `mmd_loss`.
pub const MMD_BANDWIDTHS: [f64; 19] = [
    1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 100.0, 1e3,
    1e4, 1e5, 1e6,
];

fn check_len(what: &str, len: usize, rows: usize, cols: usize) -> Result<()> {
    if len != rows * cols || rows == 0 || cols == 0 {
        return Err(Error::shape(what, &[rows, cols], &[len]));
    }
    Ok(())
}

/// Scale-invariant MSE of reconstructions `xhat` of images `x` (`batch` images of `k` values each;
/// Eigen et al. 2014, DSN eq. 4): per image `(1/k)·‖d‖² − (1/k²)·(Σd)²`, `d = x − x̂`, averaged over
/// the batch. It penalises differences between pairs of pixels, not a global offset, so the
/// decoder reproduces the shape of the input rather than its absolute intensity. Returns the loss
/// and its gradient with respect to `xhat`.
pub fn scale_invariant_mse<T: Float>(x: &[T], xhat: &[T], batch: usize) -> Result<(f64, Vec<T>)> {
    if x.len() != xhat.len() || batch == 0 || !x.len().is_multiple_of(batch) {
        return Err(Error::shape(
            "scale-invariant MSE",
            &[x.len()],
            &[xhat.len()],
        ));
    }
    let k = x.len() / batch;
    let kf = k as f64;
    let mut loss = 0.0;
    let mut grad = vec![T::ZERO; x.len()];
    for b in 0..batch {
        let r = b * k..(b + 1) * k;
        let d: Vec<f64> = x[r.clone()]
            .iter()
            .zip(&xhat[r.clone()])
            .map(|(a, b)| a.to_f64() - b.to_f64())
            .collect();
        let sum: f64 = d.iter().sum();
        let sq: f64 = d.iter().map(|v| v * v).sum();
        loss += sq / kf - sum * sum / (kf * kf);
        for (g, di) in grad[r].iter_mut().zip(&d) {
            *g = T::from_f64((-2.0 * di / kf + 2.0 * sum / (kf * kf)) / batch as f64);
        }
    }
    Ok((loss / batch as f64, grad))
}

/// Rows of `v` (`rows × cols`) minus their column means, each then divided by its norm
/// (`max(‖·‖², 1e-12)^½`, TensorFlow's `l2_normalize`); returns the normalised rows and the norms.
fn centre_normalise(v: &[f64], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = v.to_vec();
    for j in 0..cols {
        let mean = (0..rows).map(|i| v[i * cols + j]).sum::<f64>() / rows as f64;
        (0..rows).for_each(|i| c[i * cols + j] -= mean);
    }
    let mut norms = Vec::with_capacity(rows);
    for row in c.chunks_mut(cols) {
        let n = row.iter().map(|x| x * x).sum::<f64>().max(1e-12).sqrt();
        row.iter_mut().for_each(|x| *x /= n);
        norms.push(n);
    }
    (c, norms)
}

/// The adjoint of [`centre_normalise`]: the gradient with respect to `v` from the gradient `g`
/// with respect to the normalised rows `n` (with norms `norms`).
fn centre_normalise_backward(n: &[f64], norms: &[f64], g: &[f64], cols: usize) -> Vec<f64> {
    let rows = norms.len();
    let mut dv = vec![0.0; n.len()];
    for i in 0..rows {
        let r = i * cols..(i + 1) * cols;
        let (nr, gr) = (&n[r.clone()], &g[r.clone()]);
        // n = c / ‖c‖: dc = (g − n·⟨n, g⟩) / ‖c‖ (below the 1e-12 floor the norm is a constant).
        let clamped = norms[i] * norms[i] <= 1e-12;
        let proj = if clamped {
            0.0
        } else {
            nr.iter().zip(gr).map(|(a, b)| a * b).sum::<f64>()
        };
        for j in 0..cols {
            dv[i * cols + j] = (gr[j] - nr[j] * proj) / norms[i];
        }
    }
    // Centring subtracts the column mean: its adjoint subtracts the column mean of the gradient.
    for j in 0..cols {
        let mean = (0..rows).map(|i| dv[i * cols + j]).sum::<f64>() / rows as f64;
        (0..rows).for_each(|i| dv[i * cols + j] -= mean);
    }
    dv
}

/// The difference loss between the shared codes `shared` (`batch × dim_s`) and the private codes
/// `private` (`batch × dim_p`) of one domain's batch: soft subspace orthogonality
/// `‖Hcᵀ·Hp‖²_F` (DSN eq. 5) on centred, L2-normalised codes, averaged over the `dim_p·dim_s`
/// correlations (as the released implementation). Returns the loss and its gradients with respect
/// to `shared` and `private`.
pub fn difference_loss<T: Float>(
    shared: &[T],
    private: &[T],
    batch: usize,
) -> Result<(f64, Vec<T>, Vec<T>)> {
    if batch == 0 || !shared.len().is_multiple_of(batch) || !private.len().is_multiple_of(batch) {
        return Err(Error::shape(
            "difference loss codes",
            &[batch],
            &[shared.len(), private.len()],
        ));
    }
    let (ds, dp) = (shared.len() / batch, private.len() / batch);
    check_len("difference loss shared codes", shared.len(), batch, ds)?;
    check_len("difference loss private codes", private.len(), batch, dp)?;
    let f = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let (s, s_norms) = centre_normalise(&f(shared), batch, ds);
    let (p, p_norms) = centre_normalise(&f(private), batch, dp);
    // C = Pᵀ·S (dp × ds); loss = mean(C²).
    let mut c = vec![0.0; dp * ds];
    for b in 0..batch {
        for i in 0..dp {
            let pv = p[b * dp + i];
            for j in 0..ds {
                c[i * ds + j] += pv * s[b * ds + j];
            }
        }
    }
    let count = (dp * ds) as f64;
    let loss = c.iter().map(|v| v * v).sum::<f64>() / count;
    let gc: Vec<f64> = c.iter().map(|v| 2.0 * v / count).collect();
    // dL/dP = S·Gᵀ, dL/dS = P·G.
    let mut gp = vec![0.0; batch * dp];
    let mut gs = vec![0.0; batch * ds];
    for b in 0..batch {
        for i in 0..dp {
            for j in 0..ds {
                gp[b * dp + i] += s[b * ds + j] * gc[i * ds + j];
                gs[b * ds + j] += p[b * dp + i] * gc[i * ds + j];
            }
        }
    }
    let back = |n: &[f64], norms: &[f64], g: &[f64], cols: usize| -> Vec<T> {
        centre_normalise_backward(n, norms, g, cols)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    Ok((
        loss,
        back(&s, &s_norms, &gs, ds),
        back(&p, &p_norms, &gp, dp),
    ))
}

/// Squared maximum mean discrepancy between the rows of `x` (`n × dim`) and of `y` (`m × dim`)
/// under the kernel `k(a, b) = Σ_σ exp(−‖a − b‖² / (2σ))` (σ in `bandwidths`), biased estimator:
/// `mean k(x, x') + mean k(y, y') − 2·mean k(x, y)` (DSN's MMD similarity loss). Returns it and its
/// gradients with respect to `x` and `y`.
pub fn mmd<T: Float>(
    x: &[T],
    y: &[T],
    dim: usize,
    bandwidths: &[f64],
) -> Result<(f64, Vec<T>, Vec<T>)> {
    if dim == 0
        || !x.len().is_multiple_of(dim)
        || !y.len().is_multiple_of(dim)
        || x.is_empty()
        || y.is_empty()
    {
        return Err(Error::shape("MMD samples", &[dim], &[x.len(), y.len()]));
    }
    let f = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let (x, y) = (f(x), f(y));
    let (n, m) = (x.len() / dim, y.len() / dim);
    let betas: Vec<f64> = bandwidths.iter().map(|s| 1.0 / (2.0 * s)).collect();
    // k(d) and k'(d) = dk/dd for a squared distance d.
    let kernel = |d: f64| -> (f64, f64) {
        betas.iter().fold((0.0, 0.0), |(k, dk), b| {
            let e = (-b * d).exp();
            (k + e, dk - b * e)
        })
    };
    // Adds mean k(a_i, b_j) · scale to the value and its gradients to ga and gb.
    let term = |a: &[f64], b: &[f64], scale: f64, ga: &mut [f64], gb: &mut [f64]| -> f64 {
        let (na, nb) = (a.len() / dim, b.len() / dim);
        let w = scale / (na * nb) as f64;
        let mut total = 0.0;
        for i in 0..na {
            let ai = &a[i * dim..(i + 1) * dim];
            for j in 0..nb {
                let bj = &b[j * dim..(j + 1) * dim];
                let d: f64 = ai.iter().zip(bj).map(|(p, q)| (p - q) * (p - q)).sum();
                let (k, dk) = kernel(d);
                total += k;
                for t in 0..dim {
                    let g = w * dk * 2.0 * (ai[t] - bj[t]);
                    ga[i * dim + t] += g;
                    gb[j * dim + t] -= g;
                }
            }
        }
        total * w
    };
    let mut gx = vec![0.0; n * dim];
    let mut gy = vec![0.0; m * dim];
    let (mut gx2, mut gy2) = (vec![0.0; n * dim], vec![0.0; m * dim]);
    let mut value = term(&x, &x, 1.0, &mut gx, &mut gx2);
    value += term(&y, &y, 1.0, &mut gy, &mut gy2);
    gx.iter_mut().zip(&gx2).for_each(|(a, b)| *a += b);
    gy.iter_mut().zip(&gy2).for_each(|(a, b)| *a += b);
    value += term(&x, &y, -2.0, &mut gx, &mut gy);
    let to_t = |v: Vec<f64>| v.into_iter().map(T::from_f64).collect();
    Ok((value, to_t(gx), to_t(gy)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::random;
    use rand::SeedableRng;

    /// Central differences of `loss` at `v` against `grad`, every entry.
    fn check(v: &[f64], grad: &[f64], loss: impl Fn(&[f64]) -> f64, what: &str) {
        let eps = 1e-6;
        for i in 0..v.len() {
            let (mut p, mut m) = (v.to_vec(), v.to_vec());
            p[i] += eps;
            m[i] -= eps;
            let fd = (loss(&p) - loss(&m)) / (2.0 * eps);
            assert!(
                (fd - grad[i]).abs() <= 1e-7 * grad[i].abs().max(1.0),
                "{what}[{i}]: finite difference {fd} vs backward {}",
                grad[i]
            );
        }
    }

    #[test]
    fn scale_invariant_mse_ignores_offsets_and_its_gradient_matches_finite_differences() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let x: Vec<f64> = random(3 * 10, &mut rng);
        let xhat: Vec<f64> = random(3 * 10, &mut rng);
        let (_, g) = scale_invariant_mse(&x, &xhat, 3).unwrap();
        check(&xhat, &g, |v| scale_invariant_mse(&x, v, 3).unwrap().0, "x̂");
        // A constant offset per image costs nothing.
        let shifted: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, v)| v + (i / 10) as f64)
            .collect();
        assert!(scale_invariant_mse(&x, &shifted, 3).unwrap().0.abs() < 1e-15);
    }

    #[test]
    fn difference_loss_gradients_match_finite_differences_and_vanish_for_orthogonal_codes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let (batch, ds, dp) = (6, 4, 3);
        let s: Vec<f64> = random(batch * ds, &mut rng);
        let p: Vec<f64> = random(batch * dp, &mut rng);
        let (_, gs, gp) = difference_loss(&s, &p, batch).unwrap();
        check(
            &s,
            &gs,
            |v| difference_loss(v, &p, batch).unwrap().0,
            "shared",
        );
        check(
            &p,
            &gp,
            |v| difference_loss(&s, v, batch).unwrap().0,
            "private",
        );
        // Codes using disjoint features of a centred batch: orthogonal, zero loss.
        let a = [1.0, 0.0, -1.0, 0.0, 0.0, 0.0];
        let b = [0.0, 0.0, 0.0, 0.0, 1.0, -1.0];
        assert!(difference_loss(&a, &b, 3).unwrap().0 < 1e-30);
        // Identical codes: maximal correlation.
        assert!(difference_loss(&a, &a, 3).unwrap().0 > 0.4);
    }

    #[test]
    fn mmd_gradients_match_finite_differences_and_mmd_separates_shifted_samples() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let dim = 3;
        let x: Vec<f64> = random(5 * dim, &mut rng);
        let y: Vec<f64> = random(4 * dim, &mut rng);
        let bw = [0.5, 2.0];
        let (_, gx, gy) = mmd(&x, &y, dim, &bw).unwrap();
        check(&x, &gx, |v| mmd(v, &y, dim, &bw).unwrap().0, "x");
        check(&y, &gy, |v| mmd(&x, v, dim, &bw).unwrap().0, "y");
        let (same, _, _) = mmd(&x, &x, dim, &MMD_BANDWIDTHS).unwrap();
        assert!(same.abs() < 1e-12, "{same}");
        let far: Vec<f64> = x.iter().map(|v| v + 3.0).collect();
        assert!(mmd(&x, &far, dim, &MMD_BANDWIDTHS).unwrap().0 > 0.1);
    }
}
