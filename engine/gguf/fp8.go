package gguf

import (
	"encoding/binary"
	"math"
)

// FP8_E4M3 blocks are 32 E4M3 codes (OCP float8 e4m3fn: 1 sign, 4
// exponent bits of bias 7, 3 mantissa bits; no infinities, 0x7F and 0xFF
// are NaN, the largest finite magnitude is 448). The value is built from
// the code's bits: a normal code moves its exponent and mantissa fields
// into float32 position with the bias raised from 7 to 127, a subnormal
// one (exponent 0) is its mantissa times 2^-9, both exact in float32.

// E4M3IsNaN reports whether c is one of E4M3's two NaN codes (0x7F, 0xFF).
func E4M3IsNaN(c byte) bool { return c&0x7F == 0x7F }

// E4M3 returns the float32 value of an FP8 E4M3 code.
func E4M3(c byte) float32 { return e4m3Tab[c] }

// E4M3Table exposes the decode table to kernels that index it directly.
func E4M3Table() *[256]float32 { return &e4m3Tab }

var e4m3Tab = func() (t [256]float32) {
	for i := range t {
		c := uint32(i)
		mag := c & 0x7F
		var bits uint32
		switch {
		case E4M3IsNaN(byte(c)):
			bits = 0x7FC00000
		case mag >= 8: // exponent field >= 1
			bits = (mag<<20 + 120<<23)
		default:
			bits = math.Float32bits(float32(mag) / 512)
		}
		t[i] = math.Float32frombits(bits | (c&0x80)<<24)
	}
	return t
}()

func dequantFP8E4M3(b []byte, y []float32) {
	b, y = b[:32], y[:32]
	for j, c := range b {
		y[j] = e4m3Tab[c]
	}
}

// ToE4M3 returns the E4M3 code nearest x (ties to even), saturating
// finite values and infinities beyond ±448 to ±448; NaN gives 0x7F.
func ToE4M3(x float32) byte {
	b := math.Float32bits(x)
	sign := byte(b>>24) & 0x80
	a := b & 0x7FFFFFFF
	switch {
	case a > 0x7F800000:
		return 0x7F
	case a >= 0x43E00000: // 448 and beyond
		return sign | 0x7E
	case a < 0x3C800000: // below 2^-6: subnormal, steps of 2^-9
		return sign | byte(math.RoundToEven(float64(math.Float32frombits(a))*512))
	}
	// Round the mantissa to 3 bits (ties to even); a carry moves into the
	// exponent, which is what rounding up to the next binade means.
	r := (a + 0x7FFFF + (a>>20)&1) >> 20
	if m := r - 120<<3; m <= 0x7E {
		return sign | byte(m)
	}
	return sign | 0x7E
}

// quantFP8E4M3 stores each element's nearest code (no block scale: the
// caller scales the tensor first, as an FP8 checkpoint's weight_scale).
func quantFP8E4M3(x []float32, b []byte) {
	for j, v := range x[:32] {
		b[j] = ToE4M3(v)
	}
}

// FP8_E4M3_B32 blocks hold a little-endian float32 scale and then 32 E4M3
// codes (36 bytes); element j is E4M3(code j) × scale, one float32
// rounding, as the dequantizing loader computes it. It keeps Hugging Face
// FP8 weights with per-row scales or block scales (weight_scale_inv of
// 128x128 blocks, DeepSeek/Qwen FP8) 8-bit in memory: the loader copies
// the scale of each row or block into every 32-element block it covers.
//
// Why a self-contained block rather than the codes plus a separate grid of
// scales: every matmul, MoE and embedding path of both backends (the CPU
// row kernels, the GPU's deq32 templates, host-resident experts) reads a
// weight as independent 32-element units, so a unit that carries its own
// scale works in all of them without a second operand. The cost is 1.125
// B/weight instead of about 1.0, and a repack at load (the codes no longer
// alias the mapped shard). The scale stays float32 because checkpoints
// store arbitrary float32 values (amax/448); any narrower form would round
// them. 32-element blocks (not 128) accept every row of whole 32-element
// units, as FP8_E4M3 does.

func dequantFP8E4M3B32(b []byte, y []float32) {
	b, y = b[:36], y[:32]
	d := math.Float32frombits(binary.LittleEndian.Uint32(b))
	for j, c := range b[4:] {
		y[j] = e4m3Tab[c] * d
	}
}

// quantFP8E4M3B32 scales the block so that its largest magnitude becomes
// 448 (all-zero blocks get scale 0) and stores each element's nearest code.
func quantFP8E4M3B32(x []float32, b []byte) {
	x, b = x[:32], b[:36]
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 448
	binary.LittleEndian.PutUint32(b, math.Float32bits(d))
	for j, v := range x {
		if d == 0 {
			b[4+j] = 0
			continue
		}
		b[4+j] = ToE4M3(v / d)
	}
}

func init() {
	blockDecoders[FP8_E4M3] = dequantFP8E4M3
	blockEncoders[FP8_E4M3] = quantFP8E4M3
	blockDecoders[FP8_E4M3_B32] = dequantFP8E4M3B32
	blockEncoders[FP8_E4M3_B32] = quantFP8E4M3B32
}
