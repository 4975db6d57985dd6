//go:build !purego

package cpu

import "github.com/ftchat/ftchat/engine/gguf"

// dotFP8E4M3AVX2 widens 8 codes at a time to dword indices and gathers
// their values from the decode table (VGATHERDPS), then multiply-adds.
//
//go:noescape
func dotFP8E4M3AVX2(w *byte, x *float32, nb int, tab *float32) float32

// dotFP8E4M3B32AVX2 is the same gather per 36-byte FP8_E4M3_B32 block,
// the block's dot multiplied by its broadcast scale into the total.
//
//go:noescape
func dotFP8E4M3B32AVX2(w *byte, x *float32, nb int, tab *float32) float32

func dotFP8E4M3Fast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 32
	if nb == 0 {
		return 0
	}
	_ = x[nb*32-1]
	return dotFP8E4M3AVX2(&w[0], &x[0], nb, &gguf.E4M3Table()[0])
}

func dotFP8E4M3B32Fast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 36
	if nb == 0 {
		return 0
	}
	_ = x[nb*32-1]
	return dotFP8E4M3B32AVX2(&w[0], &x[0], nb, &gguf.E4M3Table()[0])
}

func init() {
	if !hasAVX2 {
		return
	}
	if fastKernels == nil {
		fastKernels = map[gguf.Type]rowKernel{}
	}
	fastKernels[gguf.FP8_E4M3] = dotFP8E4M3Fast
	fastKernels[gguf.FP8_E4M3_B32] = dotFP8E4M3B32Fast
}
