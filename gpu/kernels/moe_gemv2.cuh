// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2, gpu/moe.go): instantiated
// by moev2_<type>.cu (modules of their own, so the default path loads no
// extra PTX), same arguments and results as moe.cuh's moe_gemv_gu /
// moe_gemv_dn, for any type deq32 decodes.
//
// Why a second pair: the first keeps 4 warps on one output row, one unit
// per lane, and reads the unit's 32 floats of x from global memory at a
// 128-byte lane stride (a float4 load touches 32 lines), then syncs the CTA
// for the reduction; at the Qwen3.6-35B-A3B decode shape it reaches about
// 320 GB/s. Here a warp owns MOE2_RW output rows end to end (no CTA
// reduction), the activation is staged once per CTA in shared memory with
// each 32-float unit padded to 36 floats (lanes read consecutive units
// without bank conflicts), and one lane's x unit is dotted with every W row
// the warp owns (gate and up of MOE2_RW rows, resp. MOE2_RW down rows of
// the same expert), so each x read feeds several weight units and a thread
// has several independent weight loads in flight. Before staging, each
// thread prefetches its first weight units into L2 so DRAM latency overlaps
// the copy.
#pragma once
#include "common.cuh"

#define MOE2_RW 2                 // output rows per warp
#define MOE2_ROWS (8 * MOE2_RW)   // output rows per CTA of 8 warps
#define MOE2_UP 36                // floats per staged 32-float unit

// Same formula as ops.cu's swiglu and moe.cuh's moe_silu_mul.
__device__ __forceinline__ float moe2_silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// Copies n floats (n % 32 == 0) of x into xs, unit u at xs + MOE2_UP*u.
__device__ __forceinline__ void moe2_stage(float* xs, const float* __restrict__ x, int n) {
    const float4* s = reinterpret_cast<const float4*>(x);
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
        float4 v = __ldg(s + i);
        *reinterpret_cast<float4*>(xs + MOE2_UP * (i >> 3) + 4 * (i & 7)) = v;
    }
}

// Staged unit u into registers.
__device__ __forceinline__ void moe2_ldx(const float* xs, int u, float* x) {
    const float4* p = reinterpret_cast<const float4*>(xs + MOE2_UP * u);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 v = p[i];
        x[4 * i] = v.x; x[4 * i + 1] = v.y; x[4 * i + 2] = v.z; x[4 * i + 3] = v.w;
    }
}

__device__ __forceinline__ float moe2_dot(const float* w, const float* x) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 32; i++) s = fmaf(w[i], x[i], s);
    return s;
}

// Decoded unit u of row times x; xs is the sum of x (moe2_xsum), used by
// the types whose dot is factored.
template <int T>
__device__ __forceinline__ float moe2_unit(const uint8_t* row, int u, const float* x, float xs) {
    float w[32];
    int c;
    deq32<T>(unit_ptr<T>(row, u, c), c, w);
    return moe2_dot(w, x);
}

// Q4_K: sum (d1 q_i - m1) x_i computed as d1 (sum q_i x_i) - m1 (sum x_i),
// the nibbles q_i turned into floats by the 2^23 trick (a byte permute into
// 0x4B0000qq and one FADD, no int-to-float conversion, whose throughput
// bounds the decoder), the block header read as one 16-byte load. Same
// element order as deq32<T_Q4_K>; float32 throughout, a different rounding
// than decoding each weight first.
template <>
__device__ __forceinline__ float moe2_unit<T_Q4_K>(const uint8_t* row, int u, const float* x, float xs) {
    const uint8_t* b = row + (size_t)(u >> 3) * 144;
    int c = u & 7, sh = 8 * (c & 3);
    uint4 h = *reinterpret_cast<const uint4*>(b);
    const uint4* qp = reinterpret_cast<const uint4*>(b + 16 + 32 * (c >> 1));
    uint4 q0 = qp[0], q1 = qp[1];
    float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFFu)));
    float dmin = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
    // scale_min_k4 on the 12 scale bytes h.y, h.z, h.w without indexing
    uint32_t A = (h.y >> sh) & 0xFFu, B = (h.z >> sh) & 0xFFu, C = (h.w >> sh) & 0xFFu;
    uint32_t sc = c < 4 ? (A & 63u) : ((C & 0xFu) | ((A >> 6) << 4));
    uint32_t m = c < 4 ? (B & 63u) : ((C >> 4) | ((B >> 6) << 4));
    float d1 = d * (float)sc, m1 = dmin * (float)m;
    int shift = 4 * (c & 1);
    uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t nib = (w[i] >> shift) & 0x0F0F0F0Fu;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float f = __uint_as_float(__byte_perm(nib, 0x4B000000u, 0x7540u | e)) - 8388608.f;
            s = fmaf(f, x[4 * i + e], s);
        }
    }
    return fmaf(d1, s, -m1 * xs);
}

