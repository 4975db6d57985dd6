// Kernels for FP8_E4M3 weights (Hugging Face per-tensor FP8, W8A16): see
// mm.cuh (decoder in fp8.cuh). Built without --use_fast_math.
#include "fp8.cuh"
#define MM_T T_FP8
#define MM_NAME fp8
#include "mm.cuh"
#include "gemvr.cuh"
