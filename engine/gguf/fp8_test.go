package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
)

// TestE4M3MatchesMLDtypes checks every E4M3 code against ml_dtypes'
// float8_e4m3fn (engine/kvcache/testdata/e4m3_decode.bin, written by
// scripts/kv_fp8_fixtures.py): bit for bit, NaN for NaN.
func TestE4M3MatchesMLDtypes(t *testing.T) {
	b, err := os.ReadFile("../kvcache/testdata/e4m3_decode.bin")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 256*4 {
		t.Fatalf("fixture has %d bytes, want 1024", len(b))
	}
	for c := 0; c < 256; c++ {
		want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*c:]))
		got := E4M3(byte(c))
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(got)) {
				t.Errorf("code %#02x: got %v, want NaN", c, got)
			}
			continue
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("code %#02x: got %v (%#08x), want %v (%#08x)", c, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// TestE4M3Landmarks states the format's edges independently of any table.
func TestE4M3Landmarks(t *testing.T) {
	for _, tc := range []struct {
		code byte
		want float64
	}{
		{0x00, 0}, {0x01, 0x1p-9}, {0x07, 7 * 0x1p-9}, {0x08, 0x1p-6}, {0x38, 1}, {0x3c, 1.5},
		{0x7e, 448}, {0xfe, -448}, {0xb8, -1}, {0x81, -0x1p-9},
	} {
		if got := E4M3(tc.code); float64(got) != tc.want {
			t.Errorf("code %#02x = %v, want %v", tc.code, got, tc.want)
		}
	}
	if !math.Signbit(float64(E4M3(0x80))) || E4M3(0x80) != 0 {
		t.Errorf("code 0x80 = %v, want -0", E4M3(0x80))
	}
	for _, c := range []byte{0x7f, 0xff} {
		if !math.IsNaN(float64(E4M3(c))) {
			t.Errorf("code %#02x = %v, want NaN", c, E4M3(c))
		}
	}
}

func TestDequantizeFP8E4M3(t *testing.T) {
	raw := make([]byte, 64)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	got := make([]float32, 64)
	if err := Dequantize(FP8_E4M3, raw, got); err != nil {
		t.Fatal(err)
	}
	for i, c := range raw {
		w := E4M3(c)
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("element %d: %v, want %v", i, got[i], w)
		}
	}
	if FP8_E4M3.RowSize(64) != 64 || !FP8_E4M3.Internal() || NVFP4.Internal() {
		t.Fatalf("FP8_E4M3 geometry/internal flags wrong")
	}
}

// TestInternalTypeRefused: GGUF files cannot name the internal FP8 types
// (read or write), nor can --type.
func TestInternalTypeRefused(t *testing.T) {
	for _, typ := range []Type{FP8_E4M3, FP8_E4M3_B32} {
		t.Run(typ.String(), func(t *testing.T) {
			if !typ.Internal() {
				t.Fatal("not Internal")
			}
			if _, err := ParseType(typ.String()); err == nil {
				t.Error("ParseType accepted the internal type")
			}
			infos := []TensorInfo{{Name: "w", Dims: []uint64{32, 1}, Type: typ}}
			if _, err := NewWriter(&bytes.Buffer{}, nil, infos); err == nil || !strings.Contains(err.Error(), "in-memory type") {
				t.Fatalf("writer: err = %v", err)
			}
			// A file written with a Q8_0 tensor, then patched to claim the id.
			var buf bytes.Buffer
			gw, err := NewWriter(&buf, nil, []TensorInfo{{Name: "w", Dims: []uint64{32, 1}, Type: Q8_0}})
			if err != nil {
				t.Fatal(err)
			}
			if err := gw.WriteTensor(make([]byte, 34)); err != nil {
				t.Fatal(err)
			}
			if err := gw.Close(); err != nil {
				t.Fatal(err)
			}
			b := buf.Bytes()
			// The tensor info: name (u64 len + "w"), nd u32, dims 2×u64, then the type u32.
			i := bytes.Index(b, []byte{1, 0, 0, 0, 0, 0, 0, 0, 'w'})
			if i < 0 {
				t.Fatal("tensor info not found")
			}
			at := i + 9 + 4 + 16
			if binary.LittleEndian.Uint32(b[at:]) != uint32(Q8_0) {
				t.Fatalf("type field not at %d", at)
			}
			binary.LittleEndian.PutUint32(b[at:], uint32(typ))
			_, err = OpenBytes("x.gguf", b)
			if err == nil || !strings.Contains(err.Error(), "not a GGUF type") {
				t.Fatalf("Open: err = %v", err)
			}
		})
	}
}

