// Grouped (prefill) mixture-of-experts GEMMs for Q2_K expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q2_K
#define MOE_NAME q2_k
#include "moe.cuh"
