// Decode mixture-of-experts GEMVs for FP8_E4M3 expert weights: see moe.cuh
// (decoder in fp8.cuh). Built without --use_fast_math.
#include "fp8.cuh"
#define MOE_T T_FP8
#define MOE_NAME fp8
#define MOE_GEMV 1
#include "moe.cuh"
