// Block decoders of the FP4 weight types, NVFP4 (GGUF type 40) and MXFP4
// (type 39), for the typed templates (mm.cuh, moe.cuh): included by
// mm_nvfp4.cu, mm_mxfp4.cu and their moe_/moev_ sources before the
// template header, so common.cuh (and every other module's hash) stays as
// it is. Element order and values are engine/gguf's (fp4.go): ggml's doubled
// E2M1 values times the halved block scale, exact in float32. Weights stay
// 4-bit in memory and are decoded in registers (W4A16: the GEMMs feed the
// decoded values to bf16 mma.sync; GPUs before Blackwell have no FP4 MMA).
#pragma once
#include "common.cuh"

enum { T_MXFP4 = 39, T_NVFP4 = 40 };
TYPEINFO(T_MXFP4, 32, 17) TYPEINFO(T_NVFP4, 64, 36)

// Doubled E2M1 value of code c (0..15): 0,1,2,3,4,6,8,12, then negated.
__device__ __forceinline__ float fp4_value(uint32_t c) {
    uint32_t m = c & 7;
    float v = (float)(__byte_perm(0x03020100u, 0x0C080604u, m) & 0xFF);
    return (c & 8) ? 0.f - v : v;  // code 8 is +0, as ggml's int8 table gives
}

// UE4M3 block scale times 0.5 (ggml_ue4m3_to_fp32): 0 and 0x7F give 0,
// bit 7 is ignored by exponent and mantissa.
__device__ __forceinline__ float ue4m3_half(uint32_t x) {
    if (x == 0 || x == 0x7F) return 0.f;
    uint32_t e = (x >> 3) & 15, m = x & 7;
    if (e == 0) return (float)m * 0x1p-10f;
    return __uint_as_float(((e + 119) << 23) | (m << 20));
}

// E8M0 scale times 0.5 (ggml_e8m0_to_fp32_half): 2^(x-128).
__device__ __forceinline__ float e8m0_half(uint32_t x) {
    return __uint_as_float(x < 2 ? 0x00200000u << x : (x - 1) << 23);
}

// NVFP4 unit c (0, 1) of a 64-element block = sub-blocks 2c and 2c+1:
// qs[8s+j] holds element 16s+j (low nibble) and 16s+8+j (high nibble).
// Blocks are 36 bytes, so the code bytes are 4-byte aligned.
template <> __device__ __forceinline__ void deq32<T_NVFP4>(const uint8_t* b, int c, float* y) {
    float d0 = ue4m3_half(b[2 * c]), d1 = ue4m3_half(b[2 * c + 1]);
    const uint32_t* q = reinterpret_cast<const uint32_t*>(b + 4 + 16 * c);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t w = q[k];
        float d = k < 2 ? d0 : d1;
        int o = k < 2 ? 4 * k : 16 + 4 * (k - 2);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            y[o + e] = fp4_value((w >> (8 * e)) & 15) * d;
            y[o + 8 + e] = fp4_value((w >> (8 * e + 4)) & 15) * d;
        }
    }
}

// MXFP4: scale byte, then qs[16]: element j low nibble of qs[j], j+16 high.
template <> __device__ __forceinline__ void deq32<T_MXFP4>(const uint8_t* b, int, float* y) {
    float d = e8m0_half(b[0]);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        uint32_t q = b[1 + j];
        y[j] = fp4_value(q & 15) * d;
        y[j + 16] = fp4_value(q >> 4) * d;
    }
}
