// Kernels for NVFP4 weights: see mm.cuh (decoders in fp4.cuh). Built without --use_fast_math.
#include "fp4.cuh"
#define MM_T T_NVFP4
#define MM_NAME nvfp4
#include "mm.cuh"
