// Tensor-core operand helpers of the GEMMs (mm.cuh, gemmt.cuh, moe.cuh):
// the 16-bit element type of the shared operand tiles, pack2 (two floats
// to one operand word) and mma_16816 (one m16n8k16 step, float32
// accumulators), so one source builds every compute flavour.
//
// FT_COMPUTE_F16 (ptxgen sets it for the compute_75 "sm75" PTX, the
// flavour of Turing GPUs and of --compute-dtype fp16 on newer ones) makes
// the operands fp16 instead of bf16. Before sm_80 there is no m16n8k16
// fp16 MMA (nor any bf16 one): a k16 step is then two m16n8k8 steps, the
// k halves of the same fragments (a0,a1 with b0; a2,a3 with b1).
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef FT_COMPUTE_F16
#define FT_COMPUTE_F16 0
#endif

#if FT_COMPUTE_F16
typedef __half mma_elem;
#else
typedef __nv_bfloat16 mma_elem;
#endif

// f16_sat clamps x to fp16's finite range, keeping NaN. fp16 tops out at
// 65504: an activation or weight beyond it (bf16 and float32 reach 3e38)
// would become inf and make the whole output row inf/NaN; clamped, only
// its own products are off.
__device__ __forceinline__ float f16_sat(float x) { return fabsf(x) > 65504.f ? copysignf(65504.f, x) : x; }

// pack2 rounds a (low half) and b (high half) to one operand word.
__device__ __forceinline__ uint32_t pack2(float a, float b) {
#if FT_COMPUTE_F16
    __half2 v = __floats2half2_rn(f16_sat(a), f16_sat(b));
#else
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
#endif
    return *reinterpret_cast<uint32_t*>(&v);
}

// mma_16816: c += a (16x16, row) * b (16x8, col), float32 accumulators.
__device__ __forceinline__ void mma_16816(float* c, const uint32_t* a, const uint32_t* b) {
#if !FT_COMPUTE_F16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
}
