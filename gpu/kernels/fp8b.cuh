// Block decoder of FP8_E4M3_B32 (engine/gguf/fp8.go: ftchat's in-memory
// form of Hugging Face FP8 weights with per-row or 128x128-block scales,
// not a GGUF type) for the typed templates (mm.cuh, moe.cuh,
// moe_gemv2.cuh): included by mm_fp8b.cu and its moe_/moev_/moev2_ sources
// before the template header. A block is a float32 scale and 32 E4M3
// codes (36 bytes); element j is E4M3(code j) × scale, rounded once
// (__fmul_rn, never contracted), exactly as gguf.Dequantize. The codes
// decode as in fp8.cuh (integer ops); weights stay 8-bit in memory (W8A16).
#pragma once
#include "fp8.cuh"

enum { T_FP8B = (1 << 16) + 1 };  // gguf.FP8_E4M3_B32
TYPEINFO(T_FP8B, 32, 36)

// Rows are whole 36-byte blocks from a 256-byte aligned base, so a block
// is 4-byte aligned: its scale and codes load as 9 aligned words.
template <> __device__ __forceinline__ void deq32<T_FP8B>(const uint8_t* b, int, float* y) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(b);
    float d = __uint_as_float(p[0]);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t w = p[1 + k];
#pragma unroll
        for (int e = 0; e < 4; e++) y[4 * k + e] = __fmul_rn(e4m3_value((w >> (8 * e)) & 0xFFu), d);
    }
}
