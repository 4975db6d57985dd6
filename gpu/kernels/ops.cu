// Element-wise, normalisation, embedding, matmul, MoE routing and sampling
// kernels of the ftchat CUDA backend (the paged KV write and attention live
// in kvwrite.cu / attention.cu). Accuracy matters here (norms, softmax of the
// router), so this file is built without --use_fast_math.
//
// Weights stay in their GGUF block formats. Every format is read through
// deq32: the 32 consecutive elements [32c, 32c+32) of one block, in exactly
// the element order of engine/gguf's CPU decoders.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ggml type ids (engine/gguf/types.go).
enum {
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7,
    T_Q8_0 = 8, T_Q8_1 = 9, T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12,
    T_Q5_K = 13, T_Q6_K = 14, T_BF16 = 30
};

template <int T> struct TypeInfo;
#define TYPEINFO(T_, BE, BB) template <> struct TypeInfo<T_> { static constexpr int be = BE, bb = BB; };
TYPEINFO(T_F32, 1, 4) TYPEINFO(T_F16, 1, 2) TYPEINFO(T_BF16, 1, 2)
TYPEINFO(T_Q4_0, 32, 18) TYPEINFO(T_Q4_1, 32, 20) TYPEINFO(T_Q5_0, 32, 22) TYPEINFO(T_Q5_1, 32, 24)
TYPEINFO(T_Q8_0, 32, 34) TYPEINFO(T_Q8_1, 32, 36)
TYPEINFO(T_Q2_K, 256, 84) TYPEINFO(T_Q3_K, 256, 110) TYPEINFO(T_Q4_K, 256, 144)
TYPEINFO(T_Q5_K, 256, 176) TYPEINFO(T_Q6_K, 256, 210)

