// Batched-decode GEMM for Q4_K and Q6_K weights, from registers (gemmq8/16/32_*,
// gemmq_pack_*), included by mm_q4_k.cu and mm_q6_k.cu after mm.cuh (mma.cuh's
// pack2 and mma_16816). Issue 14: at 16 rows the tile GEMMs took 3.6-4.3x
// the time of one row, dequantizing every weight to a 16-bit shared tile;
// here the weights go from global memory straight into the mma's A
// fragments as their small integers and the scales are applied to the
// float32 products of each sub-block (Q4_K below; Q6_K at gemmq6_body).
//
// Y[ntok][rows] = X[ntok][cols] · Wᵀ with W's rows the mma's M side and the
// tokens its N side. A dot product does not care in which order its k
// elements are summed, only that A and B agree, so each m16n8k16 step takes
// 16 elements of one Q4_K sub-block (32 elements with one 6-bit scale and
// min) in the order that makes each lane's share of a row 4 bytes of its
// own: lane (g, t) holds weight rows g and g+8, and in k step (b, h) (sub-block
// b = 0..7 of a super-block, half h) its fragment slots 2t, 2t+1, 2t+8, 2t+9
// are the elements in bytes 8t+4h+{0, 2, 1, 3} of the sub-block's 32 bytes
// (low nibbles for even b, high for odd). A lane thus reads its rows' nibbles
// as one 8-byte load per 64 elements, and turns four of them into two
// 16-bit operand pairs with a mask and an exponent OR (128+q in bf16,
// 1024+q in fp16) and a subtract. The activations are packed once per call
// (gemmq_pack_q4_k) into exactly those B fragments, so the main loop reads
// them with one coalesced 8-byte load per k step and token tile.
//
// Per sub-block the mmas give C = Σ q·x over the integer nibbles; one more mma
// against an all-ones A gives S = Σ x, and w = d·sc·q − dmin·m makes the
// sub-block's share d·sc·C − dmin·m·S, added in float32. The weights are
// thus used exactly (no 16-bit rounding of w), the activations as 16-bit
// operands as in the tile GEMMs.
//
// A CTA of GQ_WARPS warps owns GQ_ROWS rows, each warp GQ_MT m16 tiles, and
// blockIdx.y a slice of kSB super-blocks (split-K: the slices write float32
// partials to Y + blockIdx.y*ntok*rows, which gemm_reduce_* sums in order).
// There is no barrier. Requires cols % 256 == 0 and ntok <= 8*NT.
#pragma once

#define GQ_WARPS 4
#define GQ_MT 2
#define GQ_ROWS (GQ_WARPS * GQ_MT * 16)

#if FT_COMPUTE_F16
#define GQ_MAGIC 0x64006400u   // fp16 1024.0 in both halves: 1024 + q is exact
#define GQ_MAGIC32 0x00200020u // added to GQ_MAGIC: fp16 1056.0 = 1024 + 32
#define GQ_ONES 0x3C003C00u    // fp16 1.0, 1.0
#else
#define GQ_MAGIC 0x43004300u   // bf16 128.0 in both halves: 128 + q is exact
#define GQ_MAGIC32 0x00200020u // added to GQ_MAGIC: bf16 160.0 = 128 + 32
#define GQ_ONES 0x3F803F80u    // bf16 1.0, 1.0
#endif

// gq_sub is the 16-bit operand pair v minus the pair c, exact for the small
// integers the decoders below make.
__device__ __forceinline__ uint32_t gq_sub(uint32_t v, uint32_t c) {
#if FT_COMPUTE_F16
    __half2 h = __hsub2(*reinterpret_cast<__half2*>(&v), *reinterpret_cast<__half2*>(&c));
#else
    __nv_bfloat162 h = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&v), *reinterpret_cast<__nv_bfloat162*>(&c));
#endif
    return *reinterpret_cast<uint32_t*>(&h);
}

// gq_nib turns the low nibbles of bytes 0 and 2 of w into a 16-bit operand
// pair (byte 0's in the low half).
__device__ __forceinline__ uint32_t gq_nib(uint32_t w) {
    return gq_sub((w & 0x000F000Fu) | GQ_MAGIC, GQ_MAGIC);
}

// gq_ldx loads one B fragment pair. Volatile, like mma_16816, so it stays
// in its sub-block: hoisted, the loads of all 8 sub-blocks of a super-block
// would take 64-128 registers and spill.
__device__ __forceinline__ void gq_ldx(const uint2* p, uint32_t* b) {
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "l"(p));
}

