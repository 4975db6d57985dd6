package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

var benchThreads = 0

// BenchmarkMatVec: one activation row times a 2048×2048 weight per type
// (the decode shape); reports weight bytes read per second.
func BenchmarkMatVec(b *testing.B) {
	const dim = 2048
	r := rand.New(rand.NewPCG(1, 1))
	for _, typ := range []gguf.Type{gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		for _, rows := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/rows=%d", typ, rows), func(b *testing.B) {
				be := New(Options{Threads: benchThreads})
				defer be.Close()
				raw, err := gguf.Quantize(typ, randVec(r, dim*dim, 1))
				if err != nil {
					b.Skip(err)
				}
				w, err := be.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{dim, dim}, Type: typ}, raw)
				if err != nil {
					b.Fatal(err)
				}
				x := tensorOf(be, rows, dim, randVec(r, rows*dim, 1))
				dst := be.NewTensor(rows, dim)
				b.SetBytes(int64(len(raw)))
				b.ResetTimer()
				for range b.N {
					be.MatMul(dst, x, w)
				}
			})
		}
	}
}