// 32 bytes at p (2-byte aligned) as 8 words: 9 aligned 4-byte loads and a
// funnel shift, instead of byte loads. Reads up to 4 bytes past p + 32
// (callers keep that inside the block).
__device__ __forceinline__ void moe2_ld32(const uint8_t* p, uint32_t* out) {
    uint32_t mis = (uint32_t)(uintptr_t)p & 2u;
    const uint32_t* a = reinterpret_cast<const uint32_t*>(p - mis);  // p's provenance: global loads
    uint32_t sh = mis * 8u;
    uint32_t w[9];
#pragma unroll
    for (int i = 0; i < 9; i++) w[i] = a[i];
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

// Q6_K (210-byte blocks, so only 2-byte aligned): ql and qh of the unit
// through moe2_ld32 (the reads past them stay in the block: qh, scales
// and d follow), the 6-bit values made floats by the 2^23 trick, one
// partial sum per 16-element scale. Element order of deq32<T_Q6_K>.
template <>
__device__ __forceinline__ float moe2_unit<T_Q6_K>(const uint8_t* row, int u, const float* x, float) {
    const uint8_t* b = row + (size_t)(u >> 3) * 210;
    int c = u & 7, n = c >> 2, k = c & 3;
    uint32_t ql[8], qh[8];
    moe2_ld32(b + 64 * n + 32 * (k & 1), ql);
    moe2_ld32(b + 128 + 32 * n, qh);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
    float d = ldh(b + 208);
    float da = d * (float)sc[2 * k], db = d * (float)sc[2 * k + 1];
    int ls = 4 * (k >> 1), hs = 2 * k;
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t q = ((ql[i] >> ls) & 0x0F0F0F0Fu) | (((qh[i] >> hs) & 0x03030303u) << 4);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float f = __uint_as_float(__byte_perm(q, 0x4B000000u, 0x7540u | e)) - 8388640.f;  // q - 32
            if (i < 4) s0 = fmaf(f, x[4 * i + e], s0);
            else s1 = fmaf(f, x[4 * i + e], s1);
        }
    }
    return fmaf(da, s0, db * s1);
}

// Q8_0 (34-byte blocks, 2-byte aligned; deq32 reads 32 single bytes): the
// block as 8 aligned words plus a last 2 or 4 bytes that stay inside it,
// the codes made floats by the 2^23 trick on (q ^ 0x80), d times the sum.
template <>
__device__ __forceinline__ float moe2_unit<T_Q8_0>(const uint8_t* row, int u, const float* x, float) {
    const uint8_t* b = row + (size_t)u * 34;
    uint32_t mis = (uint32_t)(uintptr_t)b & 2u;
    const uint32_t* a = reinterpret_cast<const uint32_t*>(b - mis);  // not before the row: b - 2 >= row when mis
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; i++) w[i] = a[i];
    uint32_t last = mis ? a[8] : (uint32_t)*reinterpret_cast<const uint16_t*>(b + 32);
    float d = __half2float(__ushort_as_half((unsigned short)(mis ? w[0] >> 16 : w[0] & 0xFFFFu)));
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t hi = i < 7 ? w[i + 1] : last;
        uint32_t q = (mis ? hi : __funnelshift_r(w[i], hi, 16)) ^ 0x80808080u;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float f = __uint_as_float(__byte_perm(q, 0x4B000000u, 0x7540u | e)) - 8388736.f;  // q - 128
            s = fmaf(f, x[4 * i + e], s);
        }
    }
    return d * s;
}

