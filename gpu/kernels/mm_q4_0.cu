// Kernels for Q4_0 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q4_0
#define MM_NAME q4_0
#include "mm.cuh"
#include "gemvr.cuh"
