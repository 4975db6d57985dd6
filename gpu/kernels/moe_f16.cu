// Grouped (prefill) mixture-of-experts GEMMs for F16 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_F16
#define MOE_NAME f16
#include "moe.cuh"
