package gguf

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randomBlocks returns n normal values whose 32-element blocks have scales
// spread over four decades, with an all-zero block and a constant block.
func randomBlocks(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for b := 0; b < n/32; b++ {
		s := math.Pow(10, rng.Float64()*4-3)
		for i := 32 * b; i < 32*b+32; i++ {
			x[i] = float32(rng.NormFloat64() * s)
		}
	}
	clear(x[0:32])
	for i := 32; i < 64; i++ {
		x[i] = 0.75
	}
	return x
}

// TestQuantizeErrorBounds checks Dequantize(Quantize(x)) against x. Bounds
// are on the absolute error relative to the largest magnitude in the block
// (32 elements) or super-block (256), derived from each format's step size:
// half a step plus fp16 rounding of the scales, plus the one-step clip at
// the positive end of the symmetric legacy formats.
func TestQuantizeErrorBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := randomBlocks(rng, 64*256)
	cases := []struct {
		typ    Type
		span   int     // elements the bound is relative to
		maxRel float64 // max |err| / max|x| over the span
		rmsRel float64 // overall rms(err)/rms(x), a quality check
		abs    float64 // absolute slack: half of F16's smallest subnormal
	}{
		{F32, 1, 0, 0, 0},
		{F16, 1, 1.0 / 2048, 1e-3, 0x1p-25},
		{BF16, 1, 1.0 / 256, 4e-3, 0},
		{Q8_0, 32, 1.0/254 + 1.0/1024, 0.01, 0},
		{Q4_0, 32, 1.0/8 + 1.0/128, 0.1, 0},
		{Q4_1, 32, 1.0/15 + 1.0/256, 0.1, 0},
		{Q5_0, 32, 1.0/16 + 1.0/256, 0.05, 0},
		{Q5_1, 32, 1.0/31 + 1.0/256, 0.05, 0},
		{Q4_K, 256, 0.075, 0.15, 0},
		{Q5_K, 256, 0.036, 0.08, 0},
		{Q6_K, 256, 0.018, 0.04, 0},
	}
	for _, c := range cases {
		t.Run(c.typ.String(), func(t *testing.T) {
			raw, err := Quantize(c.typ, x)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) != len(x)/c.typ.BlockElems()*c.typ.BlockBytes() {
				t.Fatalf("encoded size %d", len(raw))
			}
			y := poisoned(len(x))
			if err := Dequantize(c.typ, raw, y); err != nil {
				t.Fatal(err)
			}
			var se, sx, worst float64
			for s := 0; s < len(x); s += c.span {
				var amax float64
				for _, v := range x[s : s+c.span] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for i := s; i < s+c.span; i++ {
					e := math.Abs(float64(y[i]) - float64(x[i]))
					if !(e <= c.maxRel*amax+c.abs) { // also catches NaN
						t.Fatalf("element %d: x=%v y=%v err %.3g > %.3g * amax %.3g", i, x[i], y[i], e, c.maxRel, amax)
					}
					if amax > 0 {
						worst = max(worst, e/amax)
					}
					se += e * e
					sx += float64(x[i]) * float64(x[i])
				}
			}
			rms := math.Sqrt(se / sx)
			if rms > c.rmsRel {
				t.Errorf("rms relative error %.4f > %.4f", rms, c.rmsRel)
			}
			t.Logf("max err/amax %.4f, rms rel %.5f", worst, rms)
			for i := 0; i < 32; i++ { // the zero block stays exactly zero
				if y[i] != 0 {
					t.Fatalf("zero block element %d decoded as %v", i, y[i])
				}
			}
		})
	}
}

func TestQuantizeErrors(t *testing.T) {
	if _, err := Quantize(Q4_K, make([]float32, 32)); err == nil {
		t.Error("32 elements accepted for Q4_K")
	}
	if _, err := Quantize(Q2_K, make([]float32, 256)); err == nil {
		t.Error("Q2_K quantization claimed")
	}
	for _, typ := range []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K} {
		if !QuantizeSupported(typ) || !DequantizeSupported(typ) {
			t.Errorf("%s not reported as supported", typ)
		}
	}
}

func BenchmarkQuantize(b *testing.B) {
	x := randomBlocks(rand.New(rand.NewPCG(1, 2)), 1<<16)
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				if _, err := Quantize(typ, x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDequantize(b *testing.B) {
	x := randomBlocks(rand.New(rand.NewPCG(1, 2)), 1<<16)
	y := make([]float32, len(x))
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q6_K} {
		raw, _ := Quantize(typ, x)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				if err := Dequantize(typ, raw, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestRowSize(t *testing.T) {
	for _, c := range []struct {
		typ  Type
		n    int
		want int
	}{{F32, 3, 12}, {F16, 4, 8}, {Q8_0, 64, 68}, {Q4_K, 512, 288}, {Q6_K, 256, 210}, {Type(99), 32, 0}} {
		if got := c.typ.RowSize(c.n); got != c.want {
			t.Errorf("%s.RowSize(%d) = %d, want %d", c.typ, c.n, got, c.want)
		}
	}
}