// gq_load loads, for the super-block chunk q (64 elements) of both rows of
// each m tile, this lane's 8 nibble bytes into qv, and with header the
// super-block's first 16 bytes (d, dmin, the 12 scale bytes) into hd.
__device__ __forceinline__ void gq_load(const uint8_t* __restrict__ W, long long rowBytes, const int (&wrow)[GQ_MT][2],
                                        int q, int t, bool header, uint4 (&hd)[GQ_MT][2], uint2 (&qv)[GQ_MT][2]) {
#pragma unroll
    for (int i = 0; i < GQ_MT; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const uint8_t* blk = W + (size_t)wrow[i][e] * rowBytes + (size_t)(q >> 2) * 144;
            if (header) hd[i][e] = __ldg(reinterpret_cast<const uint4*>(blk));
            qv[i][e] = __ldg(reinterpret_cast<const uint2*>(blk + 16 + 32 * (q & 3) + 8 * t));
        }
}

// gq_scales unpacks a Q4_K header: the 6-bit scales of sub-blocks 0..3 and
// 4..7 as bytes of sc[0] and sc[1], the mins likewise in sc[2], sc[3].
__device__ __forceinline__ void gq_scales(uint4 h, uint32_t (&sc)[4], float& d, float& dmin) {
    float2 dd = __half22float2(*reinterpret_cast<__half2*>(&h.x));
    d = dd.x;
    dmin = dd.y;
    sc[0] = h.y & 0x3F3F3F3Fu;
    sc[1] = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    sc[2] = h.z & 0x3F3F3F3Fu;
    sc[3] = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
}

// GqWarp is where a warp's share of a gemmq launch lies: its lane (g, t),
// first weight row r0, the super-blocks [s0, s1) of its k slice, and the
// rows each m tile's lane reads (rows past the end read the last row;
// their outputs are not stored). gq_warp fills it for row tile tile and k
// slice split, false for a warp past the last row.
struct GqWarp {
    int lane, g, t, r0, s0, s1;
    int wrow[GQ_MT][2];
};
__device__ __forceinline__ bool gq_warp(int rows, int cols, int kSB, int tile, int split, GqWarp& w) {
    w.lane = threadIdx.x & 31;
    w.g = w.lane >> 2;
    w.t = w.lane & 3;
    w.r0 = tile * GQ_ROWS + (threadIdx.x >> 5) * GQ_MT * 16;
    if (w.r0 >= rows) return false;
    w.s0 = split * kSB;
    w.s1 = min(cols >> 8, w.s0 + kSB);
#pragma unroll
    for (int i = 0; i < GQ_MT; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) w.wrow[i][e] = min(w.r0 + 16 * i + 8 * e + w.g, rows - 1);
    return true;
}

template <int NT>
__device__ __forceinline__ void gq_zero(float (&acc)[GQ_MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < GQ_MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
}

// gq_store writes a warp's accumulators (rows r0.., tokens 8j+2t, +1) to
// out (its k slice's [ntok][rows]), times the fp16 flavour's inverse row
// scales.
template <int NT>
__device__ __forceinline__ void gq_store(const float (&acc)[GQ_MT][NT][4], int r0, int g, int t, int rows,
                                         const float* __restrict__ xinv, float* __restrict__ out, int ntok) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int tk = 8 * j + 2 * t;
#if FT_COMPUTE_F16
        const float iv0 = tk < ntok ? xinv[tk] : 0.f, iv1 = tk + 1 < ntok ? xinv[tk + 1] : 0.f;
#else
        const float iv0 = 1.f, iv1 = 1.f;
#endif
#pragma unroll
        for (int i = 0; i < GQ_MT; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int r = r0 + 16 * i + 8 * e + g;
                if (r >= rows) continue;
                if (tk < ntok) out[(size_t)tk * rows + r] = acc[i][j][2 * e] * iv0;
                if (tk + 1 < ntok) out[(size_t)(tk + 1) * rows + r] = acc[i][j][2 * e + 1] * iv1;
            }
    }
}

