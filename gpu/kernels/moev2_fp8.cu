// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_FP8 (FP8_E4M3) expert
// weights: see moe_gemv2.cuh (decoder in fp8.cuh). Built without --use_fast_math.
#include "fp8.cuh"
#define MOE_T T_FP8
#define MOE_NAME fp8
#include "moe_gemv2.cuh"
