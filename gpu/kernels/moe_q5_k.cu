// Grouped (prefill) mixture-of-experts GEMMs for Q5_K expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q5_K
#define MOE_NAME q5_k
#include "moe.cuh"
