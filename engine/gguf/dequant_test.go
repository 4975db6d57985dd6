package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// fixtureTypes are the tensors of testdata/types.gguf, written and
// dequantized by the gguf Python package (scripts/gguf_fixtures.py).
var fixtureTypes = []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

func readF32File(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func openFixture(t *testing.T) *File {
	t.Helper()
	f, err := Open(filepath.Join("testdata", "types.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// poisoned returns a slice of n NaNs so that unwritten outputs are caught.
func poisoned(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return out
}

// TestDequantizeMatchesReference compares bit for bit (tolerance 0): both
// sides evaluate the same float32 expressions in the same order.
func TestDequantizeMatchesReference(t *testing.T) {
	f := openFixture(t)
	for _, typ := range fixtureTypes {
		t.Run(typ.String(), func(t *testing.T) {
			ti, ok := f.Tensor(typ.String())
			if !ok || ti.Type != typ {
				t.Fatalf("fixture tensor %s missing or wrong type: %+v", typ, ti)
			}
			raw, err := f.TensorData(ti)
			if err != nil {
				t.Fatal(err)
			}
			want := readF32File(t, filepath.Join("testdata", "dequant", typ.String()+".f32"))
			if uint64(len(want)) != ti.Elements() {
				t.Fatalf("expected %d values, tensor has %d", len(want), ti.Elements())
			}
			checkDequantize(t, typ, raw, want)
		})
	}
}

// checkDequantize requires Dequantize of raw, and DequantizeBlock of each
// block into a poisoned scratch (as a matmul kernel would), to give want bit
// for bit.
func checkDequantize(t *testing.T, typ Type, raw []byte, want []float32) {
	t.Helper()
	got := poisoned(len(want))
	if err := Dequantize(typ, raw, got); err != nil {
		t.Fatal(err)
	}
	compareBits(t, got, want)
	be, bb := typ.BlockElems(), typ.BlockBytes()
	scratch := poisoned(be)
	for i := 0; i < len(want)/be; i++ {
		if err := DequantizeBlock(typ, raw[i*bb:], scratch); err != nil {
			t.Fatal(err)
		}
		compareBits(t, scratch, want[i*be:(i+1)*be])
		if t.Failed() {
			t.Fatalf("block %d differs", i)
		}
	}
}

func compareBits(t *testing.T, got, want []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("element %d: got %v (%#x), want %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d elements differ", bad, len(want))
	}
}

// TestQuantizeLegacyMatchesReference checks that the legacy quantizers (and
// the float conversions) reproduce the reference bytes exactly.
func TestQuantizeLegacyMatchesReference(t *testing.T) {
	f := openFixture(t)
	for _, typ := range []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1} {
		t.Run(typ.String(), func(t *testing.T) {
			src := readF32File(t, filepath.Join("testdata", "dequant", typ.String()+".src.f32"))
			ti, _ := f.Tensor(typ.String())
			want, err := f.TensorData(ti)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Quantize(typ, src)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				bb := typ.BlockBytes()
				for i := 0; i < len(want); i += bb {
					if !bytes.Equal(got[i:i+bb], want[i:i+bb]) {
						t.Fatalf("block %d differs:\n got %x\nwant %x", i/bb, got[i:i+bb], want[i:i+bb])
					}
				}
				t.Fatalf("length %d, want %d", len(got), len(want))
			}
		})
	}
}

func TestDequantizeErrors(t *testing.T) {
	dst := make([]float32, 32)
	if err := Dequantize(Q8_0, make([]byte, 33), dst); err == nil {
		t.Error("short input accepted")
	}
	if err := Dequantize(Q4_K, make([]byte, 144), dst); err == nil {
		t.Error("32 elements accepted for a 256-element block type")
	}
	if err := Dequantize(Q8_K, make([]byte, 292), make([]float32, 256)); err == nil {
		t.Error("Q8_K accepted")
	}
	if err := Dequantize(Type(99), nil, nil); err == nil {
		t.Error("unknown type accepted")
	}
}

func TestF16RoundTrip(t *testing.T) {
	// every half value survives f16 -> f32 -> f16 (NaNs stay NaN)
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if f != f {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#x came back as %#x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#x -> %v -> %#x", h, f, back)
		}
	}
	// rounding: halfway cases go to even, overflow to inf
	cases := []struct {
		in   float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {65520, 0x7c00}, {65519, 0x7bff},
		{-1e-8, 0x8000}, {float32(math.Ldexp(1, -25)), 0}, {float32(math.Ldexp(1.5, -25)), 1},
	}
	for _, c := range cases {
		if got := F32ToF16(c.in); got != c.want {
			t.Errorf("F32ToF16(%v) = %#x, want %#x", c.in, got, c.want)
		}
	}
}
