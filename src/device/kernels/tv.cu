// The TV prox (device::ops::tv), the twin of denoise::tv: Condat's over-relaxed Chambolle–Pock
// iteration on many planes at once, each plane stopping on its own criterion (`active`).
//
// Every operation rounds as the CPU twin's Rust code does (the _rn intrinsics keep the compiler
// from contracting a multiply and an add into an FMA, and sum in the CPU's order), so one iteration
// gives the CPU's bits. The dual field is interleaved as on the CPU: u[q·axes + a].

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

// Position of flat in-plane index p along each transformed axis, and each axis's length and
// stride (D, H, W for volumes; H, W for images).
struct TsrTvGrid {
    int axes;
    long long lens[3];
    long long strides[3];
};

__device__ TsrTvGrid tsr_tv_grid(int d, int h, int w, int axes) {
    TsrTvGrid g;
    g.axes = axes;
    if (axes == 3) {
        g.lens[0] = d; g.lens[1] = h; g.lens[2] = w;
        g.strides[0] = (long long)h * w; g.strides[1] = w; g.strides[2] = 1;
    } else {
        g.lens[0] = h; g.lens[1] = w; g.lens[2] = 1;
        g.strides[0] = w; g.strides[1] = 1; g.strides[2] = 0;
    }
    return g;
}

// False when flat index i lies in a plane that has stopped; else i's position along each axis.
__device__ bool tsr_tv_locate(const TsrTvGrid& g, const int* active, long long n, long long i,
                              long long* pos) {
    long long plane = i / n;
    if (!active[plane]) return false;
    long long p = i - plane * n;
    for (int a = 0; a < g.axes; ++a) pos[a] = (p / g.strides[a]) % g.lens[a];
    return true;
}

// x2 ← x₂ + ρ(x − x₂) with x = (x₂ − τ∇ᵀu₂ + τy)/(1 + τ); xbar ← 2x − x₂; delta ← new x₂ − old.
extern "C" __global__ void tsr_tv_primal(float* __restrict__ x2, float* __restrict__ xbar,
                                         float* __restrict__ delta,
                                         const float* __restrict__ u2,
                                         const float* __restrict__ y,
                                         const int* __restrict__ active, int d, int h, int w,
                                         int axes, float tau, float rho, long long total) {
    TsrTvGrid g = tsr_tv_grid(d, h, w, axes);
    long long n = (long long)d * h * w;
    TSR_GRID_STRIDE(i, total) {
        long long pos[3];
        if (!tsr_tv_locate(g, active, n, i, pos)) continue;
        // (∇ᵀu)_p, summed in the CPU's order.
        float s = 0.0f;
        for (int a = 0; a < axes; ++a) {
            if (pos[a] >= 1) s = __fadd_rn(s, u2[(i - g.strides[a]) * axes + a]);
            if (pos[a] + 1 < g.lens[a]) s = __fsub_rn(s, u2[i * axes + a]);
        }
        float x_old = x2[i];
        float num = __fadd_rn(__fsub_rn(x_old, __fmul_rn(tau, s)), __fmul_rn(tau, y[i]));
        float x = __fdiv_rn(num, __fadd_rn(1.0f, tau));
        xbar[i] = __fsub_rn(__fmul_rn(2.0f, x), x_old);
        float x_new = __fadd_rn(x_old, __fmul_rn(rho, __fsub_rn(x, x_old)));
        x2[i] = x_new;
        delta[i] = __fsub_rn(x_new, x_old);
    }
}

// u₂ ← u₂ + ρ(proj(u₂ + σ_d∇xbar) − u₂), the projection on the ball of radius ths per pixel.
extern "C" __global__ void tsr_tv_dual(float* __restrict__ u2, const float* __restrict__ xbar,
                                       const int* __restrict__ active, int d, int h, int w,
                                       int axes, float sigma_dual, float rho, float ths,
                                       long long total) {
    TsrTvGrid g = tsr_tv_grid(d, h, w, axes);
    long long n = (long long)d * h * w;
    TSR_GRID_STRIDE(i, total) {
        long long pos[3];
        if (!tsr_tv_locate(g, active, n, i, pos)) continue;
        float grad[3];
        float norm_sq = 0.0f;
        for (int a = 0; a < axes; ++a) {
            float diff = pos[a] + 1 < g.lens[a] ? __fsub_rn(xbar[i + g.strides[a]], xbar[i]) : 0.0f;
            grad[a] = __fadd_rn(u2[i * axes + a], __fmul_rn(sigma_dual, diff));
            norm_sq = __fadd_rn(norm_sq, __fmul_rn(grad[a], grad[a]));
        }
        float shrink = __fdiv_rn(1.0f, fmaxf(__fdiv_rn(sqrtf(norm_sq), ths), 1.0f));
        for (int a = 0; a < axes; ++a) {
            float u = u2[i * axes + a];
            u2[i * axes + a] = __fadd_rn(u, __fmul_rn(rho, __fsub_rn(__fmul_rn(grad[a], shrink), u)));
        }
    }
}

// The reductions run with exactly TSR_TV_THREADS threads per block (a power of two).
#define TSR_TV_THREADS 256

// Tree sum of one value per thread of the block, in a fixed order; every thread gets the total.
__device__ double tsr_block_sum(double* sums, double v) {
    sums[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = TSR_TV_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    double total = sums[0];
    __syncthreads();
    return total;
}

// For plane blockIdx.y: partials[(plane·gridDim.x + blockIdx.x)·2 + {0, 1}] ← the block's share
// of Σ delta² and Σ x2², in f64 (the squares of floats are exact in f64; the order depends on the
// plane length and the grid alone). The host adds a plane's partials in order.
extern "C" __global__ void tsr_tv_plane_sums(const float* __restrict__ delta,
                                             const float* __restrict__ x2,
                                             double* __restrict__ partials, long long n) {
    __shared__ double sums[TSR_TV_THREADS];
    long long base = (long long)blockIdx.y * n;
    double diff = 0.0, norm = 0.0;
    TSR_GRID_STRIDE(i, n) {
        double dv = (double)delta[base + i], xv = (double)x2[base + i];
        diff += dv * dv;
        norm += xv * xv;
    }
    double diff_total = tsr_block_sum(sums, diff);
    double norm_total = tsr_block_sum(sums, norm);
    if (threadIdx.x == 0) {
        long long at = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * 2;
        partials[at] = diff_total;
        partials[at + 1] = norm_total;
    }
}
