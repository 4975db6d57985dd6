// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_MXFP4 expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#include "fp4.cuh"
#define MOE_T T_MXFP4
#define MOE_NAME mxfp4
#include "moe_gemv2.cuh"
