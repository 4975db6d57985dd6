// Typed kernels for one GGUF weight type, instantiated by mm_<type>.cu,
// which defines MM_T (the type id), MM_NAME (the kernel-name suffix) and,
// for F32/F16/BF16, MM_FLOAT. One module per type keeps the driver's PTX JIT
// at first start to the types a model actually uses.
#pragma once
#include "common.cuh"
#include "mma.cuh"
#ifndef MM_FLOAT
#define MM_FLOAT 0
#endif

// ---------------------------------------------------------------------------
// GEMV for decode and small batches: y[t][r] = sum_i W[r][i] * x[t][i] for
// t < ntok <= GEMV_MAX_TOK. One warp per output row; lanes take 32-element
// units of the row (a whole legacy block, or 1/8 of a k-quant block), so a
// warp reads its row once whatever the number of tokens. float32 accumulation.
// Requires cols % 32 == 0 (units) and 16-byte aligned x rows.
#define GEMV_MAX_TOK 8
#define GEMV_WARPS 8
// Tuning knob for kernel runs (FTCHAT_PTX_DIR; the committed PTX uses 0):
// GEMV_PREFETCH 1 has each lane of the multi-token GEMV prefetch its next
// chunk's weight unit into L1 before the current chunk's barrier.
#ifndef GEMV_PREFETCH
#define GEMV_PREFETCH 0
#endif

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
#if GEMV_PREFETCH
        if (active && u + 32 < units) {  // issued beside this chunk's load
            int c;
            const uint8_t* nb = unit_ptr<T>(row, u + 32, c);
            constexpr int span = TypeInfo<T>::be == 1 ? 32 * TypeInfo<T>::bb : TypeInfo<T>::bb;
            asm volatile("prefetch.global.L1 [%0];" ::"l"(nb));
            asm volatile("prefetch.global.L1 [%0];" ::"l"(nb + span - 1));
        }
#endif
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

#define GEMVX_KERNEL(T_, NAME) GEMVX_KERNEL_(T_, NAME)
#define GEMVX_KERNEL_(T_, NAME)                                                                                 \
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

#define GEMV_KERNEL(T_, NAME) GEMV_KERNEL_(T_, NAME)
#define GEMV_KERNEL_(T_, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_##NAME(                                 \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemv_body<T_>(W, rowBytes, rows, cols, x, y, ntok, rows);                                              \
    }
GEMV_KERNEL(MM_T, MM_NAME)

GEMVX_KERNEL(MM_T, MM_NAME)

#define GEMVF_KERNEL(T_, NAME) GEMVF_KERNEL_(T_, NAME)
#define GEMVF_KERNEL_(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemvf_##NAME(                                \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemv_float_body<T_>(W, rowBytes, rows, cols, x, y, ntok, rows);                                        \
    }
#if MM_FLOAT
GEMVF_KERNEL(MM_T, MM_NAME)
#endif

// ---------------------------------------------------------------------------
// Tensor-core GEMM for prefill: Y[ntok][rows] = X[ntok][cols] · W^T.
// CTA tile 64 tokens x 64 output rows x 64 k; 4 warps in 2x2, each 32x32
// (2 x 4 mma.sync m16n8k16 tiles: bf16 operands, fp16 in the fp16-compute
// flavour (mma.cuh), float32 accumulators). Each thread dequantizes one
// 32-element unit of W per k step into shared memory as 16-bit operands,
// and converts 32 floats of X. Requires cols % 32 == 0.
#define GM 64
#define GN 64
#define GK 64
#define GPAD 8
// Tuning knobs for kernel runs (FTCHAT_PTX_DIR; the committed PTX uses 0):
// GEMM_PIPE 1 loads the next k step into registers during this one's mmas;
// MM_FASTDQ 1 dequantizes Q4_K units straight to bf16 pairs (q4k_unit_bf16)
// in the unpipelined tile GEMM of the bf16 flavours.
#ifndef GEMM_PIPE
#define GEMM_PIPE 0
#endif
#ifndef MM_FASTDQ
#define MM_FASTDQ 0
#endif

