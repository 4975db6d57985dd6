// Kernels for F32 weights: see mm.cuh. Built without --use_fast_math.
#define MM_T T_F32
#define MM_NAME f32
#define MM_FLOAT 1
#include "mm.cuh"
#include "gemvr.cuh"
