// Typed mixture-of-experts kernels for one GGUF weight type, instantiated by
// moe_<type>.cu, which defines MOE_T (the type id) and MOE_NAME (the
// kernel-name suffix). The expert weights are stacked: gate/up
// [nexp*ff][cols], down [nexp*dim][ff]. Dequantization is deq32 of
// common.cuh (the decoders of mm.cuh's GEMV/GEMM).
//
// Prefill (grouped): moe.cu's moe_sort lists tiles of at most MOE_BM
// (token, slot) pairs of one expert, in expert-sorted order; one launch of
// moe_gemm_gu covers every active expert for gate and up together and
// writes silu(gate)*up per sorted pair, one launch of moe_gemm_dn the down
// projection per sorted pair. Tensor cores: mma.sync m16n8k16 (mma.cuh:
// bf16 operands, fp16 in the fp16-compute flavour) with float32
// accumulators; each k step (MOE_BK = 128) dequantizes its W units
// straight into shared memory (two units per thread, loads issued
// together), and up to 3 CTAs per SM hide the load latency of one another.
//
// Decode (a few tokens): moe_gemv_gu / moe_gemv_dn, a warp per output row
// and (token, slot) pair resp. token, reading expert ids and weights from
// device memory; moe_gemv_dn sums the token's top-k experts with their
// weights, so no combine kernel follows.
//
// Second-level scales (NVFP4's per-expert weight_scale_2, llama.cpp's
// ffn_*_exps.scale): Sg, Su, Sd are nullable device vectors of nexp floats;
// an expert's gate and up dot products are multiplied by its Sg / Su entry
// before silu(gate)*up, its down dot products by its Sd entry before the
// routing weight, as the CPU backend scales each matmul's output rows.
#pragma once
#include "common.cuh"
#include "moe_tile.cuh"
#include "mma.cuh"

#define MOE_BK 128
#define MOE_PAD 8
// Tuning knobs for scripts/moe_variants.sh (the committed PTX uses the
// defaults): MOE_LOADER 2 (default) puts 4 threads of a warp on consecutive
// units of one W row (a warp's loads touch 8 rows, not 16; on the H200 the
// 30B-A3B down GEMM at 512 rows went from 39 to 45 TFLOP/s), 1 gives each
// thread units lh and lh + 2 of its row; MOE_FASTDQ 1 decodes
// Q4_K nibbles with the 2^23 float trick and one FMA (no int-to-float
// conversion; one rounding instead of two, for the bf16 GEMMs only).
#ifndef MOE_LOADER
#define MOE_LOADER 2
#endif
#ifndef MOE_FASTDQ
#define MOE_FASTDQ 0
#endif
// MOE_PREFETCH 1 (a knob to price, 0 in the committed PTX): each loader,
// having stored its k step, asks L2 for the next step's weight blocks, so
// their DRAM latency overlaps the step's tensor-core work instead of
// following it.
#ifndef MOE_PREFETCH
#define MOE_PREFETCH 0
#endif

// moe_prefetch_step: into L2, the weight blocks (each 128-byte line of
// them) of the k step that this thread's loader reads next: units u and
// u + du of rows r0 and r1.
template <int T>
__device__ __forceinline__ void moe_prefetch_step(const uint8_t* r0, const uint8_t* r1, int units, int u, int du) {
    constexpr int span = TypeInfo<T>::be == 1 ? 32 * TypeInfo<T>::bb : TypeInfo<T>::bb;
    int c;
    const uint8_t* p[2] = {unit_ptr<T>(r0, min(u, units - 1), c), unit_ptr<T>(r1, min(u + du, units - 1), c)};
#pragma unroll
    for (int j = 0; j < 2; j++) {
#pragma unroll
        for (int o = 0; o < span; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p[j] + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p[j] + span - 1));
    }
}

// Same formula as ops.cu's swiglu.
__device__ __forceinline__ float moe_silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