template <int NT>
__device__ void gemmq4_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                            const uint2* __restrict__ XP, const float* __restrict__ xinv, float* __restrict__ Y,
                            int ntok, int kSB, int tile, int split) {
    GqWarp wp;
    if (!gq_warp(rows, cols, kSB, tile, split, wp)) return;
    const int lane = wp.lane, g = wp.g, t = wp.t, r0 = wp.r0, s0 = wp.s0, s1 = wp.s1;
    const int(&wrow)[GQ_MT][2] = wp.wrow;
    const uint32_t ones[4] = {GQ_ONES, GQ_ONES, GQ_ONES, GQ_ONES};
    float acc[GQ_MT][NT][4];
    gq_zero(acc);

    // One 64-element chunk (two sub-blocks) an iteration, over the slice's
    // chunks q; each iteration loads the next chunk's nibbles (and at a
    // super-block's last chunk the next header) before it computes, so one
    // chunk's loads are in flight behind each warp's mmas. A fully unrolled
    // super-block would hoist its scale conversions and spill.
    const int q0 = 4 * s0, q1 = 4 * s1;
    uint4 hn[GQ_MT][2];
    uint2 qn[GQ_MT][2];
    gq_load(W, rowBytes, wrow, q0, t, true, hn, qn);
    uint32_t scw[GQ_MT][2][4];
    float d[GQ_MT][2], dmin[GQ_MT][2];
#pragma unroll 1
    for (int q = q0; q < q1; q++) {
        const int c = q & 3;
        if (c == 0) {
#pragma unroll
            for (int i = 0; i < GQ_MT; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) gq_scales(hn[i][e], scw[i][e], d[i][e], dmin[i][e]);
        }
        uint2 qc[GQ_MT][2];
#pragma unroll
        for (int i = 0; i < GQ_MT; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) qc[i][e] = qn[i][e];
        if (q + 1 < q1) gq_load(W, rowBytes, wrow, q + 1, t, c == 3, hn, qn);
        const uint2* xs = XP + (size_t)q * 4 * NT * 32 + lane;
#pragma unroll
        for (int bb = 0; bb < 2; bb++) {
            const int b = 2 * c + bb; // sub-block within the super-block
            uint32_t bf[2][NT][2];
            float S[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) S[j][e] = 0.f;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    gq_ldx(xs + ((2 * bb + h) * NT + j) * 32, bf[h][j]);
                    mma_16816(S[j], ones, bf[h][j]);
                }
            }
            const int sh = 4 * bb;
            // byte b of the scales (sc) and of the mins (m): words 0/1 and 2/3
            const int wsel = c >> 1, bsh = 8 * (b & 3);
#pragma unroll
            for (int i = 0; i < GQ_MT; i++) {
                float C[NT][4];
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) C[j][e] = 0.f;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t w0 = (h ? qc[i][0].y : qc[i][0].x) >> sh;
                    uint32_t w1 = (h ? qc[i][1].y : qc[i][1].x) >> sh;
                    uint32_t a[4] = {gq_nib(w0), gq_nib(w1), gq_nib(w0 >> 8), gq_nib(w1 >> 8)};
#pragma unroll
                    for (int j = 0; j < NT; j++) mma_16816(C[j], a, bf[h][j]);
                }
                float ds0 = d[i][0] * (float)(((wsel ? scw[i][0][1] : scw[i][0][0]) >> bsh) & 0xFFu);
                float dm0 = dmin[i][0] * (float)(((wsel ? scw[i][0][3] : scw[i][0][2]) >> bsh) & 0xFFu);
                float ds1 = d[i][1] * (float)(((wsel ? scw[i][1][1] : scw[i][1][0]) >> bsh) & 0xFFu);
                float dm1 = dmin[i][1] * (float)(((wsel ? scw[i][1][3] : scw[i][1][2]) >> bsh) & 0xFFu);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    acc[i][j][0] += ds0 * C[j][0] - dm0 * S[j][0];
                    acc[i][j][1] += ds0 * C[j][1] - dm0 * S[j][1];
                    acc[i][j][2] += ds1 * C[j][2] - dm1 * S[j][0];
                    acc[i][j][3] += ds1 * C[j][3] - dm1 * S[j][1];
                }
            }
        }
    }
    gq_store<NT>(acc, r0, g, t, rows, xinv, Y, ntok);
}

