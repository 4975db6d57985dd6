// Kernels for Q3_K weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q3_K
#define MM_NAME q3_k
#include "mm.cuh"
#include "gemvr.cuh"
