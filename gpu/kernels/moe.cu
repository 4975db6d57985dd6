// Mixture-of-experts kernels that do not depend on the weight type: router
// softmax + top-k, the device-side grouping of (token, slot) pairs by expert
// (histogram, scan, permutation, tile list) and the weighted combine. The
// typed expert GEMMs/GEMVs are in moe.cuh (one module per weight type,
// moe_<type>.cu). Built without --use_fast_math (router softmax).
#include "common.cuh"
#include "moe_tile.cuh"

// Router: one warp per token. Softmax over nexp logits (float32, max
// subtracted), the topk largest (ties: lower expert id first, as the CPU's
// stable sort), optionally renormalised to sum to 1. ids/wts[t*topk + k].
extern "C" __global__ void moe_topk(const float* __restrict__ logits, int ntok, int nexp, int topk, int norm,
                                    int* __restrict__ ids, float* __restrict__ wts) {
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (t >= ntok) return;
    const float* l = logits + (size_t)t * nexp;
    float mx = -INFINITY;
    for (int e = lane; e < nexp; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int e = lane; e < nexp; e += 32) sum += expf(l[e] - mx);
    sum = warp_sum(sum);
    float prev = INFINITY, tot = 0.f, mine = 0.f;
    int prevId = -1;
    for (int k = 0; k < topk; k++) {
        // best strictly after (prev, prevId) in (value desc, id asc) order
        float best = -INFINITY;
        int bi = 0x7fffffff;
        for (int e = lane; e < nexp; e += 32) {
            float v = l[e];
            bool after = v < prev || (v == prev && e > prevId);
            if (after && (bi == 0x7fffffff || v > best)) {
                best = v;
                bi = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > best || (ov == best && oi < bi))) {
                best = ov;
                bi = oi;
            }
        }
        if (bi == 0x7fffffff) bi = 0;  // NaN logits: keep the id in range
        float pr = expf(best - mx) / sum;
        if (lane == k) mine = pr;
        if (lane == 0) ids[t * topk + k] = bi;
        tot += pr;
        prev = best;
        prevId = bi;
    }
    // topk <= 32 on this path (checked by the host).
    if (lane < topk) wts[t * topk + lane] = norm ? mine / tot : mine;
}

// moe_topk2 (FTCHAT_MOEV=2): moe_topk with the token's logits loaded once
// into registers (lane holds experts lane + 32j, nexp <= 1024) instead of
// re-read from memory by every pass, and the per-k warp argmax done with
// two redux.sync (max of an order-preserving key, then min id among the
// lanes holding it) instead of five rounds of paired shuffles. The same
// max, sum order, candidate rule and (value desc, id asc) order as
// moe_topk, so it writes the same ids and weights bit for bit (TestMoETopk).
#define TOPK_PL 32

