// Single-token decode GEMV with several rows per warp (gemvr_<type>),
// included by each mm_<type>.cu after mm.cuh.
//
// gemvx stages all of x in shared memory for 8 rows (one per warp): on the
// 2048-wide matrices of the MoE/hybrid shapes that copy is as many bytes as
// the CTA's weights, and each CTA waits for it (one L2 round trip and a
// barrier) before its first weight load. Here
//   - each lane first touches the cache lines of its first units of its
//     first row (a plain load whose value is kept), so their HBM reads are
//     in flight while x is staged;
//   - a CTA owns rowsPerCTA rows (a multiple of 2·GEMV_WARPS), so one copy
//     of x serves them all, and each warp walks its rows two at a time,
//     both rows' units dequantized against one shared read of x.
// Row order, unit order and float32 accumulation per lane are gemvx's, so
// the sums agree with it to rounding of the two-row interleave (none: each
// row keeps its own accumulator and the same order).
#pragma once

#ifndef GEMVR_TOUCH_UNITS
#define GEMVR_TOUCH_UNITS 4 // units per lane whose lines are touched before the barrier
#endif

// gemvr_touch loads one byte of every 64 of the block holding unit u (so
// every 128-byte line it spans), returning them folded, so that the loads
// stay live until the caller uses the value.
template <int T>
__device__ __forceinline__ uint32_t gemvr_touch(const uint8_t* row, int u) {
    constexpr int BB = TypeInfo<T>::bb;
    int c;
    const uint8_t* blk = unit_ptr<T>(row, u, c);
    if (TypeInfo<T>::be == 1) { // float types: the unit's 32 elements
        blk = row + (size_t)u * 32 * BB;
        const int span = 32 * BB;
        uint32_t v = __ldg(blk);
#pragma unroll
        for (int o = 64; o < span; o += 64) v += __ldg(blk + o);
        return v + __ldg(blk + span - 1);
    }
    uint32_t v = __ldg(blk);
#pragma unroll
    for (int o = 64; o < BB; o += 64) v += __ldg(blk + o);
    return v + __ldg(blk + BB - 1);
}

template <int T>
__device__ __forceinline__ float gemvr_dot(const uint8_t* __restrict__ row, int u, const float4* __restrict__ xr) {
    float w[32];
    int c;
    deq32<T>(unit_ptr<T>(row, u, c), c, w);
    float s = 0.f;
#pragma unroll
    for (int f = 0; f < 8; f++) {
        float4 v = xr[f ^ (u & 7)];
        s = fmaf(w[4 * f], v.x, s);
        s = fmaf(w[4 * f + 1], v.y, s);
        s = fmaf(w[4 * f + 2], v.z, s);
        s = fmaf(w[4 * f + 3], v.w, s);
    }
    return s;
}

template <int T>
__device__ void gemvr_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                           const float* __restrict__ x, float* __restrict__ y, int rowsPerCTA) {
    extern __shared__ float4 xsd[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = blockIdx.x * rowsPerCTA;
    int rend = min(rows, r0 + rowsPerCTA);
    int units = cols >> 5;
    // Touch the first row's first units before staging x.
    uint32_t touched = 0;
    if (r0 + warp < rend) {
        const uint8_t* row = W + (size_t)(r0 + warp) * rowBytes;
#pragma unroll
        for (int k = 0; k < GEMVR_TOUCH_UNITS; k++) {
            int u = lane + 32 * k;
            if (u < units) touched += gemvr_touch<T>(row, u);
        }
    }
    int cols4 = cols >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int i = threadIdx.x; i < cols4; i += blockDim.x) {
        int uu = i >> 3, f = i & 7;
        xsd[uu * 8 + (f ^ (uu & 7))] = __ldg(x4 + i);
    }
    __syncthreads();
    // Rows r and r + GEMV_WARPS together, then the next pair.
    for (int r = r0 + warp; r < rend; r += 2 * GEMV_WARPS) {
        int rb = r + GEMV_WARPS;
        bool two = rb < rend;
        const uint8_t* rowA = W + (size_t)r * rowBytes;
        const uint8_t* rowB = W + (size_t)(two ? rb : r) * rowBytes;
        float accA = 0.f, accB = 0.f;
#pragma unroll 2
        for (int u = lane; u < units; u += 32) {
            const float4* xr = xsd + u * 8;
            accA += gemvr_dot<T>(rowA, u, xr);
            if (two) accB += gemvr_dot<T>(rowB, u, xr);
        }
        accA = warp_sum(accA);
        accB = warp_sum(accB);
        if (lane == 0) {
            // touched is never 0xFFFFFFFF with bytes folded by addition of
            // at most 5·GEMVR_TOUCH_UNITS values < 256: the branch keeps the
            // touch loads alive without changing any output.
            y[r] = touched == 0xFFFFFFFFu ? 0.f : accA;
            if (two) y[rb] = accB;
        }
    }
}

#define GEMVR_KERNEL(T_, NAME) GEMVR_KERNEL_(T_, NAME)
#define GEMVR_KERNEL_(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemvr_##NAME(                                \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int rowsPerCTA) {  \
        gemvr_body<T_>(W, rowBytes, rows, cols, x, y, rowsPerCTA);                                             \
    }
GEMVR_KERNEL(MM_T, MM_NAME)