// TestDequantizeFP8E4M3B32: each element is its code's value times the
// block's float32 scale (one rounding), over scales of very different
// magnitudes (a subnormal product included), every code (subnormal codes,
// -0 and the NaN codes among them) and the all-zero block.
func TestDequantizeFP8E4M3B32(t *testing.T) {
	if FP8_E4M3_B32.RowSize(64) != 72 || FP8_E4M3_B32.BlockElems() != 32 || FP8_E4M3_B32.String() != "FP8_E4M3_B32" {
		t.Fatalf("geometry: RowSize(64) %d, block %d, name %s", FP8_E4M3_B32.RowSize(64), FP8_E4M3_B32.BlockElems(), FP8_E4M3_B32)
	}
	scales := []float32{1, 0.0175, 3.5e-7, 0x1p-130, 2.25e4, -0.5, 0}
	raw := make([]byte, 8*36*len(scales))
	for k, d := range scales {
		for b := 0; b < 8; b++ { // 8 blocks of 32: all 256 codes
			blk := raw[(k*8+b)*36:]
			binary.LittleEndian.PutUint32(blk, math.Float32bits(d))
			for j := 0; j < 32; j++ {
				blk[4+j] = byte(32*b + j)
			}
		}
	}
	got := make([]float32, 8*32*len(scales))
	if err := Dequantize(FP8_E4M3_B32, raw, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		d := scales[i/256]
		c := byte(i % 256)
		want := E4M3(c) * d
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("scale %v code %#02x: %v, want NaN", d, c, v)
			}
			continue
		}
		if math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("scale %v code %#02x: %v (%#08x), want %v (%#08x)", d, c, v, math.Float32bits(v), want, math.Float32bits(want))
		}
	}
	if v := got[0x80]; v != 0 || !math.Signbit(float64(v)) {
		t.Errorf("code 0x80 at scale 1 = %v, want -0", v)
	}
}

// TestQuantizeFP8E4M3B32: the encoder maps each block's largest magnitude
// to ±448 and every element to within half an E4M3 step (2^-4 relative for
// normals, 2^-10 of the block maximum for subnormal codes); zero blocks
// decode to zero.
func TestQuantizeFP8E4M3B32(t *testing.T) {
	x := make([]float32, 4*32)
	for i := range x {
		e := float64(i%7) - 3
		x[i] = float32(math.Pow(10, e) * (1 + float64(i%13)/13) * float64(1-2*(i%2)))
	}
	for i := 32; i < 64; i++ {
		x[i] = 0
	}
	raw, err := Quantize(FP8_E4M3_B32, x)
	if err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(FP8_E4M3_B32, raw, y); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 4; b++ {
		var amax float64
		for _, v := range x[32*b : 32*b+32] {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		for i := 32 * b; i < 32*b+32; i++ {
			tol := math.Max(math.Abs(float64(x[i]))/16, amax/448*0x1p-10)*1.0001 + 1e-30
			if d := math.Abs(float64(y[i]) - float64(x[i])); d > tol {
				t.Errorf("element %d: %v -> %v (|Δ| %.3g > %.3g)", i, x[i], y[i], d, tol)
			}
		}
	}
}

// TestToE4M3 checks the encoder against the nearest code by search: every
// float16 bit pattern as input (ties to the even code), saturation and NaN.
func TestToE4M3(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		x := F16ToF32(uint16(h))
		got := ToE4M3(x)
		if math.IsNaN(float64(x)) {
			if got != 0x7F {
				t.Fatalf("NaN -> %#02x", got)
			}
			continue
		}
		want, best := byte(0), math.Inf(1)
		for c := 0; c < 256; c++ {
			v := float64(E4M3(byte(c)))
			if math.IsNaN(v) || math.Signbit(v) != math.Signbit(float64(x)) {
				continue
			}
			d := math.Abs(v - float64(x))
			if d < best || d == best && c&1 == 0 {
				want, best = byte(c), d
			}
		}
		if got != want {
			t.Fatalf("ToE4M3(%v) = %#02x (%v), want %#02x (%v)", x, got, E4M3(got), want, E4M3(want))
		}
	}
}
