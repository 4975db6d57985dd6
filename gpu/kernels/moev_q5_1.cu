// Decode mixture-of-experts GEMVs for Q5_1 expert weights: see moe.cuh.
// Built without --use_fast_math.
#define MOE_T T_Q5_1
#define MOE_NAME q5_1
#define MOE_GEMV 1
#include "moe.cuh"