// Unsigned key whose order is the float order of v (not NaN; -0 as +0,
// which the float comparisons treat as equal). Never 0.
__device__ __forceinline__ unsigned topk_key(float v) {
    unsigned u = __float_as_uint(v == 0.f ? 0.f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Warp max / min of an unsigned: redux.sync from sm_80, five shuffle
// rounds before (the compute_75 PTX); the same result either way.
__device__ __forceinline__ unsigned warp_umax(unsigned v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}
__device__ __forceinline__ unsigned warp_umin(unsigned v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_min_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}
__device__ __forceinline__ float topk_val(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// topk2_row: moe_topk2's work for token t's logits l (lane of its warp);
// the logits are read through L2 (__ldcg), so a kernel may run it on
// logits other CTAs of its grid wrote (moe_router_topk).
__device__ __forceinline__ void topk2_row(const float* l, int nexp, int topk, int norm, int* __restrict__ ids,
                                          float* __restrict__ wts, int t, int lane) {
    float v[TOPK_PL];
#pragma unroll
    for (int j = 0; j < TOPK_PL; j++) v[j] = lane + 32 * j < nexp ? __ldcg(l + lane + 32 * j) : -INFINITY;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < TOPK_PL; j++) mx = fmaxf(mx, v[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < TOPK_PL; j++)
        if (lane + 32 * j < nexp) sum += expf(v[j] - mx);
    sum = warp_sum(sum);
    float prev = INFINITY, tot = 0.f, mine = 0.f;
    int prevId = -1;
    for (int k = 0; k < topk; k++) {
        float best = -INFINITY;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < TOPK_PL; j++) {
            int e = lane + 32 * j;
            float x = v[j];
            bool after = x < prev || (x == prev && e > prevId);
            if (e < nexp && after && (bi == 0x7fffffff || x > best)) {
                best = x;
                bi = e;
            }
        }
        unsigned key = bi != 0x7fffffff ? topk_key(best) : 0u;
        unsigned mk = warp_umax(key);
        unsigned id = warp_umin(mk != 0u && key == mk ? (unsigned)bi : 0xffffffffu);
        if (mk == 0u) {  // no candidate left (NaN logits): keep the id in range, as moe_topk
            best = -INFINITY;
            bi = 0;
        } else {
            best = topk_val(mk);
            bi = (int)id;
        }
        float pr = expf(best - mx) / sum;
        if (lane == k) mine = pr;
        if (lane == 0) ids[t * topk + k] = bi;
        tot += pr;
        prev = best;
        prevId = bi;
    }
    if (lane < topk) wts[t * topk + lane] = norm ? mine / tot : mine;
}

extern "C" __global__ void moe_topk2(const float* __restrict__ logits, int ntok, int nexp, int topk, int norm,
                                     int* __restrict__ ids, float* __restrict__ wts) {
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (t >= ntok) return;
    topk2_row(logits + (size_t)t * nexp, nexp, topk, norm, ids, wts, t, lane);
}

// Group the npairs (token, slot) pairs by expert, in one CTA of 1024
// threads (nexp <= 1024): histogram of ids, exclusive scan, then each pair
// takes a slot in its expert's run: sorted[pos] = pair, inv[pair] = pos.
// The tile list gives the grouped GEMMs their work: tile i covers sorted
// rows [start, end) of expert e, at most MOE_BM rows; tiles[3i..3i+2] =
// {e, start, end}, e = -1 for unused slots up to ntiles (the grid bound).
extern "C" __global__ void __launch_bounds__(1024) moe_sort(const int* __restrict__ ids, int npairs, int nexp,
                                                             int ntiles, int* __restrict__ sorted,
                                                             int* __restrict__ inv, int* __restrict__ tiles) {
    __shared__ int cnt[1024], off[1024], toff[1024];
    int tid = threadIdx.x;
    cnt[tid] = 0;
    __syncthreads();
    for (int p = tid; p < npairs; p += 1024) atomicAdd(&cnt[ids[p]], 1);
    __syncthreads();
    int c = tid < nexp ? cnt[tid] : 0;
    int nt = (c + MOE_BM - 1) / MOE_BM;
    off[tid] = c;
    toff[tid] = nt;
    __syncthreads();
    // Hillis-Steele inclusive scans of both arrays.
    for (int d = 1; d < 1024; d <<= 1) {
        int a = tid >= d ? off[tid - d] : 0, b = tid >= d ? toff[tid - d] : 0;
        __syncthreads();
        off[tid] += a;
        toff[tid] += b;
        __syncthreads();
    }
    int start = off[tid] - c, t0 = toff[tid] - nt;  // exclusive
    int total = toff[1023];
    for (int j = 0; j < nt; j++) {
        int s = start + j * MOE_BM;
        tiles[3 * (t0 + j)] = tid;
        tiles[3 * (t0 + j) + 1] = s;
        tiles[3 * (t0 + j) + 2] = min(s + MOE_BM, start + c);
    }
    for (int i = total + tid; i < ntiles; i += 1024) tiles[3 * i] = -1;
    __syncthreads();
    cnt[tid] = start;  // cursor
    __syncthreads();
    for (int p = tid; p < npairs; p += 1024) {
        int pos = atomicAdd(&cnt[ids[p]], 1);
        sorted[pos] = p;
        inv[p] = pos;
    }
}

// out[t][d] = sum_k wts[t*topk+k] * y[inv[t*topk+k]][d] (overwrites out).
extern "C" __global__ void moe_gather_sum(const float* __restrict__ y, const int* __restrict__ inv,
                                          const float* __restrict__ wts, int ntok, int topk, int dim,
                                          float* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)ntok * dim) return;
    int t = (int)(i / dim), d = (int)(i % dim);
    float s = 0.f;
    for (int k = 0; k < topk; k++) {
        int p = t * topk + k;
        s = fmaf(wts[p], y[(size_t)inv[p] * dim + d], s);
    }
    out[i] = s;
}

