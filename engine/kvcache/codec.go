package kvcache

import (
	"math"
	"sync"
)

// Scalar codecs between float32 and the storage formats. All encoders
// round to nearest, ties to even, exactly (integer arithmetic on the
// float32 bits, no intermediate float64 rounding). The CUDA write kernel
// mirrors this algorithm on every architecture so it produces the same
// codes; the special-value rules follow PTX cvt.rn.satfinite.
//
// Special values:
//   - E4M3 (OCP E4M3FN): no infinities. Finite overflow and ±Inf
//     saturate to ±448 (code 0x7e/0xfe). NaN encodes to 0x7f.
//   - E5M2: finite overflow and ±Inf saturate to ±57344 (0x7b/0xfb), the
//     PTX .satfinite behaviour, so a stored code is never infinite.
//     NaN encodes to 0x7f. Decoding 0x7c/0xfc still yields ±Inf.
//   - BF16/F16: IEEE behaviour, overflow rounds to ±Inf, NaN stays NaN
//     (quieted, sign kept).

// roundMinifloat returns the magnitude code (exponent and mantissa fields,
// no sign) of the float32 magnitude with bits abs (sign cleared, finite),
// for a format with mbits mantissa bits and exponent bias; the result may
// exceed the format's largest code, callers clamp. Rounding is RNE.
func roundMinifloat(abs uint32, mbits, bias int) uint32 {
	exp32 := int(abs >> 23)
	if exp32 == 0 {
		// float32 zero or subnormal (< 2^-126): far below half the smallest
		// subnormal of every target format.
		return 0
	}
	e := exp32 - 127
	sig := abs&0x7fffff | 1<<23 // value = sig * 2^(e-23)
	emin := 1 - bias
	shift := 23 - mbits
	normal := e >= emin
	if !normal {
		shift += emin - e
	}
	if shift > 25 {
		return 0 // below half the smallest subnormal
	}
	q := sig >> uint(shift)
	rem := sig & (1<<uint(shift) - 1)
	half := uint32(1) << uint(shift-1)
	if rem > half || rem == half && q&1 == 1 {
		q++ // a carry into the next binade is handled by the addition below
	}
	if !normal {
		return q // exponent field 0; q == 1<<mbits is the smallest normal
	}
	// q carries the implicit leading one at bit mbits.
	return uint32(e+bias-1)<<uint(mbits) + q
}

func f32parts(x float32) (sign, abs uint32) {
	b := math.Float32bits(x)
	return b & 0x80000000, b & 0x7fffffff
}

const (
	f32Inf      = 0x7f800000
	e4m3MaxCode = 0x7e
	e5m2MaxCode = 0x7b
	fp8NaN      = 0x7f
)

// EncodeE4M3 converts x to OCP E4M3FN, RNE, saturating at ±448.
func EncodeE4M3(x float32) uint8 {
	sign, abs := f32parts(x)
	if abs > f32Inf {
		return fp8NaN
	}
	c := roundMinifloat(abs, 3, 7)
	if c > e4m3MaxCode {
		c = e4m3MaxCode
	}
	return uint8(sign>>24) | uint8(c)
}

// EncodeE5M2 converts x to OCP E5M2, RNE, saturating at ±57344 (also for ±Inf).
func EncodeE5M2(x float32) uint8 {
	sign, abs := f32parts(x)
	if abs > f32Inf {
		return fp8NaN
	}
	c := roundMinifloat(abs, 2, 15)
	if c > e5m2MaxCode {
		c = e5m2MaxCode
	}
	return uint8(sign>>24) | uint8(c)
}

// EncodeBF16 converts x to bfloat16, RNE; overflow gives ±Inf.
func EncodeBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > f32Inf {
		return uint16(b>>16) | 0x40 // quiet NaN, sign and top payload kept
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// DecodeBF16 widens a bfloat16 code exactly.
func DecodeBF16(c uint16) float32 { return math.Float32frombits(uint32(c) << 16) }

// EncodeF16 converts x to IEEE binary16, RNE; overflow gives ±Inf.
func EncodeF16(x float32) uint16 {
	sign, abs := f32parts(x)
	s := uint16(sign >> 16)
	switch {
	case abs > f32Inf:
		return s | 0x7e00 | uint16(abs>>13)&0x1ff // quiet NaN
	case abs == f32Inf:
		return s | 0x7c00
	}
	c := roundMinifloat(abs, 10, 15)
	if c >= 0x7c00 {
		c = 0x7c00
	}
	return s | uint16(c)
}

// DecodeF16 widens a binary16 code exactly.
func DecodeF16(c uint16) float32 { return f16Table()[c] }

// DecodeE4M3 returns the value of an E4M3FN code (0x7f/0xff are NaN).
func DecodeE4M3(c uint8) float32 { return e4m3Table[c] }

// DecodeE5M2 returns the value of an E5M2 code.
func DecodeE5M2(c uint8) float32 { return e5m2Table[c] }

// decodeMinifloat computes a code's value from its fields; special
// (all-ones exponent) codes are the caller's business.
func decodeMinifloat(c uint32, ebits, mbits, bias int) float64 {
	e := int(c>>uint(mbits)) & (1<<uint(ebits) - 1)
	m := float64(c & (1<<uint(mbits) - 1))
	frac := m / float64(uint32(1)<<uint(mbits))
	if e == 0 {
		return math.Ldexp(frac, 1-bias)
	}
	return math.Ldexp(1+frac, e-bias)
}

var e4m3Table, e5m2Table = buildFP8Tables()

func buildFP8Tables() (e4, e5 [256]float32) {
	for i := range 256 {
		neg := i&0x80 != 0
		mag := uint32(i & 0x7f)
		v4 := decodeMinifloat(mag, 4, 3, 7)
		if mag == 0x7f {
			v4 = math.NaN()
		}
		v5 := decodeMinifloat(mag, 5, 2, 15)
		switch {
		case mag == 0x7c:
			v5 = math.Inf(1)
		case mag > 0x7c:
			v5 = math.NaN()
		}
		if neg {
			v4, v5 = -v4, -v5
		}
		e4[i], e5[i] = float32(v4), float32(v5)
	}
	return
}

var f16Once sync.Once
var f16Lut []float32

func f16Table() []float32 {
	f16Once.Do(func() {
		f16Lut = make([]float32, 1<<16)
		for i := range f16Lut {
			mag := uint32(i & 0x7fff)
			var v float64
			switch {
			case mag == 0x7c00:
				v = math.Inf(1)
			case mag > 0x7c00:
				f16Lut[i] = math.Float32frombits(uint32(i&0x8000)<<16 | 0x7fc00000 | (mag&0x3ff)<<13)
				continue
			default:
				v = decodeMinifloat(mag, 5, 10, 15)
			}
			if i&0x8000 != 0 {
				v = -v
			}
			f16Lut[i] = float32(v)
		}
	})
	return f16Lut
}
