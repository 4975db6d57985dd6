// Element-wise and matrix ops of the ftchat CUDA backend (everything except
// the paged KV write and attention, which live in attention.cu/kvwrite.cu).
// Accuracy-critical: no --use_fast_math.
#include <cstdint>

extern "C" __global__ void fill_u32(uint32_t* p, uint32_t v, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (long long)gridDim.x * blockDim.x) p[i] = v;
}
