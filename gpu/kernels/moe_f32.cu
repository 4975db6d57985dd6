// Grouped (prefill) mixture-of-experts GEMMs for F32 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_F32
#define MOE_NAME f32
#include "moe.cuh"
