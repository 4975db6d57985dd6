// Kernels for MXFP4 weights: see mm.cuh (decoders in fp4.cuh). Built without --use_fast_math.
#include "fp4.cuh"
#define MM_T T_MXFP4
#define MM_NAME mxfp4
#include "mm.cuh"
#include "gemvr.cuh"
