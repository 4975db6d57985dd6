// Grouped (prefill) mixture-of-experts GEMMs for Q8_1 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_Q8_1
#define MOE_NAME q8_1
#include "moe.cuh"
