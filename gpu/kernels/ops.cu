// Element-wise, normalisation, RoPE, MoE routing/combining and sampling
// kernels of the ftchat CUDA backend. The typed kernels (embedding, GEMV,
// GEMM, expert GEMV) are in mm.cuh, one module per weight type; the paged
// KV write and attention in kvwrite.cu / attention.cu. Accuracy matters
// here (norms, router softmax), so this file is built without
// --use_fast_math.
#include "common.cuh"

// Router: per token, softmax over nexp logits (float32, max-subtracted), pick
// the topk largest probabilities (ties: lower expert id first), optionally
// renormalise them to sum to 1. One thread per token (nexp <= 1024).
extern "C" __global__ void moe_route(const float* logits, int ntok, int nexp, int topk, int norm, int* ids, float* wts) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ntok) return;
    const float* l = logits + (size_t)t * nexp;
    float mx = -INFINITY;
    for (int e = 0; e < nexp; e++) mx = fmaxf(mx, l[e]);
    float sum = 0.f;
    for (int e = 0; e < nexp; e++) sum += expf(l[e] - mx);
    float prev = INFINITY;
    int prevId = -1;
    float tot = 0.f;
    for (int k = 0; k < topk; k++) {
        // next best strictly after (prev, prevId) in (value desc, id asc) order
        float best = -INFINITY;
        int bi = -1;
        for (int e = 0; e < nexp; e++) {
            float v = l[e];
            bool after = v < prev || (v == prev && e > prevId);
            if (after && (bi < 0 || v > best)) {
                best = v;
                bi = e;
            }
        }
        float pr = expf(best - mx) / sum;
        ids[t * topk + k] = bi;
        wts[t * topk + k] = pr;
        tot += pr;
        prev = best;
        prevId = bi;
    }
    if (norm)
        for (int k = 0; k < topk; k++) wts[t * topk + k] /= tot;
}

// h[p] = silu(g[p]) * u[p] over n elements (SwiGLU), then MoE combine.
extern "C" __global__ void moe_combine(const float* yd, const float* wts, int ntok, int topk, int dim, float* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)ntok * dim) return;
    int t = (int)(i / dim), d = (int)(i % dim);
    float s = 0.f;
    for (int k = 0; k < topk; k++) s = fmaf(wts[t * topk + k], yd[((size_t)t * topk + k) * dim + d], s);
    out[i] = s;
}

// ---------------------------------------------------------------------------
// Block-wide sum for 256-thread CTAs.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) part[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = l < nw ? part[l] : 0.f;
    return warp_sum(v);
}

// RMSNorm: dst[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * g, one CTA per row.
// Works in place (dst == x).
extern "C" __global__ void rmsnorm(float* dst, const float* x, const float* g, int cols, float eps) {
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* dr = dst + (size_t)blockIdx.x * cols;
    float ss = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / cols + (double)eps));
    for (int i = threadIdx.x; i < cols; i += blockDim.x) dr[i] = xr[i] * inv * g[i];
}

// RMSNorm, second kernel (FTCHAT_FUSE=1, gpu/norm.go): the first one's
// loops are not unrolled, so each thread waits for its loads one after
// another, twice (a 2048-float row took ~10 µs on the H200). Here every
// thread issues all its loads of x (and delta, and g) at once as float4,
// keeps the values in registers across the block sum and writes from
// them. Rows of cols % 4 == 0, at most 4 * RMS_T * RMS_V floats and
// 16-byte aligned x, dst and g take that path, others a loop that does the
// same arithmetic per element. add_rmsnorm first adds delta into x (as add
// does) and writes x back; rmsnorm2 and add_rmsnorm share rms_row, so
// add then rmsnorm2 and add_rmsnorm give the same bits.
#define RMS_T 256
#define RMS_V 8

__device__ __forceinline__ bool rms_aligned(const void* p) { return ((uintptr_t)p & 15) == 0; }

template <bool ADD>
__device__ __forceinline__ void rms_row(float* dr, float* xr, const float* delta, const float* g, int cols, float eps) {
    float ss = 0.f;
    if ((cols & 3) == 0 && cols <= 4 * RMS_T * RMS_V && rms_aligned(dr) && rms_aligned(xr) && rms_aligned(g)) {
        int n4 = cols >> 2;
        bool dv = ADD && rms_aligned(delta);
        float4 v[RMS_V], gv[RMS_V];
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* g4 = reinterpret_cast<const float4*>(g);
#pragma unroll
        for (int j = 0; j < RMS_V; j++) {
            int i = threadIdx.x + RMS_T * j;
            v[j] = gv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < n4) {
                v[j] = x4[i];
                gv[j] = __ldg(g4 + i);
                if (ADD) {
                    float4 d;
                    if (dv) {
                        d = reinterpret_cast<const float4*>(delta)[i];
                    } else {
                        d = make_float4(delta[4 * i], delta[4 * i + 1], delta[4 * i + 2], delta[4 * i + 3]);
                    }
                    v[j].x += d.x; v[j].y += d.y; v[j].z += d.z; v[j].w += d.w;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < RMS_V; j++) {
            ss = fmaf(v[j].x, v[j].x, ss);
            ss = fmaf(v[j].y, v[j].y, ss);
            ss = fmaf(v[j].z, v[j].z, ss);
            ss = fmaf(v[j].w, v[j].w, ss);
            if (ADD && threadIdx.x + RMS_T * j < n4) reinterpret_cast<float4*>(xr)[threadIdx.x + RMS_T * j] = v[j];
        }
        ss = block_sum(ss);
        float inv = (float)(1.0 / sqrt((double)ss / cols + (double)eps));
#pragma unroll
        for (int j = 0; j < RMS_V; j++) {
            int i = threadIdx.x + RMS_T * j;
            if (i < n4)
                reinterpret_cast<float4*>(dr)[i] = make_float4(v[j].x * inv * gv[j].x, v[j].y * inv * gv[j].y,
                                                               v[j].z * inv * gv[j].z, v[j].w * inv * gv[j].w);
        }
        return;
    }
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float a = xr[i];
        if (ADD) {
            a += delta[i];
            xr[i] = a;
        }
        ss = fmaf(a, a, ss);
    }
    ss = block_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / cols + (double)eps));
    for (int i = threadIdx.x; i < cols; i += blockDim.x) dr[i] = xr[i] * inv * g[i];
}