__device__ __forceinline__ float ldh(const uint8_t* p) {
    return __half2float(__ushort_as_half((uint16_t)(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ uint32_t ldu32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// scale/min pair j of a Q4_K/Q5_K block (6 bits each, packed in 12 bytes).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// deq32 decodes elements [32c, 32c+32) of block b (of type T) into y.
// For the float types "block" means the row and c indexes 32-element runs.
template <int T> __device__ __forceinline__ void deq32(const uint8_t* b, int c, float* y);

template <> __device__ __forceinline__ void deq32<T_F32>(const uint8_t* b, int c, float* y) {
    const float4* p = reinterpret_cast<const float4*>(b + 128 * c);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 v = p[i];
        y[4 * i] = v.x; y[4 * i + 1] = v.y; y[4 * i + 2] = v.z; y[4 * i + 3] = v.w;
    }
}
template <> __device__ __forceinline__ void deq32<T_F16>(const uint8_t* b, int c, float* y) {
    const uint4* p = reinterpret_cast<const uint4*>(b + 64 * c);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 v = p[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __half22float2(*reinterpret_cast<__half2*>(&w[k]));
            y[8 * i + 2 * k] = f.x; y[8 * i + 2 * k + 1] = f.y;
        }
    }
}
template <> __device__ __forceinline__ void deq32<T_BF16>(const uint8_t* b, int c, float* y) {
    const uint4* p = reinterpret_cast<const uint4*>(b + 64 * c);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 v = p[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            y[8 * i + 2 * k] = __uint_as_float(w[k] << 16);
            y[8 * i + 2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
        }
    }
}
template <> __device__ __forceinline__ void deq32<T_Q4_0>(const uint8_t* b, int, float* y) {
    float d = ldh(b);
    const uint8_t* qs = b + 2;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((int)(qs[j] & 0xF) - 8) * d;
        y[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
    }
}
template <> __device__ __forceinline__ void deq32<T_Q4_1>(const uint8_t* b, int, float* y) {
    float d = ldh(b), m = ldh(b + 2);
    const uint8_t* qs = b + 4;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        y[j] = __fadd_rn(__fmul_rn((float)(qs[j] & 0xF), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)(qs[j] >> 4), d), m);
    }
}
template <> __device__ __forceinline__ void deq32<T_Q5_0>(const uint8_t* b, int, float* y) {
    float d = ldh(b);
    uint32_t qh = ldu32(b + 2);
    const uint8_t* qs = b + 6;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
        y[j] = (float)((int)((qs[j] & 0xF) | (h0 << 4)) - 16) * d;
        y[j + 16] = (float)((int)((qs[j] >> 4) | (h1 << 4)) - 16) * d;
    }
}
template <> __device__ __forceinline__ void deq32<T_Q5_1>(const uint8_t* b, int, float* y) {
    float d = ldh(b), m = ldh(b + 2);
    uint32_t qh = ldu32(b + 4);
    const uint8_t* qs = b + 8;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
        y[j] = __fadd_rn(__fmul_rn((float)((qs[j] & 0xF) | (h0 << 4)), d), m);
        y[j + 16] = __fadd_rn(__fmul_rn((float)((qs[j] >> 4) | (h1 << 4)), d), m);
    }
}
template <> __device__ __forceinline__ void deq32<T_Q8_0>(const uint8_t* b, int, float* y) {
    float d = ldh(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
#pragma unroll
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}
template <> __device__ __forceinline__ void deq32<T_Q8_1>(const uint8_t* b, int, float* y) {
    float d = ldh(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
#pragma unroll
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}
// Q2_K: element o = 128n + 32s + 16h + l uses scale 8n+2s+h and bits 2s of q[32n+16h+l].
template <> __device__ __forceinline__ void deq32<T_Q2_K>(const uint8_t* b, int c, float* y) {
    const uint8_t* sc = b;
    const uint8_t* q = b + 16 + 32 * (c >> 2);
    float d = ldh(b + 80), dmin = ldh(b + 82);
    int s = c & 3, is = 8 * (c >> 2) + 2 * s;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float dl = d * (float)(sc[is + h] & 0xF), ml = dmin * (float)(sc[is + h] >> 4);
#pragma unroll
        for (int l = 0; l < 16; l++) y[16 * h + l] = __fsub_rn(__fmul_rn(dl, (float)((q[16 * h + l] >> (2 * s)) & 3)), ml);
    }
}
// Q3_K: as Q2_K, plus the high bit from hmask (bit 4n+s), signed 6-bit scales.
template <> __device__ __forceinline__ void deq32<T_Q3_K>(const uint8_t* b, int c, float* y) {
    const uint8_t* hm = b;
    const uint8_t* q = b + 32 + 32 * (c >> 2);
    const uint8_t* sb = b + 96;
    float d = ldh(b + 108);
    int s = c & 3, n = c >> 2, is0 = 8 * n + 2 * s;
    uint8_t m = (uint8_t)(1u << (4 * n + s));
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int is = is0 + h;
        int lo = (sb[is % 8] >> (4 * (is / 8))) & 0xF;
        int hi = (sb[8 + is % 4] >> (2 * (is / 4))) & 3;
        float dl = d * (float)((lo | (hi << 4)) - 32);
#pragma unroll
        for (int l = 0; l < 16; l++) {
            int v = (q[16 * h + l] >> (2 * s)) & 3;
            if (!(hm[16 * h + l] & m)) v -= 4;
            y[16 * h + l] = dl * (float)v;
        }
    }
}
// Q4_K: chunk c is nibble (c&1) of q[32*(c>>1) ..], scale/min pair c.
template <> __device__ __forceinline__ void deq32<T_Q4_K>(const uint8_t* b, int c, float* y) {
    float d = ldh(b), dmin = ldh(b + 2);
    int sc, m;
    scale_min_k4(c, b + 4, sc, m);
    float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint4* q = reinterpret_cast<const uint4*>(b + 16 + 32 * (c >> 1));
    int shift = 4 * (c & 1);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        uint4 v = q[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                y[16 * i + 4 * k + e] = __fsub_rn(__fmul_rn(d1, (float)((w[k] >> (8 * e + shift)) & 0xF)), m1);
    }
}
template <> __device__ __forceinline__ void deq32<T_Q5_K>(const uint8_t* b, int c, float* y) {
    float d = ldh(b), dmin = ldh(b + 2);
    int sc, m;
    scale_min_k4(c, b + 4, sc, m);
    float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + 48 + 32 * (c >> 1);
    int shift = 4 * (c & 1);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int v = ((q[l] >> shift) & 0xF) | (((qh[l] >> c) & 1) << 4);
        y[l] = __fsub_rn(__fmul_rn(d1, (float)v), m1);
    }
}
// Q6_K: chunk c: half n=c>>2, quarter k=c&3: nibble (k>>1) of ql[64n + 32(k&1) + l],
// bits 2k of qh[32n + l], scale 8n + l/16 + 2k.
template <> __device__ __forceinline__ void deq32<T_Q6_K>(const uint8_t* b, int c, float* y) {
    int n = c >> 2, k = c & 3;
    const uint8_t* ql = b + 64 * n + 32 * (k & 1);
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
    float d = ldh(b + 208);
    int ls = 4 * (k >> 1);
    float d0 = d * (float)sc[2 * k], d1 = d * (float)sc[2 * k + 1];
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int v = (int)(((ql[l] >> ls) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[l] = (l < 16 ? d0 : d1) * (float)v;
    }
}

// unit_ptr returns the block holding elements [32u, 32u+32) of a row and the chunk index.
template <int T> __device__ __forceinline__ const uint8_t* unit_ptr(const uint8_t* row, int u, int& c) {
    constexpr int BE = TypeInfo<T>::be, BB = TypeInfo<T>::bb;
    if (BE == 1) {
        c = u;
        return row;
    }
    int e = 32 * u;
    c = (e % BE) / 32;
    return row + (size_t)(e / BE) * BB;
}

// Element i of a float-type row.
template <int T> __device__ __forceinline__ float ld_elem(const uint8_t* row, int i);
template <> __device__ __forceinline__ float ld_elem<T_F32>(const uint8_t* row, int i) { return reinterpret_cast<const float*>(row)[i]; }
template <> __device__ __forceinline__ float ld_elem<T_F16>(const uint8_t* row, int i) { return __half2float(reinterpret_cast<const __half*>(row)[i]); }
template <> __device__ __forceinline__ float ld_elem<T_BF16>(const uint8_t* row, int i) { return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t*>(row)[i] << 16); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------------------
// GEMV for decode and small batches: y[t][r] = sum_i W[r][i] * x[t][i] for
// t < ntok <= GEMV_MAX_TOK. One warp per output row; lanes take 32-element
// units of the row (a whole legacy block, or 1/8 of a k-quant block), so a
// warp reads its row once whatever the number of tokens. float32 accumulation.
// Requires cols % 32 == 0 (units) and 16-byte aligned x rows.
#define GEMV_MAX_TOK 8
#define GEMV_WARPS 8

template <int T>
__device__ __forceinline__ void gemv_row(const uint8_t* __restrict__ row, int cols, const float* __restrict__ x, int ldx,
                                         int ntok, float* acc) {
    int lane = threadIdx.x & 31;
    int units = cols >> 5;
    for (int u = lane; u < units; u += 32) {
        float w[32];
        int c;
        const uint8_t* blk = unit_ptr<T>(row, u, c);
        deq32<T>(blk, c, w);
#pragma unroll
        for (int t = 0; t < GEMV_MAX_TOK; t++) {
            if (t < ntok) {
                const float4* xp = reinterpret_cast<const float4*>(x + (size_t)t * ldx + 32 * u);
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float4 v = __ldg(xp + i);
                    s = fmaf(w[4 * i], v.x, s);
                    s = fmaf(w[4 * i + 1], v.y, s);
                    s = fmaf(w[4 * i + 2], v.z, s);
                    s = fmaf(w[4 * i + 3], v.w, s);
                }
                acc[t] += s;
            }
        }
    }
}