// Loads of one k step, branch-free so that they overlap the tensor-core
// work that follows them in the same basic block: out-of-range units and
// rows read a valid address (unit clamped, row 0) and are zeroed by select.
template <int T>
__device__ __forceinline__ void moe_ldw(const uint8_t* row, bool rowok, int units, int u, float* w) {
    bool ok = rowok && u < units;
    int c;
    const uint8_t* b = unit_ptr<T>(row, min(u, units - 1), c);
    if constexpr (T == T_Q4_K && MOE_FASTDQ) {
        const Q4KUnit un = q4k_unit(b, c);
        const float d1 = un.d1, m1 = -un.m1;
        const uint4* q = un.q;
        const int shift = un.shift;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 v = q[i];
            uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float f = __uint_as_float(0x4B000000u | ((x[k] >> (8 * e + shift)) & 0xFu)) - 8388608.f;
                    w[16 * i + 4 * k + e] = fmaf(d1, f, m1);
                }
        }
    } else {
        deq32<T>(b, c, w);
    }
#pragma unroll
    for (int i = 0; i < 32; i++) w[i] = ok ? w[i] : 0.f;
}

// 8 floats of row at column k (k % 8 == 0, n % 32 == 0).
__device__ __forceinline__ void moe_ldx(const float* row, bool rowok, int n, int k, float4* xv) {
    bool ok = rowok && k < n;
    const float4* q = reinterpret_cast<const float4*>(row + (ok ? k : 0));
    float4 a = __ldg(q), b = __ldg(q + 1), z = make_float4(0.f, 0.f, 0.f, 0.f);
    xv[0] = ok ? a : z;
    xv[1] = ok ? b : z;
}

__device__ __forceinline__ void moe_stw(mma_elem* dst, const float* w) {
    uint4* d = reinterpret_cast<uint4*>(dst);
#pragma unroll
    for (int i = 0; i < 4; i++)
        d[i] = make_uint4(pack2(w[8 * i], w[8 * i + 1]), pack2(w[8 * i + 2], w[8 * i + 3]),
                          pack2(w[8 * i + 4], w[8 * i + 5]), pack2(w[8 * i + 6], w[8 * i + 7]));
}

// xs: the row's f16_row_scale (1 in the bf16 flavour, which ignores it).
__device__ __forceinline__ void moe_stx(mma_elem* dst, const float4* xv, float xs) {
    float4 a = f16_scale4(xv[0], xs), b = f16_scale4(xv[1], xs);
    *reinterpret_cast<uint4*>(dst) = make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
}

// moe_row_scale: the f16_row_scale of activation row ar of a tile (its 8
// threads aq read the columns they load: 8*aq + 64*i), with the inverse in
// xinv[ar] for the epilogue. 1 in the bf16 flavour.
__device__ __forceinline__ float moe_row_scale(const float* row, bool ok, int n, int ar, int aq, float* xinv) {
#if FT_COMPUTE_F16
    float xs = f16_group_scale<8>(ok ? row_amax8(row, 8 * aq, 64, n) : 0.f);
    if (aq == 0) xinv[ar] = 1.f / xs;
    return xs;
#else
    return 1.f;
#endif
}

// A fragment (16 rows from r, k offset kk) of a [rows][MOE_BK+MOE_PAD] 16-bit tile.
__device__ __forceinline__ void moe_frag_a(const mma_elem (*As)[MOE_BK + MOE_PAD], int r, int kk, int tg, uint32_t* a) {
    a[0] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg]);
    a[1] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg]);
    a[2] = *reinterpret_cast<const uint32_t*>(&As[r][kk + 2 * tg + 8]);
    a[3] = *reinterpret_cast<const uint32_t*>(&As[r + 8][kk + 2 * tg + 8]);
}
__device__ __forceinline__ void moe_frag_b(const mma_elem (*Bs)[MOE_BK + MOE_PAD], int n, int kk, int tg, uint32_t* b) {
    b[0] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg]);
    b[1] = *reinterpret_cast<const uint32_t*>(&Bs[n][kk + 2 * tg + 8]);
}

