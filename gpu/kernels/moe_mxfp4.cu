// Grouped (prefill) mixture-of-experts GEMMs for MXFP4 expert weights: see
// moe.cuh (decoders in fp4.cuh). Built without --use_fast_math.
#include "fp4.cuh"
#define MOE_T T_MXFP4
#define MOE_NAME mxfp4
#include "moe.cuh"