// Decode GEMV: each CTA of GEMV_WARPS warps owns GEMV_WARPS rows (a warp
// per row). The columns go in chunks of 32 units (1024 elements): each lane
// first issues the loads of its unit of the weight row (so they are in
// flight while the CTA stages the chunk of x), then the CTA copies x's chunk
// for all tokens into shared memory with coalesced loads, and each lane dots
// its dequantized unit with it. Shared x is XOR-swizzled per unit so the 32
// lanes' 16-byte reads (unit stride 128 bytes) spread over all banks.
template <int T>
__device__ void gemv_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                          const float* __restrict__ x, float* __restrict__ y, int ntok, int ldy) {
    __shared__ float4 xs[GEMV_MAX_TOK * 32 * 8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * GEMV_WARPS + warp;
    bool active = r < rows;
    const uint8_t* row = W + (size_t)(active ? r : 0) * rowBytes;
    float acc[GEMV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < GEMV_MAX_TOK; t++) acc[t] = 0.f;
    int units = cols >> 5;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    int cols4 = cols >> 2;
    for (int u0 = 0; u0 < units; u0 += 32) {
        int nu = min(32, units - u0);
        int u = u0 + lane;
        float w[32];
        if (active && lane < nu) {
            int c;
            deq32<T>(unit_ptr<T>(row, u, c), c, w);
        }
        int n4 = ntok * nu * 8;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            int t = i / (nu * 8), rem = i - t * (nu * 8), uu = rem >> 3, f = rem & 7;
            xs[t * 256 + uu * 8 + (f ^ (uu & 7))] = __ldg(x4 + (size_t)t * cols4 + (size_t)u0 * 8 + rem);
        }
        __syncthreads();
        if (active && lane < nu) {
#pragma unroll
            for (int t = 0; t < GEMV_MAX_TOK; t++) {
                if (t < ntok) {
                    float s = 0.f;
#pragma unroll
                    for (int f = 0; f < 8; f++) {
                        float4 v = xs[t * 256 + lane * 8 + (f ^ (lane & 7))];
                        s = fmaf(w[4 * f], v.x, s);
                        s = fmaf(w[4 * f + 1], v.y, s);
                        s = fmaf(w[4 * f + 2], v.z, s);
                        s = fmaf(w[4 * f + 3], v.w, s);
                    }
                    acc[t] += s;
                }
            }
        }
        __syncthreads();
    }
    if (!active) return;
#pragma unroll
    for (int t = 0; t < GEMV_MAX_TOK; t++) {
        if (t < ntok) {
            float s = warp_sum(acc[t]);
            if (lane == 0) y[(size_t)t * ldy + r] = s;
        }
    }
}

// Decode GEMV for one token with all of x in shared memory: one copy of x
// per CTA and a single barrier, then each warp streams its row with the unit
// loop unrolled so several units' loads are in flight per lane. (Batches of
// 2..8 tokens use the chunked kernel above.)
template <int T>
__device__ void gemvx_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                           const float* __restrict__ x, float* __restrict__ y) {
    extern __shared__ float4 xsd[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int cols4 = cols >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int i = threadIdx.x; i < cols4; i += blockDim.x) {
        int uu = i >> 3, f = i & 7;
        xsd[uu * 8 + (f ^ (uu & 7))] = __ldg(x4 + i);
    }
    __syncthreads();
    int r = blockIdx.x * GEMV_WARPS + warp;
    if (r >= rows) return;
    const uint8_t* row = W + (size_t)r * rowBytes;
    float acc = 0.f;
    int units = cols >> 5;
#pragma unroll 4
    for (int u = lane; u < units; u += 32) {
        float w[32];
        int c;
        deq32<T>(unit_ptr<T>(row, u, c), c, w);
        const float4* xr = xsd + u * 8;
        float s = 0.f;
#pragma unroll
        for (int f = 0; f < 8; f++) {
            float4 v = xr[f ^ (u & 7)];
            s = fmaf(w[4 * f], v.x, s);
            s = fmaf(w[4 * f + 1], v.y, s);
            s = fmaf(w[4 * f + 2], v.z, s);
            s = fmaf(w[4 * f + 3], v.w, s);
        }
        acc += s;
    }
    acc = warp_sum(acc);
    if (lane == 0) y[r] = acc;
}

