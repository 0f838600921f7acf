//! The native engine's kernels: convolutions (k×k, any stride and zero padding), the 2×2 stride-2
//! transposed convolution, ReLU and adds, on batches of 2-D or 3-D feature maps.
//!
//! A convolution is an im2col + GEMM on a strip of whole output rows at a time: the strip's patch
//! matrix `col` (`C_in·kᵈ × n`, at most a few MiB) is built, then `out[:, strip] (+)= W · col` by the
//! `gemm` crate, then bias and ReLU are applied while the strip is still in cache. PyTorch's weight
//! layout `(C_out, C_in, k…)` is already the row-major `C_out × C_in·kᵈ` matrix, so weights are used as
//! stored. Strips of all batch items run in parallel (rayon), each with its own `col` buffer, so the
//! extra memory is bounded by threads × strip size, whatever the image size.
//!
//! The transposed convolution (kernel = stride = 2) is a plain GEMM per strip of input rows,
//! `tmp (C_out·2ᵈ × n) = Wᵀ · x[:, strip]`, followed by a scatter of each of the 2ᵈ taps to its
//! sub-grid of the output.

use rayon::prelude::*;

/// A batch of feature maps `(B, C, D, H, W)` in C order; 2-D maps have `D = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Features {
    pub batch: usize,
    pub channels: usize,
    /// `[D, H, W]`.
    pub dims: [usize; 3],
    pub data: Vec<f32>,
}

impl Features {
    pub fn zeros(batch: usize, channels: usize, dims: [usize; 3]) -> Self {
        Features {
            batch,
            channels,
            dims,
            data: vec![0.0; batch * channels * dims.iter().product::<usize>()],
        }
    }

    /// Voxels per channel.
    pub fn spatial_len(&self) -> usize {
        self.dims.iter().product()
    }

    /// `self += other` (same shape), in parallel.
    pub fn add_assign(&mut self, other: &Features) {
        debug_assert_eq!(self.data.len(), other.data.len());
        self.data
            .par_chunks_mut(1 << 16)
            .zip(other.data.par_chunks(1 << 16))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
    }
}

/// Weights of a convolution: `(C_out, C_in, kd, kh, kw)` row-major (2-D: `kd = 1`), optional bias.
#[derive(Clone, Debug)]
pub struct Conv {
    pub c_in: usize,
    pub c_out: usize,
    /// `[kd, kh, kw]`.
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [usize; 3],
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    /// Apply ReLU to the output (after the bias, after the residual accumulation).
    pub relu: bool,
}

