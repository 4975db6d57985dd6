// Skinny tensor-core GEMM for the 9..32-row matmuls of batched decode
// steps: Y[ntok][rows] = X[ntok][cols] · Wᵀ, included by mm.cuh (needs its
// mma.cuh's pack2 and mma_16816). The 64x64-tile GEMM leaves most SMs idle at
// these sizes and the GEMV reads the weights once per 8 rows; here the
// weights are the mma's M side, so one pass over W serves up to 32 tokens.
//
// A CTA of GT_WARPS warps owns GT_WARPS*GT_ROWS weight rows; each warp owns
// GT_ROWS of them (two m16 tiles) and walks its k range in steps of GT_K.
// In a step each lane dequantizes two 32-element units of its own row into
// the warp's shared tile as 16-bit operands; after a __syncwarp the warp
// runs the 4 k16 mmas of both m-tiles against NT token tiles of 8, whose fragments it
// reads straight from global memory (the CTA's warps read the same x, so
// it is served by L1). There is no CTA-wide barrier: a warp past the last
// row returns at once. blockIdx.y takes kSteps steps (split-K) when the row
// tiles alone would leave SMs idle; the slices write float32 partials to
// Y + blockIdx.y*ntok*rows, which gemm_reduce_* sums in order.
// Requires cols % 32 == 0 and ntok <= 8*NT.
#pragma once

#define GT_WARPS 8
#define GT_ROWS 32
#define GT_K 64
#define GT_PAD 8
// Tuning knob for kernel runs (FTCHAT_PTX_DIR; the committed PTX uses 0):
// GT_PREFETCH 1 prefetches the next step's weight block into L1, 2 the
// block 4 steps ahead (the next K-quant block) into L2, 3 both.
#ifndef GT_PREFETCH
#define GT_PREFETCH 0
#endif

#if GT_PREFETCH
// gt_prefetch touches every 128-byte line of the block (or float unit) at p.
template <int T, bool L2>
__device__ __forceinline__ void gt_prefetch(const uint8_t* p) {
    constexpr int span = TypeInfo<T>::be == 1 ? 32 * TypeInfo<T>::bb : TypeInfo<T>::bb;
#pragma unroll
    for (int o = 0; o < span; o += 128) {
        if constexpr (L2)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
        else
            asm volatile("prefetch.global.L1 [%0];" ::"l"(p + o));
    }
    if constexpr (L2)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + span - 1));
    else
        asm volatile("prefetch.global.L1 [%0];" ::"l"(p + span - 1));
}
#endif

template <int T, int NT>
__device__ void gemmt_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                           const float* __restrict__ X, float* __restrict__ Y, int ntok, int kSteps) {
    __shared__ __align__(16) mma_elem tile[GT_WARPS][GT_ROWS][GT_K + GT_PAD];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, tg = lane & 3;
    int r0 = (blockIdx.x * GT_WARPS + warp) * GT_ROWS;
    if (r0 >= rows) return;
    int units = cols >> 5;
    int steps = (units + 1) >> 1;
    int s0 = blockIdx.y * kSteps, s1 = min(steps, s0 + kSteps);
    int myRow = r0 + lane;
    bool rowOK = myRow < rows;
    const uint8_t* wrow = W + (size_t)(rowOK ? myRow : r0) * rowBytes;
    mma_elem(*ts)[GT_K + GT_PAD] = tile[warp];
#if FT_COMPUTE_F16
    // fp16 flavour (mma.cuh's row scales): token 8j+g's scale for the B
    // fragments, the inverses of tokens 8j+2tg and 8j+2tg+1 for the
    // epilogue, over this warp's k slice; one token at a time, coalesced.
    float xsb[NT], iv0[NT], iv1[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) xsb[j] = iv0[j] = iv1[j] = 1.f;
    {
        int k0 = s0 * GT_K, k1 = min(s1 * GT_K, cols);
        for (int t = 0; t < ntok; t++) {
            float m = 0.f;
            for (int k = k0 + 4 * lane; k < k1; k += 128) {
                m = fmaxf(m, amax4(__ldg(reinterpret_cast<const float4*>(X + (size_t)t * cols + k))));
            }
            float xs = f16_group_scale<32>(m), iv = 1.f / xs;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (8 * j + g == t) xsb[j] = xs;
                if (8 * j + 2 * tg == t) iv0[j] = iv;
                if (8 * j + 2 * tg + 1 == t) iv1[j] = iv;
            }
        }
    }