#define GEMVX_KERNEL(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemvx_##NAME(                                \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y) {                  \
        gemvx_body<T_>(W, rowBytes, rows, cols, x, y);                                                         \
    }

// Float weights with any row length: lanes stride over elements (coalesced).
template <int T>
__device__ void gemv_float_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                const float* __restrict__ x, float* __restrict__ y, int ntok, int ldy) {
    int r = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const uint8_t* row = W + (size_t)r * rowBytes;
    float acc[GEMV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < GEMV_MAX_TOK; t++) acc[t] = 0.f;
    for (int i = threadIdx.x & 31; i < cols; i += 32) {
        float w = ld_elem<T>(row, i);
#pragma unroll
        for (int t = 0; t < GEMV_MAX_TOK; t++)
            if (t < ntok) acc[t] = fmaf(w, x[(size_t)t * cols + i], acc[t]);
    }
#pragma unroll
    for (int t = 0; t < GEMV_MAX_TOK; t++) {
        if (t < ntok) {
            float s = warp_sum(acc[t]);
            if ((threadIdx.x & 31) == 0) y[(size_t)t * ldy + r] = s;
        }
    }
}

#define GEMV_KERNEL(T_, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_##NAME(                                 \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemv_body<T_>(W, rowBytes, rows, cols, x, y, ntok, rows);                                              \
    }
GEMV_KERNEL(T_F32, f32) GEMV_KERNEL(T_F16, f16) GEMV_KERNEL(T_BF16, bf16)
GEMV_KERNEL(T_Q4_0, q4_0) GEMV_KERNEL(T_Q4_1, q4_1) GEMV_KERNEL(T_Q5_0, q5_0) GEMV_KERNEL(T_Q5_1, q5_1)
GEMV_KERNEL(T_Q8_0, q8_0) GEMV_KERNEL(T_Q8_1, q8_1) GEMV_KERNEL(T_Q2_K, q2_k) GEMV_KERNEL(T_Q3_K, q3_k)
GEMV_KERNEL(T_Q4_K, q4_k) GEMV_KERNEL(T_Q5_K, q5_k) GEMV_KERNEL(T_Q6_K, q6_k)

GEMVX_KERNEL(T_F32, f32) GEMVX_KERNEL(T_F16, f16) GEMVX_KERNEL(T_BF16, bf16)
GEMVX_KERNEL(T_Q4_0, q4_0) GEMVX_KERNEL(T_Q4_1, q4_1) GEMVX_KERNEL(T_Q5_0, q5_0) GEMVX_KERNEL(T_Q5_1, q5_1)
GEMVX_KERNEL(T_Q8_0, q8_0) GEMVX_KERNEL(T_Q8_1, q8_1) GEMVX_KERNEL(T_Q2_K, q2_k) GEMVX_KERNEL(T_Q3_K, q3_k)
GEMVX_KERNEL(T_Q4_K, q4_k) GEMVX_KERNEL(T_Q5_K, q5_k) GEMVX_KERNEL(T_Q6_K, q6_k)

#define GEMVF_KERNEL(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemvf_##NAME(                                \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemv_float_body<T_>(W, rowBytes, rows, cols, x, y, ntok, rows);                                        \
    }
GEMVF_KERNEL(T_F32, f32) GEMVF_KERNEL(T_F16, f16) GEMVF_KERNEL(T_BF16, bf16)

