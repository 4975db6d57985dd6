// Grouped (prefill) mixture-of-experts GEMMs for Q4_0 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q4_0
#define MOE_NAME q4_0
#include "moe.cuh"