// One CTA of RMS_T threads per row; dst == x allowed.
extern "C" __global__ void __launch_bounds__(RMS_T) rmsnorm2(float* dst, float* x, const float* g, int cols, float eps) {
    size_t o = (size_t)blockIdx.x * cols;
    rms_row<false>(dst + o, x + o, nullptr, g, cols, eps);
}

// x += delta, then dst = rmsnorm(x) * g; one CTA of RMS_T threads per row.
extern "C" __global__ void __launch_bounds__(RMS_T) add_rmsnorm(float* dst, float* x, const float* delta, const float* g,
                                                                int cols, float eps) {
    size_t o = (size_t)blockIdx.x * cols;
    rms_row<true>(dst + o, x + o, delta + o, g, cols, eps);
}

// HeadRMSNorm: each headDim slice of every row, in place; one warp per (row, head).
extern "C" __global__ void head_rmsnorm(float* x, const float* g, int nslices, int headDim, float eps) {
    int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (s >= nslices) return;
    float* v = x + (size_t)s * headDim;
    float ss = 0.f;
    for (int i = threadIdx.x & 31; i < headDim; i += 32) ss = fmaf(v[i], v[i], ss);
    ss = warp_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / headDim + (double)eps));
    for (int i = threadIdx.x & 31; i < headDim; i += 32) v[i] = v[i] * inv * g[i];
}

// RoPE in place. x: [rows][cols], heads of headDim; freqs: dim/2 inverse
// frequencies (scale and freq factors folded in, float64). Angles are
// computed in float64 so long positions keep their precision.
// neox: pairs (i, i+dim/2); else (2i, 2i+1). One thread per (row, head, pair).
extern "C" __global__ void rope(float* x, const int* pos, const double* freqs, int rows, int cols, int headDim,
                                int dim, int neox) {
    int half = dim >> 1;
    int heads = cols / headDim;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long n = (long long)rows * heads * half;
    if (i >= n) return;
    int p = (int)(i % half);
    long long rh = i / half;
    int h = (int)(rh % heads), r = (int)(rh / heads);
    double s, c;
    sincos((double)pos[r] * freqs[p], &s, &c);
    float fs = (float)s, fc = (float)c;
    float* v = x + (size_t)r * cols + (size_t)h * headDim;
    int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
    float a = v[i0], b = v[i1];
    v[i0] = a * fc - b * fs;
    v[i1] = a * fs + b * fc;
}

// dst = silu(gate) * up, element-wise.
extern "C" __global__ void swiglu(float* dst, const float* gate, const float* up, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    dst[i] = g / (1.f + expf(-g)) * up[i];
}

// SwiGLU on MoE: h[p][f] = silu(g[p][f]) * u[p][f] is the same kernel.

// dst += x.
extern "C" __global__ void add(float* dst, const float* x, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += x[i];
}

// dst = x rounded to bf16 (nearest even), pairs of elements (n even): the
// activations of cublasGemmEx with bf16 operands.
extern "C" __global__ void f32_to_bf16(__nv_bfloat162* dst, const float2* x, long long npairs) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < npairs) {
        float2 v = x[i];
        dst[i] = __floats2bfloat162_rn(v.x, v.y);
    }
}

// x[r][c] += b[c].
extern "C" __global__ void add_bias(float* x, const float* b, int rows, int cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)rows * cols) x[i] += b[i % cols];
}

// Greedy sampling: out[r] = argmax of row r (first index on ties; NaN never wins).
extern "C" __global__ void argmax_rows(const float* x, int cols, int* out) {
    const float* v = x + (size_t)blockIdx.x * cols;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float f = v[i];
        if (f > best || (f == best && i < bi)) {
            best = f;
            bi = i;
        }
    }
    __shared__ float sv[32];
    __shared__ int si[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) {
            best = ov;
            bi = oi;
        }
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) {
        sv[w] = best;
        si[w] = bi;
    }
    __syncthreads();
    if (w == 0) {
        int nw = blockDim.x >> 5;
        best = l < nw ? sv[l] : -INFINITY;
        bi = l < nw ? si[l] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) {
                best = ov;
                bi = oi;
            }
        }
        if (l == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}

extern "C" __global__ void fill_u32(uint32_t* p, uint32_t v, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (long long)gridDim.x * blockDim.x) p[i] = v;
}
