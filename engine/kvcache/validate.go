package kvcache

import (
	"fmt"
	"slices"
	"strings"
)

// Support matrix (docs/kv-cache.md):
//
//	device        dtypes                         head_dim                 page size
//	cpu           bf16 fp16 fp8_e4m3 fp8_e5m2    any                      power of two 1..1024
//	cuda sm_80+   bf16 fp16 fp8_e4m3 fp8_e5m2    64 80 96 128 256         power of two 1..1024
//	cuda < sm_80  none (the kernels are built for compute_80 and newer)
//
// On sm_80..sm_87 FP8 codes are decoded with integer ops; sm_89+ uses the
// hardware cvt instructions. Both produce the same values.

// MinFP8ComputeCap is the lowest CUDA compute capability (major*10+minor)
// that runs the KV kernels.
const MinFP8ComputeCap = 80

func headDimList() string {
	s := make([]string, len(SupportedHeadDims))
	for i, d := range SupportedHeadDims {
		s[i] = fmt.Sprint(d)
	}
	return strings.Join(s, ", ")
}

// ValidateHeadDim checks that the attention kernels of the device support
// the model's head_dim. computeCap is 0 for the CPU (any head_dim works).
func ValidateHeadDim(headDim, computeCap int) error {
	if headDim <= 0 {
		return fmt.Errorf("model head_dim %d is invalid (the model file is broken)", headDim)
	}
	if computeCap == 0 || slices.Contains(SupportedHeadDims, headDim) {
		return nil
	}
	return fmt.Errorf("model head_dim %d is not supported by the CUDA attention kernels (supported: %s); use --device cpu",
		headDim, headDimList())
}

// ValidateForDevice checks that dtype can run on a device: computeCap is
// 0 for the CPU (every dtype works) or the CUDA compute capability as
// major*10+minor (89 for Ada).
func ValidateForDevice(d DType, computeCap int) error {
	if !d.Valid() {
		return fmt.Errorf("--kv-cache-dtype %v is not supported; supported: %s", d, SupportedDTypes)
	}
	if computeCap == 0 || computeCap >= MinFP8ComputeCap {
		return nil
	}
	what := "the CUDA KV kernels"
	if d.IsFP8() {
		what = "the fp8 KV kernels"
	}
	return fmt.Errorf("--kv-cache-dtype %s: this GPU (sm_%d) cannot run %s, which need compute capability 8.0 (sm_80) or newer; use --device cpu",
		d, computeCap, what)
}

// MixedOnGPUError is the refusal of a pool whose K and V dtypes differ on
// a CUDA device: the attention kernels are instantiated per dtype for both
// halves together, so mixed pairs run on the CPU backend only.
func MixedOnGPUError(k, v DType) error {
	return fmt.Errorf("different K and V dtypes (%s) run on the CPU backend only: the CUDA attention kernels read K and V in one dtype. On a GPU use one dtype for both (--kv-cache-dtype %s, without --cache-type-k/--cache-type-v, or /kvdtype %s), or run with --device cpu",
		PairName(k, v), wider(k, v), wider(k, v))
}

// wider is the one of k and v that keeps more precision (the safer
// common choice).
func wider(k, v DType) DType {
	if k.IsFP8() && !v.IsFP8() {
		return v
	}
	if v == FP8E4M3 && k == FP8E5M2 {
		return v
	}
	return k
}