#if MM_FASTDQ && !FT_COMPUTE_F16
// q4k_unit_bf16 writes unit c of Q4_K block b as 16 bf16x2 operand words,
// about 2 instructions a weight instead of deq32's float path and pack2:
// a byte permute and one lop3 make each nibble pair the bf16 values 128+q
// (0x4300 | q), one bf16x2 FMA takes 128 off (exact for q < 16), and one
// more gives q*d1 - m1 with d1 and m1 rounded to bf16 once per unit (the
// float path rounds only the result: the error grows by the scales'
// rounding, 2^-9 of each term).
__device__ __forceinline__ void q4k_unit_bf16(const uint8_t* b, int c, uint32_t* out) {
    const Q4KUnit un = q4k_unit(b, c);
    const __nv_bfloat162 D = __float2bfloat162_rn(un.d1), M = __float2bfloat162_rn(-un.m1);
    const __nv_bfloat162 one = __float2bfloat162_rn(1.f), off = __float2bfloat162_rn(-128.f);
    const uint4* q = un.q;
    const int shift = un.shift;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        uint4 v = q[i];
        uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t xs = x[k] >> shift;
#pragma unroll
            for (int h = 0; h < 2; h++) {  // elements 4k+2h, 4k+2h+1: bytes 2h, 2h+1 of x[k]
                uint32_t p = (__byte_perm(xs, 0u, h ? 0x4342u : 0x4140u) & 0x000F000Fu) | 0x43004300u;
                __nv_bfloat162 qv = __hfma2(*reinterpret_cast<__nv_bfloat162*>(&p), one, off);
                __nv_bfloat162 w = __hfma2(qv, D, M);
                out[8 * i + 2 * k + h] = *reinterpret_cast<uint32_t*>(&w);
            }
        }
    }
}
#endif


// gemm_load dequantizes unit u of W row wr into w and loads the 32 floats
// of X row xt at the same k into xv (zeros out of range).
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

// gemm_store writes gemm_load's unit of W and 32 floats of X (times the
// row scale xs in the fp16 flavour) to their shared tiles as 16-bit operands.
__device__ __forceinline__ void gemm_store(mma_elem* bs, mma_elem* as, const float* w, const float4* xv, float xs) {
    uint4* dst = reinterpret_cast<uint4*>(bs);
#pragma unroll
    for (int i = 0; i < 4; i++)
        dst[i] = make_uint4(pack2(w[8 * i], w[8 * i + 1]), pack2(w[8 * i + 2], w[8 * i + 3]),
                            pack2(w[8 * i + 4], w[8 * i + 5]), pack2(w[8 * i + 6], w[8 * i + 7]));
    uint4* dx = reinterpret_cast<uint4*>(as);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float4 a = f16_scale4(xv[2 * i], xs), b = f16_scale4(xv[2 * i + 1], xs);
        dx[i] = make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
    }
}

