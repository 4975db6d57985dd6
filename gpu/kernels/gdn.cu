// Hybrid-model (Gated DeltaNet) kernels of the ftchat CUDA backend: the
// short causal conv with its carried state, the gated delta rule (a
// token-by-token recurrence for decode and a chunked form for prefill),
// the gated RMSNorm, sigmoid gating and the q/gate head split. The math is
// engine/model/state.go's; gpu/hybrid.go launches these.
//
// State (StateLayout, one allocation): [slot][layer]{conv [K-1][C] |
// delta [Hv][Dk][Dv]} float32. Each kernel gets the layer's conv or delta
// base in slot 0 and the slot stride in floats. Sequences are described by
// seqs[i] = {first row, rows, slot, 0}; each sequence's rows are contiguous.
// Accuracy matters (recurrent state): no --use_fast_math.

#include "gdn.cuh"

#define CONV_KMAX 8

// Depthwise causal conv + SiLU. x, dst: [rows][C]; w: [C][K] (GGUF ne0 = K);
// state: conv state of slot 0 ([K-1][C]), slots slotStride floats apart.
// grid (C/128, chunks, nseq): each thread walks `chunk` tokens of one channel
// with a register window. fused: one chunk covers every sequence, so the
// thread also leaves the last K-1 inputs in the state.
extern "C" __global__ void __launch_bounds__(128) gdn_conv(const float* __restrict__ x, const float* __restrict__ w,
                                                           float* __restrict__ dst, float* state, long long slotStride,
                                                           const int4* __restrict__ seqs, int C, int K, int chunk,
                                                           int fused) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int4 sq = seqs[blockIdx.z];
    const int t0 = blockIdx.y * chunk;
    if (t0 >= sq.y) return;
    const int t1 = min(sq.y, t0 + chunk);
    float* st = state + (size_t)sq.z * slotStride;
    float wk[CONV_KMAX], win[CONV_KMAX];
#pragma unroll
    for (int i = 0; i < CONV_KMAX; i++) {
        wk[i] = i < K ? w[(size_t)c * K + i] : 0.f;
        win[i] = 0.f;
    }
    // win[i] (i < K-1) holds the input at t0 - (K-1) + i.
#pragma unroll
    for (int i = 0; i < CONV_KMAX - 1; i++) {
        if (i < K - 1) {
            const int t = t0 - (K - 1) + i;
            win[i] = t >= 0 ? x[(size_t)(sq.x + t) * C + c] : st[(size_t)(K - 1 + t) * C + c];
        }
    }
    for (int t = t0; t < t1; t++) {
        const float in = x[(size_t)(sq.x + t) * C + c];
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < CONV_KMAX - 1; i++)
            if (i < K - 1) s = fmaf(wk[i], win[i], s);
#pragma unroll
        for (int i = 0; i < CONV_KMAX; i++)
            if (i == K - 1) s = fmaf(wk[i], in, s);
        dst[(size_t)(sq.x + t) * C + c] = silu(s);
#pragma unroll
        for (int i = 0; i < CONV_KMAX - 2; i++)
            if (i < K - 2) win[i] = win[i + 1];
#pragma unroll
        for (int i = 0; i < CONV_KMAX - 1; i++)
            if (i == K - 2) win[i] = in;
    }
    if (fused) {
#pragma unroll
        for (int i = 0; i < CONV_KMAX - 1; i++)
            if (i < K - 1) st[(size_t)i * C + c] = win[i];
    }
}

// Conv state update after an unfused gdn_conv: the state becomes the last
// K-1 inputs of [old state | the sequence's rows]. grid (C/128, nseq).
extern "C" __global__ void __launch_bounds__(128) gdn_conv_state(const float* __restrict__ x, float* state,
                                                                 long long slotStride, const int4* __restrict__ seqs,
                                                                 int C, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int4 sq = seqs[blockIdx.y];
    float* st = state + (size_t)sq.z * slotStride;
    const int n = sq.y;
    float old[CONV_KMAX];
#pragma unroll
    for (int i = 0; i < CONV_KMAX - 1; i++) old[i] = i < K - 1 ? st[(size_t)i * C + c] : 0.f;
#pragma unroll
    for (int i = 0; i < CONV_KMAX - 1; i++) {
        if (i < K - 1) {
            const int j = n + i;  // index into [old (K-1) | x (n)]
            float v;
            if (j >= K - 1) {
                v = x[(size_t)(sq.x + j - (K - 1)) * C + c];
            } else {
                v = 0.f;
#pragma unroll
                for (int m = 0; m < CONV_KMAX - 1; m++)
                    if (m == j) v = old[m];
            }
            st[(size_t)i * C + c] = v;
        }
    }
}