#endif
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    for (int s = s0; s < s1; s++) {
#if GT_PREFETCH
        if (rowOK) {
            int c;
            if ((GT_PREFETCH & 1) && 2 * s + 2 < units) gt_prefetch<T, false>(unit_ptr<T>(wrow, 2 * s + 2, c));
            if ((GT_PREFETCH & 2) && 2 * s + 8 < units) gt_prefetch<T, true>(unit_ptr<T>(wrow, 2 * s + 8, c));
        }
#endif
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int u = 2 * s + h;
            float w[32];
            if (rowOK && u < units) {
                int c;
                deq32<T>(unit_ptr<T>(wrow, u, c), c, w);
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) w[i] = 0.f;
            }
            uint4* dst = reinterpret_cast<uint4*>(&ts[lane][32 * h]);
#pragma unroll
            for (int i = 0; i < 4; i++)
                dst[i] = make_uint4(pack2(w[8 * i], w[8 * i + 1]), pack2(w[8 * i + 2], w[8 * i + 3]),
                                    pack2(w[8 * i + 4], w[8 * i + 5]), pack2(w[8 * i + 6], w[8 * i + 7]));
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < GT_K; kk += 16) {
            int k = s * GT_K + kk;
            uint32_t a[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int rr = 16 * i + g;
                a[i][0] = *reinterpret_cast<const uint32_t*>(&ts[rr][kk + 2 * tg]);
                a[i][1] = *reinterpret_cast<const uint32_t*>(&ts[rr + 8][kk + 2 * tg]);
                a[i][2] = *reinterpret_cast<const uint32_t*>(&ts[rr][kk + 2 * tg + 8]);
                a[i][3] = *reinterpret_cast<const uint32_t*>(&ts[rr + 8][kk + 2 * tg + 8]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                int t = 8 * j + g;
                uint32_t b[2] = {0u, 0u};
                // k < cols: a step of one unit (units odd) has zeros in the
                // tile's second half, and x must not be read past the row.
                if (t < ntok && k < cols) {
                    const float* xp = X + (size_t)t * cols + k + 2 * tg;
                    float2 v0 = __ldg(reinterpret_cast<const float2*>(xp));
                    float2 v1 = __ldg(reinterpret_cast<const float2*>(xp + 8));
#if FT_COMPUTE_F16
                    v0 = make_float2(v0.x * xsb[j], v0.y * xsb[j]);
                    v1 = make_float2(v1.x * xsb[j], v1.y * xsb[j]);
#endif
                    b[0] = pack2(v0.x, v0.y);
                    b[1] = pack2(v1.x, v1.y);
                }
                mma_16816(acc[0][j], a[0], b);
                mma_16816(acc[1][j], a[1], b);
            }
        }
        __syncwarp();
    }
    float* out = Y + (size_t)blockIdx.y * ntok * rows;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            int r = r0 + 16 * i + g, t = 8 * j + 2 * tg;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int rh = r + 8 * h;
                if (rh >= rows) continue;
#if FT_COMPUTE_F16
                float a0 = acc[i][j][2 * h] * iv0[j], a1 = acc[i][j][2 * h + 1] * iv1[j];
#else
                float a0 = acc[i][j][2 * h], a1 = acc[i][j][2 * h + 1];
#endif
                if (t < ntok) out[(size_t)t * rows + rh] = a0;
                if (t + 1 < ntok) out[(size_t)(t + 1) * rows + rh] = a1;
            }
        }
}

// gemmt16_* takes up to 16 tokens, gemmt32_* up to 32.
#define GEMMT_KERNEL(T_, NAME, NT_, N_) GEMMT_KERNEL_(T_, NAME, NT_, N_)
#define GEMMT_KERNEL_(T_, NAME, NT_, N_)                                                                       \
    extern "C" __global__ void __launch_bounds__(GT_WARPS * 32, 2) gemmt##N_##_##NAME(                       \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok,       \
        int kSteps) {                                                                                        \
        gemmt_body<T_, NT_>(W, rowBytes, rows, cols, x, y, ntok, kSteps);                                    \
    }
GEMMT_KERNEL(MM_T, MM_NAME, 2, 16)
GEMMT_KERNEL(MM_T, MM_NAME, 4, 32)
