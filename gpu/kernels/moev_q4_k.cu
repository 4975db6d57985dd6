// Decode mixture-of-experts GEMVs for Q4_K expert weights: see moe.cuh.
// Built without --use_fast_math.
#define MOE_T T_Q4_K
#define MOE_NAME q4_k
#define MOE_GEMV 1
#include "moe.cuh"
