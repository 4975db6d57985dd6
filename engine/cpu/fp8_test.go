package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// randFP8 returns random E4M3 codes without the NaN codes 0x7F and 0xFF
// (the HF loader refuses them), so every dot is finite.
func randFP8(r *rand.Rand, n int) []byte {
	raw := make([]byte, n)
	for i := range raw {
		c := byte(r.Uint32())
		if gguf.E4M3IsNaN(c) {
			c ^= 1
		}
		raw[i] = c
	}
	return raw
}

// TestFP8Kernels holds the portable and AVX2 FP8_E4M3 dots to a float64
// dot of gguf.Dequantize's values, over rows of 1 to 67 blocks, and checks
// a NaN code makes the dot NaN on both.
func TestFP8Kernels(t *testing.T) {
	checkRowKernels(t, gguf.FP8_E4M3, rand.New(rand.NewPCG(8, 43)), func(r *rand.Rand, cols int) []byte { return randFP8(r, cols) })
}

// checkRowKernels holds typ's portable and fast row kernels to a float64
// dot of gguf.Dequantize's values of gen's rows (relative to Σ|w·x|, 2e-6)
// over rows of 1 to 67 32-element blocks, and checks that a NaN code in
// the last byte makes the dot NaN.
func checkRowKernels(t *testing.T, typ gguf.Type, r *rand.Rand, gen func(r *rand.Rand, cols int) []byte) {
	t.Helper()
	impls := map[string]rowKernel{"go": kernels[typ]}
	if k, ok := fastKernels[typ]; ok {
		impls["avx2"] = k
	}
	for _, nb := range []int{1, 2, 3, 8, 67} {
		cols := nb * 32
		raw := gen(r, cols)
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
			closeTo(t, fmt.Sprintf("%s/%d blocks", name, nb), k(raw, x, nil), want, scale, 2e-6)
			nan := append([]byte(nil), raw...)
			nan[len(nan)-1] = 0xFF
			if v := k(nan, x, nil); !math.IsNaN(float64(v)) {
				t.Errorf("%s/%d blocks: NaN code gave %v", name, nb, v)
			}
		}
	}
	if !hasAVX2 {
		t.Log("no AVX2+FMA on this CPU: only the portable kernel ran")
	}
}

// TestFP8ScaledMatMul: an FP8_E4M3 weight with a per-tensor scale through
// the backend (MatMul, Embed) against dequantize-then-float products.
func TestFP8ScaledMatMul(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(9, 10))
	const cols, rows, n = 96, 40, 5
	raw := randFP8(r, rows*cols)
	info := gguf.TensorInfo{Name: "blk.0.attn_q.weight", Dims: []uint64{cols, rows}, Type: gguf.FP8_E4M3}
	const s = 0.0175
	w, err := b.LoadScaledWeight(info, raw, []float32{s})
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, rows*cols)
	if err := gguf.Dequantize(gguf.FP8_E4M3, raw, deq); err != nil {
		t.Fatal(err)
	}
	xs := randVec(r, n*cols, 1)
	got := poisoned(b, n, rows)
	b.MatMul(got, tensorOf(b, n, cols, xs), w)
	for i := 0; i < n; i++ {
		for o := 0; o < rows; o++ {
			var want, sc float64
			for c := 0; c < cols; c++ {
				p := float64(deq[o*cols+c]) * float64(xs[i*cols+c])
				want += p
				sc += math.Abs(p)
			}
			closeTo(t, fmt.Sprintf("row %d out %d", i, o), got.Data[i*rows+o], want*s, sc*s, 2e-6)
		}
	}
	e := poisoned(b, 2, cols)
	b.Embed(e, w, []int32{3, 39})
	for k, tok := range []int{3, 39} {
		for c := 0; c < cols; c++ {
			if want := deq[tok*cols+c] * s; e.Data[k*cols+c] != want {
				t.Fatalf("embed row %d col %d = %v, want %v", tok, c, e.Data[k*cols+c], want)
			}
		}
	}
}
