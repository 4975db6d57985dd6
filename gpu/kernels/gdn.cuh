// Device helpers shared by gdn.cu and gdn_chunk.cu (see gdn.cu).
#pragma once
#include "common.cuh"

namespace {

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Per-token scalars of value head j: decay exp(g) (or g itself) and beta.
__device__ __forceinline__ void gdn_gate(const float* alpha, const float* beta, const float* A, const float* dtb,
                                         size_t row, int Hv, int j, float& g, float& bt) {
    g = A[j] * softplus(alpha[row * Hv + j] + dtb[j]);
    bt = sigm(beta[row * Hv + j]);
}

// l2norm of a Dk vector by one warp into dst (times scale): x * rsqrt(sum x^2 + 1e-6).
__device__ __forceinline__ void warp_l2norm(const float* src, float* dst, int Dk, float scale, int lane) {
    float ss = 0.f;
    for (int d = lane; d < Dk; d += 32) ss = fmaf(src[d], src[d], ss);
    ss = warp_sum(ss);
    const float inv = scale / sqrtf(ss + 1e-6f);
    for (int d = lane; d < Dk; d += 32) dst[d] = src[d] * inv;
}

}  // namespace
