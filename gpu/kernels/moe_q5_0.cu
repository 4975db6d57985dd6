// Grouped (prefill) mixture-of-experts GEMMs for Q5_0 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q5_0
#define MOE_NAME q5_0
#include "moe.cuh"
