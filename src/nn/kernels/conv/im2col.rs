//! The patch matrix of a strip of output positions (im2col), any part of its rows at a time, and
//! its adjoint (col2im, a scatter-add into the input).

use rayon::prelude::*;

use super::Geom;
use crate::float::Float;

/// For kernel tap `k` along one axis: the output positions `lo..hi` (of `n_out`) whose input
/// position `o·s + k·d − pad` lies inside `0..n_in`.
fn valid_outputs(
    k: usize,
    s: usize,
    d: usize,
    pad: usize,
    n_in: usize,
    n_out: usize,
) -> (usize, usize) {
    let kd = k * d;
    let lo = pad.saturating_sub(kd).div_ceil(s).min(n_out);
    let hi = if n_in + pad > kd {
        ((n_in + pad - kd - 1) / s + 1).min(n_out)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Fills `col[(ci, kz, ky, kx), j]` for the output positions `j` of output rows `r0..r1` (row `r` is
/// `(oz, oy) = (r / H_out, r % H_out)`), zero where the kernel reaches into the padding.
#[allow(clippy::too_many_arguments)]
pub(super) fn im2col<T: Float>(
    g: &Geom,
    pad_lo: [usize; 3],
    x: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    r0: usize,
    r1: usize,
    col: &mut [T],
) {
    let wo = out_dims[2];
    im2col_span(
        g,
        pad_lo,
        x,
        in_dims,
        out_dims,
        r0 * wo..r1 * wo,
        0..g.k_len(),
        col,
    );
}

/// Patch rows `ks` of [`im2col`]'s matrix (row `ks.start` at `col[0..n]`) for the flattened output
/// positions `span` (`(oz · H_out + oy) · W_out + ox`), which may begin and end inside a row:
/// `col[(k − ks.start) · n + j − span.start]`. The forward cuts 1-D signals inside their one row;
/// the weight gradient builds one register block's rows at a time, in L1.
#[allow(clippy::too_many_arguments)]
pub(super) fn im2col_span<T: Float>(
    g: &Geom,
    pad_lo: [usize; 3],
    x: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    span: std::ops::Range<usize>,
    ks: std::ops::Range<usize>,
    col: &mut [T],
) {
    let [di, hi, wi] = in_dims;
    let [_, ho, wo] = out_dims;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.stride;
    let [dd, dh, dw] = g.dilation;
    let [pd, ph, pw] = pad_lo;
    let n = span.len();
    if n == 0 || wo == 0 {
        return;
    }
    let in_s = di * hi * wi;
    let rows = span.start / wo..(span.end - 1) / wo + 1;
    for (row_idx, dst_row) in ks.zip(col.chunks_exact_mut(n)) {
        let (ci, tap) = (row_idx / (kd * kh * kw), row_idx % (kd * kh * kw));
        let (kz, ky, kx) = (tap / (kh * kw), tap / kw % kh, tap % kw);
        let xc = &x[ci * in_s..(ci + 1) * in_s];
        let (lo, hi_x) = valid_outputs(kx, sw, dw, pw, wi, wo);
        for r in rows.clone() {
            // This row's part of the span: output columns xa..xb.
            let xa = span.start.saturating_sub(r * wo);
            let xb = (span.end - r * wo).min(wo);
            let at = r * wo + xa - span.start;
            let dst = &mut dst_row[at..at + (xb - xa)];
            let (oz, oy) = (r / ho, r % ho);
            let iz = (oz * sd + kz * dd) as isize - pd as isize;
            let iy = (oy * sh + ky * dh) as isize - ph as isize;
            if iz < 0 || iz >= di as isize || iy < 0 || iy >= hi as isize {
                dst.fill(T::ZERO);
                continue;
            }
            let src = &xc[(iz as usize * hi + iy as usize) * wi..][..wi];
            // Columns a..b read the input; the rest of xa..xb is padding.
            let a = lo.clamp(xa, xb);
            let b = hi_x.clamp(a, xb);
            dst[..a - xa].fill(T::ZERO);
            dst[b - xa..].fill(T::ZERO);
            if b == a {
                continue;
            }
            let valid = &mut dst[a - xa..b - xa];
            if sw == 1 {
                let start = a + kx * dw - pw;
                valid.copy_from_slice(&src[start..start + (b - a)]);
            } else {
                let start = a * sw + kx * dw - pw;
                valid
                    .iter_mut()
                    .zip(src[start..].iter().step_by(sw))
                    .for_each(|(d, s)| *d = *s);
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds `col[(ci, kz, ky, kx), j]` into the input voxel each entry was
/// read from (entries in the padding are dropped). Parallel over input channels.
#[allow(clippy::too_many_arguments)]
pub(super) fn col2im_add<T: Float>(
    g: &Geom,
    pad_lo: [usize; 3],
    col: &[T],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    r0: usize,
    r1: usize,
    dx: &mut [T],
) {
    let [di, hi, wi] = in_dims;
    let [_, ho, wo] = out_dims;
    let [kd, kh, kw] = g.kernel;
    let [sd, sh, sw] = g.stride;
    let [dd, dh, dw] = g.dilation;
    let [pd, ph, pw] = pad_lo;
    let n = (r1 - r0) * wo;
    let in_s = di * hi * wi;
    let taps = kd * kh * kw;
    dx.par_chunks_mut(in_s).enumerate().for_each(|(ci, dxc)| {
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let row_idx = ci * taps + (kz * kh + ky) * kw + kx;
                    let src_row = &col[row_idx * n..(row_idx + 1) * n];
                    let (lo, hi_x) = valid_outputs(kx, sw, dw, pw, wi, wo);
                    for r in r0..r1 {
                        let (oz, oy) = (r / ho, r % ho);
                        let iz = (oz * sd + kz * dd) as isize - pd as isize;
                        let iy = (oy * sh + ky * dh) as isize - ph as isize;
                        if iz < 0 || iz >= di as isize || iy < 0 || iy >= hi as isize {
                            continue;
                        }
                        let src = &src_row[(r - r0) * wo..(r - r0 + 1) * wo];
                        let dst = &mut dxc[(iz as usize * hi + iy as usize) * wi..][..wi];
                        if sw == 1 {
                            let start = lo + kx * dw - pw;
                            dst[start..start + (hi_x - lo)]
                                .iter_mut()
                                .zip(&src[lo..hi_x])
                                .for_each(|(d, v)| *d += *v);
                        } else if hi_x > lo {
                            let start = lo * sw + kx * dw - pw;
                            dst[start..]
                                .iter_mut()
                                .step_by(sw)
                                .zip(&src[lo..hi_x])
                                .for_each(|(d, v)| *d += *v);
                        }
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{random_features, random_geometry};
    use crate::nn::kernels::conv::{Conv, Features};
    use rand::{RngExt, SeedableRng};

    #[test]
    fn patch_spans_cutting_rows_equal_the_whole_patch_matrix() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for case in 0..60 {
            let rank = 1 + case % 3;
            let (k, st, p, d, n) = random_geometry(rank, &mut rng);
            let c_in = rng.random_range(1..3);
            let c = Conv::with_geometry(
                c_in,
                1,
                k,
                st,
                p,
                d,
                vec![0.0; c_in * k.iter().product::<usize>()],
                None,
                false,
            );
            let Some(od) = c.out_dims(n) else { continue };
            let x: Features = random_features(1, c_in, n, &mut rng);
            let g = c.geom();
            let (k_len, out_s) = (g.k_len(), od.iter().product::<usize>());
            let rows_total = od[0] * od[1];
            let mut whole = vec![0.0f32; k_len * out_s];
            im2col(&g, p, &x.data, n, od, 0, rows_total, &mut whole);
            for _ in 0..5 {
                let p0 = rng.random_range(0..out_s);
                let p1 = rng.random_range(p0 + 1..=out_s);
                let m = p1 - p0;
                let mut part = vec![f32::NAN; k_len * m];
                im2col_span(&g, p, &x.data, n, od, p0..p1, 0..k_len, &mut part);
                for kk in 0..k_len {
                    assert_eq!(
                        part[kk * m..(kk + 1) * m],
                        whole[kk * out_s + p0..kk * out_s + p1],
                        "case {case}: k {k:?} s {st:?} p {p:?} d {d:?} in {n:?}, span {p0}..{p1}, row {kk}"
                    );
                }
            }
        }
    }
}
