package hfmodel

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// e2m1 is the E2M1 value of a 4-bit code (sign in bit 3), written out from
// the format's definition rather than ggml's doubled table.
var e2m1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}

// TestRepackNVFP4Decodes: random ModelOpt-packed codes and E4M3 block
// scales (every code, sign bits set on scales, subnormal scales) repacked
// to ggml NVFP4 and decoded by gguf.Dequantize give exactly
// e2m1(code) · |e4m3(scale)| for every element, decoded here straight from
// the checkpoint layout (element 2k in the low nibble of byte k). The
// output buffer is NaN-poisoned first.
func TestRepackNVFP4Decodes(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 4))
	for _, sh := range [][2]int{{1, 64}, {3, 128}, {5, 192}} {
		rows, cols := sh[0], sh[1]
		codes := make([]byte, rows*cols/2)
		scales := make([]byte, rows*cols/16)
		for i := range codes {
			codes[i] = byte(r.UintN(256))
		}
		for i := range scales {
			s := byte(r.UintN(0x7F)) // any E4M3 code but NaN
			if r.UintN(4) == 0 {
				s |= 0x80 // a sign bit, which ggml's UE4M3 drops
			}
			scales[i] = s
		}
		blocks, err := repackNVFP4(nil, codes, scales, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) != rows*cols/64*36 {
			t.Fatalf("%dx%d: %d bytes, want %d", rows, cols, len(blocks), rows*cols/64*36)
		}
		got := make([]float32, rows*cols)
		for i := range got {
			got[i] = float32(math.NaN())
		}
		if err := gguf.Dequantize(gguf.NVFP4, blocks, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			c := codes[i/2] >> (4 * (i % 2)) & 0xF
			s := kvcache.DecodeE4M3(scales[i/16] & 0x7F)
			if want := e2m1[c] * s; got[i] != want {
				t.Fatalf("%dx%d: element (%d, %d) = %v, want %v (code %d, scale byte %#x)", rows, cols, i/cols, i%cols, got[i], want, c, scales[i/16])
			}
		}
	}
	if _, err := repackNVFP4(nil, make([]byte, 32), []byte{1, 2, 0xFF, 3}, 1, 64); err == nil || !strings.Contains(err.Error(), "row 0, columns 32..47 is NaN") {
		t.Fatalf("NaN scale: %v", err)
	}
}

// BenchmarkRepackNVFP4 repacks a 2048x2048 weight (one expert of a large MoE).
func BenchmarkRepackNVFP4(b *testing.B) {
	const rows, cols = 2048, 2048
	codes := make([]byte, rows*cols/2)
	scales := make([]byte, rows*cols/16)
	for i := range scales {
		scales[i] = 0x38
	}
	dst := make([]byte, 0, rows*cols/64*36)
	b.SetBytes(int64(len(codes) + len(scales)))
	for b.Loop() {
		if _, err := repackNVFP4(dst[:0], codes, scales, rows, cols); err != nil {
			b.Fatal(err)
		}
	}
}
