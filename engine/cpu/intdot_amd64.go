//go:build !purego

package cpu

import (
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
)

//go:noescape
func dotQ4KQ8AVX2(w *byte, x *q8Block, nb int) float32

func dotQ4KQ8Fast(w []byte, x []q8Block, _ []float32) float32 {
	nb := len(w) / 144
	if nb == 0 {
		return 0
	}
	_ = x[nb-1]
	return dotQ4KQ8AVX2(&w[0], &x[0], nb)
}

func init() {
	if unsafe.Sizeof(q8Block{}) != q8BlockBytes || unsafe.Offsetof(q8Block{}.bsums) != 260 {
		panic("cpu: q8Block layout differs from what the assembly reads")
	}
	if hasAVX2 {
		fastIntKernels = map[gguf.Type]intKernel{
			gguf.Q4_K: dotQ4KQ8Fast,
		}
	}
}
