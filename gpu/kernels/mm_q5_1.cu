// Kernels for Q5_1 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q5_1
#define MM_NAME q5_1
#include "mm.cuh"
#include "gemvr.cuh"
