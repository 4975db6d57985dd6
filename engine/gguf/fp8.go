package gguf

import "math"

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

func init() {
	blockDecoders[FP8_E4M3] = dequantFP8E4M3
	blockEncoders[FP8_E4M3] = quantFP8E4M3
}
