// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_FP8B (FP8_E4M3_B32)
// expert weights: see moe_gemv2.cuh (decoder in fp8b.cuh). Built without --use_fast_math.
#include "fp8b.cuh"
#define MOE_T T_FP8B
#define MOE_NAME fp8b
#include "moe_gemv2.cuh"
