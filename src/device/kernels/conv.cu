// The FFT path of the convolution engine (device::ops::conv; physics/conv.rs on the CPU): padding
// onto the FFT grid, products of spectra, cropping, and the fold that is the padding's adjoint.
// The FFTs themselves are cuFFT's. Arrays are planes of (depth, height, width) in C order; the
// padding is given per axis as maps computed on the host by the CPU engine itself (axis_map), so
// every padding (valid, circular, replicate, reflect, constant) is the same kernel.

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

// xg[p][z][y][x] ← x[p][map_d[z]][map_h[y]][map_w[x]], or 0 where a map says −1 (every grid value
// is written).
extern "C" __global__ void tsr_conv_pad(const float* __restrict__ x, float* __restrict__ xg,
                                        const int* __restrict__ map_d,
                                        const int* __restrict__ map_h,
                                        const int* __restrict__ map_w, int d, int h, int w,
                                        int gd, int gh, int gw, long long planes) {
    long long per = (long long)gd * gh * gw;
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        long long r = i - p * per;
        int gx = (int)(r % gw);
        int gy = (int)((r / gw) % gh);
        int gz = (int)(r / ((long long)gw * gh));
        int sz = map_d[gz], sy = map_h[gy], sx = map_w[gx];
        xg[i] = (sz >= 0 && sy >= 0 && sx >= 0)
                    ? x[((p * d + sz) * h + sy) * (long long)w + sx]
                    : 0.0f;
    }
}

// y[p][z][y][x] ← full[p][z + off_d][y + off_h][x + off_w].
extern "C" __global__ void tsr_conv_crop(const float* __restrict__ full, float* __restrict__ y,
                                         int od, int oh, int ow, int gd, int gh, int gw,
                                         int off_d, int off_h, int off_w, long long planes) {
    long long per = (long long)od * oh * ow;
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        long long r = i - p * per;
        int ox = (int)(r % ow);
        int oy = (int)((r / ow) % oh);
        int oz = (int)(r / ((long long)ow * oh));
        y[i] = full[((p * gd + oz + off_d) * gh + oy + off_h) * (long long)gw + ox + off_w];
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
    long long per = (long long)d * h * w;
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        long long r = i - p * per;
        int sx = (int)(r % w);
        int sy = (int)((r / w) % h);
        int sz = (int)(r / ((long long)w * h));
        const float* gp = g + p * (long long)gd * gh * gw;
        float acc = 0.0f;
        for (int a = start_d[sz]; a < start_d[sz + 1]; ++a) {
            for (int b = start_h[sy]; b < start_h[sy + 1]; ++b) {
                const float* row = gp + ((long long)idx_d[a] * gh + idx_h[b]) * gw;
                for (int c = start_w[sx]; c < start_w[sx + 1]; ++c) acc += row[idx_w[c]];
            }
        }
        x[i] = acc;
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