impl Conv {
    /// A `k×k` (2-D, `rank = 2`) or `k×k×k` (3-D) convolution with one stride and padding for every
    /// spatial axis; `weight` must hold `c_out·c_in·kᵈ` values.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rank: usize,
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        relu: bool,
    ) -> Self {
        let (kd, sd, pd) = if rank == 3 {
            (k, stride, pad)
        } else {
            (1, 1, 0)
        };
        assert_eq!(weight.len(), c_out * c_in * kd * k * k, "conv weight size");
        Conv {
            c_in,
            c_out,
            kernel: [kd, k, k],
            stride: [sd, stride, stride],
            pad: [pd, pad, pad],
            weight,
            bias,
            relu,
        }
    }

    /// Rows of the patch matrix: `C_in · kd · kh · kw`.
    fn k_len(&self) -> usize {
        self.c_in * self.kernel.iter().product::<usize>()
    }

    /// Output spatial size for input `dims` (`None` when the kernel does not fit).
    pub fn out_dims(&self, dims: [usize; 3]) -> Option<[usize; 3]> {
        let mut o = [0; 3];
        for a in 0..3 {
            let span = dims[a] + 2 * self.pad[a];
            if span < self.kernel[a] {
                return None;
            }
            o[a] = (span - self.kernel[a]) / self.stride[a] + 1;
        }
        Some(o)
    }

    /// `conv(x)`, or `acc + conv(x)` when `acc` is given (its buffer is reused for the output).
    pub fn forward(&self, x: &Features, acc: Option<Features>) -> Features {
        assert_eq!(x.channels, self.c_in, "conv input channels");
        let od = self
            .out_dims(x.dims)
            .expect("conv kernel larger than its input");
        let accumulate = acc.is_some();
        let mut out = match acc {
            Some(a) => {
                assert!(
                    a.batch == x.batch && a.channels == self.c_out && a.dims == od,
                    "conv accumulator shape"
                );
                a
            }
            None => Features {
                batch: x.batch,
                channels: self.c_out,
                dims: od,
                // Every element is written by the GEMM (read_dst = false), so no zeroing is needed;
                // zeros keep it safe Rust at a small cost.
                data: vec![0.0; x.batch * self.c_out * od.iter().product::<usize>()],
            },
        };
        let k_len = self.k_len();
        let rows_total = od[0] * od[1];
        let wo = od[2];
        let rows = strip_rows(k_len, wo, rows_total, x.batch);
        let strips = rows_total.div_ceil(rows);
        let out_s = od.iter().product::<usize>();
        let in_s = x.spatial_len();
        let out_ptr = SendPtr(out.data.as_mut_ptr());
        let tasks = x.batch * strips;
        let inner_par = gemm_parallelism(tasks);
        (0..tasks)
            .into_par_iter()
            .for_each_init(Vec::new, |col, task| {
                let (b, s) = (task / strips, task % strips);
                let r0 = s * rows;
                let r1 = (r0 + rows).min(rows_total);
                let n = (r1 - r0) * wo;
                col.resize(k_len * n, 0.0);
                let xb = &x.data[b * self.c_in * in_s..(b + 1) * self.c_in * in_s];
                im2col(self, xb, x.dims, od, r0, r1, col);
                let out_ptr = &out_ptr;
                // SAFETY: task (b, s) writes only rows r0..r1 of every channel of item b; tasks are
                // disjoint, and `out` outlives the parallel loop.
                unsafe {
                    let dst = out_ptr.0.add(b * self.c_out * out_s + r0 * wo);
                    gemm::gemm(
                        self.c_out,
                        n,
                        k_len,
                        dst,
                        1,
                        out_s as isize,
                        accumulate,
                        self.weight.as_ptr(),
                        1,
                        k_len as isize,
                        col.as_ptr(),
                        1,
                        n as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        inner_par,
                    );
                    if self.bias.is_some() || self.relu {
                        for co in 0..self.c_out {
                            let row = std::slice::from_raw_parts_mut(dst.add(co * out_s), n);
                            let bias = self.bias.as_ref().map_or(0.0, |b| b[co]);
                            if self.relu {
                                row.iter_mut().for_each(|v| *v = (*v + bias).max(0.0));
                            } else {
                                row.iter_mut().for_each(|v| *v += bias);
                            }
                        }
                    }
                }
            });
        out
    }
}

/// Weights of a transposed convolution with kernel = stride = 2 and no padding: `(C_in, C_out, 2, 2)`
/// or `(C_in, C_out, 2, 2, 2)` row-major, as PyTorch's `ConvTranspose{2,3}d` stores them.
#[derive(Clone, Debug)]
pub struct ConvTranspose2x {
    pub c_in: usize,
    pub c_out: usize,
    /// 2 or 3 spatial axes.
    pub rank: usize,
    pub weight: Vec<f32>,
}

impl ConvTranspose2x {
    pub fn new(rank: usize, c_in: usize, c_out: usize, weight: Vec<f32>) -> Self {
        let taps = if rank == 3 { 8 } else { 4 };
        assert_eq!(
            weight.len(),
            c_in * c_out * taps,
            "transposed conv weight size"
        );
        ConvTranspose2x {
            c_in,
            c_out,
            rank,
            weight,
        }
    }

    fn taps(&self) -> usize {
        if self.rank == 3 { 8 } else { 4 }
    }

