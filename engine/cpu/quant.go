package cpu

import (
	"encoding/binary"
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
)

// rowKernel returns the dot product of one weight row, stored as raw blocks,
// with x. xs holds the sums of x over consecutive 32-element blocks: the
// formats with an offset (q*d + m, or d*(q-8)) fold it into one multiply
// per block (Σ(d q + m)x = d Σ q x + m Σ x), so the inner loops only
// convert small integers and multiply-add. Each kernel decodes one block at
// a time in registers; no weight matrix is ever dequantized as a whole.
type rowKernel func(w []byte, x, xs []float32) float32

// kernels holds the portable fused kernels; types without one use the
// generic path (dequantize the row into scratch, then a float32 dot).
// fastKernels, filled at init on CPUs with SIMD support, take precedence.
var kernels = map[gguf.Type]rowKernel{
	gguf.F16:  dotF16,
	gguf.BF16: dotBF16,
	gguf.Q4_0: dotQ4_0,
	gguf.Q4_1: dotQ4_1,
	gguf.Q5_0: dotQ5_0,
	gguf.Q5_1: dotQ5_1,
	gguf.Q8_0: dotQ8_0,
	gguf.Q4_K: dotQ4_K,
	gguf.Q5_K: dotQ5_K,
	gguf.Q6_K: dotQ6_K,
}

var fastKernels map[gguf.Type]rowKernel

// rowKernel4 is a rowKernel over four activation rows at once (x and xs hold
// four rows at the given strides): each weight block is decoded once per
// four rows. Only SIMD builds have them.
type rowKernel4 func(w []byte, x []float32, xstride int, xs []float32, xsstride int, out *[4]float32)

var fastKernels4 map[gguf.Type]rowKernel4

func kernelFor(t gguf.Type) rowKernel {
	if k, ok := fastKernels[t]; ok {
		return k
	}
	return kernels[t]
}

// dotF32 is the float32 dot product used by the generic path.
var dotF32 = dotF32Go

var f16tab = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = gguf.F16ToF32(uint16(i))
	}
	return &t
}()

func f16(b []byte) float32 { return f16tab[binary.LittleEndian.Uint16(b)] }

// blockSums writes the sums of x over 32-element blocks into xs.
func blockSums(xs, x []float32) {
	for i := range xs {
		b := x[i*32 : i*32+32 : i*32+32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 32; j += 4 {
			s0 += b[j]
			s1 += b[j+1]
			s2 += b[j+2]
			s3 += b[j+3]
		}
		xs[i] = (s0 + s1) + (s2 + s3)
	}
}

func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF16(w []byte, x, _ []float32) float32 {
	x = x[:len(w)/2]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += f16tab[binary.LittleEndian.Uint16(w[2*i:])] * x[i]
		s1 += f16tab[binary.LittleEndian.Uint16(w[2*i+2:])] * x[i+1]
	}
	for ; i < len(x); i++ {
		s0 += f16tab[binary.LittleEndian.Uint16(w[2*i:])] * x[i]
	}
	return s0 + s1
}

func dotBF16(w []byte, x, _ []float32) float32 {
	x = x[:len(w)/2]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[2*i:]))<<16) * x[i]
		s1 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[2*i+2:]))<<16) * x[i+1]
	}
	for ; i < len(x); i++ {
		s0 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(w[2*i:]))<<16) * x[i]
	}
	return s0 + s1
}

// nib16 returns Σ lo(q[j])·x[j] + hi(q[j])·x[j+16] over one 32-element block.
func nib16(q []byte, x []float32) float32 {
	q = q[:16]
	x = x[:32]
	var a0, a1, a2, a3 float32
	for j := 0; j < 16; j += 2 {
		b0, b1 := q[j], q[j+1]
		a0 += float32(b0&15) * x[j]
		a1 += float32(b0>>4) * x[j+16]
		a2 += float32(b1&15) * x[j+1]
		a3 += float32(b1>>4) * x[j+17]
	}
	return (a0 + a1) + (a2 + a3)
}

// nib5 is nib16 with a fifth bit per element from qh (bit j for element j).
func nib5(q []byte, qh uint32, x []float32) float32 {
	q = q[:16]
	x = x[:32]
	var a0, a1 float32
	for j := 0; j < 16; j++ {
		b := q[j]
		lo := uint32(b&15) | (qh>>uint(j)&1)<<4
		hi := uint32(b>>4) | (qh>>uint(j+16)&1)<<4
		a0 += float32(lo) * x[j]
		a1 += float32(hi) * x[j+16]
	}
	return a0 + a1
}

func dotQ4_0(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/18; i++ {
		b := w[i*18 : i*18+18 : i*18+18]
		s += f16(b) * (nib16(b[2:], x[i*32:]) - 8*xs[i])
	}
	return s
}

func dotQ4_1(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/20; i++ {
		b := w[i*20 : i*20+20 : i*20+20]
		s += f16(b)*nib16(b[4:], x[i*32:]) + f16(b[2:])*xs[i]
	}
	return s
}

func dotQ5_0(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/22; i++ {
		b := w[i*22 : i*22+22 : i*22+22]
		s += f16(b) * (nib5(b[6:], binary.LittleEndian.Uint32(b[2:]), x[i*32:]) - 16*xs[i])
	}
	return s
}

