// Kernels for Q2_K weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q2_K
#define MM_NAME q2_k
#include "mm.cuh"
#include "gemvr.cuh"
