//! How a convolution's work is cut into strips of output positions: the patch matrix of a strip
//! bounded by the cache and by a quarter of the layer's output, in whole SIMD vectors, with enough
//! strips to keep every thread busy; and the raw output pointer the parallel strips share.

/// A raw output pointer shared by parallel tasks that write disjoint parts.
pub(super) struct SendPtr<T>(pub(super) *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Output rows per task: enough columns (≥ 512) that packing the weights is a small part of each
/// GEMM, few enough that the patch matrix stays near the L2 cache (~2 MiB) and within a quarter of
/// the layer's output (`out_len` values per item), and at least a few tasks per thread when the
/// image allows.
pub(super) fn strip_rows(
    k_len: usize,
    row_len: usize,
    rows_total: usize,
    out_len: usize,
    batch: usize,
) -> usize {
    let mut rows = grad_strip_rows(k_len, row_len, rows_total, out_len);
    let want_tasks = 4 * rayon::current_num_threads();
    let per_item = want_tasks.div_ceil(batch.max(1));
    if rows_total.div_ceil(rows) < per_item {
        rows = rows_total.div_ceil(per_item).max(1);
    }
    whole_gemm_lanes(rows, row_len)
}

/// `rows` rounded down so that a strip's `rows · row_len` patch columns are a whole number of
/// [`GEMM_LANES`] (where at least one such multiple fits). The forward GEMM runs transposed
/// (`outᵀ = colᵀ · Wᵀ`, its output row-major), and `gemm` reads the patch matrix in place only
/// when that count is a multiple of its SIMD width; otherwise it first copies the whole patch
/// matrix into a packed buffer of the same size, doubling each thread's scratch (issue 11: on a
/// 3-rank slab of a 64³ cube, 22 columns wide, every strip was copied). The strip size does not
/// change any output value: each output column is one GEMM column, summed over the kernel alone.
fn whole_gemm_lanes(rows: usize, row_len: usize) -> usize {
    let step = GEMM_LANES / gcd(row_len.max(1), GEMM_LANES);
    if rows >= step {
        rows - rows % step
    } else {
        rows
    }
}

/// The SIMD width (in elements) whose multiples `gemm` takes unpacked: 16 f32 lanes with AVX-512,
/// a multiple of the 8 lanes of f64 and of narrower vector units.
const GEMM_LANES: usize = 16;

fn gcd(a: usize, b: usize) -> usize {
    match b {
        0 => a,
        _ => gcd(b, a % b),
    }
}

/// Output rows per strip where the strips' results are summed (weight gradients): a size that does
/// not depend on the number of threads, so the order of the sums does not either. Each thread's
/// patch matrix is bounded by a fraction of the layer's output (`out_len` values per item) as well
/// as by the cache, so on a rank's small block of a decomposed image the scratch shrinks with the
/// block instead of staying a fixed ~2 MiB per thread (issue 11's memory goal; CNN3D's 3-rank
/// slabs of a 64³ cube have outputs of 2.7 MiB).
pub(super) fn grad_strip_rows(
    k_len: usize,
    row_len: usize,
    rows_total: usize,
    out_len: usize,
) -> usize {
    (strip_cols_bound(k_len, out_len) / row_len.max(1)).clamp(1, rows_total.max(1))
}

/// Patch columns per strip: ~2 MiB of patches (f32), at most a quarter of the layer's output
/// (`out_len` values per item), at least 512.
fn strip_cols_bound(k_len: usize, out_len: usize) -> usize {
    const COL_TARGET: usize = 1 << 19; // elements (2 MiB in f32)
    const OUT_FRACTION: usize = 4;
    // 512, not 1024: on a 3-rank slab of a 64³ cube the floor, not the quarter, set the strip
    // (1024 patch columns of 216 against a 2.7 MiB output); the GEMM's weights are tiny there.
    const MIN_COLS: usize = 512;
    let target = COL_TARGET.min(out_len / OUT_FRACTION);
    (target / k_len.max(1)).max(MIN_COLS)
}

/// Output positions per task of the forward convolution (of `positions` per item): the bounds of
/// [`strip_cols_bound`], at least a few tasks per thread when the image allows, in whole vectors
/// of [`GEMM_LANES`] (see [`whole_gemm_lanes`]). A strip may begin and end inside a row: a 1-D
/// signal is one long row, which whole-row strips could not split (a 2¹⁸-sample signal through a
/// 16-channel k = 9 layer made one 151 MB patch matrix, built on one thread). Strip boundaries
/// change no output value: each output position is one GEMM column, summed over the kernel alone.
pub(super) fn strip_positions(
    k_len: usize,
    positions: usize,
    out_len: usize,
    batch: usize,
) -> usize {
    let mut cols = strip_cols_bound(k_len, out_len).min(positions.max(1));
    let want_tasks = 4 * rayon::current_num_threads();
    let per_item = want_tasks.div_ceil(batch.max(1));
    if positions.div_ceil(cols) < per_item {
        cols = positions.div_ceil(per_item).max(1);
    }
    if cols >= GEMM_LANES {
        cols - cols % GEMM_LANES
    } else {
        cols
    }
}

/// gemm's own threads when there is a single (item, strip) task, so both cores work on it; none
/// when rayon already spreads several tasks.
pub(super) fn gemm_parallelism(tasks: usize) -> gemm::Parallelism {
    if tasks == 1 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forward strip's patch columns are a whole number of `gemm`'s SIMD widths wherever one
    /// fits (22-wide rows, a 3-rank slab of a 64³ cube, take strips of 8 rows), within the
    /// quarter-of-the-output bound, and the strips still cover every row.
    #[test]
    fn forward_strips_hold_whole_simd_widths_of_patch_columns() {
        for (k_len, positions, out_len) in [
            (216, 64 * 64 * 22, 8 * 64 * 64 * 22),
            (216, 64 * 64 * 21, 8 * 64 * 64 * 21),
            (27, 64 * 64 * 22, 8 * 64 * 64 * 22),
            (216, 64 * 64 * 64, 8 * 64 * 64 * 64),
            (9, 1024 * 342, 16 * 1024 * 342),
            (144, 1 << 18, 16 << 18),
        ] {
            let cols = strip_positions(k_len, positions, out_len, 1);
            let bound = strip_cols_bound(k_len, out_len);
            assert!(
                cols >= GEMM_LANES && cols <= bound,
                "{cols} columns against the bound {bound}"
            );
            assert_eq!(cols % GEMM_LANES, 0, "{cols} columns");
        }
        // A 1-D signal (one row) is split too.
        assert!(strip_positions(144, 1 << 18, 16 << 18, 1) < 1 << 17);
        // Fewer positions than a vector: one strip of them all.
        assert_eq!(strip_positions(27, 5, 40, 1), 1.max(5usize.div_ceil(8)));
        // No multiple fits: the rows stay as they were.
        assert_eq!(whole_gemm_lanes(3, 1), 3);
        assert_eq!(whole_gemm_lanes(1, 22), 1);
        assert_eq!(whole_gemm_lanes(47, 22), 40);
    }
}