// ---------------------------------------------------------------------------
// Tensor-core GEMM for prefill: Y[ntok][rows] = X[ntok][cols] · W^T.
// CTA tile 64 tokens x 64 output rows x 64 k; 4 warps in 2x2, each 32x32
// (2 x 4 mma.sync m16n8k16 bf16 tiles, float32 accumulators). Each thread
// dequantizes one 32-element unit of W per k step into shared memory as
// bf16, and converts 32 floats of X. Requires cols % 32 == 0.
#define GM 64
#define GN 64
#define GK 64
#define GPAD 8

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int T>
__device__ void gemm_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                          const float* __restrict__ X, float* __restrict__ Y, int ntok) {
    __shared__ __align__(16) __nv_bfloat16 As[GM][GK + GPAD];
    __shared__ __align__(16) __nv_bfloat16 Bs[GN][GK + GPAD];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int m0 = blockIdx.y * GM, n0 = blockIdx.x * GN;
    int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    int g = lane >> 2, tg = lane & 3;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;

    int lr = tid >> 1, lh = tid & 1;  // this thread's tile row and half (32 k values)
    int units = cols >> 5;
    for (int k0 = 0; k0 < cols; k0 += GK) {
        int u = (k0 >> 5) + lh;
        // W unit -> Bs[lr][32*lh ..]
        {
            float w[32];
            int r = n0 + lr;
            if (r < rows && u < units) {
                int c;
                const uint8_t* blk = unit_ptr<T>(W + (size_t)r * rowBytes, u, c);
                deq32<T>(blk, c, w);
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) w[i] = 0.f;
            }
            uint4* dst = reinterpret_cast<uint4*>(&Bs[lr][32 * lh]);
#pragma unroll
            for (int i = 0; i < 4; i++)
                dst[i] = make_uint4(pack_bf16(w[8 * i], w[8 * i + 1]), pack_bf16(w[8 * i + 2], w[8 * i + 3]),
                                    pack_bf16(w[8 * i + 4], w[8 * i + 5]), pack_bf16(w[8 * i + 6], w[8 * i + 7]));
        }
        // X row -> As[lr][32*lh ..]
        {
            int t = m0 + lr;
            uint4* dst = reinterpret_cast<uint4*>(&As[lr][32 * lh]);
            if (t < ntok && u < units) {
                const float4* xp = reinterpret_cast<const float4*>(X + (size_t)t * cols + 32 * u);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float4 a = __ldg(xp + 2 * i), b = __ldg(xp + 2 * i + 1);
                    dst[i] = make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) dst[i] = make_uint4(0, 0, 0, 0);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            uint32_t a[2][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int r = wm + 16 * i + g;
                a[i][0] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg]);
                a[i][1] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg]);
                a[i][2] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg + 8]);
                a[i][3] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg + 8]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int n = wn + 8 * j + g;
                b[j][0] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg]);
                b[j][1] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg + 8]);
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int t = m0 + wm + 16 * i + g, r = n0 + wn + 8 * j + 2 * tg;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int tt = t + 8 * h;
                if (tt < ntok) {
                    if (r < rows) Y[(size_t)tt * rows + r] = acc[i][j][2 * h];
                    if (r + 1 < rows) Y[(size_t)tt * rows + r + 1] = acc[i][j][2 * h + 1];
                }
            }
        }
}

#define GEMM_KERNEL(T_, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128) gemm_##NAME(                                             \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemm_body<T_>(W, rowBytes, rows, cols, x, y, ntok);                                                    \
    }
GEMM_KERNEL(T_F32, f32) GEMM_KERNEL(T_F16, f16) GEMM_KERNEL(T_BF16, bf16)
GEMM_KERNEL(T_Q4_0, q4_0) GEMM_KERNEL(T_Q4_1, q4_1) GEMM_KERNEL(T_Q5_0, q5_0) GEMM_KERNEL(T_Q5_1, q5_1)
GEMM_KERNEL(T_Q8_0, q8_0) GEMM_KERNEL(T_Q8_1, q8_1) GEMM_KERNEL(T_Q2_K, q2_k) GEMM_KERNEL(T_Q3_K, q3_k)
GEMM_KERNEL(T_Q4_K, q4_k) GEMM_KERNEL(T_Q5_K, q5_k) GEMM_KERNEL(T_Q6_K, q6_k)

// Large-batch GEMM: CTA tile 128 tokens x 128 output rows x 64 k, 8 warps
// in 2 (tokens) x 4 (rows), each 64x32 (4 x 4 mma tiles). Loads of the next
// k step (one dequantized W unit and 32 floats of X per thread) are issued
// into registers before the mma loop of the current step, so global
// latency overlaps the tensor-core work. Requires cols % 32 == 0.
#define LM 128
#define LN 128

template <int T>
__device__ __forceinline__ void gemm_load(const uint8_t* __restrict__ W, long long rowBytes, int rows, int units,
                                          const float* __restrict__ X, int cols, int ntok, int wr, int xt, int u,
                                          float* w, float4* xv) {
    if (wr < rows && u < units) {
        int c;
        deq32<T>(unit_ptr<T>(W + (size_t)wr * rowBytes, u, c), c, w);
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = 0.f;
    }
    if (xt < ntok && u < units) {
        const float4* xp = reinterpret_cast<const float4*>(X + (size_t)xt * cols + 32 * u);
#pragma unroll
        for (int i = 0; i < 8; i++) xv[i] = __ldg(xp + i);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) xv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

template <int T>
__device__ void gemm_large_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                const float* __restrict__ X, float* __restrict__ Y, int ntok) {
    __shared__ __align__(16) __nv_bfloat16 As[LM][GK + GPAD];
    __shared__ __align__(16) __nv_bfloat16 Bs[LN][GK + GPAD];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int m0 = blockIdx.y * LM, n0 = blockIdx.x * LN;
    int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    int g = lane >> 2, tg = lane & 3;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.f;
    int lr = tid >> 1, lh = tid & 1;
    int units = cols >> 5;
    float w[32];
    float4 xv[8];
    gemm_load<T>(W, rowBytes, rows, units, X, cols, ntok, n0 + lr, m0 + lr, lh, w, xv);
    for (int k0 = 0; k0 < cols; k0 += GK) {
        {
            uint4* dst = reinterpret_cast<uint4*>(&Bs[lr][32 * lh]);
#pragma unroll
            for (int i = 0; i < 4; i++)
                dst[i] = make_uint4(pack_bf16(w[8 * i], w[8 * i + 1]), pack_bf16(w[8 * i + 2], w[8 * i + 3]),
                                    pack_bf16(w[8 * i + 4], w[8 * i + 5]), pack_bf16(w[8 * i + 6], w[8 * i + 7]));
            uint4* dx = reinterpret_cast<uint4*>(&As[lr][32 * lh]);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 a = xv[2 * i], b = xv[2 * i + 1];
                dx[i] = make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
            }
        }
        __syncthreads();
        if (k0 + GK < cols) gemm_load<T>(W, rowBytes, rows, units, X, cols, ntok, n0 + lr, m0 + lr, ((k0 + GK) >> 5) + lh, w, xv);
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wm + 16 * i + g;
                a[i][0] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg]);
                a[i][1] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg]);
                a[i][2] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg + 8]);
                a[i][3] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg + 8]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int n = wn + 8 * j + g;
                b[j][0] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg]);
                b[j][1] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg + 8]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int t = m0 + wm + 16 * i + g, r = n0 + wn + 8 * j + 2 * tg;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int tt = t + 8 * h;
                if (tt < ntok) {
                    if (r < rows) Y[(size_t)tt * rows + r] = acc[i][j][2 * h];
                    if (r + 1 < rows) Y[(size_t)tt * rows + r + 1] = acc[i][j][2 * h + 1];
                }
            }
        }
}