// One k step of a grouped-GEMM tile, dequantized straight into shared
// memory: W rows lr (128 of them, two threads per row) take units lh and
// lh + 2 of the step's 4; activation rows ar (MOE_BM) take 8 floats at
// 8*aq and 64 + 8*aq. The loads are branch-free, so the two units' and the
// four float4s' global loads can all be in flight together.
#if MOE_LOADER == 2
// Loader 2: thread t dequantizes unit t & 3 of W rows t >> 2 (w0) and
// 64 + (t >> 2) (w1), so the 4 threads of a row read consecutive units.
template <int T>
__device__ __forceinline__ void moe_load_tile2(const uint8_t* w0, bool ok0, const uint8_t* w1, bool ok1, int units,
                                               int k0, const float* arow, bool aok, int cols, int ar, int aq,
                                               float xs, mma_elem (*As)[MOE_BK + MOE_PAD],
                                               mma_elem (*Bs)[MOE_BK + MOE_PAD]) {
    int ur = threadIdx.x & 3, r = threadIdx.x >> 2;
    float4 xv[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++) moe_ldx(arow, aok, cols, k0 + 8 * aq + 64 * i, xv[i]);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        float w[32];
        moe_ldw<T>(j ? w1 : w0, j ? ok1 : ok0, units, (k0 >> 5) + ur, w);
        moe_stw(&Bs[r + 64 * j][32 * ur], w);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) moe_stx(&As[ar][8 * aq + 64 * i], xv[i], xs);
    constexpr int step = MOE_BK / 32;  // units of a k step
    if (MOE_PREFETCH && (k0 >> 5) + step < units) moe_prefetch_step<T>(w0, w1, units, (k0 >> 5) + step + ur, 0);
}
#endif

template <int T>
__device__ __forceinline__ void moe_load_tile(const uint8_t* wrow, bool wok, int units, int k0, int lr, int lh,
                                              const float* arow, bool aok, int cols, int ar, int aq, float xs,
                                              mma_elem (*As)[MOE_BK + MOE_PAD],
                                              mma_elem (*Bs)[MOE_BK + MOE_PAD]) {
    float4 xv[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++) moe_ldx(arow, aok, cols, k0 + 8 * aq + 64 * i, xv[i]);
    if constexpr (T == T_Q3_K || T == T_Q5_K) {
        // The largest decoders are not unrolled (keeps the PTX under 200 KB):
        // prefetch the second unit's block into L1 so both are in flight.
        int c;
        const uint8_t* b1 = unit_ptr<T>(wrow, min((k0 >> 5) + lh + 2, units - 1), c);
        asm volatile("prefetch.global.L1 [%0];" ::"l"(b1));
        asm volatile("prefetch.global.L1 [%0];" ::"l"(b1 + TypeInfo<T>::bb - 1));
#pragma unroll 1
        for (int j = 0; j < 2; j++) {
            int ur = lh + 2 * j;
            float w[32];
            moe_ldw<T>(wrow, wok, units, (k0 >> 5) + ur, w);
            moe_stw(&Bs[lr][32 * ur], w);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int ur = lh + 2 * j;
            float w[32];
            moe_ldw<T>(wrow, wok, units, (k0 >> 5) + ur, w);
            moe_stw(&Bs[lr][32 * ur], w);
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) moe_stx(&As[ar][8 * aq + 64 * i], xv[i], xs);
    constexpr int step = MOE_BK / 32;  // units of a k step
    if (MOE_PREFETCH && (k0 >> 5) + step < units) moe_prefetch_step<T>(wrow, wrow, units, (k0 >> 5) + step + lh, 2);
}

// Grouped gate+up: grid (cdiv(ff, 64), ntiles), 256 threads. CTA tile:
// MOE_BM sorted pairs x 64 ff columns of gate and the same 64 of up (128
// W rows) x MOE_BK. Warps 2 (pairs, 16 each) x 4 (columns, 16 each); each
// warp keeps gate and up accumulators of the same outputs, so the epilogue
// writes h[pos][col] = silu(gate) * up for sorted position pos.
template <int T>
__device__ void moe_gemm_gu_body(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, long long rowBytes,
                                 int ff, int cols, const float* __restrict__ X, int topk,
                                 const int* __restrict__ sorted, const int* __restrict__ tiles,
                                 float* __restrict__ H, const float* __restrict__ Sg,
                                 const float* __restrict__ Su) {
    __shared__ __align__(16) mma_elem As[MOE_BM][MOE_BK + MOE_PAD];
    __shared__ __align__(16) mma_elem Bs[128][MOE_BK + MOE_PAD];
    int e = tiles[3 * blockIdx.y];
    if (e < 0) return;
    int r0 = tiles[3 * blockIdx.y + 1], r1 = tiles[3 * blockIdx.y + 2];
    int n0 = blockIdx.x * 64;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    int wm = (warp >> 2) * 16, wn = (warp & 3) * 16;
    int lr = tid >> 1, lh = tid & 1;
    int wc = n0 + (lr & 63);
    bool wok = wc < ff;
    const uint8_t* wrow = (lr < 64 ? Wg : Wu) + ((size_t)e * ff + (wok ? wc : 0)) * rowBytes;
#if MOE_LOADER == 2
    int gc = n0 + (tid >> 2);  // loader 2: gate and up row of column gc
    bool gok = gc < ff;
    size_t goff = ((size_t)e * ff + (gok ? gc : 0)) * rowBytes;
    const uint8_t *g0 = Wg + goff, *u0 = Wu + goff;
#endif
    int ar = tid >> 3, aq = tid & 7;
    bool aok = r0 + ar < r1;
    const float* xrow = X + (size_t)(aok ? sorted[r0 + ar] / topk : 0) * cols;
    F16_ROW_INV(xinv, MOE_BM);
    float xs = moe_row_scale(xrow, aok, cols, ar, aq, xinv);
    int units = cols >> 5;
    float accg[2][4], accu[2][4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) accg[j][i] = accu[j][i] = 0.f;
    for (int k0 = 0; k0 < cols; k0 += MOE_BK) {
#if MOE_LOADER == 2
        moe_load_tile2<T>(g0, gok, u0, gok, units, k0, xrow, aok, cols, ar, aq, xs, As, Bs);
#else
        moe_load_tile<T>(wrow, wok, units, k0, lr, lh, xrow, aok, cols, ar, aq, xs, As, Bs);
#endif
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MOE_BK; kk += 16) {
            uint32_t a[4], bg[2], bu[2];
            moe_frag_a(As, wm + g, kk, tg, a);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int n = wn + 8 * j + g;
                moe_frag_b(Bs, n, kk, tg, bg);
                moe_frag_b(Bs, 64 + n, kk, tg, bu);
                mma_16816(accg[j], a, bg);
                mma_16816(accu[j], a, bu);
            }
        }
        __syncthreads();
    }
    float sg = Sg ? Sg[e] : 1.f, su = Su ? Su[e] : 1.f;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int col = n0 + wn + 8 * j + 2 * tg;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int pos = r0 + wm + g + 8 * h;
            if (pos < r1) {
                float iv = row_inv(xinv, wm + g + 8 * h), g1 = sg * iv, u1 = su * iv;
                float* out = H + (size_t)pos * ff;
                if (col < ff) out[col] = moe_silu_mul(accg[j][2 * h] * g1, accu[j][2 * h] * u1);
                if (col + 1 < ff) out[col + 1] = moe_silu_mul(accg[j][2 * h + 1] * g1, accu[j][2 * h + 1] * u1);
            }
        }
    }
}

