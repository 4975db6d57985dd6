// Kernels for Q4_1 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q4_1
#define MM_NAME q4_1
#include "mm.cuh"
#include "gemvr.cuh"
