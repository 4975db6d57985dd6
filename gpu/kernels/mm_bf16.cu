// Kernels for BF16 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_BF16
#define MM_NAME bf16
#define MM_FLOAT 1
#include "mm.cuh"
#include "gemvr.cuh"