// gemm_body covers k in [kBegin, kEnd) (multiples of GK, or kEnd = cols):
// the whole row for gemm_*, one slice per blockIdx.z for the split-K gemms_*.
template <int T>
__device__ void gemm_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                          const float* __restrict__ X, float* __restrict__ Y, int ntok, int kBegin, int kEnd) {
    __shared__ __align__(16) mma_elem As[GM][GK + GPAD];
    __shared__ __align__(16) mma_elem Bs[GN][GK + GPAD];
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
    F16_ROW_INV(xinv, GM);
    float xs = pair_row_scale(X, cols, ntok, m0 + lr, lh, kBegin, kEnd, lr, xinv);
#if GEMM_PIPE
    // Variant: the next k step's W unit and X floats are loaded into
    // registers before this step's mma loop (as gemm_large_body does).
    float w[32];
    float4 xv[8];
    gemm_load<T>(W, rowBytes, rows, units, X, cols, ntok, n0 + lr, m0 + lr, (kBegin >> 5) + lh, w, xv);
#endif
    for (int k0 = kBegin; k0 < kEnd; k0 += GK) {
#if GEMM_PIPE
        gemm_store(&Bs[lr][32 * lh], &As[lr][32 * lh], w, xv, xs);
        __syncthreads();
        if (k0 + GK < kEnd)
            gemm_load<T>(W, rowBytes, rows, units, X, cols, ntok, n0 + lr, m0 + lr, ((k0 + GK) >> 5) + lh, w, xv);
#else
        int u = (k0 >> 5) + lh;
        // W unit -> Bs[lr][32*lh ..]
#if MM_FASTDQ && !FT_COMPUTE_F16
        if constexpr (T == T_Q4_K) {
            uint32_t pw[16];
            int r = n0 + lr;
            if (r < rows && u < units) {
                int c;
                q4k_unit_bf16(unit_ptr<T>(W + (size_t)r * rowBytes, u, c), c, pw);
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) pw[i] = 0u;
            }
            uint4* dst = reinterpret_cast<uint4*>(&Bs[lr][32 * lh]);
#pragma unroll
            for (int i = 0; i < 4; i++) dst[i] = make_uint4(pw[4 * i], pw[4 * i + 1], pw[4 * i + 2], pw[4 * i + 3]);
        } else
#endif
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
                dst[i] = make_uint4(pack2(w[8 * i], w[8 * i + 1]), pack2(w[8 * i + 2], w[8 * i + 3]),
                                    pack2(w[8 * i + 4], w[8 * i + 5]), pack2(w[8 * i + 6], w[8 * i + 7]));
        }
        // X row -> As[lr][32*lh ..]
        {
            int t = m0 + lr;
            uint4* dst = reinterpret_cast<uint4*>(&As[lr][32 * lh]);
            if (t < ntok && u < units) {
                const float4* xp = reinterpret_cast<const float4*>(X + (size_t)t * cols + 32 * u);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float4 a = f16_scale4(__ldg(xp + 2 * i), xs), b = f16_scale4(__ldg(xp + 2 * i + 1), xs);
                    dst[i] = make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) dst[i] = make_uint4(0, 0, 0, 0);
            }
        }
        __syncthreads();
#endif
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
                for (int j = 0; j < 4; j++) mma_16816(acc[i][j], a[i], b[j]);
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
                    float iv = row_inv(xinv, tt - m0);
                    if (r < rows) Y[(size_t)tt * rows + r] = acc[i][j][2 * h] * iv;
                    if (r + 1 < rows) Y[(size_t)tt * rows + r + 1] = acc[i][j][2 * h + 1] * iv;
                }
            }
        }
}

#define GEMM_KERNEL(T_, NAME) GEMM_KERNEL_(T_, NAME)
#define GEMM_KERNEL_(T_, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128) gemm_##NAME(                                             \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemm_body<T_>(W, rowBytes, rows, cols, x, y, ntok, 0, cols);                                           \
    }
GEMM_KERNEL(MM_T, MM_NAME)

// Split-K GEMM for small batches, whose 64x64 tiles alone leave most SMs
// idle: blockIdx.z takes k steps [z*kSteps, (z+1)*kSteps) of GK elements
// (whole 32-element units, so every weight type splits the same way) and
// writes its float32 partial tile to part[z][ntok][rows]. gemm_reduce_*
// then sums the slices in order, so results repeat run to run (no atomics).
#define GEMMS_KERNEL(T_, NAME) GEMMS_KERNEL_(T_, NAME)
#define GEMMS_KERNEL_(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) gemms_##NAME(                                            \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* part, int ntok,        \
        int kSteps) {                                                                                          \
        int kb = blockIdx.z * kSteps * GK;                                                                     \
        gemm_body<T_>(W, rowBytes, rows, cols, x, part + (size_t)blockIdx.z * ntok * rows, ntok, kb,            \
                      min(cols, kb + kSteps * GK));                                                            \
    }
