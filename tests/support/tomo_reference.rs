//! A straightforward single-threaded reference of deepinv's parallel-beam discretisation, written
//! directly from `radon.py` (pad → mask → rotate the N×N grid → bilinear `grid_sample` with zeros →
//! sum the grid rows), with its adjoint by scattering the same weights. No clipping, no precomputed
//! geometry: it is the baseline for the benchmark and an independent check of the optimised operator.

#![allow(dead_code)]

/// Detector width and the padding before the image (deepinv's `Radon.forward`).
pub fn padded_width(width: usize, circle: bool) -> (usize, usize) {
    if circle {
        (width, 0)
    } else {
        let n = (std::f32::consts::SQRT_2 * width as f32).ceil() as usize;
        (n, n / 2 - width / 2)
    }
}

fn inside_circle(width: usize, r: usize, c: usize) -> bool {
    let t = |k: usize| 2.0 * k as f32 / (width as f32 - 1.0) - 1.0;
    t(r) * t(r) + t(c) * t(c) <= 1.0
}

/// Grid position (row, col) in padded-image pixels of grid point (i, j) for angle `deg`.
fn sample_position(n: usize, (sin, cos): (f64, f64), i: usize, j: usize) -> (f64, f64) {
    // affine_grid with align_corners=True: normalised x (column) and y (row) in [-1, 1].
    let x = -1.0 + 2.0 * j as f64 / (n as f64 - 1.0);
    let y = -1.0 + 2.0 * i as f64 / (n as f64 - 1.0);
    let gx = cos * x + sin * y;
    let gy = -sin * x + cos * y;
    // grid_sample with align_corners=True.
    let col = (gx + 1.0) / 2.0 * (n as f64 - 1.0);
    let row = (gy + 1.0) / 2.0 * (n as f64 - 1.0);
    (row, col)
}

/// The four neighbours of a sample inside the `n×n` padded image, with bilinear weights.
/// Neighbours outside the image get weight 0 (zero padding).
fn neighbours(n: usize, row: f64, col: f64) -> [(usize, f64); 4] {
    let (r0, c0) = (row.floor(), col.floor());
    let (wr, wc) = (row - r0, col - c0);
    let mut out = [(0, 0.0); 4];
    let mut k = 0;
    for (dr, fr) in [(0.0, 1.0 - wr), (1.0, wr)] {
        for (dc, fc) in [(0.0, 1.0 - wc), (1.0, wc)] {
            let (r, c) = (r0 + dr, c0 + dc);
            if r >= 0.0 && c >= 0.0 && r < n as f64 && c < n as f64 {
                out[k] = (r as usize * n + c as usize, fr * fc);
            }
            k += 1;
        }
    }
    out
}

fn sin_cos_deg(deg: f32) -> (f64, f64) {
    (deg as f64).to_radians().sin_cos()
}

/// Sinogram `[det][angle]` of one `width×width` image.
pub fn radon(img: &[f32], width: usize, angles_deg: &[f32], circle: bool) -> Vec<f32> {
    let (n, pad) = padded_width(width, circle);
    let mut padded = vec![0.0f32; n * n];
    for r in 0..width {
        for c in 0..width {
            if !circle || inside_circle(width, r, c) {
                padded[(r + pad) * n + c + pad] = img[r * width + c];
            }
        }
    }
    let na = angles_deg.len();
    let mut y = vec![0.0f32; n * na];
    for (a, &deg) in angles_deg.iter().enumerate() {
        let sc = sin_cos_deg(deg);
        for j in 0..n {
            let mut acc = 0.0f64;
            for i in 0..n {
                let (row, col) = sample_position(n, sc, i, j);
                for (idx, w) in neighbours(n, row, col) {
                    acc += w * padded[idx] as f64;
                }
            }
            y[j * na + a] = acc as f32;
        }
    }
    y
}

/// The exact adjoint of [`radon`]: back-projection of a sinogram `[det][angle]`.
pub fn radon_adjoint(y: &[f32], width: usize, angles_deg: &[f32], circle: bool) -> Vec<f32> {
    let (n, pad) = padded_width(width, circle);
    let na = angles_deg.len();
    let mut padded = vec![0.0f64; n * n];
    for (a, &deg) in angles_deg.iter().enumerate() {
        let sc = sin_cos_deg(deg);
        for j in 0..n {
            let v = y[j * na + a] as f64;
            for i in 0..n {
                let (row, col) = sample_position(n, sc, i, j);
                for (idx, w) in neighbours(n, row, col) {
                    padded[idx] += w * v;
                }
            }
        }
    }
    let mut x = vec![0.0f32; width * width];
    for r in 0..width {
        for c in 0..width {
            if !circle || inside_circle(width, r, c) {
                x[r * width + c] = padded[(r + pad) * n + c + pad] as f32;
            }
        }
    }
    x
}
