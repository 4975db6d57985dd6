package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// BenchmarkExpertGEMV: one routed expert's gate (or up) projection of
// Qwen3.6-35B-A3B, 512 outputs × 2048 inputs, for one activation row (the
// decode shape of host-resident experts) and 8 rows; weight bytes per second.
func BenchmarkExpertGEMV(b *testing.B) {
	const rows, cols = 512, 2048
	r := rand.New(rand.NewPCG(2, 3))
	for _, typ := range []gguf.Type{gguf.NVFP4, gguf.MXFP4, gguf.Q4_K, gguf.Q4_0, gguf.Q8_0} {
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/rows=%d", typ, n), func(b *testing.B) {
				be := New(Options{Threads: benchThreads})
				defer be.Close()
				raw, err := gguf.Quantize(typ, randVec(r, rows*cols, 0.02))
				if err != nil {
					b.Fatal(err)
				}
				w, err := be.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{cols, rows}, Type: typ}, raw)
				if err != nil {
					b.Fatal(err)
				}
				x := tensorOf(be, n, cols, randVec(r, n*cols, 1))
				dst := be.NewTensor(n, rows)
				b.SetBytes(int64(len(raw)))
				b.ResetTimer()
				for range b.N {
					be.MatMul(dst, x, w)
				}
			})
		}
	}
}

// BenchmarkExpertRowKernel is BenchmarkExpertGEMV's single-row case on one
// thread, calling the row kernel directly (no worker pool): the number to
// compare kernels by on a shared machine.
func BenchmarkExpertRowKernel(b *testing.B) {
	const rows, cols = 512, 2048
	r := rand.New(rand.NewPCG(2, 3))
	for _, typ := range []gguf.Type{gguf.NVFP4, gguf.MXFP4, gguf.Q4_K, gguf.Q4_0, gguf.Q8_0} {
		b.Run(typ.String(), func(b *testing.B) {
			raw, err := gguf.Quantize(typ, randVec(r, rows*cols, 0.02))
			if err != nil {
				b.Fatal(err)
			}
			k := kernelFor(typ)
			x := randVec(r, cols, 1)
			xs := make([]float32, cols/32)
			blockSums(xs, x)
			rb := typ.RowSize(cols)
			var sink float32
			b.SetBytes(int64(len(raw)))
			b.ResetTimer()
			for range b.N {
				for o := 0; o < rows; o++ {
					sink += k(raw[o*rb:(o+1)*rb], x, xs)
				}
			}
			_ = sink
		})
	}
}
