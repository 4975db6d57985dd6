// Decode mixture-of-experts GEMVs for Q6_K expert weights: see moe.cuh.
// Built without --use_fast_math.
#define MOE_T T_Q6_K
#define MOE_NAME q6_k
#define MOE_GEMV 1
#include "moe.cuh"