// Q6_K (gemmq*_q6_k): each 16 elements share one int8 scale, so a k step
// is 16 consecutive elements and lane t's fragment slots 2t, 2t+1, 2t+8,
// 2t+9 are elements 4t+{0, 2, 1, 3} of it (gemmq_pack's order for Q6_K).
// The element's 6 bits are a nibble of ql and 2 bits of qh, 4 bytes of
// each per lane and k step; w = d·sc·(q − 32), so C = Σ (q − 32)·x needs
// no sums. A 210-byte block is only 2-byte aligned, so the 4-byte words are
// read as two halves.
__device__ __forceinline__ uint32_t gq_ld32u(const uint8_t* p) {
    uint16_t lo, hi;
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(lo) : "l"(p));
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(hi) : "l"(p + 2));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// gq_q6 turns the nibbles of bytes 0 and 2 of ql and the 2-bit fields of
// bytes 0 and 2 of qh (both already shifted into place) into q − 32 as a
// 16-bit operand pair.
__device__ __forceinline__ uint32_t gq_q6(uint32_t ql, uint32_t qh) {
    return gq_sub((ql & 0x000F000Fu) | ((qh & 0x00030003u) << 4) | GQ_MAGIC, GQ_MAGIC + GQ_MAGIC32);
}

template <int NT>
__device__ void gemmq6_body(const uint8_t* __restrict__ W, long long rowBytes, int rows, int cols,
                            const uint2* __restrict__ XP, const float* __restrict__ xinv, float* __restrict__ Y,
                            int ntok, int kSB, int tile, int split) {
    GqWarp wp;
    if (!gq_warp(rows, cols, kSB, tile, split, wp)) return;
    const int lane = wp.lane, g = wp.g, t = wp.t, r0 = wp.r0, s0 = wp.s0, s1 = wp.s1;
    const int(&wrow)[GQ_MT][2] = wp.wrow;
    float acc[GQ_MT][NT][4];
    gq_zero(acc);

    // One half (128 elements) of a super-block an iteration: per row 4 ql
    // words, 2 qh words, 8 scales.
#pragma unroll 1
    for (int hq = 2 * s0; hq < 2 * s1; hq++) {
        const int n = hq & 1;
        uint32_t ql[GQ_MT][2][2][2], qh[GQ_MT][2][2], sc[GQ_MT][2][2];
        float d[GQ_MT][2];
#pragma unroll
        for (int i = 0; i < GQ_MT; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint8_t* blk = W + (size_t)wrow[i][e] * rowBytes + (size_t)(hq >> 1) * 210;
#pragma unroll
                for (int kk = 0; kk < 2; kk++)
#pragma unroll
                    for (int h = 0; h < 2; h++) ql[i][e][kk][h] = gq_ld32u(blk + 64 * n + 32 * kk + 16 * h + 4 * t);
#pragma unroll
                for (int h = 0; h < 2; h++) qh[i][e][h] = gq_ld32u(blk + 128 + 32 * n + 16 * h + 4 * t);
                sc[i][e][0] = gq_ld32u(blk + 192 + 8 * n);
                sc[i][e][1] = gq_ld32u(blk + 196 + 8 * n);
                d[i][e] = ldh(blk + 208);
            }
        const uint2* xs = XP + (size_t)hq * 8 * NT * 32 + lane;
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                // k step 2k+h of this half: chunk k, elements 16h..16h+15
                uint32_t bf[NT][2];
#pragma unroll
                for (int j = 0; j < NT; j++) gq_ldx(xs + ((2 * k + h) * NT + j) * 32, bf[j]);
                const int si = h + 2 * k; // scale index within the half
#pragma unroll
                for (int i = 0; i < GQ_MT; i++) {
                    uint32_t l0 = ql[i][0][k & 1][h] >> (4 * (k >> 1)), l1 = ql[i][1][k & 1][h] >> (4 * (k >> 1));
                    uint32_t h0 = qh[i][0][h] >> (2 * k), h1 = qh[i][1][h] >> (2 * k);
                    uint32_t a[4] = {gq_q6(l0, h0), gq_q6(l1, h1), gq_q6(l0 >> 8, h0 >> 8), gq_q6(l1 >> 8, h1 >> 8)};
                    float C[NT][4];
#pragma unroll
                    for (int j = 0; j < NT; j++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) C[j][e] = 0.f;
                        mma_16816(C[j], a, bf[j]);
                    }
                    float s0f = d[i][0] * (float)(int8_t)((sc[i][0][si >> 2] >> (8 * (si & 3))) & 0xFFu);
                    float s1f = d[i][1] * (float)(int8_t)((sc[i][1][si >> 2] >> (8 * (si & 3))) & 0xFFu);
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        acc[i][j][0] += s0f * C[j][0];
                        acc[i][j][1] += s0f * C[j][1];
                        acc[i][j][2] += s1f * C[j][2];
                        acc[i][j][3] += s1f * C[j][3];
                    }
                }
            }
    }
    gq_store<NT>(acc, r0, g, t, rows, xinv, Y, ntok);
}

