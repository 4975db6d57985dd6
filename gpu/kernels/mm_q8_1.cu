// Kernels for Q8_1 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q8_1
#define MM_NAME q8_1
#include "mm.cuh"
#include "gemvr.cuh"
