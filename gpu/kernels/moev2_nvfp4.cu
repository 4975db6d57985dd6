// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_NVFP4 expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#include "fp4.cuh"
#define MOE_T T_NVFP4
#define MOE_NAME nvfp4
#include "moe_gemv2.cuh"
