// Single-token Q4_K and Q6_K GEMV on integer activations (gemvq*_q4_k,
// gemvq*_q6_k, gemvq_pack_*), included by mm_q4_k.cu and mm_q6_k.cu after
// gemmq.cuh (gq_scales, gq_ld32u). Q4_K is described here, Q6_K at
// gemvq6_body.
// Issue 13: one decode row of gemmq spends ~410 instructions a warp on each
// 1 KB of weights (nibbles widened to 16-bit mma operands, the scales
// applied per sub-block in each of a row's four lanes) and Nsight Compute
// found it issue-bound at 1.1 TB/s. Here the activation row is quantized
// once per call to int16 in blocks of 32 (x ≈ xd·q, one block per Q4_K
// sub-block, with the block's float sum xs for the mins), and each lane
// dots 16 weight bytes (32 nibbles) with dp2a (16-bit × 8-bit pairs): 16
// integer dots and one scale step per 16 bytes. int16 keeps the activations
// ~100x closer than the bf16 operands of the GEMMs (int8, as llama.cpp's
// MMVQ uses, measured 3x further: 0.4-0.7% on a random Q4_K dot).
//
// A warp computes R whole output rows (1, 2 or 4), each reduced across
// lanes in a fixed order, so a row's result does not depend on R, the grid
// or the other rows. Its 32 lanes are 4 groups of 8; group g takes super-blocks g, g+4, ..., and
// lane i of a group the 16 bytes qs[16i..16i+15]: low nibbles are elements
// 64j+l0..+15 of sub-block 2j, high ones 64j+32+l0..+15 of sub-block 2j+1
// (j = i/2, l0 = 16·(i&1)). Only the lanes with l0 = 0 add their two
// sub-blocks' min terms, over the whole 32 elements.
#pragma once

// gemvq_pack_<type>: xq (int16), xd (the scale of each 32-element block)
// and xs (its float sum) from one float32 row x of cols (a multiple of
// 32) elements. A warp per block, 8 blocks a CTA of 256 threads: the
// block's largest |x| and sum by butterfly shuffles (the same order in
// every run), q = rint(x·32767/max), xd = max/32767. The same in every
// module that has gemvq.
#define GEMVQ_PACK(NAME) GEMVQ_PACK_(NAME)
#define GEMVQ_PACK_(NAME)                                                                                       \
    extern "C" __global__ void __launch_bounds__(256) gemvq_pack_##NAME(                                        \
        const float* __restrict__ x, int cols, int16_t* __restrict__ xq, float* __restrict__ xd,               \
        float* __restrict__ xs) {                                                                               \
        gemvq_pack(x, cols, xq, xd, xs);                                                                        \
    }
__device__ __forceinline__ void gemvq_pack(const float* __restrict__ x, int cols, int16_t* __restrict__ xq,
                                           float* __restrict__ xd, float* __restrict__ xs) {
    const int blk = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (blk * 32 >= cols) return;
    const float v = x[blk * 32 + lane];
    float a = fabsf(v), s = v;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        s += __shfl_xor_sync(0xffffffffu, s, o);
    }
    const float inv = a > 0.f ? 32767.f / a : 0.f;
    xq[blk * 32 + lane] = (int16_t)__float2int_rn(v * inv);
    if (lane == 0) {
        xd[blk] = a / 32767.f;
        xs[blk] = s;
    }
}
GEMVQ_PACK(MM_NAME)

// gv_dot16 adds to acc the dot of 16 nibbles (bits shift..shift+3 of each
// byte of q) with 16 int16 activations (x0: the first 8, x1: the rest).
__device__ __forceinline__ int gv_dot16(uint4 q, int4 x0, int4 x1, int shift, int acc) {
    const uint32_t w[4] = {(q.x >> shift) & 0x0F0F0F0Fu, (q.y >> shift) & 0x0F0F0F0Fu, (q.z >> shift) & 0x0F0F0F0Fu,
                           (q.w >> shift) & 0x0F0F0F0Fu};
    const int xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        acc = __dp2a_lo(xv[2 * k], (int)w[k], acc);
        acc = __dp2a_hi(xv[2 * k + 1], (int)w[k], acc);
    }
    return acc;
}

