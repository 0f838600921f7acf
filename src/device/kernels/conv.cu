// The FFT path of the convolution engine (device::ops::blur_engine; physics/blur_engine.rs on the CPU): padding
// onto the FFT grid, products of spectra, cropping, and the fold that is the padding's adjoint.
// The FFTs themselves are cuFFT's. Arrays are planes of (depth, height, width) in C order; the
// padding is given per axis as maps computed on the host by the CPU engine itself (axis_map), so
// every padding (valid, circular, replicate, reflect, constant) is the same kernel.

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

// Flat index i of planes of (d, h, w) → plane p and (z, y, x).
struct TsrIndex {
    long long p;
    int z, y, x;
};
__device__ __forceinline__ TsrIndex tsr_unravel(long long i, int d, int h, int w) {
    long long per = (long long)d * h * w;
    TsrIndex r;
    r.p = i / per;
    long long rest = i - r.p * per;
    r.x = (int)(rest % w);
    r.y = (int)((rest / w) % h);
    r.z = (int)(rest / ((long long)w * h));
    return r;
}

// xg[p][z][y][x] ← x[p][map_d[z]][map_h[y]][map_w[x]], or 0 where a map says −1 (every grid value
// is written).
extern "C" __global__ void tsr_conv_pad(const float* __restrict__ x, float* __restrict__ xg,
                                        const int* __restrict__ map_d,
                                        const int* __restrict__ map_h,
                                        const int* __restrict__ map_w, int d, int h, int w,
                                        int gd, int gh, int gw, long long planes) {
    TSR_GRID_STRIDE(i, planes * gd * gh * gw) {
        TsrIndex g = tsr_unravel(i, gd, gh, gw);
        int sz = map_d[g.z], sy = map_h[g.y], sx = map_w[g.x];
        xg[i] = (sz >= 0 && sy >= 0 && sx >= 0)
                    ? x[((g.p * d + sz) * h + sy) * (long long)w + sx]
                    : 0.0f;
    }
}

// y[p][z][y][x] ← full[p][z + off_d][y + off_h][x + off_w].
extern "C" __global__ void tsr_conv_crop(const float* __restrict__ full, float* __restrict__ y,
                                         int od, int oh, int ow, int gd, int gh, int gw,
                                         int off_d, int off_h, int off_w, long long planes) {
    TSR_GRID_STRIDE(i, planes * od * oh * ow) {
        TsrIndex o = tsr_unravel(i, od, oh, ow);
        y[i] = full[((o.p * gd + o.z + off_d) * gh + o.y + off_h) * (long long)gw + o.x + off_w];
    }
}

// x[p][z][y][x] ← Σ g[p][rz][ry][rx] over the grid positions that copy sample (z, y, x): the
// adjoint of tsr_conv_pad. Per axis, the positions copying sample s are idx[start[s]..start[s+1]]
// (the inverse of the pad map, ascending).
extern "C" __global__ void tsr_conv_fold(const float* __restrict__ g, float* __restrict__ x,
                                         const int* __restrict__ start_d,
                                         const int* __restrict__ idx_d,
                                         const int* __restrict__ start_h,
                                         const int* __restrict__ idx_h,
                                         const int* __restrict__ start_w,
                                         const int* __restrict__ idx_w, int d, int h, int w,
                                         int gd, int gh, int gw, long long planes) {
    TSR_GRID_STRIDE(i, planes * d * h * w) {
        TsrIndex s = tsr_unravel(i, d, h, w);
        const float* gp = g + s.p * (long long)gd * gh * gw;
        float acc = 0.0f;
        for (int a = start_d[s.z]; a < start_d[s.z + 1]; ++a) {
            for (int b = start_h[s.y]; b < start_h[s.y + 1]; ++b) {
                const float* row = gp + ((long long)idx_d[a] * gh + idx_h[b]) * gw;
                for (int c = start_w[s.x]; c < start_w[s.x + 1]; ++c) acc += row[idx_w[c]];
            }
        }
        x[i] = acc;
    }
}

// spec[p][i] ← spec[p][i] / (n·(1 + a·Ĝ[ch(p)][i])): the shifted inverse (a·G + I)⁻¹ of a circular
// convolution G whose spectrum Ĝ (unscaled, (re, im) pairs; its real part is used) is real and ≥ 0, a
// Gram kernel's, with the 1/n of the unnormalised inverse transform folded in, in double as the CPU's
// Conv::shifted_inverse; ch(p) as below.
extern "C" __global__ void tsr_spectrum_shifted_inverse(float* __restrict__ spec,
                                                        const float* __restrict__ gspec, long long len,
                                                        int kernels, int channels, float a, long long n,
                                                        long long planes) {
    TSR_GRID_STRIDE(i, planes * len) {
        long long p = i / len;
        long long e = i - p * len;
        long long ch = kernels == 1 ? 0 : p % channels;
        double g = (double)gspec[2 * (ch * len + e)];
        float f = (float)(1.0 / ((double)n * (1.0 + (double)a * g)));
        spec[2 * i] *= f;
        spec[2 * i + 1] *= f;
    }
}

// spec[p][i] ← spec[p][i] · k[ch(p)][i] (or · conj(k) with `conjugate`), complex values as (re, im)
// float pairs; ch(p) = 0 with one kernel, else p mod channels (Conv::channel_of).
extern "C" __global__ void tsr_spectrum_multiply(float* __restrict__ spec,
                                                 const float* __restrict__ kspec, long long len,
                                                 int kernels, int channels, int conjugate,
                                                 long long planes) {
    TSR_GRID_STRIDE(i, planes * len) {
        long long p = i / len;
        long long e = i - p * len;
        long long ch = kernels == 1 ? 0 : p % channels;
        float kr = kspec[2 * (ch * len + e)];
        float ki = kspec[2 * (ch * len + e) + 1];
        if (conjugate) ki = -ki;
        float sr = spec[2 * i], si = spec[2 * i + 1];
        spec[2 * i] = sr * kr - si * ki;
        spec[2 * i + 1] = sr * ki + si * kr;
    }
}
