// Shared by moe.cu (the tile list) and moe.cuh (the grouped GEMMs): rows
// (token, slot pairs of one expert) per grouped-GEMM tile. gpu/moe.go
// mirrors it as moeBM.
#pragma once
#define MOE_BM 32