// y[p][j] *= S[ids[p]] for the pairs' rows of n floats: the per-expert
// second-level scale on the per-pair path's expert GEMV outputs (the fused
// kernels of moe.cuh apply it in their epilogues).
extern "C" __global__ void moe_scale_pairs(float* __restrict__ y, const int* __restrict__ ids,
                                           const float* __restrict__ S, int pairs, int n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)pairs * n) return;
    y[i] *= S[ids[i / n]];
}

// Router logits for a batch, logits[t][e] = x[t] . R[e] (R an F32
// [nexp][cols] weight), in float32 so that the top-k choice sees the CPU
// router's values (a bf16 tensor-core GEMM would flip near ties). Split
// over k: slice blockIdx.z sums k in [z*kslice, min(cols, (z+1)*kslice))
// into out + z*ntok*nexp (the logits themselves when gridDim.z == 1, else
// partials that moe_router_sum adds in slice order: deterministic). The
// kernel before it (128 CTAs of 4 warps, each walking all of k alone) took
// 115 µs a 512-token chunk of the Qwen3-30B-A3B shape on the H200, 12% of
// its prefill kernel time. CTA tile 64 tokens x 64 experts, 256
// threads of 4 x 4 outputs (consecutive tokens and experts: one 16-byte
// shared load of each per k), k in steps of 16 staged transposed in shared
// memory, the next step's loads in flight during this one's FMAs.
// cols % 4 == 0, kslice % 16 == 0.
#define RK_T 64
#define RK_E 64
#define RK_K 16
extern "C" __global__ void __launch_bounds__(256) moe_router_sk(const float* __restrict__ R, int nexp, int cols,
                                                                 const float* __restrict__ X, int ntok, int kslice,
                                                                 float* __restrict__ out) {
    __shared__ __align__(16) float xs[RK_K][RK_T + 4];
    __shared__ __align__(16) float rs[RK_K][RK_E + 4];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int t0 = blockIdx.y * RK_T, e0 = blockIdx.x * RK_E;
    const int kb = blockIdx.z * kslice, ke = min(cols, kb + kslice);
    out += (size_t)blockIdx.z * ntok * nexp;
    // loader: row lr of the token and the expert tile, 4 floats at kq
    const int lr = tid >> 2, kq = 4 * (tid & 3);
    const bool xok = t0 + lr < ntok, rok = e0 + lr < nexp;
    const float* xp = X + (size_t)(xok ? t0 + lr : 0) * cols;
    const float* rp = R + (size_t)(rok ? e0 + lr : 0) * cols;
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    auto ld = [&](const float* p, bool ok, int k0) {
        bool in = ok && k0 + kq < ke;
        float4 v = __ldg(reinterpret_cast<const float4*>(p + (in ? k0 + kq : 0)));
        return in ? v : z;
    };
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.f;
    float4 xv = ld(xp, xok, kb), rv = ld(rp, rok, kb);
    for (int k0 = kb; k0 < ke; k0 += RK_K) {
        xs[kq][lr] = xv.x; xs[kq + 1][lr] = xv.y; xs[kq + 2][lr] = xv.z; xs[kq + 3][lr] = xv.w;
        rs[kq][lr] = rv.x; rs[kq + 1][lr] = rv.y; rs[kq + 2][lr] = rv.z; rs[kq + 3][lr] = rv.w;
        __syncthreads();
        if (k0 + RK_K < ke) xv = ld(xp, xok, k0 + RK_K), rv = ld(rp, rok, k0 + RK_K);
#pragma unroll
        for (int k = 0; k < RK_K; k++) {
            float4 a = *reinterpret_cast<const float4*>(&xs[k][4 * ty]);
            float4 b = *reinterpret_cast<const float4*>(&rs[k][4 * tx]);
            float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = t0 + 4 * ty + i;
        if (t >= ntok) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int e = e0 + 4 * tx + j;
            if (e < nexp) out[(size_t)t * nexp + e] = acc[i][j];
        }
    }
}

