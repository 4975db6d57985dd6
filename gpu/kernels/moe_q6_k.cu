// Grouped (prefill) mixture-of-experts GEMMs for Q6_K expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q6_K
#define MOE_NAME q6_k
#include "moe.cuh"
