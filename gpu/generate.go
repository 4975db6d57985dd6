package gpu

// Regenerate the embedded PTX from kernels/*.cu with nvcc 11.8 (PTX ISA 7.8,
// so drivers from R520 on can load it). Sources whose recorded hash still
// matches are skipped; -force rebuilds all.
//
//go:generate go run ./internal/ptxgen -dir kernels