// Sum of a unit of x for the factored dots (0 for the others).
template <int T>
__device__ __forceinline__ float moe2_xsum(const float* x) {
    float s = 0.f;
    if constexpr (T == T_Q4_K) {
#pragma unroll
        for (int i = 0; i < 32; i++) s += x[i];
    }
    return s;
}

// L2 prefetch of about where unit u of row lies.
template <int T>
__device__ __forceinline__ void moe2_prefetch(const uint8_t* row, int u) {
    int c;
    const uint8_t* b = unit_ptr<T>(row, u, c);
    b += (c * 32 * TypeInfo<T>::bb) / TypeInfo<T>::be;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(b));
}

// Gate+up: grid (cdiv(ff, MOE2_ROWS), npairs), 256 threads, cols/32 *
// MOE2_UP floats of dynamic shared memory. Warp w of CTA (bx, p) computes
// rows r0 .. r0+MOE2_RW-1, r0 = (8 bx + w) MOE2_RW, of pair p.
template <int T>
__device__ void moe_gemv2_gu_body(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, long long rowBytes,
                                  int ff, int cols, const float* __restrict__ X, int topk, const int* __restrict__ ids,
                                  float* __restrict__ H, const float* __restrict__ Sg, const float* __restrict__ Su) {
    extern __shared__ __align__(16) float moe2_xs[];
    int p = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * 8 + warp) * MOE2_RW;
    int e = ids[p], units = cols >> 5;
    const uint8_t* g[MOE2_RW];
    const uint8_t* up[MOE2_RW];
#pragma unroll
    for (int j = 0; j < MOE2_RW; j++) {
        size_t off = ((size_t)e * ff + min(r0 + j, ff - 1)) * rowBytes;  // rows past ff read row ff-1, unwritten
        g[j] = Wg + off;
        up[j] = Wu + off;
    }
    if (r0 < ff && lane < units) {
#pragma unroll
        for (int j = 0; j < MOE2_RW; j++) {
            moe2_prefetch<T>(g[j], lane);
            moe2_prefetch<T>(up[j], lane);
        }
    }
    moe2_stage(moe2_xs, X + (size_t)(p / topk) * cols, cols);
    __syncthreads();
    if (r0 >= ff) return;  // no barrier follows
    float sg[MOE2_RW], su[MOE2_RW];
#pragma unroll
    for (int j = 0; j < MOE2_RW; j++) sg[j] = su[j] = 0.f;
    // Two units per lane per step, the second predicated (a lane past the
    // end rereads its first unit and drops the result), so all loads of a
    // step are independent and there is no remainder loop.
#pragma unroll 1
    for (int u0 = lane; u0 < units; u0 += 64) {
        bool ok1 = u0 + 32 < units;
        int u1 = ok1 ? u0 + 32 : u0;
        float x0[32], x1[32];
        moe2_ldx(moe2_xs, u0, x0);
        moe2_ldx(moe2_xs, u1, x1);
        float s0 = moe2_xsum<T>(x0), s1 = moe2_xsum<T>(x1);
#pragma unroll
        for (int j = 0; j < MOE2_RW; j++) {
            float a0 = moe2_unit<T>(g[j], u0, x0, s0), a1 = moe2_unit<T>(g[j], u1, x1, s1);
            float b0 = moe2_unit<T>(up[j], u0, x0, s0), b1 = moe2_unit<T>(up[j], u1, x1, s1);
            sg[j] += a0 + (ok1 ? a1 : 0.f);
            su[j] += b0 + (ok1 ? b1 : 0.f);
        }
    }
    float fg = Sg ? Sg[e] : 1.f, fu = Su ? Su[e] : 1.f;
#pragma unroll
    for (int j = 0; j < MOE2_RW; j++) {
        float a = warp_sum(sg[j]), b = warp_sum(su[j]);
        if (lane == 0 && r0 + j < ff) H[(size_t)p * ff + r0 + j] = moe2_silu_mul(Sg ? a * fg : a, Su ? b * fu : b);
    }
}