#define GEMML_KERNEL(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) gemml_##NAME(                                            \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemm_large_body<T_>(W, rowBytes, rows, cols, x, y, ntok);                                              \
    }
GEMML_KERNEL(T_F32, f32) GEMML_KERNEL(T_F16, f16) GEMML_KERNEL(T_BF16, bf16)
GEMML_KERNEL(T_Q4_0, q4_0) GEMML_KERNEL(T_Q4_1, q4_1) GEMML_KERNEL(T_Q5_0, q5_0) GEMML_KERNEL(T_Q5_1, q5_1)
GEMML_KERNEL(T_Q8_0, q8_0) GEMML_KERNEL(T_Q8_1, q8_1) GEMML_KERNEL(T_Q2_K, q2_k) GEMML_KERNEL(T_Q3_K, q3_k)
GEMML_KERNEL(T_Q4_K, q4_k) GEMML_KERNEL(T_Q5_K, q5_k) GEMML_KERNEL(T_Q6_K, q6_k)

// ---------------------------------------------------------------------------
// MoE expert GEMV. Stacked expert weights hold rowsPerExpert rows per expert.
// Work item p = blockIdx.y indexes (token, slot) pairs: expert ids[p];
// input x + (p / xDiv) * cols (xDiv = topk for inputs shared by a token's
// slots, 1 for per-slot inputs); output y[p][rowsPerExpert].
template <int T>
__device__ void moe_gemv_body(const uint8_t* __restrict__ W, long long rowBytes, int rowsPerExpert, int cols,
                              const float* __restrict__ x, int xDiv, const int* __restrict__ ids, float* __restrict__ y) {
    int p = blockIdx.y;
    int r = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (r >= rowsPerExpert) return;
    int e = ids[p];
    const uint8_t* row = W + ((size_t)e * rowsPerExpert + r) * rowBytes;
    float acc[GEMV_MAX_TOK];
    acc[0] = 0.f;
    gemv_row<T>(row, cols, x + (size_t)(p / xDiv) * cols, cols, 1, acc);
    float s = warp_sum(acc[0]);
    if ((threadIdx.x & 31) == 0) y[(size_t)p * rowsPerExpert + r] = s;
}
#define MOE_KERNEL(T_, NAME)                                                                                   \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) moe_gemv_##NAME(                             \
        const uint8_t* W, long long rowBytes, int rowsPerExpert, int cols, const float* x, int xDiv,           \
        const int* ids, float* y) {                                                                            \
        moe_gemv_body<T_>(W, rowBytes, rowsPerExpert, cols, x, xDiv, ids, y);                                  \
    }
MOE_KERNEL(T_F32, f32) MOE_KERNEL(T_F16, f16) MOE_KERNEL(T_BF16, bf16)
MOE_KERNEL(T_Q4_0, q4_0) MOE_KERNEL(T_Q4_1, q4_1) MOE_KERNEL(T_Q5_0, q5_0) MOE_KERNEL(T_Q5_1, q5_1)
MOE_KERNEL(T_Q8_0, q8_0) MOE_KERNEL(T_Q8_1, q8_1) MOE_KERNEL(T_Q2_K, q2_k) MOE_KERNEL(T_Q3_K, q3_k)
MOE_KERNEL(T_Q4_K, q4_k) MOE_KERNEL(T_Q5_K, q5_k) MOE_KERNEL(T_Q6_K, q6_k)

