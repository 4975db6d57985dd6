// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_Q5_K expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#define MOE_T T_Q5_K
#define MOE_NAME q5_k
#include "moe_gemv2.cuh"
