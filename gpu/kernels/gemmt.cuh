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
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    for (int s = s0; s < s1; s++) {
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
                if (t < ntok) out[(size_t)t * rows + rh] = acc[i][j][2 * h];
                if (t + 1 < ntok) out[(size_t)(t + 1) * rows + rh] = acc[i][j][2 * h + 1];
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
