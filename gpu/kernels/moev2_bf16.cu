// Decode MoE GEMVs, variant 2 (FTCHAT_MOEV=2), for T_BF16 expert weights: see
// moe_gemv2.cuh. Built without --use_fast_math.
#define MOE_T T_BF16
#define MOE_NAME bf16
#include "moe_gemv2.cuh"
