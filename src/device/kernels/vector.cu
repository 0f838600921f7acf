// Element-wise operations and deterministic reductions on tessera's device arrays (device::ops::vector).
//
// The element-wise kernels use the _rn intrinsics so that the compiler cannot contract a multiply
// and an add into one FMA: every value is rounded as the CPU twin (tensor.rs) rounds it, so these
// operations give the CPU's bits. Every kernel walks its range with a grid-stride loop, so any grid
// covers any length.

#define TSR_GRID_STRIDE(i, n)                                                                    \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);               \
         i += (long long)gridDim.x * blockDim.x)

// y ← y + a·x (Tensor::axpy).
extern "C" __global__ void tsr_axpy(float* __restrict__ y, const float* __restrict__ x, float a,
                                    long long n) {
    TSR_GRID_STRIDE(i, n) { y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i])); }
}

// x ← a·x (Tensor::scale).
extern "C" __global__ void tsr_scale(float* __restrict__ x, float a, long long n) {
    TSR_GRID_STRIDE(i, n) { x[i] = __fmul_rn(x[i], a); }
}

// out ← a − b (Tensor::sub).
extern "C" __global__ void tsr_sub(float* __restrict__ out, const float* __restrict__ a,
                                   const float* __restrict__ b, long long n) {
    TSR_GRID_STRIDE(i, n) { out[i] = __fsub_rn(a[i], b[i]); }
}

// x ← clamp(x, lo, hi) as Rust's f32::clamp: NaN stays NaN.
extern "C" __global__ void tsr_clamp(float* __restrict__ x, float lo, float hi, long long n) {
    TSR_GRID_STRIDE(i, n) {
        float v = x[i];
        if (v < lo) v = lo;
        if (v > hi) v = hi;
        x[i] = v;
    }
}

// The reductions run with exactly TSR_REDUCE_THREADS threads per block (a power of two).
#define TSR_REDUCE_THREADS 256

// Tree sum of one value per thread of the block, in a fixed order; thread 0 gets the total.
__device__ double tsr_block_sum(double* sums, double v) {
    sums[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = TSR_REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    return sums[0];
}

// partials[block] ← Σ a[i]·b[i] over the block's grid-stride share, in f64. The products of two
// floats are exact in f64, and the order of every sum depends on n and the grid alone, so the
// result is the same on every run (the host fixes the grid as a function of n).
extern "C" __global__ void tsr_dot_partials(const float* __restrict__ a,
                                            const float* __restrict__ b,
                                            double* __restrict__ partials, long long n) {
    __shared__ double sums[TSR_REDUCE_THREADS];
    double acc = 0.0;
    TSR_GRID_STRIDE(i, n) { acc += (double)a[i] * (double)b[i]; }
    double total = tsr_block_sum(sums, acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// out[0] ← Σ partials[0..count], one block, fixed order.
extern "C" __global__ void tsr_sum_partials(const double* __restrict__ partials, int count,
                                            double* __restrict__ out) {
    __shared__ double sums[TSR_REDUCE_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += TSR_REDUCE_THREADS) acc += partials[i];
    double total = tsr_block_sum(sums, acc);
    if (threadIdx.x == 0) out[0] = total;
}

// dst[p][c][r] ← src[p][r][c] for `planes` rows × cols matrices.
extern "C" __global__ void tsr_transpose(const float* __restrict__ src, float* __restrict__ dst,
                                         int rows, int cols, long long planes) {
    long long per = (long long)rows * cols;
    TSR_GRID_STRIDE(i, planes * per) {
        long long p = i / per;
        int rc = (int)(i - p * per);
        int r = rc / cols, c = rc - r * cols;
        dst[p * per + (long long)c * rows + r] = src[i];
    }
}
