// On-device sampling (gpu/sample.go): the repetition penalty, the argmax
// and the top-k candidates of one logits row, so that a decode step hands
// the host a token id or k candidates instead of the whole row.
//
// Order. Every element is ranked by a 64-bit key: the high word orders the
// float value (NaN below -Inf, -0 equal to +0, as float comparisons see
// them), the low word is ~id, so among equal values the lower id ranks
// higher. Keys are unique, so "the k largest keys" is exactly
// engine/sample's top-k (ties: lower id first) and the largest key its
// argmax (first index on ties, NaN never wins). Exact float ops only: no
// fast-math flag for this file.
#include <cstdint>

#define SAMPLE_TILE 2048   // keys sorted per CTA by sample_topk_tile
#define SAMPLE_THREADS 1024

__device__ __forceinline__ uint32_t sample_ord(float v) {
    if (v != v) {
        return 0;  // NaN: below every number
    }
    if (v == 0.0f) {
        v = 0.0f;  // -0 ranks with +0
    }
    uint32_t u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ unsigned long long sample_key(int i, float v) {
    return ((unsigned long long)sample_ord(v) << 32) | (unsigned long long)(~(uint32_t)i);
}

__device__ __forceinline__ int sample_id(unsigned long long k) { return (int)~(uint32_t)k; }

// sample_penalise: dst (a copy of the row) gets the CTRL penalty at each of
// the n distinct ids: positive logits divided, the others multiplied, in
// IEEE float32 (rounded to nearest, as the host's /= and *=).
extern "C" __global__ void sample_penalise(const float* src, float* dst, const int* ids, int n, int cols, float penalty) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int t = ids[i];
    if (t < 0 || t >= cols) {
        return;
    }
    float v = src[t];
    dst[t] = v > 0.0f ? __fdiv_rn(v, penalty) : __fmul_rn(v, penalty);
}

// Block-wide maximum of a 64-bit key (blockDim a multiple of 32, ≤ 1024).
__device__ unsigned long long sample_block_max(unsigned long long k) {
    __shared__ unsigned long long warp_best[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long x = __shfl_xor_sync(0xffffffffu, k, o);
        k = x > k ? x : k;
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) {
        warp_best[w] = k;
    }
    __syncthreads();
    if (w == 0) {
        k = l < (int)(blockDim.x >> 5) ? warp_best[l] : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long x = __shfl_xor_sync(0xffffffffu, k, o);
            k = x > k ? x : k;
        }
    }
    return k;  // valid in thread 0
}

// sample_argmax_part: CTA b writes the largest key of x[b*chunk, (b+1)*chunk).
extern "C" __global__ void sample_argmax_part(const float* x, int n, int chunk, unsigned long long* part) {
    int lo = blockIdx.x * chunk;
    int hi = min(n, lo + chunk);
    unsigned long long best = 0;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        unsigned long long k = sample_key(i, x[i]);
        best = k > best ? k : best;
    }
    best = sample_block_max(best);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = best;
    }
}

// sample_argmax_final: one CTA reduces the parts to the id. engine/sample's
// Argmax starts at index 0 and moves only on a strictly larger value, so a
// NaN at index 0 is never left: the answer is then 0.
extern "C" __global__ void sample_argmax_final(const unsigned long long* part, int nparts, const float* x, int* out) {
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        best = part[i] > best ? part[i] : best;
    }
    best = sample_block_max(best);
    if (threadIdx.x == 0) {
        float x0 = x[0];
        out[0] = x0 != x0 ? 0 : sample_id(best);
    }
}

// sample_topk_tile: CTA b sorts the keys of tile b (SAMPLE_TILE elements:
// of the row x when x is not null, else of the keys in) in descending order
// and writes its k largest to out[b*k ..]. Missing elements are key 0,
// below every real key. Repeated over the outputs until one tile is left,
// this leaves the row's k largest keys, largest first.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) sample_topk_tile(const float* x, const unsigned long long* in, int n, int k, unsigned long long* out) {
    __shared__ unsigned long long s[SAMPLE_TILE];
    int base = blockIdx.x * SAMPLE_TILE;
    for (int i = threadIdx.x; i < SAMPLE_TILE; i += blockDim.x) {
        int g = base + i;
        unsigned long long key = 0;
        if (g < n) {
            key = x != nullptr ? sample_key(g, x[g]) : in[g];
        }
        s[i] = key;
    }
    // Bitonic sort, descending at the last merge.
    for (int size = 2; size <= SAMPLE_TILE; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < SAMPLE_TILE / 2; t += blockDim.x) {
                int a = 2 * t - (t & (stride - 1));
                int b = a + stride;
                bool desc = (a & size) == 0;
                unsigned long long ka = s[a], kb = s[b];
                if ((ka < kb) == desc) {
                    s[a] = kb;
                    s[b] = ka;
                }
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        out[(size_t)blockIdx.x * k + i] = s[i];
    }
}

// sample_topk_emit: the ids of the k keys and their values in x.
extern "C" __global__ void sample_topk_emit(const unsigned long long* keys, int k, const float* x, int* ids, float* vals) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= k) {
        return;
    }
    int id = sample_id(keys[i]);
    ids[i] = id;
    vals[i] = x[id];
}
