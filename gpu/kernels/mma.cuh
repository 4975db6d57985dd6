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

// Activation rows of the fp16 flavour. An FFN's silu(gate)*up can pass
// 65504 where bf16 and float32 do not blink, and f16_sat would clip it:
// the GEMMs instead multiply each activation row by the power of two
// (f16_row_scale of the row's largest |value|) that brings it below 2^15
// before rounding to fp16, and multiply the row's outputs by the inverse
// (exact, both are powers of two). Rows already in range keep 1, so their
// operands are unchanged. row_amax* scan a thread's share of a row; the
// bf16 flavour compiles none of this.
__device__ __forceinline__ float f16_row_scale(float amax) {
    if (!(amax >= 32768.f)) return 1.f;  // in range (or NaN: nothing to save)
    int e = min((int)((__float_as_uint(amax) >> 23) & 0xff) - 127 - 14, 126);
    return __uint_as_float((uint32_t)(127 - e) << 23);
}

// f16_group_scale: the f16_row_scale of the largest of m over LANES
// adjacent lanes (LANES a power of two up to 32), in every one of them.
template <int LANES>
__device__ __forceinline__ float f16_group_scale(float m) {
#pragma unroll
    for (int o = 1; o < LANES; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return f16_row_scale(m);
}

// F16_ROW_INV declares a GEMM tile's inverse row scales, n floats of shared
// memory in the fp16 flavour; the bf16 flavour has none (row_inv is 1).
#if FT_COMPUTE_F16
#define F16_ROW_INV(name, n) __shared__ float name[n]
#else
#define F16_ROW_INV(name, n) float* name = nullptr
#endif

// row_inv is tile row i's inverse scale for the epilogue: 1 in the bf16
// flavour, where the multiply folds away.
__device__ __forceinline__ float row_inv(const float* xinv, int i) {
#if FT_COMPUTE_F16
    return xinv[i];
#else
    return 1.f;
#endif
}

// f16_scale4 is a times its row scale xs in the fp16 flavour, a as it is
// in the bf16 one.
__device__ __forceinline__ float4 f16_scale4(float4 a, float xs) {
#if FT_COMPUTE_F16
    return make_float4(a.x * xs, a.y * xs, a.z * xs, a.w * xs);
#else
    return a;
#endif
}

__device__ __forceinline__ float amax4(float4 a) {
    return fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w)));
}

// Largest |x| over the 8-float groups of row at k = start, start + step, ...
// below n (16-byte aligned groups).
__device__ __forceinline__ float row_amax8(const float* row, int start, int step, int n) {
    float m = 0.f;
    for (int k = start; k < n; k += step) {
        const float4* q = reinterpret_cast<const float4*>(row + k);
        m = fmaxf(m, fmaxf(amax4(__ldg(q)), amax4(__ldg(q + 1))));
    }
    return m;
}

// Largest |x| of the 32 floats at p (16-byte aligned).
__device__ __forceinline__ float amax32(const float* p) {
    const float4* q = reinterpret_cast<const float4*>(p);
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) m = fmaxf(m, amax4(__ldg(q + i)));
    return m;
}

// pair_row_scale: the f16_row_scale of X row t over [kBegin, kEnd) for
// the thread pair (lh = 0, 1; adjacent lanes) of the tile GEMMs that loads
// its 32-element units lh, lh + 2, ..., with the inverse in xinv[lr].
// 1 in the bf16 flavour.
__device__ __forceinline__ float pair_row_scale(const float* X, int cols, int ntok, int t, int lh, int kBegin,
                                                int kEnd, int lr, float* xinv) {
#if FT_COMPUTE_F16
    float m = 0.f;
    if (t < ntok)
        for (int k = kBegin + 32 * lh; k < kEnd; k += 64) m = fmaxf(m, amax32(X + (size_t)t * cols + k));
    float xs = f16_group_scale<2>(m);
    if (lh == 0) xinv[lr] = 1.f / xs;
    return xs;
#else
    return 1.f;
#endif
}

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
