// Kernels for FP8_E4M3_B32 weights (Hugging Face FP8 with per-row or block
// scales, W8A16): see mm.cuh (decoder in fp8b.cuh). Built without --use_fast_math.
#include "fp8b.cuh"
#define MM_T T_FP8B
#define MM_NAME fp8b
#include "mm.cuh"
#include "gemvr.cuh"