// Down + combine: grid (cdiv(dim, MOE2_ROWS), ntok), 256 threads, topk *
// ff/32 * MOE2_UP floats of dynamic shared memory (the token's topk rows
// of h, which are consecutive). Lanes stride over the (slot, unit) pairs
// q of the staged h; each adds wts * (down rows of slot q's expert . h unit q)
// for the warp's MOE2_RW rows.
template <int T>
__device__ void moe_gemv2_dn_body(const uint8_t* __restrict__ W, long long rowBytes, int dim, int ff,
                                  const float* __restrict__ H, int topk, const int* __restrict__ ids,
                                  const float* __restrict__ wts, float* __restrict__ out, const float* __restrict__ Sd) {
    extern __shared__ __align__(16) float moe2_xs[];
    __shared__ int se[32];
    __shared__ float sw[32], ss[32];
    int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * 8 + warp) * MOE2_RW;
    int units = ff >> 5, total = topk * units;
    const int* tid = ids + (size_t)t * topk;
    if (r0 < dim && lane < total) {
        int k = lane / units, u = lane - k * units;
        size_t base = (size_t)tid[k] * dim;
#pragma unroll
        for (int j = 0; j < MOE2_RW; j++) moe2_prefetch<T>(W + (base + min(r0 + j, dim - 1)) * rowBytes, u);
    }
    if (threadIdx.x < topk) {
        int p = t * topk + threadIdx.x, e = ids[p];
        se[threadIdx.x] = e;
        sw[threadIdx.x] = wts[p];
        ss[threadIdx.x] = Sd ? Sd[e] : 1.f;
    }
    moe2_stage(moe2_xs, H + (size_t)t * topk * ff, topk * ff);
    __syncthreads();
    if (r0 >= dim) return;  // no barrier follows
    float acc[MOE2_RW];
#pragma unroll
    for (int j = 0; j < MOE2_RW; j++) acc[j] = 0.f;
    // Two (slot, unit) pairs per lane per step, as in the gate+up kernel.
#pragma unroll 1
    for (int q0 = lane; q0 < total; q0 += 64) {
        bool ok1 = q0 + 32 < total;
        int qs[2] = {q0, ok1 ? q0 + 32 : q0};
        float d[2][MOE2_RW], wk[2], sk[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int k = qs[i] / units, u = qs[i] - k * units;
            size_t base = (size_t)se[k] * dim;
            wk[i] = sw[k];
            sk[i] = ss[k];
            float x[32];
            moe2_ldx(moe2_xs, qs[i], x);
            float xs = moe2_xsum<T>(x);
#pragma unroll
            for (int j = 0; j < MOE2_RW; j++) d[i][j] = moe2_unit<T>(W + (base + min(r0 + j, dim - 1)) * rowBytes, u, x, xs);
        }
#pragma unroll
        for (int j = 0; j < MOE2_RW; j++) {
            acc[j] = fmaf(wk[0], Sd ? d[0][j] * sk[0] : d[0][j], acc[j]);
            if (ok1) acc[j] = fmaf(wk[1], Sd ? d[1][j] * sk[1] : d[1][j], acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < MOE2_RW; j++) {
        float a = warp_sum(acc[j]);
        if (lane == 0 && r0 + j < dim) out[(size_t)t * dim + r0 + j] = a;
    }
}

#define MOEV2_KERNELS(T_, NAME) MOEV2_KERNELS_(T_, NAME)
#define MOEV2_KERNELS_(T_, NAME)                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_gemv2_gu_##NAME(                                  \
        const uint8_t* Wg, const uint8_t* Wu, long long rowBytes, int ff, int cols, const float* X, int topk,  \
        const int* ids, float* H, const float* Sg, const float* Su) {                                          \
        moe_gemv2_gu_body<T_>(Wg, Wu, rowBytes, ff, cols, X, topk, ids, H, Sg, Su);                            \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_gemv2_dn_##NAME(                                  \
        const uint8_t* W, long long rowBytes, int dim, int ff, const float* H, int topk, const int* ids,       \
        const float* wts, float* out, const float* Sd) {                                                       \
        moe_gemv2_dn_body<T_>(W, rowBytes, dim, ff, H, topk, ids, wts, out, Sd);                               \
    }
MOEV2_KERNELS(MOE_T, MOE_NAME)
