package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
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

// BenchmarkGatedDeltaRule: one Gated DeltaNet layer of Qwen3.6-35B-A3B
// (16 key heads, 32 value heads, head dims 128) for one decode token and
// a 256-token prefill chunk, the fast path and the plain reference.
func BenchmarkGatedDeltaRule(b *testing.B) {
	const Hk, Hv, dk, dv = 16, 32, 128, 128
	C := 2*Hk*dk + Hv*dv
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 256} {
		for _, p := range []struct {
			name string
			run  deltaHead
		}{{"fast", deltaHeadFast}, {"plain", deltaHeadRef}} {
			b.Run(fmt.Sprintf("tokens=%d/%s", n, p.name), func(b *testing.B) {
				be := New(Options{Threads: benchThreads})
				defer be.Close()
				if err := be.AllocState(model.StateLayout{Layers: 1, Slots: 1, ConvChannels: C, ConvKernel: 4, ValueHeads: Hv, KeyDim: dk, ValueDim: dv}); err != nil {
					b.Fatal(err)
				}
				A := make([]float32, Hv)
				for i := range A {
					A[i] = -0.1
				}
				mk := func(name string, v []float32) model.Weight {
					raw, _ := gguf.Quantize(gguf.F32, v)
					w, err := be.LoadWeight(gguf.TensorInfo{Name: name, Dims: []uint64{Hv}, Type: gguf.F32}, raw)
					if err != nil {
						b.Fatal(err)
					}
					return w
				}
				g := &model.GatedDeltaNet{KeyHeads: Hk, ValueHeads: Hv, KeyDim: dk, ValueDim: dv, Tiled: true, A: mk("A", A), DtBias: mk("dt", randVec(r, Hv, 1))}
				qkv, al, bt := tensorOf(be, n, C, randVec(r, n*C, 1)), tensorOf(be, n, Hv, randVec(r, n*Hv, 1)), tensorOf(be, n, Hv, randVec(r, n*Hv, 1))
				dst := be.NewTensor(n, Hv*dv)
				batch := &model.Batch{Tokens: make([]int32, n), Pos: make([]int32, n), Seqs: []model.SeqSpan{{NewTokens: n}}}
				b.SetBytes(int64(n) * 4 * Hv * dk * dv) // state bytes touched per pass
				b.ResetTimer()
				for range b.N {
					be.gatedDeltaRule(dst, qkv, al, bt, g, 0, batch, p.run)
				}
			})
		}
	}
}
