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
		}
	}
	if !hasAVX2 {
		t.Log("no AVX2+FMA on this CPU: only the portable kernels ran")
	}
}
