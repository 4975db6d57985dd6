// Fused KV write of the ftchat CUDA backend: RoPE on K, quantize K and V to
// their dtypes (the pool's K and V dtypes may differ), scatter both into
// their pages. One warp per (token, kv head, K|V) row. The same launch may
// take the block's q heads (RoPE in place) and the q/k head norms before
// the rotation.
//
// The codes and scales are bit-identical to kvcache.HostStore.WriteRow:
// the encoders below are the integer round-to-nearest-even algorithm of
// engine/kvcache/codec.go (also on compute_89, so both PTX flavours give
// the same bytes), divisions are IEEE (__fdiv_rn), and RoPE is computed as
// the Go reference in gpu/attention_test.go does: theta = pos * invf[i] in
// float64 (invf from the host, rope scaling and frequency factors folded
// in), cos/sin in float64 rounded to float32, the rotation in float32
// without fused multiply-adds.
//
// Pool layout (docs/kv-cache.md): codes [page][kv_head][slot][head_dim],
// dynamic scales [page][kv_head][slot] float32, static scales [kv_head].
// Accuracy-critical: no --use_fast_math.
#include <cstdint>

namespace {

enum { KV_BF16 = 0, KV_F16 = 1, KV_E4M3 = 2, KV_E5M2 = 3 };

// roundMini mirrors kvcache.roundMinifloat: the magnitude code of the
// finite float32 magnitude abs for a format with mbits mantissa bits and
// the given exponent bias, RNE; may exceed the format's largest code.
__device__ __forceinline__ uint32_t roundMini(uint32_t abs, int mbits, int bias) {
    int exp32 = (int)(abs >> 23);
    if (exp32 == 0) return 0;
    int e = exp32 - 127;
    uint32_t sig = (abs & 0x7fffffu) | 0x800000u;
    int emin = 1 - bias;
    int shift = 23 - mbits;
    bool normal = e >= emin;
    if (!normal) shift += emin - e;
    if (shift > 25) return 0;
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    if (!normal) return q;
    return ((uint32_t)(e + bias - 1) << mbits) + q;
}

__device__ __forceinline__ uint32_t encE4M3(float x) {
    uint32_t b = __float_as_uint(x), sign = b & 0x80000000u, abs = b & 0x7fffffffu;
    if (abs > 0x7f800000u) return 0x7f;
    uint32_t c = roundMini(abs, 3, 7);
    if (c > 0x7e) c = 0x7e;
    return (sign >> 24) | c;
}

__device__ __forceinline__ uint32_t encE5M2(float x) {
    uint32_t b = __float_as_uint(x), sign = b & 0x80000000u, abs = b & 0x7fffffffu;
    if (abs > 0x7f800000u) return 0x7f;
    uint32_t c = roundMini(abs, 2, 15);
    if (c > 0x7b) c = 0x7b;
    return (sign >> 24) | c;
}

__device__ __forceinline__ uint32_t encBF16(float x) {
    uint32_t b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return ((b >> 16) | 0x40u) & 0xffffu;
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ uint32_t encF16(float x) {
    uint32_t b = __float_as_uint(x), abs = b & 0x7fffffffu;
    uint32_t s = (b >> 16) & 0x8000u;
    if (abs > 0x7f800000u) return s | 0x7e00u | ((abs >> 13) & 0x1ffu);
    if (abs == 0x7f800000u) return s | 0x7c00u;
    uint32_t c = roundMini(abs, 10, 15);
    if (c >= 0x7c00u) c = 0x7c00u;
    return s | c;
}

}  // namespace

// warpSumKV: the butterfly sum of common.cuh's warp_sum (same order, so a
// head norm here rounds as head_rmsnorm does).
__device__ __forceinline__ float warpSumKV(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// headNorm: the warp's head b[0..D) scaled in place as ops.cu's head_rmsnorm
// scales it (the same sums in the same order, the same roundings).
__device__ __forceinline__ void headNorm(float* b, const float* __restrict__ g, int D, float eps, int lane) {
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) ss = fmaf(b[i], b[i], ss);
    ss = warpSumKV(ss);
    const float inv = (float)(1.0 / sqrt((double)ss / D + (double)eps));
    for (int i = lane; i < D; i += 32) b[i] = b[i] * inv * g[i];
    __syncwarp();
}

// ropeLoad: element lane + 32j of the warp's head b into x[j] (0 past D),
// rotated by RoPE at pos where rope is set and d < ropeDim; returns the
// lane's largest magnitude.
__device__ __forceinline__ float ropeLoad(const float* b, float x[8], int D, int lane, bool rope, int pos,
                                          const double* __restrict__ invf, int ropeDim, int neox) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int d = lane + 32 * j;
        float val = 0.f;
        if (d < D) {
            val = b[d];
            if (rope && d < ropeDim) {
                int i, i0, i1;
                if (neox) {
                    const int half = ropeDim >> 1;
                    i = d < half ? d : d - half;
                    i0 = i;
                    i1 = i + half;
                } else {
                    i = d >> 1;
                    i0 = d & ~1;
                    i1 = d | 1;
                }
                double sn, cs;
                sincos((double)pos * invf[i], &sn, &cs);
                const float c = (float)cs, s = (float)sn;
                const float x0 = b[i0], x1 = b[i1];
                val = (d == i0) ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s))
                                : __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
            }
            amax = fmaxf(amax, fabsf(val));
        }
        x[j] = val;
    }
    return amax;
}

