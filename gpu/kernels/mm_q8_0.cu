// Kernels for Q8_0 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q8_0
#define MM_NAME q8_0
#include "mm.cuh"
#include "gemvr.cuh"
