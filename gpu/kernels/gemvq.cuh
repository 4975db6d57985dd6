// Single-token Q4_K GEMV on integer activations (gemvq_q4_k,
// gemvq_pack_q4_k), included by mm_q4_k.cu after gemmq.cuh (gq_scales).
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
// every run), q = rint(x·32767/max), xd = max/32767.
extern "C" __global__ void __launch_bounds__(256) gemvq_pack_q4_k(const float* __restrict__ x, int cols,
                                                                 int16_t* __restrict__ xq, float* __restrict__ xd,
                                                                 float* __restrict__ xs) {
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

// gemvq_body: y_i = W_i · x for one token and up to three weights of one
// width (rows2 = 0 for two, rows1 = 0 too for one) over the rows of W0,
// then W1, then W2, R rows a warp (warp w of the grid takes rows R·w ..
// R·w+R-1), 4 warps a CTA. The R rows share the activation loads and keep
// R weight streams in flight; each row's arithmetic, and its order, are
// those of R = 1 (the multiplies and adds are pinned with intrinsics, so
// contraction cannot differ between the instantiations). cols % 256 == 0;
// x packed by gemvq_pack_<type>.
template <int R>
__device__ __forceinline__ void gemvq_body(const uint8_t* W0, const uint8_t* W1, const uint8_t* W2, long long rowBytes,
                                           int rows0, int rows1, int rows2, int cols, const int16_t* __restrict__ xq,
                                           const float* __restrict__ xd, const float* __restrict__ xs, float* y0,
                                           float* y1, float* y2) {
    const int first = (blockIdx.x * 4 + (threadIdx.x >> 5)) * R;
    const int lane = threadIdx.x & 31, grp = lane >> 3, i = lane & 7, j = i >> 1, l0 = 16 * (i & 1);
    const uint8_t* row[R];
    float* yr[R];
    bool live[R];
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
        // a row past the end reads the warp's first row; it is not stored
        row[k] = live[k] ? W + (size_t)r * rowBytes + 16 + 16 * i : row[0];
        yr[k] = y + r;
    }
    if (!live[0]) return;
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
#pragma unroll
    for (int k = 0; k < R; k++) {
        float a = acc[k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (lane == 0 && live[k]) *yr[k] = a;
    }
}

// gemvq<R>_<type>: gemvq_body with R rows a warp; grid
// cdiv(rows0+rows1+rows2, 4·R), 128 threads.
#define GEMVQ_KERNEL(NAME, R)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                                   \
        const uint8_t* __restrict__ W0, const uint8_t* __restrict__ W1, const uint8_t* __restrict__ W2,       \
        long long rowBytes, int rows0, int rows1, int rows2, int cols, const int16_t* __restrict__ xq,        \
        const float* __restrict__ xd, const float* __restrict__ xs, float* y0, float* y1, float* y2) {         \
        gemvq_body<R>(W0, W1, W2, rowBytes, rows0, rows1, rows2, cols, xq, xd, xs, y0, y1, y2);               \
    }
GEMVQ_KERNEL(gemvq_q4_k, 1)
GEMVQ_KERNEL(gemvq2_q4_k, 2)
GEMVQ_KERNEL(gemvq4_q4_k, 4)
