package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The block layouts below follow ggml's (little-endian, fp16 scales). Every
// multiply-add is written as float32(a*b) + c so that the compiler never
// fuses it into an FMA: results then match ggml's reference C code and the
// gguf Python package bit for bit.

// QK is the block size of the legacy quant types, QKK that of the k-quants.
const (
	QK  = 32
	QKK = 256
)

// F16ToF32 converts IEEE half-precision bits to float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// subnormal half: normalise into a float32 normal
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 converts float32 to half precision, rounding to nearest even
// (NaN stays NaN, overflow becomes Inf), as numpy's astype(float16) does.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflows to zero
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is correct (up to Inf)
	}
	return sign | uint16(h)
}

// BF16ToF32 converts bfloat16 bits to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds float32 to bfloat16, nearest even, quieting NaNs (as ggml).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 64
	}
	return uint16((uint64(b) + 0x7fff + uint64(b>>16&1)) >> 16)
}

func f16at(b []byte, i int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[i:])) }

// Dequantize decodes len(dst) elements of type t from raw into dst. len(dst)
// must be a multiple of t's block size and raw must hold at least the
// corresponding number of bytes.
func Dequantize(t Type, raw []byte, dst []float32) error {
	dq, ok := blockDecoders[t]
	if !ok {
		return fmt.Errorf("gguf: dequantize: unsupported tensor type %s", t)
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	if len(dst)%be != 0 {
		return fmt.Errorf("gguf: dequantize %s: %d elements is not a multiple of the block size %d", t, len(dst), be)
	}
	nb := len(dst) / be
	if len(raw) < nb*bb {
		return fmt.Errorf("gguf: dequantize %s: %d elements need %d bytes, have %d", t, len(dst), nb*bb, len(raw))
	}
	switch t { // whole-slice fast paths for the float types
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return nil
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return nil
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return nil
	}
	for i := 0; i < nb; i++ {
		dq(raw[i*bb:(i+1)*bb], dst[i*be:(i+1)*be])
	}
	return nil
}

// DequantizeBlock decodes one block of type t (t.BlockBytes() bytes) into
// dst[:t.BlockElems()]: 32 floats for the legacy quants and MXFP4, 64 for
// NVFP4, 256 for k-quants, 1 for F32/F16/BF16. It is meant for matmul kernels that dequantize on the
// fly into a small scratch buffer; it panics if block or dst is too short,
// like a slice index would.
func DequantizeBlock(t Type, block []byte, dst []float32) error {
	dq, ok := blockDecoders[t]
	if !ok {
		return fmt.Errorf("gguf: dequantize: unsupported tensor type %s", t)
	}
	dq(block[:t.BlockBytes()], dst[:t.BlockElems()])
	return nil
}

// BlockDecoder returns the per-block decoder for t, for hot loops that want
// to avoid the per-call type switch of DequantizeBlock.
func BlockDecoder(t Type) (func(block []byte, dst []float32), bool) {
	dq, ok := blockDecoders[t]
	return dq, ok
}

// DequantizeSupported reports whether Dequantize handles t.
func DequantizeSupported(t Type) bool { _, ok := blockDecoders[t]; return ok }

var blockDecoders = map[Type]func(b []byte, y []float32){
	F32:  func(b []byte, y []float32) { y[0] = math.Float32frombits(binary.LittleEndian.Uint32(b)) },
	F16:  func(b []byte, y []float32) { y[0] = F16ToF32(binary.LittleEndian.Uint16(b)) },
	BF16: func(b []byte, y []float32) { y[0] = BF16ToF32(binary.LittleEndian.Uint16(b)) },
	Q4_0: dequantQ4_0, Q4_1: dequantQ4_1, Q5_0: dequantQ5_0, Q5_1: dequantQ5_1,
	Q8_0: dequantQ8_0, Q8_1: dequantQ8_1,
	Q2_K: dequantQ2_K, Q3_K: dequantQ3_K, Q4_K: dequantQ4_K, Q5_K: dequantQ5_K, Q6_K: dequantQ6_K,
	MXFP4: dequantMXFP4, NVFP4: dequantNVFP4,
}

// Q4_0: d f16, qs[16]; element j is low nibble of qs[j], j+16 the high nibble.
func dequantQ4_0(b []byte, y []float32) {
	d := f16at(b, 0)
	qs := b[2:18]
	y = y[:32]
	for j := 0; j < 16; j++ {
		y[j] = float32(int(qs[j]&0xf)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

// Q4_1: d f16, m f16, qs[16]; y = q*d + m.
func dequantQ4_1(b []byte, y []float32) {
	d, m := f16at(b, 0), f16at(b, 2)
	qs := b[4:20]
	y = y[:32]
	for j := 0; j < 16; j++ {
		y[j] = float32(float32(qs[j]&0xf)*d) + m
		y[j+16] = float32(float32(qs[j]>>4)*d) + m
	}
}

// Q5_0: d f16, qh u32 (5th bits), qs[16].
func dequantQ5_0(b []byte, y []float32) {
	d := f16at(b, 0)
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	y = y[:32]
	for j := 0; j < 16; j++ {
		h0 := byte(qh>>uint(j)) & 1
		h1 := byte(qh>>uint(j+16)) & 1
		y[j] = float32(int(qs[j]&0xf|h0<<4)-16) * d
		y[j+16] = float32(int(qs[j]>>4|h1<<4)-16) * d
	}
}

// Q5_1: d f16, m f16, qh u32, qs[16]; y = q*d + m.
func dequantQ5_1(b []byte, y []float32) {
	d, m := f16at(b, 0), f16at(b, 2)
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	y = y[:32]
	for j := 0; j < 16; j++ {
		h0 := byte(qh>>uint(j)) & 1
		h1 := byte(qh>>uint(j+16)) & 1
		y[j] = float32(float32(qs[j]&0xf|h0<<4)*d) + m
		y[j+16] = float32(float32(qs[j]>>4|h1<<4)*d) + m
	}
}

// Q8_0: d f16, qs[32] int8.
func dequantQ8_0(b []byte, y []float32) { scaleInt8(y[:32], b[2:34], f16at(b, 0)) }

// Q8_1: d f16, s f16 (sum, unused here), qs[32] int8.
func dequantQ8_1(b []byte, y []float32) { scaleInt8(y[:32], b[4:36], f16at(b, 0)) }

// scaleInt8 sets y[j] = int8(qs[j]) * d.
func scaleInt8(y []float32, qs []byte, d float32) {
	qs = qs[:len(y)]
	for j := range y {
		y[j] = float32(int8(qs[j])) * d
	}
}

// Q2_K: scales[16] (4-bit scale | 4-bit min), qs[64] (2 bits), d, dmin f16.
func dequantQ2_K(b []byte, y []float32) {
	scales := b[0:16]
	q := b[16:80]
	d, dmin := f16at(b, 80), f16at(b, 82)
	y = y[:256]
	is, o := 0, 0
	for n := 0; n < 2; n++ {
		qq := q[32*n : 32*n+32]
		for shift := uint(0); shift < 8; shift += 2 {
			for half := 0; half < 2; half++ {
				sc := scales[is]
				is++
				dl := d * float32(sc&0xf)
				ml := dmin * float32(sc>>4)
				for l := 0; l < 16; l++ {
					y[o] = float32(dl*float32(qq[16*half+l]>>shift&3)) - ml
					o++
				}
			}
		}
	}
}

// Q3_K: hmask[32], qs[64] (low 2 bits), scales[12] (16 6-bit scales), d f16.
func dequantQ3_K(b []byte, y []float32) {
	hm := b[0:32]
	q := b[32:96]
	s := b[96:108]
	d := f16at(b, 108)
	var sc [16]int
	for i := 0; i < 16; i++ {
		lo := s[i%8] >> (4 * uint(i/8)) & 0xf
		hi := s[8+i%4] >> (2 * uint(i/4)) & 3
		sc[i] = int(lo|hi<<4) - 32
	}
	y = y[:256]
	is, o := 0, 0
	m := byte(1)
	for n := 0; n < 2; n++ {
		qq := q[32*n : 32*n+32]
		for shift := uint(0); shift < 8; shift += 2 {
			for half := 0; half < 2; half++ {
				dl := d * float32(sc[is])
				is++
				for l := 0; l < 16; l++ {
					v := int(qq[16*half+l] >> shift & 3)
					if hm[16*half+l]&m == 0 {
						v -= 4
					}
					y[o] = dl * float32(v)
					o++
				}
			}
			m <<= 1
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block.
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K: d, dmin f16, scales[12] (8 6-bit scale/min pairs), qs[128].
func dequantQ4_K(b []byte, y []float32) {
	d, dmin := f16at(b, 0), f16at(b, 2)
	scales := b[4:16]
	q := b[16:144]
	y = y[:256]
	for j := 0; j < 4; j++ {
		sc1, m1 := scaleMinK4(2*j, scales)
		sc2, m2 := scaleMinK4(2*j+1, scales)
		d1, mm1 := d*float32(sc1), dmin*float32(m1)
		d2, mm2 := d*float32(sc2), dmin*float32(m2)
		qq := q[32*j : 32*j+32]
		yy := y[64*j : 64*j+64]
		for l := 0; l < 32; l++ {
			yy[l] = float32(d1*float32(qq[l]&0xf)) - mm1
			yy[l+32] = float32(d2*float32(qq[l]>>4)) - mm2
		}
	}
}

// Q5_K: d, dmin f16, scales[12], qh[32] (5th bits), qs[128].
func dequantQ5_K(b []byte, y []float32) {
	d, dmin := f16at(b, 0), f16at(b, 2)
	scales := b[4:16]
	qh := b[16:48]
	q := b[48:176]
	y = y[:256]
	for j := 0; j < 4; j++ {
		sc1, m1 := scaleMinK4(2*j, scales)
		sc2, m2 := scaleMinK4(2*j+1, scales)
		d1, mm1 := d*float32(sc1), dmin*float32(m1)
		d2, mm2 := d*float32(sc2), dmin*float32(m2)
		qq := q[32*j : 32*j+32]
		yy := y[64*j : 64*j+64]
		s1, s2 := uint(2*j), uint(2*j+1)
		for l := 0; l < 32; l++ {
			yy[l] = float32(d1*float32(qq[l]&0xf|(qh[l]>>s1&1)<<4)) - mm1
			yy[l+32] = float32(d2*float32(qq[l]>>4|(qh[l]>>s2&1)<<4)) - mm2
		}
	}
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d f16.
func dequantQ6_K(b []byte, y []float32) {
	ql := b[0:128]
	qh := b[128:192]
	sc := b[192:208]
	d := f16at(b, 208)
	y = y[:256]
	for n := 0; n < 2; n++ {
		l4 := ql[64*n : 64*n+64]
		h := qh[32*n : 32*n+32]
		s := sc[8*n : 8*n+8]
		yy := y[128*n : 128*n+128]
		var ds [8]float32
		for i := range ds {
			ds[i] = d * float32(int8(s[i]))
		}
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(l4[l]&0xf|(h[l]&3)<<4) - 32
			q2 := int(l4[l+32]&0xf|(h[l]>>2&3)<<4) - 32
			q3 := int(l4[l]>>4|(h[l]>>4&3)<<4) - 32
			q4 := int(l4[l+32]>>4|(h[l]>>6&3)<<4) - 32
			yy[l] = ds[is] * float32(q1)
			yy[l+32] = ds[is+2] * float32(q2)
			yy[l+64] = ds[is+4] * float32(q3)
			yy[l+96] = ds[is+6] * float32(q4)
		}
	}
}
