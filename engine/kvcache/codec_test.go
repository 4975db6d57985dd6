package kvcache

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func readFixture(t *testing.T, name string, size int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("%v (regenerate with python3 scripts/kv_fp8_fixtures.py)", err)
	}
	if size > 0 && len(b) != size {
		t.Fatalf("%s: %d bytes, want %d", name, len(b), size)
	}
	return b
}

type fp8Codec struct {
	name    string
	enc     func(float32) uint8
	dec     func(uint8) float32
	max     float32
	maxCode uint8
}

var fp8Codecs = []fp8Codec{
	{"e4m3", EncodeE4M3, DecodeE4M3, E4M3Max, 0x7e},
	{"e5m2", EncodeE5M2, DecodeE5M2, E5M2Max, 0x7b},
}

func sameFloat(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b) // distinguishes -0
}

// All 256 codes decode to the ml_dtypes value.
func TestFP8DecodeAllCodes(t *testing.T) {
	for _, c := range fp8Codecs {
		t.Run(c.name, func(t *testing.T) {
			b := readFixture(t, c.name+"_decode.bin", 1024)
			for code := range 256 {
				want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*code:]))
				if got := c.dec(uint8(code)); !sameFloat(got, want) {
					t.Errorf("decode 0x%02x = %v, want %v", code, got, want)
				}
			}
		})
	}
}

// Encoding every float16 value (as float32) gives the ml_dtypes code
// (with the contract's saturation and NaN rules applied by the script).
func TestFP8EncodeAllF16(t *testing.T) {
	for _, c := range fp8Codecs {
		t.Run(c.name, func(t *testing.T) {
			want := readFixture(t, c.name+"_from_f16.bin", 65536)
			bad := 0
			for h := range 65536 {
				x := DecodeF16(uint16(h))
				if got := c.enc(x); got != want[h] {
					if bad++; bad <= 10 {
						t.Errorf("encode(%g [f16 0x%04x]) = 0x%02x, want 0x%02x", x, h, got, want[h])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of 65536 wrong", bad)
			}
		})
	}
}

// For arbitrary float32 inputs, the code is the nearest representable value
// (ties to the even code), found by brute force over the decode table in
// float64 — an oracle independent of the bit-twiddling encoder.
func TestFP8EncodeNearestRandomF32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range fp8Codecs {
		t.Run(c.name, func(t *testing.T) {
			for i := range 100000 {
				var x float32
				if i%2 == 0 {
					x = math.Float32frombits(r.Uint32())
				} else { // concentrate on the format's range
					x = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(40)-24))
				}
				if x != x {
					continue
				}
				want := nearestFP8(c, x)
				if got := c.enc(x); got != want {
					t.Fatalf("encode(%g) = 0x%02x (%g), want 0x%02x (%g)", x, got, c.dec(got), want, c.dec(want))
				}
			}
		})
	}
}

func nearestFP8(c fp8Codec, x float32) uint8 {
	if x >= c.max {
		return c.maxCode
	}
	if x <= -c.max {
		return 0x80 | c.maxCode
	}
	best, bestErr := -1, math.Inf(1)
	for code := range 256 {
		v := float64(c.dec(uint8(code)))
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Signbit(v) != math.Signbit(float64(x)) {
			continue
		}
		e := math.Abs(v - float64(x))
		if e < bestErr || e == bestErr && code&1 == 0 {
			best, bestErr = code, e
		}
	}
	return uint8(best)
}

func TestFP8Specials(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, c := range fp8Codecs {
		cases := []struct {
			x    float32
			want uint8
		}{
			{0, 0}, {float32(math.Copysign(0, -1)), 0x80},
			{inf, c.maxCode}, {-inf, 0x80 | c.maxCode},
			{math.MaxFloat32, c.maxCode}, {c.max * 1.03, c.maxCode}, {-c.max * 1.5, 0x80 | c.maxCode},
			{nan, 0x7f},
			{1, map[string]uint8{"e4m3": 0x38, "e5m2": 0x3c}[c.name]},
		}
		for _, tc := range cases {
			if got := c.enc(tc.x); got != tc.want {
				t.Errorf("%s encode(%g) = 0x%02x, want 0x%02x", c.name, tc.x, got, tc.want)
			}
		}
		if v := c.dec(0x7f); v == v {
			t.Errorf("%s decode(0x7f) = %v, want NaN", c.name, v)
		}
	}
}

func test16(t *testing.T, name string, enc func(float32) uint16, dec func(uint16) float32) {
	b := readFixture(t, name, 0)
	if len(b)%6 != 0 || len(b) == 0 {
		t.Fatalf("%s: bad size %d", name, len(b))
	}
	for i := 0; i < len(b); i += 6 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		want := binary.LittleEndian.Uint16(b[i+4:])
		got := enc(x)
		if x != x {
			if d := dec(got); d == d {
				t.Errorf("encode(NaN 0x%08x) = 0x%04x, not a NaN", math.Float32bits(x), got)
			}
			continue
		}
		if got != want {
			t.Errorf("encode(%g [0x%08x]) = 0x%04x, want 0x%04x", x, math.Float32bits(x), got, want)
		}
	}
}

func TestBF16EncodeFixture(t *testing.T) { test16(t, "bf16_cases.bin", EncodeBF16, DecodeBF16) }
func TestF16EncodeFixture(t *testing.T)  { test16(t, "f16_cases.bin", EncodeF16, DecodeF16) }

// Every 16-bit code survives decode then encode (non-NaN), for both formats.
func TestRoundTrip16(t *testing.T) {
	for c := range 1 << 16 {
		for _, f := range []struct {
			name string
			enc  func(float32) uint16
			dec  func(uint16) float32
		}{{"bf16", EncodeBF16, DecodeBF16}, {"f16", EncodeF16, DecodeF16}} {
			x := f.dec(uint16(c))
			if x != x {
				continue
			}
			if got := f.enc(x); got != uint16(c) {
				t.Fatalf("%s: 0x%04x -> %g -> 0x%04x", f.name, c, x, got)
			}
		}
	}
}

func TestParseDType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DType
	}{
		{"auto", Auto}, {"bf16", BF16}, {"BF16", BF16}, {"bfloat16", BF16}, {"fp16", F16}, {"f16", F16},
		{"fp8_e4m3", FP8E4M3}, {" fp8 ", FP8E4M3}, {"e4m3", FP8E4M3}, {"fp8_e5m2", FP8E5M2}, {"e5m2", FP8E5M2},
	} {
		got, err := ParseDType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for d := Auto; d <= FP8E5M2; d++ {
		if got, err := ParseDType(d.String()); err != nil || got != d {
			t.Errorf("round trip %v: %v %v", d, got, err)
		}
	}
	_, err := ParseDType("int4")
	if err == nil || !contains(err.Error(), `"int4"`) || !contains(err.Error(), "fp8_e4m3") {
		t.Errorf("ParseDType(int4) error = %v; want it to name the value and list supported ones", err)
	}
	if BF16.ElemBytes() != 2 || F16.ElemBytes() != 2 || FP8E4M3.ElemBytes() != 1 || FP8E5M2.ElemBytes() != 1 {
		t.Error("ElemBytes")
	}
	if BF16.IsFP8() || !FP8E5M2.IsFP8() || !FP8E4M3.IsFP8() || Auto.IsFP8() {
		t.Error("IsFP8")
	}
	if Auto.Resolve(F16) != F16 || Auto.Resolve(BF16) != BF16 || FP8E4M3.Resolve(F16) != FP8E4M3 {
		t.Error("Resolve")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
