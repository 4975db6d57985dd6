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
// hybrid.go.
// L (the chunk length) is 64 or 32 (devices with less shared memory).
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
        // Load: normalized q, k rows; per-row g and beta.
#pragma unroll 1
        for (int i = 0; i < TR; i++) {
            const int t = w + NW * i;
            if (t >= L) break;
            if (t < Lc) {
                const size_t row = (size_t)sq.x + c0 + t;
                const float* xr = qkv + row * W;
                warp_l2norm(xr + kh * Dk, Qs + t * DKP, Dk, qscale, lane);
                warp_l2norm(xr + Hk * Dk + kh * Dk, Ks + t * DKP, Dk, 1.f, lane);
                if (lane == 0) {
                    float g, bt;
                    gdn_gate(alpha, beta, A, dtb, row, Hv, j, g, bt);
                    G[t] = g;
                    Bt[t] = bt;
                }
            } else {
                for (int d = lane; d < Dk; d += 32) Qs[t * DKP + d] = Ks[t * DKP + d] = 0.f;
                if (lane == 0) Bt[t] = 0.f;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float acc = 0.f;
            for (int t = 0; t < L; t++) {
                if (t < Lc) acc += G[t];
                G[t] = acc;
            }
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
#pragma unroll 1
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
#pragma unroll 1
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
        // Forward substitution (I + A) U = R, one warp, lane = column.
        if (w == 0) {
            for (int t = 1; t < Lc; t++) {
                float u0 = U[t * 32 + lane], u1 = 0.f;
                const float* ar = Am + t * (L + 1);
                int jj = 0;
                for (; jj + 1 < t; jj += 2) {
                    u0 = fmaf(-ar[jj], U[jj * 32 + lane], u0);
                    u1 = fmaf(-ar[jj + 1], U[(jj + 1) * 32 + lane], u1);
                }
                if (jj < t) u0 = fmaf(-ar[jj], U[jj * 32 + lane], u0);
                U[t * 32 + lane] = u0 + u1;
            }
        }
        __syncthreads();
        // Intra-chunk output.
#pragma unroll
        for (int i = 0; i < TR; i++) {
            const int t = w + NW * i;
            if (t >= L) break;
            float acc = o[i];
            const float* ar = Aq + t * (L + 1);
#pragma unroll 1
            for (int jj = 0; jj <= t; jj++) acc = fmaf(ar[jj], U[jj * 32 + lane], acc);
            if (t < Lc && v < Dv) dst[((size_t)sq.x + c0 + t) * Hv * Dv + (size_t)j * Dv + v] = acc;
        }
        // State: S = e^(G_L) S + sum_t e^(G_L - G_t) k_t u_t^T, thread (k, lane).
        const float eL = expf(Gl);
        for (int k = w; k < Dk; k += NW) {
            float acc = 0.f;
#pragma unroll 4
            for (int t = 0; t < Lc; t++) acc = fmaf(Ks[t * DKP + k] * Eg[t], U[t * 32 + lane], acc);
            Ss[k * 32 + lane] = fmaf(eL, Ss[k * 32 + lane], acc);
        }
        __syncthreads();
    }
    if (v < Dv)
        for (int k = w; k < Dk; k += NW) Sp[(size_t)k * Dv + v] = Ss[k * 32 + lane];
}