// Gated delta rule, token by token (decode). One CTA of 8 warps per
// (value head j, 32-column block of Dv, sequence): lane = value column,
// warp w holds state rows [16w, 16w+16) in registers (Dk, Dv <= 128). The
// state is read and written once per call; per token two cross-warp sums
// (S^T k and S^T q) go through shared memory.
// qkv: [rows][2*Hk*Dk + Hv*Dv]; alpha, beta: [rows][Hv]; dst: [rows][Hv*Dv];
// S: delta state of slot 0 of the layer, [Hv][Dk][Dv] per slot.
#define REC_NW 8
#define REC_RK 16
extern "C" __global__ void __launch_bounds__(REC_NW * 32) gdn_recurrent(
    const float* __restrict__ qkv, const float* __restrict__ alpha, const float* __restrict__ beta,
    const float* __restrict__ A, const float* __restrict__ dtb, float* __restrict__ dst, float* S, long long slotStride,
    const int4* __restrict__ seqs, int Hk, int Hv, int Dk, int Dv, int tiled) {
    __shared__ float qs[2][128], ks[2][128], red[2][REC_NW][32], red2[2][REC_NW][32], sc[2][2];
    const int j = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int v = blockIdx.y * 32 + lane;
    const int4 sq = seqs[blockIdx.z];
    const int kh = tiled ? j % Hk : j / (Hv / Hk);
    const int W = 2 * Hk * Dk + Hv * Dv;
    float* Sp = S + (size_t)sq.z * slotStride + (size_t)j * Dk * Dv;
    float s[REC_RK];
#pragma unroll
    for (int i = 0; i < REC_RK; i++) {
        const int k = w * REC_RK + i;
        s[i] = (k < Dk && v < Dv) ? Sp[(size_t)k * Dv + v] : 0.f;
    }
    const float qscale = 1.f / sqrtf((float)Dk);
    for (int t = 0; t < sq.y; t++) {
        const int b = t & 1;
        const size_t row = (size_t)sq.x + t;
        const float* xr = qkv + row * W;
        if (w == 0) warp_l2norm(xr + kh * Dk, qs[b], Dk, qscale, lane);
        if (w == 1) warp_l2norm(xr + Hk * Dk + kh * Dk, ks[b], Dk, 1.f, lane);
        if (w == 2 && lane == 0) {
            float g, bt;
            gdn_gate(alpha, beta, A, dtb, row, Hv, j, g, bt);
            sc[b][0] = expf(g);
            sc[b][1] = bt;
        }
        __syncthreads();
        const float decay = sc[b][0], bt = sc[b][1];
        float p = 0.f;
#pragma unroll
        for (int i = 0; i < REC_RK; i++) {
            const int k = w * REC_RK + i;
            if (k < Dk) p = fmaf(s[i], ks[b][k], p);
        }
        red[b][w][lane] = p;
        __syncthreads();
        float kv = 0.f;
#pragma unroll
        for (int m = 0; m < REC_NW; m++) kv += red[b][m][lane];
        const float vv = v < Dv ? xr[2 * Hk * Dk + j * Dv + v] : 0.f;
        const float u = bt * (vv - decay * kv);
        float p2 = 0.f;
#pragma unroll
        for (int i = 0; i < REC_RK; i++) {
            const int k = w * REC_RK + i;
            if (k < Dk) {
                s[i] = fmaf(ks[b][k], u, decay * s[i]);
                p2 = fmaf(s[i], qs[b][k], p2);
            }
        }
        red2[b][w][lane] = p2;
        __syncthreads();
        if (w == 0 && v < Dv) {
            float o = 0.f;
#pragma unroll
            for (int m = 0; m < REC_NW; m++) o += red2[b][m][lane];
            dst[row * Hv * Dv + (size_t)j * Dv + v] = o;
        }
    }
#pragma unroll
    for (int i = 0; i < REC_RK; i++) {
        const int k = w * REC_RK + i;
        if (k < Dk && v < Dv) Sp[(size_t)k * Dv + v] = s[i];
    }
}

// dst = rmsnorm(x) * w * silu(z) over each headDim slice; one warp per
// slice. dst may be x (each element is read before the same thread writes it).
extern "C" __global__ void gated_rmsnorm(float* dst, const float* x, const float* z, const float* __restrict__ g,
                                         int nslices, int headDim, float eps) {
    const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (s >= nslices) return;
    const int lane = threadIdx.x & 31;
    const float* xs = x + (size_t)s * headDim;
    const float* zs = z + (size_t)s * headDim;
    float* ds = dst + (size_t)s * headDim;
    float ss = 0.f;
    for (int i = lane; i < headDim; i += 32) ss = fmaf(xs[i], xs[i], ss);
    ss = warp_sum(ss);
    const float inv = (float)(1.0 / sqrt((double)ss / headDim + (double)eps));
    for (int i = lane; i < headDim; i += 32) ds[i] = xs[i] * inv * g[i] * silu(zs[i]);
}

// x[r][c] *= sigmoid(gate[r][gcols == 1 ? 0 : c]).
extern "C" __global__ void sigmoid_mul(float* x, const float* __restrict__ gate, int rows, int cols, int gcols) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * cols) return;
    const long long r = i / cols;
    const float gv = gcols == 1 ? gate[r] : gate[i];
    x[i] *= sigm(gv);
}

// src [rows][heads][2][hd] -> dst1, dst2 [rows][heads][hd].
extern "C" __global__ void split_heads(float* __restrict__ d1, float* __restrict__ d2, const float* __restrict__ src,
                                       int rows, int heads, int hd) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n = (long long)rows * heads * hd;
    if (i >= n) return;
    const long long rh = i / hd;
    const int d = (int)(i % hd);
    const float* s = src + rh * 2 * hd;
    d1[i] = s[d];
    d2[i] = s[hd + d];
}