// Grouped down: grid (cdiv(dim, 128), ntiles), 256 threads. CTA tile:
// MOE_BM sorted pairs x 128 output rows x MOE_BK of ff; warps 2 (pairs, 16
// each) x 4 (rows, 32 each). y[pos][dim] per sorted position.
template <int T>
__device__ void moe_gemm_dn_body(const uint8_t* __restrict__ W, long long rowBytes, int dim, int ff,
                                 const float* __restrict__ H, const int* __restrict__ tiles, float* __restrict__ Y,
                                 const float* __restrict__ Sd) {
    __shared__ __align__(16) mma_elem As[MOE_BM][MOE_BK + MOE_PAD];
    __shared__ __align__(16) mma_elem Bs[128][MOE_BK + MOE_PAD];
    int e = tiles[3 * blockIdx.y];
    if (e < 0) return;
    int r0 = tiles[3 * blockIdx.y + 1], r1 = tiles[3 * blockIdx.y + 2];
    int n0 = blockIdx.x * 128;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    int wm = (warp >> 2) * 16, wn = (warp & 3) * 32;
    int lr = tid >> 1, lh = tid & 1;
    bool wok = n0 + lr < dim;
    const uint8_t* wrow = W + ((size_t)e * dim + (wok ? n0 + lr : 0)) * rowBytes;
#if MOE_LOADER == 2
    int dr0 = n0 + (tid >> 2), dr1 = dr0 + 64;  // loader 2: rows dr0 and dr1
    bool dok0 = dr0 < dim, dok1 = dr1 < dim;
    const uint8_t* d0 = W + ((size_t)e * dim + (dok0 ? dr0 : 0)) * rowBytes;
    const uint8_t* d1 = W + ((size_t)e * dim + (dok1 ? dr1 : 0)) * rowBytes;
#endif
    int ar = tid >> 3, aq = tid & 7;
    bool aok = r0 + ar < r1;
    const float* hrow = H + (size_t)(aok ? r0 + ar : 0) * ff;
    F16_ROW_INV(xinv, MOE_BM);
    float xs = moe_row_scale(hrow, aok, ff, ar, aq, xinv);
    int units = ff >> 5;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.f;
    for (int k0 = 0; k0 < ff; k0 += MOE_BK) {
#if MOE_LOADER == 2
        moe_load_tile2<T>(d0, dok0, d1, dok1, units, k0, hrow, aok, ff, ar, aq, xs, As, Bs);
#else
        moe_load_tile<T>(wrow, wok, units, k0, lr, lh, hrow, aok, ff, ar, aq, xs, As, Bs);
#endif
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MOE_BK; kk += 16) {
            uint32_t a[4], b[2];
            moe_frag_a(As, wm + g, kk, tg, a);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                moe_frag_b(Bs, wn + 8 * j + g, kk, tg, b);
                mma_16816(acc[j], a, b);
            }
        }
        __syncthreads();
    }
    float sd = Sd ? Sd[e] : 1.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int col = n0 + wn + 8 * j + 2 * tg;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int pos = r0 + wm + g + 8 * h;
            if (pos < r1) {
                float s1 = sd * row_inv(xinv, wm + g + 8 * h);
                float* out = Y + (size_t)pos * dim;
                if (col < dim) out[col] = acc[j][2 * h] * s1;
                if (col + 1 < dim) out[col + 1] = acc[j][2 * h + 1] * s1;
            }
        }
    }
}

