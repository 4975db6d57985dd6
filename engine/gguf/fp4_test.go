package gguf

import (
	"bytes"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// TestFP4MatchesReference compares NVFP4 and MXFP4 decoding bit for bit with
// gguf-py's dequantize_blocks (scripts/fp4_fixtures.py): every scale byte,
// every code in both nibbles, random blocks.
func TestFP4MatchesReference(t *testing.T) {
	f, err := Open(filepath.Join("testdata", "fp4.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, typ := range []Type{NVFP4, MXFP4} {
		t.Run(typ.String(), func(t *testing.T) {
			ti, ok := f.Tensor(typ.String())
			if !ok || ti.Type != typ {
				t.Fatalf("fixture tensor %s missing or wrong type: %+v", typ, ti)
			}
			if want := ti.Elements() / uint64(typ.BlockElems()) * uint64(typ.BlockBytes()); ti.Bytes() != want {
				t.Fatalf("Bytes() = %d, want %d", ti.Bytes(), want)
			}
			raw, err := f.TensorData(ti)
			if err != nil {
				t.Fatal(err)
			}
			want := readF32File(t, filepath.Join("testdata", "dequant", typ.String()+".f32"))
			checkDequantize(t, typ, raw, want)
		})
	}
}

func TestFP4ScaleTables(t *testing.T) {
	for _, c := range []struct {
		name string
		got  float32
		want float64
	}{
		{"ue4m3 0x00", UE4M3(0x00), 0},
		{"ue4m3 NaN code", UE4M3(0x7F), 0},
		{"ue4m3 smallest subnormal", UE4M3(0x01), 0.5 * 0x1p-9},
		{"ue4m3 1.0", UE4M3(0x38), 0.5},
		{"ue4m3 max 448", UE4M3(0x7E), 224},
		{"ue4m3 bit 7 ignored", UE4M3(0xB8), 0.5},
		{"ue4m3 0xFF", UE4M3(0xFF), 240},
		{"e8m0 0", E8M0Half(0), 0x1p-128},
		{"e8m0 1", E8M0Half(1), 0x1p-127},
		{"e8m0 127", E8M0Half(127), 0.5},
		{"e8m0 255", E8M0Half(255), 0x1p127},
	} {
		if float64(c.got) != c.want {
			t.Errorf("%s: got %g, want %g", c.name, c.got, c.want)
		}
	}
}

func TestFP4Geometry(t *testing.T) {
	for _, c := range []struct {
		typ          Type
		name         string
		elems, bytes int
	}{{NVFP4, "NVFP4", 64, 36}, {MXFP4, "MXFP4", 32, 17}} {
		if c.typ.String() != c.name || c.typ.BlockElems() != c.elems || c.typ.BlockBytes() != c.bytes {
			t.Errorf("%d: %s %d/%d, want %s %d/%d", uint32(c.typ), c.typ, c.typ.BlockElems(), c.typ.BlockBytes(), c.name, c.elems, c.bytes)
		}
		if p, err := ParseType(c.name); err != nil || p != c.typ {
			t.Errorf("ParseType(%q) = %v, %v", c.name, p, err)
		}
	}
	// A corrupt file's dims saturate instead of wrapping.
	ti := TensorInfo{Dims: []uint64{math.MaxUint64 / 64 * 64, 4}, Type: NVFP4}
	if ti.Bytes() != math.MaxUint64 {
		t.Errorf("huge NVFP4 tensor: Bytes() = %d, want saturation", ti.Bytes())
	}
}

// bestFP4Search is ggml's best_index_mxfp4 as written: the first code with
// the smallest |kvalue·d − x|.
func bestFP4Search(x, d float32) byte {
	best, bestErr := 0, abs32(float32(KValuesFP4[0])*d-x)
	for i := 1; i < 16; i++ {
		if e := abs32(float32(KValuesFP4[i])*d - x); e < bestErr {
			best, bestErr = i, e
		}
	}
	return byte(best)
}

// TestBestFP4MatchesSearch: the threshold code choice equals ggml's search
// on random values, exact midpoints and specials, for every scale byte
// whose largest product is finite.
func TestBestFP4MatchesSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for sb := 0; sb < 256; sb++ {
		for _, d := range []float32{UE4M3(byte(sb)), E8M0Half(byte(sb))} {
			if math.IsInf(float64(12*d), 0) {
				continue // E8M0 >= 252: the search's products overflow; no real block gets here
			}
			xs := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
			for _, m := range fp4Mids {
				xs = append(xs, m*d, -m*d, math.Nextafter32(m*d, 0), math.Nextafter32(m*d, 1e38), -math.Nextafter32(m*d, 1e38))
			}
			for range 200 {
				xs = append(xs, float32(r.NormFloat64()*7)*d)
			}
			for _, x := range xs {
				if got, want := bestFP4(x, d), bestFP4Search(x, d); got != want {
					t.Fatalf("scale %g, x %g: code %d, ggml's search %d", d, x, got, want)
				}
			}
		}
	}
}

// TestFP4QuantizeMatchesReference: Quantize reproduces the reference bytes
// of scripts/fp4_fixtures.py (gguf-py's MXFP4.quantize_blocks; ggml's
// NVFP4 reference quantizer in numpy over gguf-py's UE4M3 conversions) on
// data spanning six decades, zeros and exact midpoints.
func TestFP4QuantizeMatchesReference(t *testing.T) {
	f, err := Open(filepath.Join("testdata", "fp4.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, typ := range []Type{NVFP4, MXFP4} {
		ti, ok := f.Tensor(typ.String() + "_Q")
		if !ok {
			t.Fatalf("fixture tensor %s_Q missing", typ)
		}
		want, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		src := readF32File(t, filepath.Join("testdata", "dequant", typ.String()+".src.f32"))
		got, err := Quantize(typ, src)
		if err != nil {
			t.Fatal(err)
		}
		bb := typ.BlockBytes()
		bad := 0
		for b := 0; b < len(want)/bb; b++ {
			if !bytes.Equal(got[b*bb:(b+1)*bb], want[b*bb:(b+1)*bb]) {
				if bad < 3 {
					t.Errorf("%s block %d: got %x, want %x", typ, b, got[b*bb:(b+1)*bb], want[b*bb:(b+1)*bb])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d blocks differ", typ, bad, len(want)/bb)
		}
	}
}
