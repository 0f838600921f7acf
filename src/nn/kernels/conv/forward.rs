//! The forward products: a convolution as strips of `W · im2col(x)` (or Winograd's F(4×4, 3×3)
//! where it applies), and a transposed convolution's direct kernel where kernel = stride.

use rayon::prelude::*;

use super::im2col::im2col_span;
use super::strips::{SendPtr, gemm_parallelism, strip_positions, strip_rows};
use super::{ConvTranspose, Features, Geom};
use crate::float::Float;
use crate::nn::kernels::{patch_gemm, winograd};

/// `out = relu?(W · im2col(x) + bias (+ acc))` with output size `od` and low-side padding `pad_lo`.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_forward<T: Float>(
    g: &Geom,
    weight: &[T],
    bias: Option<&[T]>,
    relu: bool,
    x: &Features<T>,
    acc: Option<Features<T>>,
    pad_lo: [usize; 3],
    od: [usize; 3],
) -> Features<T> {
    assert_eq!(x.channels, g.c_in, "conv input channels");
    let accumulate = acc.is_some();
    let mut out = match acc {
        Some(a) => {
            assert!(
                a.batch == x.batch && a.channels == g.c_out && a.dims == od,
                "conv accumulator shape"
            );
            a
        }
        // Every element is written by the GEMM (read_dst = false), so no zeroing is needed; zeros
        // keep it safe Rust at a small cost.
        None => Features::zeros(x.batch, g.c_out, od),
    };
    let window = [g.kernel, g.stride, g.dilation];
    if let Some(l) = winograd::layer::<T>([g.c_in, g.c_out], window, x.dims, pad_lo, od) {
        let (x_data, out_data) = (&x.data, &mut out.data);
        winograd::conv3x3_weights(
            &l, weight, bias, relu, x.batch, x_data, out_data, accumulate,
        );
        return out;
    }
    let k_len = g.k_len();
    let out_s = od.iter().product::<usize>();
    if out_s == 0 || x.batch == 0 {
        return out;
    }
    let per_strip = strip_positions(k_len, out_s, g.c_out * out_s, x.batch);
    let strips = out_s.div_ceil(per_strip);
    let in_s = x.spatial_len();
    let out_ptr = SendPtr(out.data.as_mut_ptr());
    let tasks = x.batch * strips;
    let inner_par = gemm_parallelism(tasks);
    let native = patch_gemm::available::<T>();
    (0..tasks)
        .into_par_iter()
        .for_each_init(Vec::new, |col, task| {
            let (b, s) = (task / strips, task % strips);
            let p0 = s * per_strip;
            let n = per_strip.min(out_s - p0);
            col.resize(k_len * n, T::ZERO);
            let xb = &x.data[b * g.c_in * in_s..(b + 1) * g.c_in * in_s];
            im2col_span(g, pad_lo, xb, x.dims, od, p0..p0 + n, 0..k_len, col);
            let out_ptr = &out_ptr;
            // SAFETY: task (b, s) writes only positions p0..p0 + n of every channel of item b;
            // tasks are disjoint, and `out` outlives the parallel loop.
            unsafe {
                let dst = out_ptr.0.add(b * g.c_out * out_s + p0);
                if native {
                    let f32s = patch_gemm::as_f32::<T>;
                    let (weight, col, bias) = (f32s(weight), f32s(col), bias.map(f32s));
                    let p = patch_gemm::Product {
                        weight,
                        weight_strides: [k_len, 1],
                        c_out: g.c_out,
                        k_len,
                        col,
                        ld: n,
                        n,
                        bias,
                        relu,
                        accumulate,
                    };
                    patch_gemm::weights_times_patches(&p, dst.cast::<f32>(), out_s);
                    return;
                }
                gemm::gemm(
                    g.c_out,
                    n,
                    k_len,
                    dst,
                    1,
                    out_s as isize,
                    accumulate,
                    weight.as_ptr(),
                    1,
                    k_len as isize,
                    col.as_ptr(),
                    1,
                    n as isize,
                    T::ONE,
                    T::ONE,
                    false,
                    false,
                    false,
                    inner_par,
                );
                if bias.is_some() || relu {
                    for co in 0..g.c_out {
                        let row = std::slice::from_raw_parts_mut(dst.add(co * out_s), n);
                        let bias = bias.map_or(T::ZERO, |b| b[co]);
                        if relu {
                            row.iter_mut().for_each(|v| *v = (*v + bias).max(T::ZERO));
                        } else {
                            row.iter_mut().for_each(|v| *v += bias);
                        }
                    }
                }
            }
        });
    out
}