func dotQ5_1(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/24; i++ {
		b := w[i*24 : i*24+24 : i*24+24]
		s += f16(b)*nib5(b[8:], binary.LittleEndian.Uint32(b[4:]), x[i*32:]) + f16(b[2:])*xs[i]
	}
	return s
}

func dotQ8_0(w []byte, x, _ []float32) float32 {
	var s float32
	for i := 0; i < len(w)/34; i++ {
		b := w[i*34 : i*34+34 : i*34+34]
		q := b[2:34]
		xb := x[i*32 : i*32+32 : i*32+32]
		var a0, a1, a2, a3 float32
		for j := 0; j < 32; j += 4 {
			a0 += float32(int8(q[j])) * xb[j]
			a1 += float32(int8(q[j+1])) * xb[j+1]
			a2 += float32(int8(q[j+2])) * xb[j+2]
			a3 += float32(int8(q[j+3])) * xb[j+3]
		}
		s += f16(b) * ((a0 + a1) + (a2 + a3))
	}
	return s
}

// scaleMin unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block.
func scaleMin(j int, q []byte) (sc, m float32) {
	if j < 4 {
		return float32(q[j] & 63), float32(q[j+4] & 63)
	}
	return float32(q[j+4]&0xf | (q[j-4]>>6)<<4), float32(q[j+4]>>4 | (q[j]>>6)<<4)
}

// nib32 returns the low-nibble and high-nibble dots of 32 bytes with
// x[0:32] and x[32:64] (the Q4_K sub-block pair layout).
func nib32(q []byte, x []float32) (lo, hi float32) {
	q = q[:32]
	x = x[:64]
	var a0, a1, b0, b1 float32
	for l := 0; l < 32; l += 2 {
		c0, c1 := q[l], q[l+1]
		a0 += float32(c0&15) * x[l]
		a1 += float32(c1&15) * x[l+1]
		b0 += float32(c0>>4) * x[l+32]
		b1 += float32(c1>>4) * x[l+33]
	}
	return a0 + a1, b0 + b1
}

func dotQ4_K(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/144; i++ {
		b := w[i*144 : i*144+144 : i*144+144]
		d, dmin := f16(b), f16(b[2:])
		sc := b[4:16]
		xb := x[i*256 : i*256+256 : i*256+256]
		xsb := xs[i*8 : i*8+8 : i*8+8]
		var acc, macc float32
		for j := 0; j < 4; j++ {
			lo, hi := nib32(b[16+32*j:], xb[64*j:])
			s1, m1 := scaleMin(2*j, sc)
			s2, m2 := scaleMin(2*j+1, sc)
			acc += s1*lo + s2*hi
			macc += m1*xsb[2*j] + m2*xsb[2*j+1]
		}
		s += d*acc - dmin*macc
	}
	return s
}

func dotQ5_K(w []byte, x, xs []float32) float32 {
	var s float32
	for i := 0; i < len(w)/176; i++ {
		b := w[i*176 : i*176+176 : i*176+176]
		d, dmin := f16(b), f16(b[2:])
		sc := b[4:16]
		qh := b[16:48]
		xb := x[i*256 : i*256+256 : i*256+256]
		xsb := xs[i*8 : i*8+8 : i*8+8]
		var acc, macc float32
		for j := 0; j < 4; j++ {
			q := b[48+32*j : 80+32*j]
			xx := xb[64*j : 64*j+64]
			s1, s2 := uint(2*j), uint(2*j+1)
			var lo, hi float32
			for l := 0; l < 32; l++ {
				c, h := q[l], qh[l]
				lo += float32(c&15|(h>>s1&1)<<4) * xx[l]
				hi += float32(c>>4|(h>>s2&1)<<4) * xx[l+32]
			}
			sc1, m1 := scaleMin(2*j, sc)
			sc2, m2 := scaleMin(2*j+1, sc)
			acc += sc1*lo + sc2*hi
			macc += m1*xsb[2*j] + m2*xsb[2*j+1]
		}
		s += d*acc - dmin*macc
	}
	return s
}

func dotQ6_K(w []byte, x, _ []float32) float32 {
	var s float32
	for i := 0; i < len(w)/210; i++ {
		b := w[i*210 : i*210+210 : i*210+210]
		d := f16(b[208:])
		xb := x[i*256 : i*256+256 : i*256+256]
		var acc float32
		for n := 0; n < 2; n++ {
			ql := b[64*n : 64*n+64]
			qh := b[128+32*n : 160+32*n]
			sc := b[192+8*n : 200+8*n]
			xx := xb[128*n : 128*n+128]
			for is := 0; is < 2; is++ {
				var a1, a2, a3, a4 float32
				for l := 16 * is; l < 16*is+16; l++ {
					h := qh[l]
					a1 += float32(int32(ql[l]&0xf|(h&3)<<4)-32) * xx[l]
					a2 += float32(int32(ql[l+32]&0xf|(h>>2&3)<<4)-32) * xx[l+32]
					a3 += float32(int32(ql[l]>>4|(h>>4&3)<<4)-32) * xx[l+64]
					a4 += float32(int32(ql[l+32]>>4|(h>>6&3)<<4)-32) * xx[l+96]
				}
				acc += float32(int8(sc[is]))*a1 + float32(int8(sc[is+2]))*a2 +
					float32(int8(sc[is+4]))*a3 + float32(int8(sc[is+6]))*a4
			}
		}
		s += d * acc
	}
	return s
}
