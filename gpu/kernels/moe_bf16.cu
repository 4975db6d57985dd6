// Grouped (prefill) mixture-of-experts GEMMs for BF16 expert weights: see
// moe.cuh. Built without --use_fast_math.
#define MOE_T T_BF16
#define MOE_NAME bf16
#include "moe.cuh"