    pub fn forward(&self, x: &Features) -> Features {
        assert_eq!(x.channels, self.c_in, "transposed conv input channels");
        let [d, h, w] = x.dims;
        let od = if self.rank == 3 {
            [2 * d, 2 * h, 2 * w]
        } else {
            [d, 2 * h, 2 * w]
        };
        let taps = self.taps();
        let m = self.c_out * taps;
        let mut out = Features::zeros(x.batch, self.c_out, od);
        let rows_total = d * h;
        let rows = strip_rows(m, w, rows_total, x.batch);
        let strips = rows_total.div_ceil(rows);
        let (in_s, out_s) = (x.spatial_len(), out.spatial_len());
        let out_ptr = SendPtr(out.data.as_mut_ptr());
        let tasks = x.batch * strips;
        let inner_par = gemm_parallelism(tasks);
        let kd_n = if self.rank == 3 { 2 } else { 1 };
        (0..tasks)
            .into_par_iter()
            .for_each_init(Vec::new, |tmp, task| {
                let (b, s) = (task / strips, task % strips);
                let r0 = s * rows;
                let r1 = (r0 + rows).min(rows_total);
                let n = (r1 - r0) * w;
                tmp.resize(m * n, 0.0);
                // lhs[(co, t), ci] = weight[ci, co, t]: a column-major view of the stored weights.
                // SAFETY: the pointers and strides describe in-bounds matrices of the sizes given.
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
                        x.data.as_ptr().add(b * self.c_in * in_s + r0 * w),
                        1,
                        in_s as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        inner_par,
                    );
                }
                let out_ptr = &out_ptr;
                for co in 0..self.c_out {
                    for kz in 0..kd_n {
                        for ky in 0..2 {
                            for kx in 0..2 {
                                let t = (kz * 2 + ky) * 2 + kx;
                                let src = &tmp[(co * taps + t) * n..(co * taps + t + 1) * n];
                                for r in r0..r1 {
                                    let (z, y) = (r / h, r % h);
                                    let oz = if self.rank == 3 { 2 * z + kz } else { z };
                                    let orow = (oz * od[1] + 2 * y + ky) * od[2];
                                    let srow = &src[(r - r0) * w..(r - r0 + 1) * w];
                                    // SAFETY: output row (oz, 2y+ky) belongs to input row r of this
                                    // task only; columns 2x+kx < 2w.
                                    unsafe {
                                        let dst =
                                            out_ptr.0.add((b * self.c_out + co) * out_s + orow);
                                        for (xi, v) in srow.iter().enumerate() {
                                            *dst.add(2 * xi + kx) = *v;
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

/// A raw output pointer shared by parallel tasks that write disjoint parts.
struct SendPtr(*mut f32);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Output rows per task: enough columns (≥ 1024) that packing the weights is a small part of each
/// GEMM, few enough that the patch matrix stays near the L2 cache (~2 MiB), and at least a few tasks
/// per thread when the image allows.
fn strip_rows(k_len: usize, row_len: usize, rows_total: usize, batch: usize) -> usize {
    const COL_TARGET: usize = 1 << 19; // floats (2 MiB)
    const MIN_COLS: usize = 1024;
    let cols = (COL_TARGET / k_len.max(1)).max(MIN_COLS);
    let mut rows = (cols / row_len.max(1)).clamp(1, rows_total.max(1));
    let want_tasks = 4 * rayon::current_num_threads();
    let per_item = want_tasks.div_ceil(batch.max(1));
    if rows_total.div_ceil(rows) < per_item {
        rows = rows_total.div_ceil(per_item).max(1);
    }
    rows
}

/// Fills `col[(ci, kz, ky, kx), j]` for the output positions `j` of output rows `r0..r1` (row `r` is
/// `(oz, oy) = (r / H_out, r % H_out)`), zero where the kernel reaches into the padding.
fn im2col(
    conv: &Conv,
    x: &[f32],
    in_dims: [usize; 3],
    out_dims: [usize; 3],
    r0: usize,
    r1: usize,
    col: &mut [f32],
) {
    let [di, hi, wi] = in_dims;
    let [_, ho, wo] = out_dims;
    let [kd, kh, kw] = conv.kernel;
    let [sd, sh, sw] = conv.stride;
    let [pd, ph, pw] = conv.pad;
    let n = (r1 - r0) * wo;
    let in_s = di * hi * wi;
    let mut row_idx = 0;
    for ci in 0..conv.c_in {
        let xc = &x[ci * in_s..(ci + 1) * in_s];
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let dst_row = &mut col[row_idx * n..(row_idx + 1) * n];
                    row_idx += 1;
                    // Output columns whose input column ox·sw + kx − pw is inside 0..wi.
                    let lo = pw.saturating_sub(kx).div_ceil(sw).min(wo);
                    let hi_x = if wi + pw > kx {
                        ((wi + pw - kx - 1) / sw + 1).min(wo)
                    } else {
                        0
                    }
                    .max(lo);
                    for r in r0..r1 {
                        let (oz, oy) = (r / ho, r % ho);
                        let dst = &mut dst_row[(r - r0) * wo..(r - r0 + 1) * wo];
                        let iz = (oz * sd + kz) as isize - pd as isize;
                        let iy = (oy * sh + ky) as isize - ph as isize;
                        if iz < 0 || iz >= di as isize || iy < 0 || iy >= hi as isize {
                            dst.fill(0.0);
                            continue;
                        }
                        let src = &xc[(iz as usize * hi + iy as usize) * wi..][..wi];
                        dst[..lo].fill(0.0);
                        dst[hi_x..].fill(0.0);
                        if sw == 1 {
                            let start = lo + kx - pw;
                            dst[lo..hi_x].copy_from_slice(&src[start..start + (hi_x - lo)]);
                        } else {
                            for (ox, d) in dst[lo..hi_x].iter_mut().enumerate() {
                                *d = src[(lo + ox) * sw + kx - pw];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// gemm's own threads when there is a single (item, strip) task, so both cores work on it; none
/// when rayon already spreads several tasks.
fn gemm_parallelism(tasks: usize) -> gemm::Parallelism {
    if tasks == 1 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn random(n: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Direct (six nested loops) convolution, the definition.
    fn naive_conv(c: &Conv, x: &Features, acc: Option<&Features>) -> Features {
        let od = c.out_dims(x.dims).unwrap();
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
                                            let iz = (oz * c.stride[0] + kz) as isize
                                                - c.pad[0] as isize;
                                            let iy = (oy * c.stride[1] + ky) as isize
                                                - c.pad[1] as isize;
                                            let ix = (ox * c.stride[2] + kx) as isize
                                                - c.pad[2] as isize;
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

    fn naive_transposed(t: &ConvTranspose2x, x: &Features) -> Features {
        let [d, h, w] = x.dims;
        let od = if t.rank == 3 {
            [2 * d, 2 * h, 2 * w]
        } else {
            [d, 2 * h, 2 * w]
        };
        let mut out = Features::zeros(x.batch, t.c_out, od);
        let kd = if t.rank == 3 { 2 } else { 1 };
        let taps = kd * 4;
        for b in 0..x.batch {
            for ci in 0..t.c_in {
                for co in 0..t.c_out {
                    for z in 0..d {
                        for y in 0..h {
                            for xx in 0..w {
                                let v = x.data[(((b * t.c_in + ci) * d + z) * h + y) * w + xx];
                                for kz in 0..kd {
                                    for ky in 0..2 {
                                        for kx in 0..2 {
                                            let wv = t.weight[(ci * t.c_out + co) * taps
                                                + (kz * 2 + ky) * 2
                                                + kx];
                                            let oz = if t.rank == 3 { 2 * z + kz } else { z };
                                            let i = (((b * t.c_out + co) * od[0] + oz) * od[1]
                                                + 2 * y
                                                + ky)
                                                * od[2]
                                                + 2 * xx
                                                + kx;
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
            let x = Features {
                batch,
                channels: c_in,
                dims,
                data: random(batch * c_in * dims.iter().product::<usize>(), &mut rng),
            };
            let acc = (case % 3 == 1).then(|| {
                let od = conv.out_dims(dims).unwrap();
                Features {
                    batch,
                    channels: c_out,
                    dims: od,
                    data: random(batch * c_out * od.iter().product::<usize>(), &mut rng),
                }
            });
            let want = naive_conv(&conv, &x, acc.as_ref());
            let got = conv.forward(&x, acc);
            let e = max_err(&got, &want);
            assert!(e < 1e-4, "case {case} rank {rank} k{k} s{stride}: err {e}");

            let t = ConvTranspose2x::new(
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
        let dims = [1, 67, 45];
        let x = Features {
            batch: 1,
            channels: c_in,
            dims,
            data: random(c_in * 67 * 45, &mut rng),
        };
        let e = max_err(&conv.forward(&x, None), &naive_conv(&conv, &x, None));
        assert!(e < 1e-4, "err {e}");
    }
}