// gemmq_body computes row tile tile, k slice split of Y = X·Wᵀ into out
// (that slice's [ntok][rows]).
template <int T, int NT>
__device__ __forceinline__ void gemmq_body(const uint8_t* W, long long rowBytes, int rows, int cols, const uint2* XP,
                                           const float* xinv, float* out, int ntok, int kSB, int tile, int split) {
    if constexpr (T == T_Q6_K)
        gemmq6_body<NT>(W, rowBytes, rows, cols, XP, xinv, out, ntok, kSB, tile, split);
    else
        gemmq4_body<NT>(W, rowBytes, rows, cols, XP, xinv, out, ntok, kSB, tile, split);
}

// MINB_ CTAs an SM: the register budget (65536 / (128 * MINB_)) each token
// count compiles into without spilling.
#define GEMMQ_KERNEL(NAME, NT_, N_, MINB_) GEMMQ_KERNEL_(NAME, NT_, N_, MINB_)
#define GEMMQ_KERNEL_(NAME, NT_, N_, MINB_)                                                               \
    extern "C" __global__ void __launch_bounds__(GQ_WARPS * 32, MINB_) gemmq##N_##_##NAME(                \
        const uint8_t* W, long long rowBytes, int rows, int cols, const uint2* xp, const float* xinv,    \
        float* y, int ntok, int kSB) {                                                                   \
        gemmq_body<MM_T, NT_>(W, rowBytes, rows, cols, xp, xinv, y + (size_t)blockIdx.y * ntok * rows, ntok,  \
                              kSB, blockIdx.x, blockIdx.y);                                              \
    }
GEMMQ_KERNEL(MM_NAME, 1, 8, 4)
GEMMQ_KERNEL(MM_NAME, 2, 16, 3)
GEMMQ_KERNEL(MM_NAME, 4, 32, 2)

// gemmqg<N>_<type>: two or three matrices of one X and one width (q, k and
// v; gate and up: rows2 = 0 for two) in one launch, so the small ones do
// not each pay a launch and a ramp of their own. blockIdx.x runs over the
// row tiles of W0, then W1, then W2; blockIdx.y is the k slice as in
// gemmq<N>. With splits > 1, matrix i's slice z goes to
// ws + z*ntok*(rows0+rows1+rows2) + ntok*(the rows of the matrices before
// i), which gemmq_reduce3_* sums into y0, y1, y2; else to y_i directly.
#define GEMMQG_KERNEL(NAME, NT_, N_, MINB_) GEMMQG_KERNEL_(NAME, NT_, N_, MINB_)
#define GEMMQG_KERNEL_(NAME, NT_, N_, MINB_)                                                              \
    extern "C" __global__ void __launch_bounds__(GQ_WARPS * 32, MINB_) gemmqg##N_##_##NAME(               \
        const uint8_t* W0, const uint8_t* W1, const uint8_t* W2, long long rowBytes, int rows0, int rows1, \
        int rows2, int cols, const uint2* xp, const float* xinv, float* y0, float* y1, float* y2,         \
        float* ws, int ntok, int kSB, int splits) {                                                      \
        const int t0 = (rows0 + GQ_ROWS - 1) / GQ_ROWS, t1 = (rows1 + GQ_ROWS - 1) / GQ_ROWS;            \
        int tile = blockIdx.x, rows = rows0, before = 0;                                                 \
        const uint8_t* W = W0;                                                                           \
        float* y = y0;                                                                                   \
        if (tile >= t0 + t1) {                                                                           \
            tile -= t0 + t1, rows = rows2, before = rows0 + rows1, W = W2, y = y2;                       \
        } else if (tile >= t0) {                                                                         \
            tile -= t0, rows = rows1, before = rows0, W = W1, y = y1;                                    \
        }                                                                                                \
        float* out = splits > 1                                                                          \
                         ? ws + ((size_t)blockIdx.y * (rows0 + rows1 + rows2) + before) * ntok           \
                         : y;                                                                            \
        gemmq_body<MM_T, NT_>(W, rowBytes, rows, cols, xp, xinv, out, ntok, kSB, tile, blockIdx.y);       \
    }