// kv_write stores rows of k and v ([rows][kvh*D] float32) into the pool.
// Row r belongs to sequence rowSeq[r] (-1: none, skipped); seqs[s] = {first row, cached tokens,
// new tokens, page-table offset}; its position is cached + (r - first row)
// and its page pt[ptOff + pos>>pageShift], slot pos & (P-1).
// invf: ropeDim/2 float64 inverse frequencies (nullptr or ropeDim 0: no
// RoPE). neox: rotate (i, i+ropeDim/2) instead of (2i, 2i+1).
// ktype, vtype: the dtype codes of the K and the V pages. Scales (FP8
// halves only): dyn != 0: per-(token, kv head) amax/fp8max into ks/vs
// (indexed like slots); dyn == 0: ks/vs are the layer's static [kvh]
// scales (read).
// The block's q ([rows][heads*D], heads 0 for none) is rotated in place at
// the same positions by rows*heads more warps, after the K/V ones; qg and
// kg (nullptr: none) are q's and k's head RMSNorm weights, applied first
// with eps (Qwen3's q/k norm), so a block's norms, RoPE and KV write are
// one launch.
extern "C" __global__ void __launch_bounds__(128) kv_write(
    const float* __restrict__ k, const float* __restrict__ v, int rows, int kvh, int D,
    const int* __restrict__ rowSeq, const int4* __restrict__ seqs, const int* __restrict__ pt,
    int pageShift, uint8_t* __restrict__ kc, uint8_t* __restrict__ vc,
    float* __restrict__ ks, float* __restrict__ vs, int ktype, int vtype, int dyn,
    const double* __restrict__ invf, int ropeDim, int neox,
    float* __restrict__ q, int heads, const float* __restrict__ qg, const float* __restrict__ kg, float eps) {
    __shared__ float buf[4][256];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long wid = (long long)blockIdx.x * 4 + warp;
    const long long kvWarps = (long long)rows * kvh * 2;
    const bool isQ = wid >= kvWarps;
    int row, which = 0, h = 0;
    const float* src;
    if (isQ) {  // a q head: rotated in place
        const long long qw = wid - kvWarps;
        if (qw >= (long long)rows * heads) return;
        row = (int)(qw / heads);
        src = q + qw * D;
    } else {
        which = (int)(wid & 1);  // 0: K, 1: V
        const long long rest = wid >> 1;
        h = (int)(rest % kvh);
        row = (int)(rest / kvh);
        src = (which ? v : k) + ((size_t)row * kvh + h) * D;
    }
    const int si = rowSeq[row];
    if (si < 0) return;  // row of no sequence: nothing to store
    const int4 sq = seqs[si];
    const int pos = sq.y + (row - sq.x);

    float* b = buf[warp];
    for (int d = lane; d < D; d += 32) b[d] = src[d];
    __syncwarp();
    const float* g = isQ ? qg : (which == 0 ? kg : nullptr);
    if (g) headNorm(b, g, D, eps, lane);
    float x[8];
    float amax = ropeLoad(b, x, D, lane, which == 0, pos, invf, ropeDim, neox);
    if (isQ) {
        float* qd = const_cast<float*>(src);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int d = lane + 32 * j;
            if (d < D) qd[d] = x[j];
        }
        return;
    }
    const int dtype = which ? vtype : ktype;
    const int page = pt[sq.w + (pos >> pageShift)];
    const int slot = pos & ((1 << pageShift) - 1);
    const size_t sidx = ((size_t)page * kvh + h) * ((size_t)1 << pageShift) + slot;

    uint8_t* dst = (which ? vc : kc);
    if (dtype == KV_BF16 || dtype == KV_F16) {
        uint16_t* d16 = (uint16_t*)dst + sidx * D;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int d = lane + 32 * j;
            if (d < D) d16[d] = (uint16_t)(dtype == KV_BF16 ? encBF16(x[j]) : encF16(x[j]));
        }
        return;
    }
    const float fmax = dtype == KV_E4M3 ? 448.f : 57344.f;
    float scale;
    if (dyn) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        scale = __fdiv_rn(amax, fmax);
        if (lane == 0) (which ? vs : ks)[sidx] = scale;
    } else {
        scale = (which ? vs : ks)[h];
    }
    uint8_t* d8 = dst + sidx * D;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int d = lane + 32 * j;
        if (d < D) {
            uint32_t c = 0;
            if (!(dyn && scale == 0.f)) {
                const float y = __fdiv_rn(x[j], scale);
                c = dtype == KV_E4M3 ? encE4M3(y) : encE5M2(y);
            }
            d8[d] = (uint8_t)c;
        }
    }
}