// logits[i] = sum over slices s (in order) of part[s*n + i], i < n.
extern "C" __global__ void __launch_bounds__(256) moe_router_sum(const float* __restrict__ part, int slices, int n,
                                                                  float* __restrict__ logits) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    float s = part[i];
    for (int k = 1; k < slices; k++) s += part[(size_t)k * n + i];
    logits[i] = s;
}

// Router logits for a few rows (decode, ntok <= RS_MAXT): one CTA per
// expert, its 256 threads striding over the row in float4s for every
// token, then a fixed-order reduction (deterministic, float32). Enough CTAs
// to read the router at full bandwidth, unlike a GEMV with a warp per row.
#define RS_MAXT 16
// router_rows: expert blockIdx.x's logits of the ntok (<= RS_MAXT) rows of
// X, one CTA of 256 threads.
__device__ __forceinline__ void router_rows(const float* __restrict__ R, int nexp, int cols, const float* __restrict__ X,
                                            int ntok, float* __restrict__ logits) {
    __shared__ float red[8][RS_MAXT];
    int e = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float* r = R + (size_t)e * cols;
    float acc[RS_MAXT];
#pragma unroll
    for (int t = 0; t < RS_MAXT; t++) acc[t] = 0.f;
    for (int c = 4 * tid; c < cols; c += 1024) {
        float4 w = __ldg(reinterpret_cast<const float4*>(r + c));
#pragma unroll
        for (int t = 0; t < RS_MAXT; t++) {
            if (t < ntok) {
                float4 x = __ldg(reinterpret_cast<const float4*>(X + (size_t)t * cols + c));
                acc[t] = fmaf(w.w, x.w, fmaf(w.z, x.z, fmaf(w.y, x.y, fmaf(w.x, x.x, acc[t]))));
            }
        }
    }
#pragma unroll
    for (int t = 0; t < RS_MAXT; t++) {
        if (t < ntok) {
            float s = warp_sum(acc[t]);
            if (lane == 0) red[warp][t] = s;
        }
    }
    __syncthreads();
    if (tid < ntok) {
        float s = 0.f;
        for (int w = 0; w < 8; w++) s += red[w][tid];
        logits[(size_t)tid * nexp + e] = s;
    }
}

extern "C" __global__ void __launch_bounds__(256) moe_router_rows(const float* __restrict__ R, int nexp, int cols,
                                                                   const float* __restrict__ X, int ntok,
                                                                   float* __restrict__ logits) {
    router_rows(R, nexp, cols, X, ntok, logits);
}

// moe_router_topk: moe_router_rows, then moe_topk2 on its logits in the
// same launch. Each CTA counts itself done on *done after its logits are
// written (and fenced); the last one takes the top-k of every row (its
// warps, a row each) and puts the counter back to 0 for the next launch.
// The same logits, ids and weights, bit for bit, as the two kernels.
extern "C" __global__ void __launch_bounds__(256) moe_router_topk(const float* __restrict__ R, int nexp, int cols,
                                                                   const float* __restrict__ X, int ntok,
                                                                   float* __restrict__ logits, unsigned* done, int topk,
                                                                   int norm, int* __restrict__ ids,
                                                                   float* __restrict__ wts) {
    __shared__ bool last;
    router_rows(R, nexp, cols, X, ntok, logits);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int t = warp; t < ntok; t += 8) topk2_row(logits + (size_t)t * nexp, nexp, topk, norm, ids, wts, t, lane);
    if (threadIdx.x == 0) *done = 0;
}
