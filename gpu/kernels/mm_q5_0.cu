// Kernels for Q5_0 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q5_0
#define MM_NAME q5_0
#include "mm.cuh"
#include "gemvr.cuh"
