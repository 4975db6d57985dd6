// Block decoder of FP8_E4M3 (engine/gguf/fp8.go: ftchat's in-memory form
// of Hugging Face per-tensor FP8 weights, not a GGUF type) for the typed
// templates (mm.cuh, moe.cuh, moe_gemv2.cuh): included by mm_fp8.cu and its
// moe_/moev_/moev2_ sources before the template header, so common.cuh (and
// every other module's hash) stays as it is. A block is 32 E4M3 codes;
// the per-tensor scale is the weight's second-level scale, applied to the
// outputs as for NVFP4 (scale_nvfp4, MoE Sg/Su/Sd). Weights stay 8-bit in
// memory and are decoded in registers (W8A16).
#pragma once
#include "common.cuh"

enum { T_FP8 = 1 << 16 };  // gguf.FP8_E4M3
TYPEINFO(T_FP8, 32, 32)

// Value of E4M3 code c, exactly as gguf.E4M3: a normal code's exponent and
// mantissa move into float32 position with the bias raised by 120, a
// subnormal one is its mantissa times 2^-9, 0x7F/0xFF are NaN. Integer
// ops only, so the sm80 and sm89 PTX agree bit for bit.
__device__ __forceinline__ float e4m3_value(uint32_t c) {
    uint32_t mag = c & 0x7Fu;
    float v = mag >= 8 ? __uint_as_float((mag << 20) + (120u << 23)) : (float)mag * 0x1p-9f;
    v = mag == 0x7Fu ? __uint_as_float(0x7FC00000u) : v;
    return __uint_as_float(__float_as_uint(v) | ((c & 0x80u) << 24));
}

// One 32-byte block (rows are whole blocks from a 256-byte aligned base,
// so the two 16-byte loads are aligned).
template <> __device__ __forceinline__ void deq32<T_FP8>(const uint8_t* b, int, float* y) {
    const uint4* p = reinterpret_cast<const uint4*>(b);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        uint4 v = p[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int e = 0; e < 4; e++) y[16 * i + 4 * k + e] = e4m3_value((w[k] >> (8 * e)) & 0xFFu);
    }
}