GEMMS_KERNEL(MM_T, MM_NAME)

// y[i] = part[0][i] + part[1][i] + ... + part[splits-1][i] for i < n, in
// that order. Type-independent; one copy per module keeps it beside gemms_*.
#define GEMM_REDUCE_KERNEL(NAME) GEMM_REDUCE_KERNEL_(NAME)
#define GEMM_REDUCE_KERNEL_(NAME)                                                                               \
    extern "C" __global__ void gemm_reduce_##NAME(const float* part, float* y, long long n, int splits) {     \
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;                                        \
        if (i >= n) return;                                                                                    \
        float s = part[i];                                                                                     \
        for (int z = 1; z < splits; z++) s += part[(size_t)z * n + i];                                         \
        y[i] = s;                                                                                              \
    }
GEMM_REDUCE_KERNEL(MM_NAME)

// Large-batch GEMM: CTA tile 128 tokens x 128 output rows x 64 k, 8 warps
// in 2 (tokens) x 4 (rows), each 64x32 (4 x 4 mma tiles). Loads of the next
// k step (one dequantized W unit and 32 floats of X per thread) are issued
// into registers before the mma loop of the current step, so global
// latency overlaps the tensor-core work. Requires cols % 32 == 0.
#define LM 128
#define LN 128

template <int T>
__device__ void gemm_large_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                                const float* __restrict__ X, float* __restrict__ Y, int ntok) {
    __shared__ __align__(16) mma_elem As[LM][GK + GPAD];
    __shared__ __align__(16) mma_elem Bs[LN][GK + GPAD];
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
    F16_ROW_INV(xinv, LM);
    float xs = pair_row_scale(X, cols, ntok, m0 + lr, lh, 0, cols, lr, xinv);
    float w[32];
    float4 xv[8];
    gemm_load<T>(W, rowBytes, rows, units, X, cols, ntok, n0 + lr, m0 + lr, lh, w, xv);
    for (int k0 = 0; k0 < cols; k0 += GK) {
        gemm_store(&Bs[lr][32 * lh], &As[lr][32 * lh], w, xv, xs);
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
                for (int j = 0; j < 4; j++) mma_16816(acc[i][j], a[i], b[j]);
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
                    float iv = row_inv(xinv, tt - m0);
                    if (r < rows) Y[(size_t)tt * rows + r] = acc[i][j][2 * h] * iv;
                    if (r + 1 < rows) Y[(size_t)tt * rows + r + 1] = acc[i][j][2 * h + 1] * iv;
                }
            }
        }
}

#define GEMML_KERNEL(T_, NAME) GEMML_KERNEL_(T_, NAME)
#define GEMML_KERNEL_(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) gemml_##NAME(                                            \
        const uint8_t* W, long long rowBytes, int rows, int cols, const float* x, float* y, int ntok) {        \
        gemm_large_body<T_>(W, rowBytes, rows, cols, x, y, ntok);                                              \
    }
GEMML_KERNEL(MM_T, MM_NAME)

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
#define MOE_KERNEL(T_, NAME) MOE_KERNEL_(T_, NAME)
#define MOE_KERNEL_(T_, NAME)                                                                                   \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) moe_gemv_##NAME(                             \
        const uint8_t* W, long long rowBytes, int rowsPerExpert, int cols, const float* x, int xDiv,           \
        const int* ids, float* y) {                                                                            \
        moe_gemv_body<T_>(W, rowBytes, rowsPerExpert, cols, x, xDiv, ids, y);                                  \
    }
MOE_KERNEL(MM_T, MM_NAME)

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
#define DEQROWS_KERNEL(T_, NAME) DEQROWS_KERNEL_(T_, NAME)
#define DEQROWS_KERNEL_(T_, NAME)                                                                               \
    extern "C" __global__ void dequant_rows_##NAME(const uint8_t* W, long long rowBytes, int r0, int nrows,     \
                                                   int cols, float* out) {                                     \
        dequant_rows_body<T_>(W, rowBytes, r0, nrows, cols, out);                                              \
    }
