// 2-D parallel-beam tomography (device::ops::tomography): the forward projection and its exact
// adjoint with the sampling of physics/tomography.rs, which computes the rays (their first kept
// sample, their length) once on the host.
//
// Sample k of a ray sits at (row0 + k·Δrow, col0 + k·Δcol) in the bordered image (stride × stride,
// image at `border`). Both kernels compute that position with one explicit fmaf, so the forward
// and the adjoint sample at exactly the same points and the adjoint is the forward's transpose to
// float rounding. The forward sums along each ray (one thread per ray); the adjoint gathers, for
// each pixel and angle, the few samples whose bilinear stencil touches it (one thread per pixel),
// so no two threads write one value and the result does not depend on scheduling.

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

// ⌊v⌋ for v clamped to [0, maxv] (NaN becomes 0), as clamp_trunc in tomography.rs.
__device__ __forceinline__ int tsr_clamp_trunc(float v, float maxv) {
    return (int)fminf(fmaxf(v, 0.0f), maxv);
}

// img[p] (stride², zeroed by the caller) ← x[p] (width²) at offset (border, border), times the
// disc mask when there is one.
extern "C" __global__ void tsr_tomo_border(const float* __restrict__ x,
                                           const float* __restrict__ mask, int use_mask,
                                           float* __restrict__ img, int width, int stride,
                                           int border, long long planes) {
    long long per = (long long)width * width;
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        int rc = (int)(i - p * per);
        int r = rc / width, c = rc - r * width;
        float v = use_mask ? x[i] * mask[rc] : x[i];
        img[p * stride * stride + (long long)(r + border) * stride + c + border] = v;
    }
}

// y[p][j][a] ← scale · Σ_k bilinear(img[p], sample k of ray (a, j)). Grid: x over detector cells,
// y over angles, z over planes.
extern "C" __global__ void tsr_tomo_forward(const float* __restrict__ img,
                                            const float* __restrict__ ray_row0,
                                            const float* __restrict__ ray_col0,
                                            const unsigned* __restrict__ ray_count,
                                            const float* __restrict__ step_row,
                                            const float* __restrict__ step_col,
                                            float* __restrict__ y, int n_det, int n_angles,
                                            int stride, float scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int a = blockIdx.y;
    long long p = blockIdx.z;
    if (j >= n_det) return;
    const float* im = img + p * stride * stride;
    int ray = a * n_det + j;
    float p0 = ray_row0[ray], q0 = ray_col0[ray];
    unsigned n = ray_count[ray];
    float dp = step_row[a], dq = step_col[a];
    float maxv = (float)(stride - 2);
    float sum = 0.0f;
    for (unsigned k = 0; k < n; ++k) {
        float kf = (float)k;
        float pp = fmaf(kf, dp, p0), qq = fmaf(kf, dq, q0);
        int ip = tsr_clamp_trunc(pp, maxv), iq = tsr_clamp_trunc(qq, maxv);
        float wp = pp - (float)ip, wq = qq - (float)iq;
        const float* t = im + ip * stride + iq;
        float top = t[0] + wq * (t[1] - t[0]);
        float bot = t[stride] + wq * (t[stride + 1] - t[stride]);
        sum += top + wp * (bot - top);
    }
    y[(p * n_det + j) * n_angles + a] = sum * scale;
}

// x[p][r][c] ← scale · mask · Σ_a Σ_(samples of angle a touching the pixel) weight · y[p][a][j]:
// the transpose of tsr_tomo_forward. `y_by_angle` is the sinogram transposed to [p][angle][det].
// The pixel's position along and across the rays of angle a gives the candidate rays j and steps
// i = first_j + k: those within √2 (the bilinear stencil's reach, rotated), four of each.
extern "C" __global__ void tsr_tomo_adjoint(
    const float* __restrict__ y_by_angle, const float* __restrict__ ray_row0,
    const float* __restrict__ ray_col0, const unsigned* __restrict__ ray_count,
    const unsigned* __restrict__ ray_first, const float* __restrict__ step_row,
    const float* __restrict__ step_col, const float* __restrict__ mask, int use_mask,
    float* __restrict__ x, int width, int border, int stride, int n_det, int n_angles,
    float center, float shift, float scale, long long planes) {
    long long per = (long long)width * width;
    float maxv = (float)(stride - 2);
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        int rc = (int)(i - p * per);
        int R = rc / width + border, C = rc % width + border;
        float dr = (float)R - center - shift, dc = (float)C - center - shift;
        const float* yp = y_by_angle + p * n_angles * n_det;
        float acc = 0.0f;
        for (int a = 0; a < n_angles; ++a) {
            float cs = step_row[a], sn = step_col[a];
            float jf = center - sn * dr + cs * dc;
            float sf = center + cs * dr + sn * dc;
            int j0 = (int)floorf(jf) - 1;
            for (int j = j0; j < j0 + 4; ++j) {
                if (j < 0 || j >= n_det) continue;
                int ray = a * n_det + j;
                int count = (int)ray_count[ray];
                if (count == 0) continue;
                int k0 = (int)floorf(sf) - (int)ray_first[ray] - 1;
                float row0 = ray_row0[ray], col0 = ray_col0[ray];
                float v = yp[a * n_det + j];
                for (int k = k0; k < k0 + 4; ++k) {
                    if (k < 0 || k >= count) continue;
                    float kf = (float)k;
                    float pp = fmaf(kf, cs, row0), qq = fmaf(kf, sn, col0);
                    int ip = tsr_clamp_trunc(pp, maxv), iq = tsr_clamp_trunc(qq, maxv);
                    if ((ip != R && ip != R - 1) || (iq != C && iq != C - 1)) continue;
                    float wp = pp - (float)ip, wq = qq - (float)iq;
                    float w_row = ip == R ? 1.0f - wp : wp;
                    float w_col = iq == C ? 1.0f - wq : wq;
                    acc += v * (w_row * w_col);
                }
            }
        }
        x[i] = (use_mask ? acc * mask[rc] : acc) * scale;
    }
}
