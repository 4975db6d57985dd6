// Grouped (prefill) mixture-of-experts GEMMs for Q8_0 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q8_0
#define MOE_NAME q8_0
#include "moe.cuh"