// Router: per token, softmax over nexp logits (float32, max-subtracted), pick
// the topk largest probabilities (ties: lower expert id first), optionally
// renormalise them to sum to 1. One thread per token (nexp <= 1024).
extern "C" __global__ void moe_route(const float* logits, int ntok, int nexp, int topk, int norm, int* ids, float* wts) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ntok) return;
    const float* l = logits + (size_t)t * nexp;
    float mx = -INFINITY;
    for (int e = 0; e < nexp; e++) mx = fmaxf(mx, l[e]);
    float sum = 0.f;
    for (int e = 0; e < nexp; e++) sum += expf(l[e] - mx);
    float prev = INFINITY;
    int prevId = -1;
    float tot = 0.f;
    for (int k = 0; k < topk; k++) {
        // next best strictly after (prev, prevId) in (value desc, id asc) order
        float best = -INFINITY;
        int bi = -1;
        for (int e = 0; e < nexp; e++) {
            float v = l[e];
            bool after = v < prev || (v == prev && e > prevId);
            if (after && (bi < 0 || v > best)) {
                best = v;
                bi = e;
            }
        }
        float pr = expf(best - mx) / sum;
        ids[t * topk + k] = bi;
        wts[t * topk + k] = pr;
        tot += pr;
        prev = best;
        prevId = bi;
    }
    if (norm)
        for (int k = 0; k < topk; k++) wts[t * topk + k] /= tot;
}

// h[p] = silu(g[p]) * u[p] over n elements (SwiGLU), then MoE combine.
extern "C" __global__ void moe_combine(const float* yd, const float* wts, int ntok, int topk, int dim, float* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)ntok * dim) return;
    int t = (int)(i / dim), d = (int)(i % dim);
    float s = 0.f;
    for (int k = 0; k < topk; k++) s = fmaf(wts[t * topk + k], yd[((size_t)t * topk + k) * dim + d], s);
    out[i] = s;
}

// Dequantize rows [r0, r0+nrows) of W to float32 out[nrows][cols] (the
// cuBLAS prefill path). One thread per 32-element unit; cols % 32 == 0.
template <int T>
__device__ void dequant_rows_body(const uint8_t* W, long long rowBytes, int r0, int nrows, int cols, float* out) {
    int units = cols >> 5;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nrows * units) return;
    int rr = (int)(i / units), u = (int)(i % units);
    float w[32];
    int c;
    deq32<T>(unit_ptr<T>(W + (size_t)(r0 + rr) * rowBytes, u, c), c, w);
    float4* o = reinterpret_cast<float4*>(out + (size_t)rr * cols + 32 * u);
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = make_float4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
}
#define DEQROWS_KERNEL(T_, NAME)                                                                               \
    extern "C" __global__ void dequant_rows_##NAME(const uint8_t* W, long long rowBytes, int r0, int nrows,     \
                                                   int cols, float* out) {                                     \
        dequant_rows_body<T_>(W, rowBytes, r0, nrows, cols, out);                                              \
    }
DEQROWS_KERNEL(T_F16, f16) DEQROWS_KERNEL(T_BF16, bf16)
DEQROWS_KERNEL(T_Q4_0, q4_0) DEQROWS_KERNEL(T_Q4_1, q4_1) DEQROWS_KERNEL(T_Q5_0, q5_0) DEQROWS_KERNEL(T_Q5_1, q5_1)
DEQROWS_KERNEL(T_Q8_0, q8_0) DEQROWS_KERNEL(T_Q8_1, q8_1) DEQROWS_KERNEL(T_Q2_K, q2_k) DEQROWS_KERNEL(T_Q3_K, q3_k)
DEQROWS_KERNEL(T_Q4_K, q4_k) DEQROWS_KERNEL(T_Q5_K, q5_k) DEQROWS_KERNEL(T_Q6_K, q6_k)

// ---------------------------------------------------------------------------
// Embedding: dst[i] = dequantized row tokens[i] of the table. One CTA per
// token; threads take 32-element units (float types: cols % 32 == 0 here too,
// else embed_float). Out-of-range ids write NaN rows and set *bad.
template <int T>
__device__ void embed_body(const uint8_t* table, long long rowBytes, int vocab, int cols, const int* tokens, float* dst, int* bad) {
    int i = blockIdx.x, tok = tokens[i];
    float* out = dst + (size_t)i * cols;
    if (tok < 0 || tok >= vocab) {
        for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = __int_as_float(0x7fc00000);
        if (threadIdx.x == 0) atomicExch(bad, tok);
        return;
    }
    const uint8_t* row = table + (size_t)tok * rowBytes;
    for (int u = threadIdx.x; u < (cols >> 5); u += blockDim.x) {
        float w[32];
        int c;
        deq32<T>(unit_ptr<T>(row, u, c), c, w);
#pragma unroll
        for (int k = 0; k < 32; k++) out[32 * u + k] = w[k];
    }
}
#define EMBED_KERNEL(T_, NAME)                                                                                 \
    extern "C" __global__ void embed_##NAME(const uint8_t* table, long long rowBytes, int vocab, int cols,     \
                                            const int* tokens, float* dst, int* bad) {                         \
        embed_body<T_>(table, rowBytes, vocab, cols, tokens, dst, bad);                                        \
    }
EMBED_KERNEL(T_F32, f32) EMBED_KERNEL(T_F16, f16) EMBED_KERNEL(T_BF16, bf16)
EMBED_KERNEL(T_Q4_0, q4_0) EMBED_KERNEL(T_Q4_1, q4_1) EMBED_KERNEL(T_Q5_0, q5_0) EMBED_KERNEL(T_Q5_1, q5_1)
EMBED_KERNEL(T_Q8_0, q8_0) EMBED_KERNEL(T_Q8_1, q8_1) EMBED_KERNEL(T_Q2_K, q2_k) EMBED_KERNEL(T_Q3_K, q3_k)
EMBED_KERNEL(T_Q4_K, q4_k) EMBED_KERNEL(T_Q5_K, q5_k) EMBED_KERNEL(T_Q6_K, q6_k)

