// Kernels for Q5_K weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q5_K
#define MM_NAME q5_k
#include "mm.cuh"
#include "gemvr.cuh"
