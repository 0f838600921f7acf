// Orthogonal wavelet thresholding (device::ops::wavelet), the twin of denoise::wavelet: the
// periodic multi-level DWT of many planes at once, one launch per level and axis, the detail
// coefficients thresholded, and the inverse. Planes are [D, H, W] (D = 1 for images).
//
// Every sum runs over the taps in the CPU's order with the CPU's rounding (the _rn intrinsics keep
// the compiler from contracting a multiply and an add into an FMA), so each step gives the CPU's
// bits.

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

__device__ long long tsr_wav_clamp(long long v, long long last) { return v < last ? v : last; }

// Length and stride of `axis` (0: D, 1: H, 2: W) in a plane of (d, h, w).
__device__ void tsr_wav_axis(int d, int h, int w, int axis, long long* len, long long* stride) {
    if (axis == 0) {
        *len = d;
        *stride = (long long)h * w;
    } else if (axis == 1) {
        *len = h;
        *stride = w;
    } else {
        *len = w;
        *stride = 1;
    }
}

// The box [0, bd)×[0, bh)×[0, bw) of every plane of dst (dd, dh, dw) from src (sd, sh, sw), each
// source position clamped to src's last sample on its axis: the CPU's `copy_box` (with `extend`,
// the box is dst's whole grid and positions beyond src repeat its last sample; without, the box
// lies within both). `total` = planes·bd·bh·bw.
extern "C" __global__ void tsr_wav_copy_box(const float* __restrict__ src, float* __restrict__ dst,
                                            int sd, int sh, int sw, int dd, int dh, int dw,
                                            int bd, int bh, int bw, long long total) {
    long long box = (long long)bd * bh * bw;
    long long src_len = (long long)sd * sh * sw;
    long long dst_len = (long long)dd * dh * dw;
    TSR_GRID_STRIDE(i, total) {
        long long plane = i / box;
        long long p = i - plane * box;
        long long x = p % bw;
        long long r = p / bw;
        long long y = r % bh;
        long long z = r / bh;
        long long zs = tsr_wav_clamp(z, sd - 1), ys = tsr_wav_clamp(y, sh - 1),
                  xs = tsr_wav_clamp(x, sw - 1);
        dst[plane * dst_len + (z * dh + y) * dw + x] = src[plane * src_len + (zs * sh + ys) * sw + xs];
    }
}

// One analysis step along `axis` of planes of (d, h, w), the axis of even length n: output position
// r < n/2 is the approximation a[r] = Σ lo[t]·src[(2r + off[t]) mod n], position n/2 + k the detail
// d[k] with the `hi` filter. `total` = planes·d·h·w.
extern "C" __global__ void tsr_wav_forward(const float* __restrict__ src, float* __restrict__ dst,
                                           const int* __restrict__ off,
                                           const float* __restrict__ lo,
                                           const float* __restrict__ hi, int taps, int d, int h,
                                           int w, int axis, long long total) {
    long long n, stride;
    tsr_wav_axis(d, h, w, axis, &n, &stride);
    long long half = n / 2;
    TSR_GRID_STRIDE(i, total) {
        long long r = (i / stride) % n;
        long long base = i - r * stride;
        bool detail = r >= half;
        long long k = detail ? r - half : r;
        const float* c = detail ? hi : lo;
        float s = 0.0f;
        for (int t = 0; t < taps; ++t) {
            long long m = (2 * k + off[t]) % n;
            s = __fadd_rn(s, __fmul_rn(c[t], src[base + m * stride]));
        }
        dst[i] = s;
    }
}

// The inverse (= adjoint) of tsr_wav_forward along `axis`: x[m] = Σ over the taps with
// off ≡ m (mod 2) of lo·a[k] + hi·d[k], k = ((m + n − off)/2) mod n/2, a in the axis's first half
// and d in its second.
extern "C" __global__ void tsr_wav_inverse(const float* __restrict__ src, float* __restrict__ dst,
                                           const int* __restrict__ off,
                                           const float* __restrict__ lo,
                                           const float* __restrict__ hi, int taps, int d, int h,
                                           int w, int axis, long long total) {
    long long n, stride;
    tsr_wav_axis(d, h, w, axis, &n, &stride);
    long long half = n / 2;
    TSR_GRID_STRIDE(i, total) {
        long long m = (i / stride) % n;
        long long base = i - m * stride;
        float s = 0.0f;
        for (int t = 0; t < taps; ++t) {
            if (((m - off[t]) & 1) != 0) continue;
            long long k = ((m + n - off[t]) / 2) % half;
            float a = src[base + k * stride], dd = src[base + (half + k) * stride];
            s = __fadd_rn(s, __fadd_rn(__fmul_rn(lo[t], a), __fmul_rn(hi[t], dd)));
        }
        dst[i] = s;
    }
}

// Soft (`hard` = 0: sign(c)·max(|c| − ths, 0), written as the CPU's max(c − ths, 0) + min(c + ths,
// 0)) or hard (c if |c| ≥ ths, else 0) thresholding of every detail coefficient of planes of
// (d, h, w): every coefficient outside the low corner (hd, hh, hw), which holds the next level's
// approximation. `total` = planes·d·h·w.
extern "C" __global__ void tsr_wav_threshold(float* __restrict__ c, int d, int h, int w, int hd,
                                             int hh, int hw, int hard, float ths,
                                             long long total) {
    TSR_GRID_STRIDE(i, total) {
        long long x = i % w;
        long long r = i / w;
        long long y = r % h;
        long long z = (r / h) % d;
        if (z < hd && y < hh && x < hw) continue;
        float v = c[i];
        if (hard) {
            c[i] = fabsf(v) < ths ? 0.0f : v;
        } else {
            c[i] = __fadd_rn(fmaxf(__fsub_rn(v, ths), 0.0f), fminf(__fadd_rn(v, ths), 0.0f));
        }
    }
}
