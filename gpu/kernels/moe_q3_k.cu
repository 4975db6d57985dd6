// Grouped (prefill) mixture-of-experts GEMMs for Q3_K expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q3_K
#define MOE_NAME q3_k
#include "moe.cuh"
