// Kernels for NVFP4 weights: see mm.cuh (decoders in fp4.cuh). Built without --use_fast_math.
#include "fp4.cuh"
#define MM_T T_NVFP4
#define MM_NAME nvfp4
#include "mm.cuh"

// y[i] *= s over n floats: an NVFP4 weight's per-tensor second-level scale
// (its <name>.scale), applied after the GEMV/GEMM and the embedding.
extern "C" __global__ void scale_nvfp4(float* y, long long n, float s) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}
#include "gemvr.cuh"
