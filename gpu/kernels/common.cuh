// Shared device code of the ops kernels: the GGUF block decoders (deq32
// reads 32 consecutive elements of a block in exactly the element order of
// engine/gguf's CPU decoders) and small helpers. Included by ops.cu and,
// through mm.cuh, by every mm_<type>.cu.
#pragma once
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
// q4k_unit decodes what every Q4_K decoder of a chunk needs: its scale
// d1 = d*sc and min m1 = dmin*m (w = d1*q - m1), the 32 bytes holding its
// nibbles and the nibble's shift in each byte.
struct Q4KUnit {
    float d1, m1;
    const uint4* q;
    int shift;
};
__device__ __forceinline__ Q4KUnit q4k_unit(const uint8_t* b, int c) {
    float d = ldh(b), dmin = ldh(b + 2);
    int sc, m;
    scale_min_k4(c, b + 4, sc, m);
    return {d * (float)sc, dmin * (float)m, reinterpret_cast<const uint4*>(b + 16 + 32 * (c >> 1)), 4 * (c & 1)};
}
template <> __device__ __forceinline__ void deq32<T_Q4_K>(const uint8_t* b, int c, float* y) {
    const Q4KUnit un = q4k_unit(b, c);
    const float d1 = un.d1, m1 = un.m1;
    const uint4* q = un.q;
    const int shift = un.shift;
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
