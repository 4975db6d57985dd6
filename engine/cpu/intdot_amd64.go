//go:build !purego

package cpu

import (
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
)

//go:noescape
func dotQ4KQ8AVX2(w *byte, x *q8Block, nb int) float32

//go:noescape
func dotQ6KQ8AVX2(w *byte, x *q8Block, nb int) float32

//go:noescape
func dotQ4_1Q8AVX2(w *byte, x *q8Block32, xs *float32, nb int) float32

//go:noescape
func dotQ4_0Q8AVX2(w *byte, x *q8Block32, xs *float32, nb int) float32

//go:noescape
func dotQ8_0Q8AVX2(w *byte, x *q8Block32, nb int) float32

// The wrappers check lengths once per row, so the assembly runs unchecked.

func dotQ4KQ8Fast(w []byte, x []q8Block, _ []float32) float32 {
	nb := len(w) / 144
	if nb == 0 {
		return 0
	}
	_ = x[nb-1]
	return dotQ4KQ8AVX2(&w[0], &x[0], nb)
}

func dotQ6KQ8Fast(w []byte, x []q8Block, _ []float32) float32 {
	nb := len(w) / 210
	if nb == 0 {
		return 0
	}
	_ = x[nb-1]
	return dotQ6KQ8AVX2(&w[0], &x[0], nb)
}

// q4Q8Fast adapts a Q4_0/Q4_1 kernel of blockBytes-long blocks.
func q4Q8Fast(k func(*byte, *q8Block32, *float32, int) float32, blockBytes int) intKernel32 {
	return func(w []byte, x []q8Block32, xs []float32) float32 {
		nb := len(w) / blockBytes
		if nb == 0 {
			return 0
		}
		_, _ = x[nb-1], xs[nb-1]
		return k(&w[0], &x[0], &xs[0], nb)
	}
}

func dotQ8_0Q8Fast(w []byte, x []q8Block32, _ []float32) float32 {
	nb := len(w) / 34
	if nb == 0 {
		return 0
	}
	_ = x[nb-1]
	return dotQ8_0Q8AVX2(&w[0], &x[0], nb)
}

func init() {
	if unsafe.Sizeof(q8Block{}) != q8BlockBytes || unsafe.Offsetof(q8Block{}.bsums) != 260 ||
		unsafe.Sizeof(q8Block32{}) != q8Block32Bytes {
		panic("cpu: q8Block layout differs from what the assembly reads")
	}
	if hasAVX2 {
		fastIntKernels = map[gguf.Type]intPath{
			gguf.Q4_K: {k256: dotQ4KQ8Fast},
			gguf.Q6_K: {k256: dotQ6KQ8Fast},
			gguf.Q4_1: {k32: q4Q8Fast(dotQ4_1Q8AVX2, 20)},
			gguf.Q4_0: {k32: q4Q8Fast(dotQ4_0Q8AVX2, 18)},
			gguf.Q8_0: {k32: dotQ8_0Q8Fast},
		}
	}
}