GEMMQG_KERNEL(MM_NAME, 1, 8, 4)
GEMMQG_KERNEL(MM_NAME, 2, 16, 3)
GEMMQG_KERNEL(MM_NAME, 4, 32, 2)

// gemmq_reduce3_<type>: y0, y1, y2 (n0, n1 - n0 and n - n1 floats) from
// the splits slices of n floats gemmqg<N> wrote, each summed in slice
// order as gemm_reduce_* does.
#define GEMMQ_REDUCE3(NAME) GEMMQ_REDUCE3_(NAME)
#define GEMMQ_REDUCE3_(NAME)                                                                              \
    extern "C" __global__ void gemmq_reduce3_##NAME(const float* part, float* y0, float* y1, float* y2,  \
                                                   long long n0, long long n1, long long n, int splits) { \
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;                                  \
        if (i >= n) return;                                                                              \
        float s = part[i];                                                                               \
        for (int z = 1; z < splits; z++) s += part[(size_t)z * n + i];                                   \
        if (i < n0)                                                                                      \
            y0[i] = s;                                                                                   \
        else if (i < n1)                                                                                 \
            y1[i - n0] = s;                                                                              \
        else                                                                                             \
            y2[i - n1] = s;                                                                              \
    }
GEMMQ_REDUCE3(MM_NAME)

// gemmq_pack_<type>: XP (the B fragments gemmq reads) from X[ntok][cols]
// float32, for nt token tiles of 8 (tokens past ntok are zeros). Grid
// (cdiv(cols, 1024), 8*nt), 256 threads: blockIdx.y is the token, each
// thread packs 4 consecutive elements. In the fp16 flavour every token's row
// is first scaled by its f16_row_scale (mma.cuh), each CTA finding the
// row's largest |x| itself, and the inverse goes to xinv[token].
#define GEMMQ_PACK(NAME) GEMMQ_PACK_(NAME)
#define GEMMQ_PACK_(NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) gemmq_pack_##NAME(const float* X, int cols, int ntok, \
                                                                        int nt, uint2* xp, float* xinv) { \
        gemmq_pack<MM_T>(X, cols, ntok, nt, xp, xinv);                                                         \
    }

template <int T>
__device__ __forceinline__ void gemmq_pack(const float* __restrict__ X, int cols, int ntok, int nt,
                                           uint2* __restrict__ xp, float* __restrict__ xinv) {
    const int tok = blockIdx.y;
    const int k0 = 4 * (blockIdx.x * 256 + threadIdx.x);
    const float* row = X + (size_t)tok * cols;
    float xs = 1.f;
#if FT_COMPUTE_F16
    {
        __shared__ float red[8];
        float m = 0.f;
        if (tok < ntok)
            for (int k = 4 * threadIdx.x; k < cols; k += 1024)
                m = fmaxf(m, amax4(__ldg(reinterpret_cast<const float4*>(row + k))));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        m = red[0];
#pragma unroll
        for (int w = 1; w < 8; w++) m = fmaxf(m, red[w]);
        xs = f16_row_scale(m);
        if (blockIdx.x == 0 && threadIdx.x == 0 && tok < ntok) xinv[tok] = 1.f / xs;
    }
#endif
    if (k0 >= cols) return;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (tok < ntok) v = f16_scale4(__ldg(reinterpret_cast<const float4*>(row + k0)), xs);
    int s, t;
    if constexpr (T == T_Q6_K) { // k step: 16 consecutive elements, lane t's 4 at 4t
        s = k0 >> 4;
        t = (k0 >> 2) & 3;
    } else { // Q4_K: step 2b+h of sub-block b, lane t's 4 at 8t+4h
        const int sb = k0 >> 8, r = k0 & 255;
        const int b = r >> 5, h = (r >> 2) & 1;
        t = (r >> 3) & 3;
        s = 16 * sb + 2 * b + h;
    }
    const int lane = 4 * (tok & 7) + t;
    xp[((size_t)s * nt + (tok >> 3)) * 32 + lane] = make_uint2(pack2(v.x, v.z), pack2(v.y, v.w));
}
GEMMQ_PACK(MM_NAME)
