//go:build !purego

package cpu

import "github.com/ftchat/ftchat/engine/gguf"

//go:noescape
func dotNVFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32

//go:noescape
func dotMXFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32

func dotNVFP4Fast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 36
	if nb == 0 {
		return 0
	}
	_ = x[nb*64-1]
	return dotNVFP4AVX2(&w[0], &x[0], nb, &gguf.UE4M3Table()[0])
}

func dotMXFP4Fast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 17
	if nb == 0 {
		return 0
	}
	_ = x[nb*32-1]
	return dotMXFP4AVX2(&w[0], &x[0], nb, &gguf.E8M0Table()[0])
}

func init() {
	if !hasAVX2 {
		return
	}
	if fastKernels == nil {
		fastKernels = map[gguf.Type]rowKernel{}
	}
	fastKernels[gguf.NVFP4] = dotNVFP4Fast
	fastKernels[gguf.MXFP4] = dotMXFP4Fast
}