// 32 weights of a unit times 32 floats of x (16-byte aligned).
__device__ __forceinline__ float moe_dot32(const float* w, const float* x) {
    const float4* xp = reinterpret_cast<const float4*>(x);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 v = __ldg(xp + i);
        s = fmaf(w[4 * i], v.x, s);
        s = fmaf(w[4 * i + 1], v.y, s);
        s = fmaf(w[4 * i + 2], v.z, s);
        s = fmaf(w[4 * i + 3], v.w, s);
    }
    return s;
}

// Decode GEMVs: a CTA of 8 warps computes MOE_ROWS output rows, MOE_WPR
// warps per row striding over the row's 32-element units (more warps per
// row keep more loads in flight than unrolling, at a quarter of the code).
#define MOE_WPR 4
#define MOE_ROWS (8 / MOE_WPR)

__device__ __forceinline__ float moe_cta_sum(float v, float* red) {
    int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    if ((threadIdx.x & 31) == 0 && warp % MOE_WPR == 0)
        for (int i = 0; i < MOE_WPR; i++) s += red[warp + i];
    return s;  // valid in lane 0 of the row's first warp
}

// Decode gate+up: grid (cdiv(ff, MOE_ROWS), npairs); row r of pair p dots
// gate and up row r of expert ids[p] with x[p / topk] and writes
// h[p][r] = silu(gate) * up.
template <int T>
__device__ void moe_gemv_gu_body(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, long long rowBytes,
                                 int ff, int cols, const float* __restrict__ X, int topk, const int* __restrict__ ids,
                                 float* __restrict__ H, const float* __restrict__ Sg, const float* __restrict__ Su) {
    __shared__ float red[2][8];
    int p = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MOE_ROWS + warp / MOE_WPR, part = warp % MOE_WPR;
    bool ok = r < ff;
    float sg = 0.f, su = 0.f;
    if (ok) {
        size_t off = ((size_t)ids[p] * ff + r) * rowBytes;
        const float* x = X + (size_t)(p / topk) * cols;
        int units = cols >> 5;
        // lanes stride over the units of the gate row, then of the up row
#pragma unroll 1
        for (int q = part * 32 + lane; q < 2 * units; q += 32 * MOE_WPR) {
            int m = q >= units, u = q - m * units;
            float w[32];
            int c;
            deq32<T>(unit_ptr<T>((m ? Wu : Wg) + off, u, c), c, w);
            float d = moe_dot32(w, x + 32 * u);
            if (m) su += d; else sg += d;
        }
    }
    sg = moe_cta_sum(sg, red[0]);
    su = moe_cta_sum(su, red[1]);
    if (ok && lane == 0 && part == 0) {
        int e = ids[p];
        H[(size_t)p * ff + r] = moe_silu_mul(Sg ? sg * Sg[e] : sg, Su ? su * Su[e] : su);
    }
}

