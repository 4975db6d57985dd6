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
//	cuda sm_75+   bf16 fp16 fp8_e4m3 fp8_e5m2    64 80 96 128 256         power of two 1..1024
//	              (K/V pairs: one dtype, or GPUPairs)
//	cuda < sm_75  none (the kernels are built for compute_75 and newer)
//
// On sm_75..sm_88 FP8 codes are decoded with integer ops (sm_75 and
// --compute-dtype fp16 through fp16 MMAs); sm_90 uses the hardware cvt
// instructions. Both produce the same values.

// MinFP8ComputeCap is the lowest CUDA compute capability (major*10+minor)
// that runs the KV kernels.
const MinFP8ComputeCap = 75

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
	return fmt.Errorf("--kv-cache-dtype %s: this GPU (sm_%d) cannot run %s, which need compute capability 7.5 (sm_75) or newer; use --device cpu",
		d, computeCap, what)
}

// GPUPairs are the K/V dtype pairs of different dtypes the CUDA backend
// runs: a 16-bit K (the precision-sensitive half: it feeds the softmax
// through q·k) with an FP8 V. Each pair is its own set of attention
// kernels, so the others (fp8 K, two 16-bit or two FP8 formats) are left
// to the CPU backend, which runs every pair.
var GPUPairs = [][2]DType{{BF16, FP8E4M3}, {BF16, FP8E5M2}, {F16, FP8E4M3}, {F16, FP8E5M2}}

// GPUPairSupported reports whether the CUDA backend runs K in k and V in v
// (one dtype for both, or one of GPUPairs).
func GPUPairSupported(k, v DType) bool {
	return k == v || slices.Contains(GPUPairs, [2]DType{k, v})
}

// MixedOnGPUError is the refusal of a K/V dtype pair the CUDA backend
// does not run (GPUPairSupported false): one line naming the pairs that do
// run there and the way to run this one.
func MixedOnGPUError(k, v DType) error {
	return fmt.Errorf("K/V dtypes %s do not run on the GPU, which runs one dtype for both halves or K in bf16/fp16 with V in fp8_e4m3/fp8_e5m2 (e.g. --cache-type-k %s --cache-type-v %s); --device cpu runs every pair",
		PairName(k, v), gpuK(k, v), gpuV(k, v))
}

// gpuK and gpuV are the nearest pair the GPU runs: the 16-bit one of the
// two for K (bf16 when both are fp8) and the fp8 one for V (fp8_e4m3 when
// both are 16-bit).
func gpuK(k, v DType) DType {
	if !k.IsFP8() {
		return k
	}
	if !v.IsFP8() {
		return v
	}
	return BF16
}

func gpuV(k, v DType) DType {
	if v.IsFP8() {
		return v
	}
	if k.IsFP8() {
		return k
	}
	return FP8E4M3
}