DEQROWS_KERNEL(MM_T, MM_NAME)

// The same rows rounded to bf16 (to nearest even), for cublasGemmEx with
// bf16 operands: half the scratch bytes of the float32 path. A lane
// dequantizes one 32-element unit; the warp's 32 units are one contiguous
// 2 KB of out (out is dense [nrows][cols]), so they go through shared
// memory and leave as consecutive 16-byte stores: a lane storing its own
// 64 bytes touched 32 sectors per instruction (~1.4 TB/s written on the
// H200). Part k of unit u sits at slot 4u + ((k + u) & 3), which halves
// the shared-memory bank conflicts of the lanes' stores. Launch with 256
// threads.
template <int T>
__device__ void dequant_rows_bf16_body(const uint8_t* W, long long rowBytes, int r0, int nrows, int cols,
                                       __nv_bfloat16* out) {
    __shared__ uint4 stage[8][128];
    const int units = cols >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long total = (long long)nrows * units;
    const long long base = (long long)blockIdx.x * blockDim.x + warp * 32;
    if (base >= total) return;  // whole warp
    const long long i = base + lane;
    if (i < total) {
        int rr = (int)(i / units), u = (int)(i % units);
        float w[32];
        int c;
        deq32<T>(unit_ptr<T>(W + (size_t)(r0 + rr) * rowBytes, u, c), c, w);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t p[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                __nv_bfloat162 v = __floats2bfloat162_rn(w[8 * k + 2 * j], w[8 * k + 2 * j + 1]);
                p[j] = *reinterpret_cast<uint32_t*>(&v);
            }
            stage[warp][4 * lane + ((k + lane) & 3)] = make_uint4(p[0], p[1], p[2], p[3]);
        }
    }
    __syncwarp();
    uint4* o = reinterpret_cast<uint4*>(out) + base * 4;
    const int n = (int)min(32LL, total - base) * 4;
    for (int j = lane; j < n; j += 32) {
        const int u = j >> 2;
        o[j] = stage[warp][4 * u + (((j & 3) + u) & 3)];
    }
}
#define DEQROWS16_KERNEL(T_, NAME) DEQROWS16_KERNEL_(T_, NAME)
#define DEQROWS16_KERNEL_(T_, NAME)                                                                             \
    extern "C" __global__ void dequant_rows_bf16_##NAME(const uint8_t* W, long long rowBytes, int r0,          \
                                                        int nrows, int cols, __nv_bfloat16* out) {              \
        dequant_rows_bf16_body<T_>(W, rowBytes, r0, nrows, cols, out);                                         \
    }
DEQROWS16_KERNEL(MM_T, MM_NAME)

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
#define EMBED_KERNEL(T_, NAME) EMBED_KERNEL_(T_, NAME)
#define EMBED_KERNEL_(T_, NAME)                                                                                 \
    extern "C" __global__ void embed_##NAME(const uint8_t* table, long long rowBytes, int vocab, int cols,     \
                                            const int* tokens, float* dst, int* bad) {                         \
        embed_body<T_>(table, rowBytes, vocab, cols, tokens, dst, bad);                                        \
    }
EMBED_KERNEL(MM_T, MM_NAME)

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
#define EMBEDF_KERNEL(T_, NAME) EMBEDF_KERNEL_(T_, NAME)
#define EMBEDF_KERNEL_(T_, NAME)                                                                                \
    extern "C" __global__ void embedf_##NAME(const uint8_t* table, long long rowBytes, int vocab, int cols,    \
                                             const int* tokens, float* dst, int* bad) {                        \
        embedf_body<T_>(table, rowBytes, vocab, cols, tokens, dst, bad);                                       \
    }
#if MM_FLOAT
EMBEDF_KERNEL(MM_T, MM_NAME)
#endif
#include "gemmt.cuh"
