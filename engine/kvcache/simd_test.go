package kvcache

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The SIMD kernels against the plain Go loops, for every length 0..67 (the
// assembly takes multiples of 8, Go the tail), on random data with the
// destination poisoned first.
func TestSIMDKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 68; n++ {
		a, b := make([]float32, n), make([]float32, n)
		codes16, codes8 := make([]byte, 2*n), make([]byte, n)
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			codes8[i] = byte(rng.IntN(256))
		}
		for i := range codes16 {
			codes16[i] = byte(rng.IntN(256))
		}
		poisoned := func() []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(math.NaN())
			}
			return x
		}
		got, want := poisoned(), poisoned()
		decodeBF16(got, codes16)
		decodeBF16Go(want, codes16)
		sameBits(t, "decodeBF16", n, got, want)
		for _, lut := range []*[256]float32{&e4m3Table, &e5m2Table} {
			got, want := poisoned(), poisoned()
			decodeLUTGo(want, codes8, lut)
			decodeFP8(got, codes8, lut == &e4m3Table)
			sameBits(t, "decodeFP8", n, got, want)
		}
		// dot and axpy change the rounding (8 lanes, fused multiply-add):
		// compare with float64 at float32 tolerance.
		var ref float64
		var mag float64
		for i := range a {
			ref += float64(a[i]) * float64(b[i])
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if d := math.Abs(float64(dot(a, b)) - ref); d > 1e-6*mag+1e-30 {
			t.Errorf("dot, n=%d: %v, want %v", n, dot(a, b), ref)
		}
		y, yref := append([]float32(nil), b...), make([]float64, n)
		for i := range yref {
			yref[i] = float64(b[i]) + 0.37*float64(a[i])
		}
		axpy(y, a, 0.37)
		for i := range y {
			if d := math.Abs(float64(y[i]) - yref[i]); d > 1e-6*(math.Abs(yref[i])+1) {
				t.Errorf("axpy, n=%d, [%d]: %v, want %v", n, i, y[i], yref[i])
			}
		}
	}
}

// Every code of both formats, specials included, through the bit-placement
// decoder: bit-identical to the tables.
func TestDecodeFP8AllCodes(t *testing.T) {
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, e4m3 := range []bool{true, false} {
		lut := &e5m2Table
		if e4m3 {
			lut = &e4m3Table
		}
		got := make([]float32, 256)
		decodeFP8(got, codes, e4m3)
		sameBits(t, "decodeFP8 all codes", 256, got, lut[:])
	}
}

func sameBits(t *testing.T, what string, n int, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s, n=%d, [%d]: %v, want %v", what, n, i, got[i], want[i])
		}
	}
}

func BenchmarkAttendDecode4K(b *testing.B) {
	for _, dt := range []DType{BF16, FP8E4M3} {
		b.Run(dt.String(), func(b *testing.B) {
			l := Layout{Layers: 1, KVHeads: 3, HeadDim: 64, PageSize: 64, Pages: 64, DType: dt}
			s, err := NewHostStore(l)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			k, v := make([]float32, 3*64), make([]float32, 3*64)
			pages := make([]int32, 64)
			for p := range pages {
				pages[p] = int32(p)
				for slot := range 64 {
					for i := range k {
						k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
					}
					s.WriteRow(0, p, slot, k, v)
				}
			}
			q, out := make([]float32, 9*64), make([]float32, 9*64)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			b.ResetTimer()
			for range b.N {
				s.Attend(out, q, 0, pages, 4096, 9, 0.125)
			}
		})
	}
}

// BenchmarkDecodeFP8 decodes 4096 E4M3 codes of one kind: normal codes,
// subnormal ones (exponent field 0; these once fed float32 subnormals to
// a multiply, ~16x slower on Intel) and a random mix.
func BenchmarkDecodeFP8(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kind := range []string{"normal", "subnormal", "mixed"} {
		b.Run(kind, func(b *testing.B) {
			src, dst := make([]byte, 4096), make([]float32, 4096)
			for i := range src {
				switch kind {
				case "normal":
					src[i] = byte(0x08+rng.IntN(0x70)) | byte(rng.IntN(2))<<7
				case "subnormal":
					src[i] = byte(rng.IntN(8)) | byte(rng.IntN(2))<<7
				default:
					src[i] = byte(rng.IntN(256))
				}
			}
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				decodeFP8(dst, src, true)
			}
		})
	}
}