// gv_rows resolves the R rows of a gemvq warp (first = R·warp of the grid)
// over W0, then W1, then W2: row[k] points off bytes into row k's data,
// yr[k] at its output. A row past the end reads the warp's first row and
// is not live (not stored). It returns whether the first row is live.
template <int R>
__device__ __forceinline__ bool gv_rows(const uint8_t* W0, const uint8_t* W1, const uint8_t* W2, long long rowBytes,
                                        int rows0, int rows1, int rows2, float* y0, float* y1, float* y2, int off,
                                        const uint8_t* (&row)[R], float* (&yr)[R], bool (&live)[R]) {
    const int first = (blockIdx.x * 4 + (threadIdx.x >> 5)) * R;
#pragma unroll
    for (int k = 0; k < R; k++) {
        int r = first + k;
        const uint8_t* W = W0;
        float* y = y0;
        live[k] = true;
        if (r >= rows0) {
            r -= rows0, W = W1, y = y1;
            if (r >= rows1) {
                r -= rows1, W = W2, y = y2;
                live[k] = r < rows2;
            }
        }
        row[k] = live[k] ? W + (size_t)r * rowBytes + off : row[0];
        yr[k] = y + r;
    }
    return live[0];
}

// gv_store sums each row's lane partials across the warp in a fixed
// butterfly order and has lane 0 store the live rows.
template <int R>
__device__ __forceinline__ void gv_store(const float (&acc)[R], const bool (&live)[R], float* const (&yr)[R], int lane) {
#pragma unroll
    for (int k = 0; k < R; k++) {
        float a = acc[k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (lane == 0 && live[k]) *yr[k] = a;
    }
}

// gemvq_body: y_i = W_i · x for one token and up to three weights of one
// width (rows2 = 0 for two, rows1 = 0 too for one) over the rows of W0,
// then W1, then W2, R rows a warp (warp w of the grid takes rows R·w ..
// R·w+R-1), 4 warps a CTA. The R rows share the activation loads and keep
// R weight streams in flight; each row's arithmetic, and its order, are
// those of R = 1 (the multiplies and adds are pinned with intrinsics, so
// contraction cannot differ between the instantiations). cols % 256 == 0;
// x packed by gemvq_pack_<type>.
template <int R>
__device__ __forceinline__ void gemvq4_body(const uint8_t* W0, const uint8_t* W1, const uint8_t* W2, long long rowBytes,
                                           int rows0, int rows1, int rows2, int cols, const int16_t* __restrict__ xq,
                                           const float* __restrict__ xd, const float* __restrict__ xs, float* y0,
                                           float* y1, float* y2) {
    const int lane = threadIdx.x & 31, grp = lane >> 3, i = lane & 7, j = i >> 1, l0 = 16 * (i & 1);
    const uint8_t* row[R];
    float* yr[R];
    bool live[R];
    if (!gv_rows<R>(W0, W1, W2, rowBytes, rows0, rows1, rows2, y0, y1, y2, 16 + 16 * i, row, yr, live)) return;
    const int nsb = cols >> 8;
    // byte 2j (sub-blocks 0..3) or 2j-4 (4..7) of gq_scales' words
    const int sh = 16 * (j & 1);
    const int16_t* xrow = xq + 64 * j + l0;
    float acc[R];
#pragma unroll
    for (int k = 0; k < R; k++) acc[k] = 0.f;
#pragma unroll 2
    for (int sb = grp; sb < nsb; sb += 4) {
        uint4 h[R], q[R];
#pragma unroll
        for (int k = 0; k < R; k++) {
            const uint8_t* qs = row[k] + (size_t)sb * 144;
            h[k] = __ldg(reinterpret_cast<const uint4*>(qs - 16 - 16 * i));
            q[k] = __ldg(reinterpret_cast<const uint4*>(qs));
        }
        const int4* xl = reinterpret_cast<const int4*>(xrow + 256 * sb);
        const int4* xh = reinterpret_cast<const int4*>(xrow + 256 * sb + 32);
        const int4 xl0 = __ldg(xl), xl1 = __ldg(xl + 1), xh0 = __ldg(xh), xh1 = __ldg(xh + 1);
        const int xb = 8 * sb + 2 * j;
        const float d0 = __ldg(xd + xb), d1 = __ldg(xd + xb + 1);
        const float m0x = l0 == 0 ? __ldg(xs + xb) : 0.f, m1x = l0 == 0 ? __ldg(xs + xb + 1) : 0.f;
#pragma unroll
        for (int k = 0; k < R; k++) {
            const int s0 = gv_dot16(q[k], xl0, xl1, 0, 0), s1 = gv_dot16(q[k], xh0, xh1, 4, 0);
            uint32_t sc[4];
            float d, dmin;
            gq_scales(h[k], sc, d, dmin);
            const uint32_t scw = j < 2 ? sc[0] : sc[1], mw = j < 2 ? sc[2] : sc[3];
            const float c0 = (float)((scw >> sh) & 0xFFu), c1 = (float)((scw >> (sh + 8)) & 0xFFu);
            const float part = __fmaf_rn(__fmul_rn(c1, d1), (float)s1, __fmul_rn(__fmul_rn(c0, d0), (float)s0));
            // lanes with l0 != 0 have m0x = m1x = 0: no min term
            const float mins = __fmaf_rn((float)((mw >> (sh + 8)) & 0xFFu), m1x, __fmul_rn((float)((mw >> sh) & 0xFFu), m0x));
            acc[k] = __fadd_rn(acc[k], __fmaf_rn(d, part, -__fmul_rn(dmin, mins)));
        }
    }
    gv_store<R>(acc, live, yr, lane);
}

// gemvq6_body: gemvq4_body for Q6_K (210-byte super-blocks: ql[128] low
// nibbles, qh[64] high 2 bits, 16 int8 scales, d). Lane i of a group takes
// half n = i/4 of the super-block and l0 = 8·(i&3): the elements
// 128n+32m+l0..+7 for m = 0..3 (ql bytes 64n+l0.. and 64n+32+l0.., their
// nibbles; qh bytes 32n+l0.., bit pairs 0-1, 2-3, 4-5, 6-7), each 8 with
// one scale (sc[8n+l0/16+2m]) and one activation block (4n+m of the
// super-block's 8). w = d·sc·(q − 32): the bytes q − 32 go to dp2a as
// signed, so there are no mins. A block is only 2-byte aligned: its words
// are read as two halves (gq_ld32u).
__device__ __forceinline__ int gv_dot8(uint32_t q0, uint32_t q1, int4 x, int acc) {
    acc = __dp2a_lo(x.x, (int)q0, acc);
    acc = __dp2a_hi(x.y, (int)q0, acc);
    acc = __dp2a_lo(x.z, (int)q1, acc);
    return __dp2a_hi(x.w, (int)q1, acc);
}

template <int R>
__device__ __forceinline__ void gemvq6_body(const uint8_t* W0, const uint8_t* W1, const uint8_t* W2, long long rowBytes,
                                            int rows0, int rows1, int rows2, int cols, const int16_t* __restrict__ xq,
                                            const float* __restrict__ xd, float* y0, float* y1, float* y2) {
    const int lane = threadIdx.x & 31, grp = lane >> 3, i = lane & 7, n = i >> 2, l0 = 8 * (i & 3);
    const int sb8 = 8 * ((i & 3) >> 1); // bit offset of byte l0/16 of each scale word
    const uint8_t* row[R];
    float* yr[R];
    bool live[R];
    if (!gv_rows<R>(W0, W1, W2, rowBytes, rows0, rows1, rows2, y0, y1, y2, 0, row, yr, live)) return;
    const int nsb = cols >> 8;
    const int16_t* xrow = xq + 128 * n + l0;
    float acc[R];
#pragma unroll
    for (int k = 0; k < R; k++) acc[k] = 0.f;
#pragma unroll 2
    for (int sb = grp; sb < nsb; sb += 4) {
        int4 xv[4];
#pragma unroll
        for (int m = 0; m < 4; m++) xv[m] = __ldg(reinterpret_cast<const int4*>(xrow + 256 * sb + 32 * m));
        const float4 dx = __ldg(reinterpret_cast<const float4*>(xd + 8 * sb + 4 * n));
#pragma unroll
        for (int k = 0; k < R; k++) {
            const uint8_t* blk = row[k] + (size_t)sb * 210;
            const uint8_t* ql = blk + 64 * n + l0;
            const uint8_t* qh = blk + 128 + 32 * n + l0;
            const uint32_t a0 = gq_ld32u(ql), a1 = gq_ld32u(ql + 4), b0 = gq_ld32u(ql + 32), b1 = gq_ld32u(ql + 36);
            const uint32_t h0 = gq_ld32u(qh), h1 = gq_ld32u(qh + 4);
            const uint32_t s0 = gq_ld32u(blk + 192 + 8 * n), s1 = gq_ld32u(blk + 196 + 8 * n);
            const float d = ldh(blk + 208);
            // q − 32 of the four element groups, two words (4 elements) each
            uint32_t q[4][2];
            const uint32_t aw[2] = {a0, a1}, bw[2] = {b0, b1}, hw[2] = {h0, h1};
#pragma unroll
            for (int w = 0; w < 2; w++) {
                q[0][w] = __vsub4((aw[w] & 0x0F0F0F0Fu) | ((hw[w] << 4) & 0x30303030u), 0x20202020u);
                q[1][w] = __vsub4((bw[w] & 0x0F0F0F0Fu) | ((hw[w] << 2) & 0x30303030u), 0x20202020u);
                q[2][w] = __vsub4(((aw[w] >> 4) & 0x0F0F0F0Fu) | (hw[w] & 0x30303030u), 0x20202020u);
                q[3][w] = __vsub4(((bw[w] >> 4) & 0x0F0F0F0Fu) | ((hw[w] >> 2) & 0x30303030u), 0x20202020u);
            }
            const float c0 = (float)(int8_t)((s0 >> sb8) & 0xFFu), c1 = (float)(int8_t)((s0 >> (sb8 + 16)) & 0xFFu);
            const float c2 = (float)(int8_t)((s1 >> sb8) & 0xFFu), c3 = (float)(int8_t)((s1 >> (sb8 + 16)) & 0xFFu);
            float part = __fmul_rn(__fmul_rn(c0, dx.x), (float)gv_dot8(q[0][0], q[0][1], xv[0], 0));
            part = __fmaf_rn(__fmul_rn(c1, dx.y), (float)gv_dot8(q[1][0], q[1][1], xv[1], 0), part);
            part = __fmaf_rn(__fmul_rn(c2, dx.z), (float)gv_dot8(q[2][0], q[2][1], xv[2], 0), part);
            part = __fmaf_rn(__fmul_rn(c3, dx.w), (float)gv_dot8(q[3][0], q[3][1], xv[3], 0), part);
            acc[k] = __fmaf_rn(d, part, acc[k]);
        }
    }
    gv_store<R>(acc, live, yr, lane);
}

// gemvq<R>_<type>: gemvq4_body (Q4_K) or gemvq6_body (Q6_K) with R rows a
// warp; grid cdiv(rows0+rows1+rows2, 4·R), 128 threads.
#define GEMVQ_KERNEL(NAME, PRE, R) GEMVQ_KERNEL_(NAME, PRE, R)
#define GEMVQ_KERNEL_(NAME, PRE, R)                                                                           \
    extern "C" __global__ void __launch_bounds__(128) PRE##_##NAME(                                           \
        const uint8_t* __restrict__ W0, const uint8_t* __restrict__ W1, const uint8_t* __restrict__ W2,       \
        long long rowBytes, int rows0, int rows1, int rows2, int cols, const int16_t* __restrict__ xq,        \
        const float* __restrict__ xd, const float* __restrict__ xs, float* y0, float* y1, float* y2) {         \
        if constexpr (MM_T == T_Q6_K)                                                                         \
            gemvq6_body<R>(W0, W1, W2, rowBytes, rows0, rows1, rows2, cols, xq, xd, y0, y1, y2);              \
        else                                                                                                  \
            gemvq4_body<R>(W0, W1, W2, rowBytes, rows0, rows1, rows2, cols, xq, xd, xs, y0, y1, y2);          \
    }
GEMVQ_KERNEL(MM_NAME, gemvq, 1)
GEMVQ_KERNEL(MM_NAME, gemvq2, 2)
GEMVQ_KERNEL(MM_NAME, gemvq4, 4)
