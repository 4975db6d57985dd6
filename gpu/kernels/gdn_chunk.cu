// Chunked gated delta rule of the ftchat CUDA backend (prefill); the
// recurrence, the state layout and the other hybrid kernels are in gdn.cu.
// Accuracy matters (recurrent state): no --use_fast_math.
#include "gdn.cuh"

// Gated delta rule, chunked (prefill): the same result as gdn_recurrent,
// L tokens at a time. With G the within-chunk cumulative log-decay and S0
// the state at the chunk's start:
//   A[t][j] = beta_t e^(G_t-G_j) k_t.k_j (j < t),  (I + A) U = R,
//   R[t] = beta_t (v_t - e^(G_t) S0^T k_t),
//   o_t = e^(G_t) S0^T q_t + sum_{j<=t} e^(G_t-G_j) (q_t.k_j) u_j,
//   S = e^(G_L) S0 + sum_t e^(G_L-G_t) k_t u_t^T.
// Every exponent is <= 0. One CTA of 8 warps per (value head, 32-column
// block of Dv, sequence), walking the sequence's chunks; the state block
// [Dk][32] lives in shared memory. Dynamic shared memory: gdnChunkSmem in
// hybrid.go. L (the chunk length) is 64, or 32 on devices with less
// shared memory. Latency is what limits this kernel (one CTA per SM at L
// 64): the chunk's q and k rows are loaded by the whole CTA at once and
// normalised from shared memory, the cumulative decay is a warp scan, the
// triangular solve goes 16 rows at a time (earlier blocks applied by every
// warp, then one warp's short chain), and the inner loops are unrolled
// with split accumulators. Tensor cores are not used yet.
#define CH_LMAX 64
extern "C" __global__ void __launch_bounds__(256) gdn_chunked(
    const float* __restrict__ qkv, const float* __restrict__ alpha, const float* __restrict__ beta,
    const float* __restrict__ A, const float* __restrict__ dtb, float* __restrict__ dst, float* S,
    long long slotStride, const int4* __restrict__ seqs, int Hk, int Hv, int Dk, int Dv, int tiled, int L) {
    constexpr int NW = 8, TR = CH_LMAX / NW;  // rows of a chunk per warp (at most)
    extern __shared__ float sm[];
    const int DKP = Dk + 1;
    float* Qs = sm;                  // [L][DKP]
    float* Ks = Qs + L * DKP;        // [L][DKP]
    float* Ss = Ks + L * DKP;        // [Dk][32]
    float* Am = Ss + Dk * 32;        // [L][L+1]
    float* Aq = Am + L * (L + 1);    // [L][L+1]
    float* U = Aq + L * (L + 1);     // [L][32]
    float* G = U + L * 32;           // [L]
    float* Bt = G + L;               // [L]
    float* Eg = Bt + L;              // [L]: e^(G_L - G_t)

    const int j = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int v = blockIdx.y * 32 + lane;
    const int4 sq = seqs[blockIdx.z];
    const int kh = tiled ? j % Hk : j / (Hv / Hk);
    const int W = 2 * Hk * Dk + Hv * Dv;
    float* Sp = S + (size_t)sq.z * slotStride + (size_t)j * Dk * Dv;
    for (int k = w; k < Dk; k += NW) Ss[k * 32 + lane] = v < Dv ? Sp[(size_t)k * Dv + v] : 0.f;
    const float qscale = 1.f / sqrtf((float)Dk);

    for (int c0 = 0; c0 < sq.y; c0 += L) {
        const int Lc = min(L, sq.y - c0);
        // Load the chunk's raw q and k rows (all threads, coalesced), zero the padding.
        for (int e = threadIdx.x; e < L * Dk; e += 256) {
            const int t = e / Dk, d = e - t * Dk;
            float qv = 0.f, kv = 0.f;
            if (t < Lc) {
                const float* xr = qkv + ((size_t)sq.x + c0 + t) * W + kh * Dk + d;
                qv = xr[0];
                kv = xr[Hk * Dk];
            }
            Qs[t * DKP + d] = qv;
            Ks[t * DKP + d] = kv;
        }
        if (threadIdx.x < L) {
            const int t = threadIdx.x;
            float g = 0.f, bt = 0.f;
            if (t < Lc) gdn_gate(alpha, beta, A, dtb, (size_t)sq.x + c0 + t, Hv, j, g, bt);
            G[t] = g;
            Bt[t] = bt;
        }
        __syncthreads();
        // l2norm each row in place (warp per row); warp 0 also scans G.
#pragma unroll 1
        for (int t = w; t < Lc; t += NW) {
            float sq2 = 0.f, sk2 = 0.f;
            for (int d = lane; d < Dk; d += 32) {
                const float qv = Qs[t * DKP + d], kv = Ks[t * DKP + d];
                sq2 = fmaf(qv, qv, sq2);
                sk2 = fmaf(kv, kv, sk2);
            }
            sq2 = warp_sum(sq2);
            sk2 = warp_sum(sk2);
            const float iq = qscale / sqrtf(sq2 + 1e-6f), ik = 1.f / sqrtf(sk2 + 1e-6f);
            for (int d = lane; d < Dk; d += 32) {
                Qs[t * DKP + d] *= iq;
                Ks[t * DKP + d] *= ik;
            }
        }
        if (w == 0) {
            // Inclusive scan of G over L <= 64 (two halves of 32); padding adds 0.
            float g0 = G[lane], g1 = lane + 32 < L ? G[lane + 32] : 0.f;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float a0 = __shfl_up_sync(0xffffffffu, g0, o), a1 = __shfl_up_sync(0xffffffffu, g1, o);
                if (lane >= o) {
                    g0 += a0;
                    g1 += a1;
                }
            }
            g1 += __shfl_sync(0xffffffffu, g0, 31);
            __syncwarp();
            G[lane] = g0;
            if (lane + 32 < L) G[lane + 32] = g1;
        }
        __syncthreads();
        const float Gl = G[L - 1];
        if (threadIdx.x < L) Eg[threadIdx.x] = expf(Gl - G[threadIdx.x]);
        // A and Aq: thread (t = w + NW*i, jj = lane + 32*m).
        {
            constexpr int JM = CH_LMAX / 32;
            float kk[TR][JM], qk[TR][JM];
#pragma unroll
            for (int i = 0; i < TR; i++)
#pragma unroll
                for (int m = 0; m < JM; m++) kk[i][m] = qk[i][m] = 0.f;
#pragma unroll 2
            for (int d = 0; d < Dk; d++) {
                float kj[JM];
#pragma unroll
                for (int m = 0; m < JM; m++) kj[m] = (lane + 32 * m < L) ? Ks[(lane + 32 * m) * DKP + d] : 0.f;
#pragma unroll
                for (int i = 0; i < TR; i++) {
                    if (w + NW * i >= L) break;
                    const float kt = Ks[(w + NW * i) * DKP + d], qt = Qs[(w + NW * i) * DKP + d];
#pragma unroll
                    for (int m = 0; m < JM; m++) {
                        kk[i][m] = fmaf(kt, kj[m], kk[i][m]);
                        qk[i][m] = fmaf(qt, kj[m], qk[i][m]);
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < TR; i++) {
                const int t = w + NW * i;
                if (t >= L) break;
#pragma unroll
                for (int m = 0; m < JM; m++) {
                    const int jj = lane + 32 * m;
                    if (jj < L) {
                        const float e = jj <= t ? expf(G[t] - G[jj]) : 0.f;
                        Am[t * (L + 1) + jj] = jj < t ? Bt[t] * e * kk[i][m] : 0.f;
                        Aq[t * (L + 1) + jj] = e * qk[i][m];
                    }
                }
            }
        }
        // R (into U) and the inter-chunk output, thread (t = w + NW*i, lane).
        float o[TR];
        {
            float rk[TR];
#pragma unroll
            for (int i = 0; i < TR; i++) rk[i] = o[i] = 0.f;
#pragma unroll 2
            for (int d = 0; d < Dk; d++) {
                const float sv = Ss[d * 32 + lane];
#pragma unroll
                for (int i = 0; i < TR; i++) {
                    if (w + NW * i >= L) break;
                    rk[i] = fmaf(Ks[(w + NW * i) * DKP + d], sv, rk[i]);
                    o[i] = fmaf(Qs[(w + NW * i) * DKP + d], sv, o[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < TR; i++) {
                const int t = w + NW * i;
                if (t >= L) break;
                const float eG = expf(G[t]);
                float vv = 0.f;
                if (t < Lc && v < Dv) vv = qkv[((size_t)sq.x + c0 + t) * W + 2 * Hk * Dk + j * Dv + v];
                U[t * 32 + lane] = Bt[t] * (vv - eG * rk[i]);
                o[i] *= eG;
            }
        }
        __syncthreads();
        // Forward substitution (I + A) U = R in blocks of 16 rows: every warp
        // applies the solved rows to the block (2 rows per warp), then warp
        // 0 solves the block's own 16-row chain. Lane = column.
        for (int b0 = 0; b0 < Lc; b0 += 16) {
            if (b0 > 0) {
#pragma unroll
                for (int rr = 0; rr < 2; rr++) {
                    const int t = b0 + 2 * w + rr;
                    if (t < Lc) {
                        const float* ar = Am + t * (L + 1);
                        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
                        for (int jj = 0; jj < b0; jj += 4) {  // b0 is a multiple of 16
                            a0 = fmaf(ar[jj], U[jj * 32 + lane], a0);
                            a1 = fmaf(ar[jj + 1], U[(jj + 1) * 32 + lane], a1);
                            a2 = fmaf(ar[jj + 2], U[(jj + 2) * 32 + lane], a2);
                            a3 = fmaf(ar[jj + 3], U[(jj + 3) * 32 + lane], a3);
                        }
                        U[t * 32 + lane] -= (a0 + a1) + (a2 + a3);
                    }
                }
                __syncthreads();
            }
            if (w == 0) {
                const int b1 = min(b0 + 16, Lc);
                float u[16];
#pragma unroll
                for (int i = 0; i < 16; i++) u[i] = b0 + i < b1 ? U[(b0 + i) * 32 + lane] : 0.f;
#pragma unroll
                for (int i = 1; i < 16; i++) {
                    const float* ar = Am + (b0 + i) * (L + 1) + b0;
                    float acc = u[i];
#pragma unroll
                    for (int m = 0; m < i; m++) acc = fmaf(-ar[m], u[m], acc);
                    u[i] = acc;
                }
#pragma unroll
                for (int i = 0; i < 16; i++)
                    if (b0 + i < b1) U[(b0 + i) * 32 + lane] = u[i];
            }
            __syncthreads();
        }
        // Intra-chunk output.
#pragma unroll
        for (int i = 0; i < TR; i++) {
            const int t = w + NW * i;
            if (t >= L) break;
            float acc = o[i];
            const float* ar = Aq + t * (L + 1);
            float acc1 = 0.f;
            int jj = 0;
            for (; jj + 1 <= t; jj += 2) {
                acc = fmaf(ar[jj], U[jj * 32 + lane], acc);
                acc1 = fmaf(ar[jj + 1], U[(jj + 1) * 32 + lane], acc1);
            }
            if (jj <= t) acc = fmaf(ar[jj], U[jj * 32 + lane], acc);
            acc += acc1;
            if (t < Lc && v < Dv) dst[((size_t)sq.x + c0 + t) * Hv * Dv + (size_t)j * Dv + v] = acc;
        }
        // State: S = e^(G_L) S + sum_t e^(G_L - G_t) k_t u_t^T, thread (k, lane).
        const float eL = expf(Gl);
        for (int k = w; k < Dk; k += NW) {
            float acc = 0.f, acc1 = 0.f;
            int t = 0;
#pragma unroll 4
            for (; t + 1 < Lc; t += 2) {
                acc = fmaf(Ks[t * DKP + k] * Eg[t], U[t * 32 + lane], acc);
                acc1 = fmaf(Ks[(t + 1) * DKP + k] * Eg[t + 1], U[(t + 1) * 32 + lane], acc1);
            }
            if (t < Lc) acc = fmaf(Ks[t * DKP + k] * Eg[t], U[t * 32 + lane], acc);
            Ss[k * 32 + lane] = fmaf(eL, Ss[k * 32 + lane], acc + acc1);
        }
        __syncthreads();
    }
    if (v < Dv)
        for (int k = w; k < Dk; k += NW) Sp[(size_t)k * Dv + v] = Ss[k * 32 + lane];
}

