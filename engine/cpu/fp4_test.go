package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// randFP4 returns random block bytes of an FP4 type: every code and, for
// NVFP4, every UE4M3 scale byte (including the NaN code 0x7F, which ggml
// decodes as 0); MXFP4 scales stay in 2^-20..2^20 so products are finite.
func randFP4(r *rand.Rand, t gguf.Type, nb int) []byte {
	raw := make([]byte, nb*t.BlockBytes())
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	if t == gguf.MXFP4 {
		for b := 0; b < nb; b++ {
			raw[b*17] = byte(128 - 20 + r.IntN(41))
		}
	}
	return raw
}

// TestFP4Kernels holds the AVX2 and portable FP4 dots to a float64 dot of
// gguf.Dequantize's values, over rows of 1 to 67 blocks.
func TestFP4Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 39))
	for _, typ := range []gguf.Type{gguf.NVFP4, gguf.MXFP4} {
		impls := map[string]rowKernel{"go": kernels[typ]}
		if k, ok := fastKernels[typ]; ok {
			impls["avx2"] = k
		}
		for _, nb := range []int{1, 2, 3, 8, 67} {
			cols := nb * typ.BlockElems()
			raw := randFP4(r, typ, nb)
			deq := make([]float32, cols)
			if err := gguf.Dequantize(typ, raw, deq); err != nil {
				t.Fatal(err)
			}
			x := randVec(r, cols, 1)
			var want, scale float64
			for i := range x {
				p := float64(deq[i]) * float64(x[i])
				want += p
				scale += math.Abs(p)
			}
			for name, k := range impls {
				closeTo(t, fmt.Sprintf("%s/%s/%d blocks", typ, name, nb), k(raw, x, nil), want, scale, 2e-6)
			}
			if k4, ok := fastKernels4[typ]; ok {
				// Four rows at a stride longer than the row, this row first.
				stride := cols + 64
				x4 := randVec(r, 4*stride, 1)
				copy(x4, x)
				var out [4]float32
				k4(raw, x4, stride, nil, 0, &out)
				closeTo(t, fmt.Sprintf("%s/x4/%d blocks", typ, nb), out[0], want, scale, 2e-6)
				for row := 1; row < 4; row++ {
					var w, sc float64
					for i := 0; i < cols; i++ {
						p := float64(deq[i]) * float64(x4[row*stride+i])
						w += p
						sc += math.Abs(p)
					}
					closeTo(t, fmt.Sprintf("%s/x4/%d blocks row %d", typ, nb, row), out[row], w, sc, 2e-6)
				}
			}
		}
	}
	if !hasAVX2 {
		t.Log("no AVX2+FMA on this CPU: only the portable kernels ran")
	}
}

// TestScaledWeights checks the second-level scales: a per-tensor scale and
// per-expert scales multiply MatMul's rows (any o0 window, as MoE issues
// them) and Embed's rows; a scale count that does not divide the rows is
// refused.
func TestScaledWeights(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(44, 45))
	const cols, E, ff, n = 128, 4, 8, 3
	rows := E * ff
	raw := randFP4(r, gguf.NVFP4, rows*cols/64)
	info := gguf.TensorInfo{Name: "blk.0.ffn_up_exps.weight", Dims: []uint64{cols, ff, E}, Type: gguf.NVFP4}
	plain, err := b.LoadWeight(info, raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, scale := range [][]float32{{0.375}, {0.5, 2, 1e-3, 3}} {
		sw, err := b.LoadScaledWeight(info, raw, scale)
		if err != nil {
			t.Fatal(err)
		}
		x := tensorOf(b, n, cols, randVec(r, n*cols, 1))
		want, got := poisoned(b, n, rows), poisoned(b, n, rows)
		b.MatMul(want, x, plain)
		b.MatMul(got, x, sw)
		for i := 0; i < n; i++ {
			for o := 0; o < rows; o++ {
				s := scale[o/(rows/len(scale))]
				if w := want.Data[i*rows+o] * s; got.Data[i*rows+o] != w {
					t.Fatalf("scales %v: dst[%d][%d] = %v, want %v", scale, i, o, got.Data[i*rows+o], w)
				}
			}
		}
		// An expert's window (o0 = 2*ff) as MoE computes it.
		part := make([]float32, n*ff)
		b.matmul(part, ff, x.Data, n, wt(sw), 2*ff, ff)
		for i := 0; i < n; i++ {
			for o := 0; o < ff; o++ {
				if part[i*ff+o] != got.Data[i*rows+2*ff+o] {
					t.Fatalf("scales %v: expert window row %d col %d = %v, want %v", scale, i, o, part[i*ff+o], got.Data[i*rows+2*ff+o])
				}
			}
		}
		ew, ep := poisoned(b, 2, cols), poisoned(b, 2, cols)
		b.Embed(ep, plain, []int32{5, 30})
		b.Embed(ew, sw, []int32{5, 30})
		for k, tok := range []int{5, 30} {
			s := scale[tok/(rows/len(scale))]
			for c := 0; c < cols; c++ {
				if ew.Data[k*cols+c] != ep.Data[k*cols+c]*s {
					t.Fatalf("scales %v: embed row %d col %d", scale, tok, c)
				}
			}
		}
	}
	if _, err := b.LoadScaledWeight(info, raw, []float32{1, 2, 3}); err == nil {
		t.Error("3 scales for 32 rows were accepted")
	}
}
