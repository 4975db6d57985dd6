package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// randFP8B32 returns rows×cols FP8_E4M3_B32 weights: random codes (no NaN
// codes, a quarter of them subnormal or ±0 so those paths are exercised)
// and block scales spread over 2^-40 .. 2^+20, so blocks of one row differ
// in magnitude by up to 2^60 and the small ones only add rounding noise.
func randFP8B32(r *rand.Rand, rows, cols int) []byte {
	raw := make([]byte, rows*cols/32*36)
	for b := 0; b < len(raw); b += 36 {
		d := float32(math.Ldexp(1+r.Float64(), r.IntN(61)-40))
		binary.LittleEndian.PutUint32(raw[b:], math.Float32bits(d))
		for j := 4; j < 36; j++ {
			c := byte(r.Uint32())
			if r.IntN(4) == 0 {
				c &= 0x87 // exponent 0: subnormal or ±0
			}
			if gguf.E4M3IsNaN(c) {
				c ^= 1
			}
			raw[b+j] = c
		}
	}
	return raw
}

func dequantAll(t *testing.T, typ gguf.Type, raw []byte, n int) []float32 {
	t.Helper()
	v := make([]float32, n)
	if err := gguf.Dequantize(typ, raw, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFP8B32Kernels holds the portable and AVX2 FP8_E4M3_B32 dots to a
// float64 dot of gguf.Dequantize's values (relative to Σ|w·x|: the
// kernels factor each block's scale out, so they round differently), over
// rows of 1 to 67 blocks, and checks a NaN code makes the dot NaN.
func TestFP8B32Kernels(t *testing.T) {
	checkRowKernels(t, gguf.FP8_E4M3_B32, rand.New(rand.NewPCG(8, 44)), func(r *rand.Rand, cols int) []byte { return randFP8B32(r, 1, cols) })
}

// TestFP8B32MatchesF32: an FP8_E4M3_B32 weight through the backend's
// MatMul (1 to 11 activation rows), Embed and MoE against the same weight
// dequantized to F32 through the same backend (what the HF loader used to
// build). Embed is exact (the same decode); the products are within 2e-6
// of Σ|w·x| per output, the MoE outputs within 1e-5 of the largest.
func TestFP8B32MatchesF32(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(9, 11))
	load := func(name string, dims []uint64, raw []byte) (q, f model.Weight, deq []float32) {
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		deq = dequantAll(t, gguf.FP8_E4M3_B32, raw, n)
		var err error
		if q, err = b.LoadWeight(gguf.TensorInfo{Name: name, Dims: dims, Type: gguf.FP8_E4M3_B32}, raw); err != nil {
			t.Fatal(err)
		}
		if f, err = b.LoadWeight(gguf.TensorInfo{Name: name, Dims: dims, Type: gguf.F32}, f32le(deq)); err != nil {
			t.Fatal(err)
		}
		return q, f, deq
	}
	const cols, rows = 160, 40
	qw, fw, deq := load("blk.0.attn_q.weight", []uint64{cols, rows}, randFP8B32(r, rows, cols))
	for _, n := range []int{1, 4, 11} {
		xs := randVec(r, n*cols, 1)
		got, ref := poisoned(b, n, rows), poisoned(b, n, rows)
		b.MatMul(got, tensorOf(b, n, cols, xs), qw)
		b.MatMul(ref, tensorOf(b, n, cols, xs), fw)
		for i := 0; i < n; i++ {
			for o := 0; o < rows; o++ {
				var sc float64
				for c := 0; c < cols; c++ {
					sc += math.Abs(float64(deq[o*cols+c]) * float64(xs[i*cols+c]))
				}
				closeTo(t, fmt.Sprintf("n=%d row %d out %d", n, i, o), got.Data[i*rows+o], float64(ref.Data[i*rows+o]), sc, 2e-6)
			}
		}
	}
	e, ef := poisoned(b, 3, cols), poisoned(b, 3, cols)
	b.Embed(e, qw, []int32{0, 39, 7})
	b.Embed(ef, fw, []int32{0, 39, 7})
	for i, v := range e.Data {
		if math.Float32bits(v) != math.Float32bits(ef.Data[i]) {
			t.Fatalf("embed element %d = %v, F32 %v", i, v, ef.Data[i])
		}
	}

	// MoE: B32 experts (moderate scales, so the SwiGLU stays in range)
	// against their F32 copies, routed by the same F32 router.
	const dim, ff, E, K, n = 64, 96, 6, 2, 9
	moderate := func(rows, cols int) []byte {
		raw := randFP8B32(r, rows, cols)
		for o := 0; o < len(raw); o += 36 {
			binary.LittleEndian.PutUint32(raw[o:], math.Float32bits(float32(math.Ldexp(1+r.Float64(), -r.IntN(6)-9))))
		}
		return raw
	}
	router, err := b.LoadWeight(gguf.TensorInfo{Name: "router", Dims: []uint64{dim, E}, Type: gguf.F32}, f32le(randVec(r, E*dim, 0.5)))
	if err != nil {
		t.Fatal(err)
	}
	gq, gf, _ := load("gate", []uint64{dim, ff, E}, moderate(E*ff, dim))
	uq, uf, _ := load("up", []uint64{dim, ff, E}, moderate(E*ff, dim))
	dq, df, _ := load("down", []uint64{ff, dim, E}, moderate(E*dim, ff))
	xd := randVec(r, n*dim, 1)
	got, ref := poisoned(b, n, dim), poisoned(b, n, dim)
	b.MoE(got, tensorOf(b, n, dim, xd), &model.MoE{Router: router, Gate: gq, Up: uq, Down: dq, Experts: E, TopK: K, NormTopK: true})
	b.MoE(ref, tensorOf(b, n, dim, xd), &model.MoE{Router: router, Gate: gf, Up: uf, Down: df, Experts: E, TopK: K, NormTopK: true})
	var mx float64
	for _, v := range ref.Data {
		mx = math.Max(mx, math.Abs(float64(v)))
	}
	if mx == 0 {
		t.Fatal("MoE reference is all zero")
	}
	for i, v := range got.Data {
		closeTo(t, fmt.Sprintf("MoE element %d", i), v, float64(ref.Data[i]), mx, 1e-5)
	}
}

func f32le(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