template <int T>
__device__ void embedf_body(const uint8_t* table, long long rowBytes, int vocab, int cols, const int* tokens, float* dst, int* bad) {
    int i = blockIdx.x, tok = tokens[i];
    float* out = dst + (size_t)i * cols;
    if (tok < 0 || tok >= vocab) {
        for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = __int_as_float(0x7fc00000);
        if (threadIdx.x == 0) atomicExch(bad, tok);
        return;
    }
    const uint8_t* row = table + (size_t)tok * rowBytes;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = ld_elem<T>(row, j);
}
#define EMBEDF_KERNEL(T_, NAME)                                                                                \
    extern "C" __global__ void embedf_##NAME(const uint8_t* table, long long rowBytes, int vocab, int cols,    \
                                             const int* tokens, float* dst, int* bad) {                        \
        embedf_body<T_>(table, rowBytes, vocab, cols, tokens, dst, bad);                                       \
    }
EMBEDF_KERNEL(T_F32, f32) EMBEDF_KERNEL(T_F16, f16) EMBEDF_KERNEL(T_BF16, bf16)

// ---------------------------------------------------------------------------
// Block-wide sum for 256-thread CTAs.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = l < nw ? part[l] : 0.f;
    return warp_sum(v);
}

// RMSNorm: dst[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * g, one CTA per row.
// Works in place (dst == x).
extern "C" __global__ void rmsnorm(float* dst, const float* x, const float* g, int cols, float eps) {
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* dr = dst + (size_t)blockIdx.x * cols;
    float ss = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / cols + (double)eps));
    for (int i = threadIdx.x; i < cols; i += blockDim.x) dr[i] = xr[i] * inv * g[i];
}

// HeadRMSNorm: each headDim slice of every row, in place; one warp per (row, head).
extern "C" __global__ void head_rmsnorm(float* x, const float* g, int nslices, int headDim, float eps) {
    int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (s >= nslices) return;
    float* v = x + (size_t)s * headDim;
    float ss = 0.f;
    for (int i = threadIdx.x & 31; i < headDim; i += 32) ss = fmaf(v[i], v[i], ss);
    ss = warp_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / headDim + (double)eps));
    for (int i = threadIdx.x & 31; i < headDim; i += 32) v[i] = v[i] * inv * g[i];
}

// RoPE in place. x: [rows][cols], heads of headDim; freqs: dim/2 inverse
// frequencies (scale and freq factors folded in, float64). Angles are
// computed in float64 so long positions keep their precision.
// neox: pairs (i, i+dim/2); else (2i, 2i+1). One thread per (row, head, pair).
extern "C" __global__ void rope(float* x, const int* pos, const double* freqs, int rows, int cols, int headDim,
                                int dim, int neox) {
    int half = dim >> 1;
    int heads = cols / headDim;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long n = (long long)rows * heads * half;
    if (i >= n) return;
    int p = (int)(i % half);
    long long rh = i / half;
    int h = (int)(rh % heads), r = (int)(rh / heads);
    double s, c;
    sincos((double)pos[r] * freqs[p], &s, &c);
    float fs = (float)s, fc = (float)c;
    float* v = x + (size_t)r * cols + (size_t)h * headDim;
    int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
    float a = v[i0], b = v[i1];
    v[i0] = a * fc - b * fs;
    v[i1] = a * fs + b * fc;
}

// dst = silu(gate) * up, element-wise.
extern "C" __global__ void swiglu(float* dst, const float* gate, const float* up, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    dst[i] = g / (1.f + expf(-g)) * up[i];
}

// SwiGLU on MoE: h[p][f] = silu(g[p][f]) * u[p][f] is the same kernel.

// dst += x.
extern "C" __global__ void add(float* dst, const float* x, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += x[i];
}

// x[r][c] += b[c].
extern "C" __global__ void add_bias(float* x, const float* b, int rows, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)rows * cols) x[i] += b[i % cols];
}

// Greedy sampling: out[r] = argmax of row r (first index on ties; NaN never wins).
extern "C" __global__ void argmax_rows(const float* x, int cols, int* out) {
    const float* v = x + (size_t)blockIdx.x * cols;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float f = v[i];
        if (f > best || (f == best && i < bi)) {
            best = f;
            bi = i;
        }
    }
    __shared__ float sv[32];
    __shared__ int si[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) {
            best = ov;
            bi = oi;
        }
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) {
        sv[w] = best;
        si[w] = bi;
    }
    __syncthreads();
    if (w == 0) {
        int nw = blockDim.x >> 5;
        best = l < nw ? sv[l] : -INFINITY;
        bi = l < nw ? si[l] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) {
                best = ov;
                bi = oi;
            }
        }
        if (l == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}

extern "C" __global__ void fill_u32(uint32_t* p, uint32_t v, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (long long)gridDim.x * blockDim.x) p[i] = v;
}
