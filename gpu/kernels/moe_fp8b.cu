// Grouped (prefill) mixture-of-experts GEMMs for FP8_E4M3_B32 expert
// weights: see moe.cuh (decoder in fp8b.cuh). Built without --use_fast_math.
#include "fp8b.cuh"
#define MOE_T T_FP8B
#define MOE_NAME fp8b
#include "moe.cuh"