// Decode down + combine: grid (cdiv(dim, MOE_ROWS), ntok); row r of token
// t sums wts[p] * (down row r of expert ids[p] . h[p]) over the token's
// pairs p = t*topk .. t*topk+topk-1 and writes out[t][r] (overwrites, so
// no combine kernel follows). Lanes stride over (slot, unit) together.
template <int T>
__device__ void moe_gemv_dn_body(const uint8_t* __restrict__ W, long long rowBytes, int dim, int ff,
                                 const float* __restrict__ H, int topk, const int* __restrict__ ids,
                                 const float* __restrict__ wts, float* __restrict__ out, const float* __restrict__ Sd) {
    __shared__ float red[8];
    int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MOE_ROWS + warp / MOE_WPR, part = warp % MOE_WPR;
    bool ok = r < dim;
    float acc = 0.f;
    if (ok) {
        int units = ff >> 5, total = topk * units;
#pragma unroll 2
        for (int q = part * 32 + lane; q < total; q += 32 * MOE_WPR) {
            int k = q / units, u = q - k * units;
            int p = t * topk + k;
            int e = ids[p];
            const uint8_t* row = W + ((size_t)e * dim + r) * rowBytes;
            float w[32];
            int c;
            deq32<T>(unit_ptr<T>(row, u, c), c, w);
            float d = moe_dot32(w, H + (size_t)p * ff + 32 * u);
            acc = fmaf(wts[p], Sd ? d * Sd[e] : d, acc);
        }
    }
    acc = moe_cta_sum(acc, red);
    if (ok && lane == 0 && part == 0) out[(size_t)t * dim + r] = acc;
}

#define MOE_KERNELS(T_, NAME) MOE_KERNELS_(T_, NAME)
#define MOE_KERNELS_(T_, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 3) moe_gemm_gu_##NAME(                                      \
        const uint8_t* Wg, const uint8_t* Wu, long long rowBytes, int ff, int cols, const float* X, int topk,  \
        const int* sorted, const int* tiles, float* H, const float* Sg, const float* Su) {                     \
        moe_gemm_gu_body<T_>(Wg, Wu, rowBytes, ff, cols, X, topk, sorted, tiles, H, Sg, Su);                   \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 3) moe_gemm_dn_##NAME(                                      \
        const uint8_t* W, long long rowBytes, int dim, int ff, const float* H, const int* tiles, float* Y,     \
        const float* Sd) {                                                                                     \
        moe_gemm_dn_body<T_>(W, rowBytes, dim, ff, H, tiles, Y, Sd);                                           \
    }
#define MOEV_KERNELS(T_, NAME) MOEV_KERNELS_(T_, NAME)
#define MOEV_KERNELS_(T_, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) moe_gemv_gu_##NAME(                           \
        const uint8_t* Wg, const uint8_t* Wu, long long rowBytes, int ff, int cols, const float* X, int topk,  \
        const int* ids, float* H, const float* Sg, const float* Su) {                                          \
        moe_gemv_gu_body<T_>(Wg, Wu, rowBytes, ff, cols, X, topk, ids, H, Sg, Su);                             \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) moe_gemv_dn_##NAME(                           \
        const uint8_t* W, long long rowBytes, int dim, int ff, const float* H, int topk, const int* ids,       \
        const float* wts, float* out, const float* Sd) {                                                       \
        moe_gemv_dn_body<T_>(W, rowBytes, dim, ff, H, topk, ids, wts, out, Sd);                                \
    }
#ifdef MOE_GEMV
MOEV_KERNELS(MOE_T, MOE_NAME)
#else
MOE_KERNELS(MOE_T, MOE_NAME)
#endif
