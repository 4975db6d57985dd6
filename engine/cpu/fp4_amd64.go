//go:build !purego

package cpu

import "github.com/ftchat/ftchat/engine/gguf"

//go:noescape
func dotNVFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32

//go:noescape
func dotMXFP4AVX2(w *byte, x *float32, nb int, tab *float32) float32

//go:noescape
func dotNVFP4x4AVX2(w *byte, x *float32, xstride int, nb int, tab *float32, out *[4]float32)

// dotNVFP4x4 is the four-row NVFP4 kernel (rowKernel4; xs is unused).
func dotNVFP4x4(w []byte, x []float32, xstride int, _ []float32, _ int, out *[4]float32) {
	nb := len(w) / 36
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_ = x[3*xstride+nb*64-1]
	dotNVFP4x4AVX2(&w[0], &x[0], xstride, nb, &gguf.UE4M3Table()[0], out)
}

//go:noescape
func dotMXFP4x4AVX2(w *byte, x *float32, xstride int, nb int, tab *float32, out *[4]float32)

// dotMXFP4x4 is the four-row MXFP4 kernel (rowKernel4; xs is unused).
func dotMXFP4x4(w []byte, x []float32, xstride int, _ []float32, _ int, out *[4]float32) {
	nb := len(w) / 17
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_ = x[3*xstride+nb*32-1]
	dotMXFP4x4AVX2(&w[0], &x[0], xstride, nb, &gguf.E8M0Table()[0], out)
}

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
	if fastKernels4 == nil {
		fastKernels4 = map[gguf.Type]rowKernel4{}
	}
	fastKernels4[gguf.NVFP4] = dotNVFP4x4
	fastKernels4[gguf.MXFP4] = dotMXFP4x4
}