impl<T: Float> ConvTranspose<T> {
    /// kernel = stride, no padding: every output voxel gets exactly one tap of one input voxel.
    pub(super) fn forward_direct(&self, x: &Features<T>, od: [usize; 3]) -> Features<T> {
        let [d, h, w] = x.dims;
        let [kd, kh, kw] = self.kernel;
        let taps = kd * kh * kw;
        let m = self.c_out * taps;
        let mut out: Features<T> = Features::zeros(x.batch, self.c_out, od);
        let rows_total = d * h;
        let rows = strip_rows(
            m,
            w,
            rows_total,
            self.c_out * od.iter().product::<usize>(),
            x.batch,
        );
        let strips = rows_total.div_ceil(rows);
        let (in_s, out_s) = (x.spatial_len(), out.spatial_len());
        let out_ptr = SendPtr(out.data.as_mut_ptr());
        let tasks = x.batch * strips;
        let inner_par = gemm_parallelism(tasks);
        let native = patch_gemm::available::<T>();
        (0..tasks)
            .into_par_iter()
            .for_each_init(Vec::new, |tmp, task| {
                let (b, s) = (task / strips, task % strips);
                let r0 = s * rows;
                let r1 = (r0 + rows).min(rows_total);
                let n = (r1 - r0) * w;
                tmp.resize(m * n, T::ZERO);
                let xs = &x.data[b * self.c_in * in_s + r0 * w..];
                // lhs[(co, t), ci] = weight[ci, co, t]: a column-major view of the stored weights.
                if native {
                    let tmp = patch_gemm::as_f32_mut(tmp);
                    let p = patch_gemm::Product {
                        weight: patch_gemm::as_f32(&self.weight),
                        weight_strides: [1, m],
                        c_out: m,
                        k_len: self.c_in,
                        col: patch_gemm::as_f32(xs),
                        ld: in_s,
                        n,
                        bias: None,
                        relu: false,
                        accumulate: false,
                    };
                    // SAFETY: tmp holds m rows of n values, borrowed mutably here.
                    unsafe { patch_gemm::weights_times_patches(&p, tmp.as_mut_ptr(), n) };
                } else {
                    // SAFETY: the pointers and strides describe in-bounds matrices of the sizes
                    // given.
                    unsafe {
                        gemm::gemm(
                            m,
                            n,
                            self.c_in,
                            tmp.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            self.weight.as_ptr(),
                            m as isize,
                            1,
                            xs.as_ptr(),
                            1,
                            in_s as isize,
                            T::ONE,
                            T::ONE,
                            false,
                            false,
                            false,
                            inner_par,
                        );
                    }
                }
                let out_ptr = &out_ptr;
                for co in 0..self.c_out {
                    for kz in 0..kd {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let t = (kz * kh + ky) * kw + kx;
                                let src = &tmp[(co * taps + t) * n..(co * taps + t + 1) * n];
                                for r in r0..r1 {
                                    let (z, y) = (r / h, r % h);
                                    let orow = ((z * kd + kz) * od[1] + y * kh + ky) * od[2];
                                    let srow = &src[(r - r0) * w..(r - r0 + 1) * w];
                                    // SAFETY: output row (z·kd+kz, y·kh+ky) belongs to input row r
                                    // of this task only; columns x·kw+kx < kw·w.
                                    unsafe {
                                        let dst =
                                            out_ptr.0.add((b * self.c_out + co) * out_s + orow);
                                        for (xi, v) in srow.iter().enumerate() {
                                            *dst.add(kw * xi + kx) = *v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            });
        out
    }
}

/// `f[b, c, …] += bias[c]`.
pub(super) fn add_channel_bias<T: Float>(f: &mut Features<T>, bias: &[T]) {
    let (s, c) = (f.spatial_len(), f.channels);
    if s == 0 {
        return;
    }
    f.data
        .par_chunks_mut(s)
        .enumerate()
        .for_each(|(p, plane)| plane.iter_mut().for_each(|v| *v += bias[p % c]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::kernels::conv::testing::{random, random_features, random_geometry};
    use crate::nn::kernels::conv::{Conv, Pads};
    use rand::{RngExt, SeedableRng};

    /// Direct (nested loops) convolution with per-side padding, the definition.
    fn naive_conv(c: &Conv, x: &Features, acc: Option<&Features>, pads: Pads) -> Features {
        let od = c.out_dims_padded(x.dims, pads).unwrap();
        let mut out = Features::zeros(x.batch, c.c_out, od);
        let [di, hi, wi] = x.dims;
        let k: usize = c.kernel.iter().product();
        for b in 0..x.batch {
            for co in 0..c.c_out {
                for oz in 0..od[0] {
                    for oy in 0..od[1] {
                        for ox in 0..od[2] {
                            let mut s = c.bias.as_ref().map_or(0.0, |b| b[co]) as f64;
                            for ci in 0..c.c_in {
                                for kz in 0..c.kernel[0] {
                                    for ky in 0..c.kernel[1] {
                                        for kx in 0..c.kernel[2] {
                                            let at = |o: usize, k: usize, a: usize| {
                                                (o * c.stride[a] + k * c.dilation[a]) as isize
                                                    - pads[a][0] as isize
                                            };
                                            let (iz, iy, ix) =
                                                (at(oz, kz, 0), at(oy, ky, 1), at(ox, kx, 2));
                                            if iz < 0
                                                || iy < 0
                                                || ix < 0
                                                || iz >= di as isize
                                                || iy >= hi as isize
                                                || ix >= wi as isize
                                            {
                                                continue;
                                            }
                                            let xv = x.data[(((b * c.c_in + ci) * di
                                                + iz as usize)
                                                * hi
                                                + iy as usize)
                                                * wi
                                                + ix as usize];
                                            let wv = c.weight[(co * c.c_in + ci) * k
                                                + (kz * c.kernel[1] + ky) * c.kernel[2]
                                                + kx];
                                            s += xv as f64 * wv as f64;
                                        }
                                    }
                                }
                            }
                            let i = (((b * c.c_out + co) * od[0] + oz) * od[1] + oy) * od[2] + ox;
                            if let Some(a) = acc {
                                s += a.data[i] as f64;
                            }
                            out.data[i] = if c.relu { s.max(0.0) } else { s } as f32;
                        }
                    }
                }
            }
        }
        out
    }

    /// The definition of a transposed convolution: every input voxel scatters its taps.
    fn naive_transposed(t: &ConvTranspose, x: &Features) -> Features {
        let od = t.out_dims(x.dims).unwrap();
        let mut out = Features::zeros(x.batch, t.c_out, od);
        let [d, h, w] = x.dims;
        let [kd, kh, kw] = t.kernel;
        let taps = kd * kh * kw;
        for b in 0..x.batch {
            for ci in 0..t.c_in {
                for co in 0..t.c_out {
                    for z in 0..d {
                        for y in 0..h {
                            for xx in 0..w {
                                let v = x.data[(((b * t.c_in + ci) * d + z) * h + y) * w + xx];
                                for kz in 0..kd {
                                    for ky in 0..kh {
                                        for kx in 0..kw {
                                            let at = |i: usize, k: usize, a: usize| {
                                                (i * t.stride[a] + k * t.dilation[a]) as isize
                                                    - t.pad[a] as isize
                                            };
                                            let (oz, oy, ox) =
                                                (at(z, kz, 0), at(y, ky, 1), at(xx, kx, 2));
                                            if oz < 0
                                                || oy < 0
                                                || ox < 0
                                                || oz >= od[0] as isize
                                                || oy >= od[1] as isize
                                                || ox >= od[2] as isize
                                            {
                                                continue;
                                            }
                                            let wv = t.weight[(ci * t.c_out + co) * taps
                                                + (kz * kh + ky) * kw
                                                + kx];
                                            let i = (((b * t.c_out + co) * od[0] + oz as usize)
                                                * od[1]
                                                + oy as usize)
                                                * od[2]
                                                + ox as usize;
                                            out.data[i] += v * wv;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(bias) = &t.bias {
            add_channel_bias(&mut out, bias);
        }
        out
    }

    fn max_err(a: &Features, b: &Features) -> f32 {
        assert_eq!((a.batch, a.channels, a.dims), (b.batch, b.channels, b.dims));
        a.data
            .iter()
            .zip(&b.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn convolutions_match_the_definition_on_odd_sizes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..24 {
            let rank = if case % 3 == 2 { 3 } else { 2 };
            let (k, stride, pad) = match case % 4 {
                0 | 1 => (3, 1, 1),
                2 => (2, 2, 0),
                _ => (3, 2, 1),
            };
            let batch = rng.random_range(1..3);
            let c_in = rng.random_range(1..6);
            let c_out = rng.random_range(1..7);
            let dims = [
                if rank == 3 { rng.random_range(2..7) } else { 1 },
                rng.random_range(2..12),
                rng.random_range(2..13),
            ];
            let kd = if rank == 3 { k } else { 1 };
            let weight = random(c_out * c_in * kd * k * k, &mut rng);
            let bias = (case % 2 == 1).then(|| random(c_out, &mut rng));
            let conv = Conv::new(
                rank,
                c_in,
                c_out,
                k,
                stride,
                pad,
                weight,
                bias,
                case % 5 == 0,
            );
            let x = random_features(batch, c_in, dims, &mut rng);
            let acc = (case % 3 == 1)
                .then(|| random_features(batch, c_out, conv.out_dims(dims).unwrap(), &mut rng));
            let want = naive_conv(&conv, &x, acc.as_ref(), conv.pads());
            let got = conv.forward(&x, acc);
            let e = max_err(&got, &want);
            assert!(e < 1e-4, "case {case} rank {rank} k{k} s{stride}: err {e}");

            let t = ConvTranspose::new_2x(
                rank,
                c_in,
                c_out,
                random(c_in * c_out * if rank == 3 { 8 } else { 4 }, &mut rng),
            );
            let e = max_err(&t.forward(&x), &naive_transposed(&t, &x));
            assert!(e < 1e-4, "transposed case {case} rank {rank}: err {e}");
        }
    }

    #[test]
    fn dilated_strided_and_one_sided_padded_layers_match_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for case in 0..60 {
            let rank = 1 + case % 3;
            let (kernel, stride, pad, dilation, dims) = random_geometry(rank, &mut rng);
            let (c_in, c_out) = (rng.random_range(1..4), rng.random_range(1..4));
            let taps: usize = kernel.iter().product();
            let conv = Conv::with_geometry(
                c_in,
                c_out,
                kernel,
                stride,
                pad,
                dilation,
                random(c_out * c_in * taps, &mut rng),
                (case % 2 == 0).then(|| random(c_out, &mut rng)),
                case % 4 == 1,
            );
            let x = random_features(2, c_in, dims, &mut rng);
            // One-sided padding, as a block at the edge of a decomposed image gets.
            let pads: Pads = std::array::from_fn(|a| [pad[a], pad[a] / 2]);
            if conv.out_dims_padded(dims, pads).is_some() {
                let e = max_err(
                    &conv.forward_padded(&x, None, pads),
                    &naive_conv(&conv, &x, None, pads),
                );
                assert!(e < 1e-4, "conv case {case}: err {e}");
            }
            let mut output_padding = [0; 3];
            for a in 3 - rank..3 {
                output_padding[a] = rng.random_range(0..stride[a].max(dilation[a]));
            }
            let t = ConvTranspose::with_geometry(
                c_in,
                c_out,
                kernel,
                stride,
                pad,
                dilation,
                output_padding,
                random(c_in * c_out * taps, &mut rng),
                (case % 3 == 0).then(|| random(c_out, &mut rng)),
            );
            if t.out_dims(dims).is_some() {
                let e = max_err(&t.forward(&x), &naive_transposed(&t, &x));
                assert!(e < 1e-4, "transposed case {case}: err {e}");
            }
        }
    }

    #[test]
    fn a_long_signal_split_inside_its_row_matches_the_definition() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (c_in, c_out) = (3, 5);
        for (k, stride, pad, dilation) in [(9, 1, 4, 1), (5, 2, 3, 2)] {
            let conv = Conv::with_geometry(
                c_in,
                c_out,
                [1, 1, k],
                [1, 1, stride],
                [0, 0, pad],
                [1, 1, dilation],
                random(c_out * c_in * k, &mut rng),
                Some(random(c_out, &mut rng)),
                true,
            );
            let x: Features = random_features(2, c_in, [1, 1, 7001], &mut rng);
            let od = conv.out_dims(x.dims).unwrap();
            assert!(strip_positions(c_in * k, od[2], c_out * od[2], 2) < od[2]);
            let e = max_err(
                &conv.forward(&x, None),
                &naive_conv(&conv, &x, None, conv.pads()),
            );
            assert!(e < 1e-5, "k {k} stride {stride}: err {e}");
        }
    }

    #[test]
    fn a_large_strip_split_conv_matches_the_definition() {
        // Enough rows and channels that the output is split into several strips and tasks.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (c_in, c_out) = (24, 9);
        let conv = Conv::new(
            2,
            c_in,
            c_out,
            3,
            1,
            1,
            random(c_out * c_in * 9, &mut rng),
            None,
            true,
        );
        let x = random_features(1, c_in, [1, 67, 45], &mut rng);
        let e = max_err(
            &conv.forward(&x, None),
            &naive_conv(&conv, &x, None, conv.pads()),
        );
        assert!(e < 1e-4, "err {e}");
    }
}
