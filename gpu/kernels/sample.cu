// On-device sampling (gpu/sample.go): the repetition penalty, the argmax
// and the top-k candidates of logits rows, so that a decode step hands the
// host token ids or k candidates instead of whole rows. Every kernel works
// on a set of rows at once, row r of the set in blockIdx.y: a decode step's
// rows are sampled by one launch of each kernel and one download.
//
// Rows are addressed through a device table of row pointers (xs[r]), so a
// set may mix rows of the logits tensor and penalised scratch copies.
//
// Order. Every element is ranked by a 64-bit key: the high word orders the
// float value (NaN below -Inf, -0 equal to +0, as float comparisons see
// them), the low word is ~id, so among equal values the lower id ranks
// higher. Keys are unique, so "the k largest keys" is exactly
// engine/sample's top-k (ties: lower id first) and the largest key its
// argmax (first index on ties, NaN never wins). Exact float ops only: no
// fast-math flag for this file.
#include <cstdint>

#define SAMPLE_TILE 2048   // keys sorted per CTA by sample_rows_topk_tile
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

// sample_rows_copy: dst row r (cols floats, rows packed) = *src[r].
extern "C" __global__ void sample_rows_copy(const float* const* src, float* dst, int cols) {
    const float* s = src[blockIdx.y];
    float* d = dst + (size_t)blockIdx.y * cols;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
        d[i] = s[i];
    }
}

// sample_rows_penalise: dst row r (a copy of *src[r]) gets the CTRL penalty
// pens[r] at each of its distinct ids ids[offs[r] .. offs[r+1]): positive
// logits divided, the others multiplied, in IEEE float32 (rounded to
// nearest, as the host's /= and *=).
extern "C" __global__ void sample_rows_penalise(const float* const* src, float* dst, int cols, const int* ids, const int* offs,
                                                const float* pens) {
    int r = blockIdx.y;
    int j = offs[r] + blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= offs[r + 1]) {
        return;
    }
    int t = ids[j];
    if (t < 0 || t >= cols) {
        return;
    }
    float v = src[r][t], p = pens[r];
    dst[(size_t)r * cols + t] = v > 0.0f ? __fdiv_rn(v, p) : __fmul_rn(v, p);
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

// sample_rows_argmax_part: CTA (b, r) writes the largest key of
// xs[r][b*chunk, (b+1)*chunk) to part[r*gridDim.x + b].
extern "C" __global__ void sample_rows_argmax_part(const float* const* xs, int n, int chunk, unsigned long long* part) {
    const float* x = xs[blockIdx.y];
    int lo = blockIdx.x * chunk;
    int hi = min(n, lo + chunk);
    unsigned long long best = 0;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        unsigned long long k = sample_key(i, x[i]);
        best = k > best ? k : best;
    }
    best = sample_block_max(best);
    if (threadIdx.x == 0) {
        part[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = best;
    }
}

// sample_rows_argmax_final: CTA (0, r) reduces row r's nparts parts to its
// id, out[r]. engine/sample's Argmax starts at index 0 and moves only on a
// strictly larger value, so a NaN at index 0 is never left: the answer is
// then 0.
extern "C" __global__ void sample_rows_argmax_final(const unsigned long long* part, int nparts, const float* const* xs, int* out) {
    const unsigned long long* p = part + (size_t)blockIdx.y * nparts;
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        best = p[i] > best ? p[i] : best;
    }
    best = sample_block_max(best);
    if (threadIdx.x == 0) {
        float x0 = xs[blockIdx.y][0];
        out[blockIdx.y] = x0 != x0 ? 0 : sample_id(best);
    }
}

// sample_rows_topk_tile: CTA (b, r) sorts the keys of tile b of row r
// (SAMPLE_TILE elements: of the row xs[r] when xs is not null, else of the
// keys in + r*stride) in descending order and writes its k largest to
// out + r*stride + b*k. Missing elements are key 0, below every real key.
// Repeated over the outputs until one tile is left, this leaves each row's
// k largest keys, largest first, at out + r*stride.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_rows_topk_tile(const float* const* xs, const unsigned long long* in, long long stride, int n, int k, unsigned long long* out) {
    __shared__ unsigned long long s[SAMPLE_TILE];
    const float* x = xs != nullptr ? xs[blockIdx.y] : nullptr;
    const unsigned long long* src = in != nullptr ? in + blockIdx.y * stride : nullptr;
    int base = blockIdx.x * SAMPLE_TILE;
    for (int i = threadIdx.x; i < SAMPLE_TILE; i += blockDim.x) {
        int g = base + i;
        unsigned long long key = 0;
        if (g < n) {
            key = x != nullptr ? sample_key(g, x[g]) : src[g];
        }
        s[i] = key;
    }
    // Bitonic sort, descending at the last merge.
    for (int size = 2; size <= SAMPLE_TILE; size <<= 1) {
        for (int st = size >> 1; st > 0; st >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < SAMPLE_TILE / 2; t += blockDim.x) {
                int a = 2 * t - (t & (st - 1));
                int b = a + st;
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
    unsigned long long* dst = out + blockIdx.y * stride + (size_t)blockIdx.x * k;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        dst[i] = s[i];
    }
}

// sample_rows_topk_emit: the ids of row r's k keys (keys + r*stride) and
// their values in xs[r], to ids[r*k ..] and vals[r*k ..].
extern "C" __global__ void sample_rows_topk_emit(const unsigned long long* keys, long long stride, int k, const float* const* xs, int* ids,
                                                 float* vals) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= k) {
        return;
    }
    int r = blockIdx.y;
    int id = sample_id(keys[r * stride + i]);
    ids[(size_t)r * k + i] = id;
    vals[(size_t)r * k + i] = xs[r][id];
}
