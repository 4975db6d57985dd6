// Kernels for Q6_K weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_Q6_K
#define MM_NAME q6_k
#include "mm.cuh"
#include "gemvr.cuh"
#include "gemmq.cuh"
#include "gemvq.cuh"
