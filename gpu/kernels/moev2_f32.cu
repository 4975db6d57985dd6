// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_F32 expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#define MOE_T T_F32
#define MOE_NAME f32
#include "moe_gemv2.cuh"
