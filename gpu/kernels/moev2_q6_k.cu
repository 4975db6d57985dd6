// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_Q6_K expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#define MOE_T T_Q6_K
#define MOE_NAME q6_k
#include "moe_gemv2.cuh"
