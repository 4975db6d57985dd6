// Kernels for F16 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_F16
#define MM_NAME f16
#define MM_FLOAT 1
#include "mm.cuh"
#include "gemvr.cuh"
