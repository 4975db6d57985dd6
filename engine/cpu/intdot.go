package cpu

import (
	"math"
	"os"

	"github.com/ftchat/ftchat/engine/gguf"
)

// The integer-dot path (Options.IntDot, FTCHAT_CPU_INTDOT=1): each
// activation row is quantized once per matmul to q8Blocks, and weight rows
// are dotted with it in integer arithmetic (AVX2 VPMADDUBSW/VPMADDWD: 32
// weights per instruction), with one float multiply-add per block. It is
// several times faster than decoding weights to float, at the cost of the
// 8-bit activation rounding (see q8Quantize), so it is opt-in: the float
// path stays the numerical reference.

// q8Block is 256 activations as int8 codes: x[i] ≈ d·qs[i], d = max|x|/127.
// bsums[k] is the sum of qs[16k:16k+16], so formats with a per-sub-block
// offset (Q4_K's mins) fold it in with one multiply per sub-block. The
// layout (d at 0, qs at 4, bsums at 260; 292 bytes) is read by assembly.
type q8Block struct {
	d     float32
	qs    [256]int8
	bsums [16]int16
}

const q8BlockBytes = 292

// q8Block32 is q8Block for 32 activations (the Q4_0/Q4_1/Q8_0 block): a
// scale per 32 values keeps more precision than one per 256, and rows
// need only be a multiple of 32 long (576 in SmolLM2). Layout: d at 0, qs
// at 4; 36 bytes.
type q8Block32 struct {
	d  float32
	qs [32]int8
}

const q8Block32Bytes = 36

// intKernel is a rowKernel over a quantized activation row; xs holds the
// float sums of x over 32-element blocks, as for rowKernel. intKernel32 is
// the same over 32-value blocks.
type (
	intKernel   func(w []byte, x []q8Block, xs []float32) float32
	intKernel32 func(w []byte, x []q8Block32, xs []float32) float32
)

// intPath is a weight type's integer kernel: one of k256, k32 is set.
type intPath struct {
	k256 intKernel
	k32  intKernel32
}

// intKernels holds the portable (reference) integer kernels; fastIntKernels,
// filled at init on CPUs with AVX2, take precedence and must match them
// bit for bit.
var intKernels = map[gguf.Type]intPath{
	gguf.Q4_K: {k256: dotQ4KQ8},
	gguf.Q6_K: {k256: dotQ6KQ8},
	gguf.Q4_0: {k32: dotQ4_0Q8},
	gguf.Q4_1: {k32: dotQ4_1Q8},
	gguf.Q8_0: {k32: dotQ8_0Q8},
}

var fastIntKernels map[gguf.Type]intPath

func intKernelFor(t gguf.Type) (intPath, bool) {
	if k, ok := fastIntKernels[t]; ok {
		return k, true
	}
	k, ok := intKernels[t]
	return k, ok
}

// intDotFromEnv reports whether FTCHAT_CPU_INTDOT asks for the integer path
// (for benchmarks of binaries that do not expose Options).
func intDotFromEnv() bool { return os.Getenv("FTCHAT_CPU_INTDOT") == "1" }

// q8Quantize quantizes x (len(x) = 256·len(dst)) block by block with
// round-to-nearest-even codes in [-127, 127], each within d/2 of x (plus
// float32 rounding of x·(1/d), < 2⁻¹⁶·d). A block holding NaN or ±Inf
// gets d = NaN, so the dots it enters are NaN as on the float path; an
// all-zero block gets d = 0. Blocks so small that 1/d overflows float32
// (subnormal d) are scaled in float64.
func q8Quantize(dst []q8Block, x []float32) {
	x = x[:256*len(dst)]
	for i := range dst {
		b := &dst[i]
		b.d = quantBlock(b.qs[:], x[256*i:256*i+256])
		for k := 0; k < 16; k++ {
			var s int16
			for _, q := range b.qs[16*k : 16*k+16] {
				s += int16(q)
			}
			b.bsums[k] = s
		}
	}
}

// q8Quantize32 is q8Quantize over 32-value blocks.
func q8Quantize32(dst []q8Block32, x []float32) {
	x = x[:32*len(dst)]
	for i := range dst {
		dst[i].d = quantBlock(dst[i].qs[:], x[32*i:32*i+32])
	}
}

// quantBlock writes the codes of xb into qs and returns their scale.
func quantBlock(qs []int8, xb []float32) float32 {
	qs = qs[:len(xb)]
	// max |x| on the bits: |x| orders as its bit pattern, and patterns ≥
	// Inf's are Inf or NaN.
	var amaxBits uint32
	for _, v := range xb {
		amaxBits = max(amaxBits, math.Float32bits(v)&0x7fffffff)
	}
	switch {
	case amaxBits >= 0x7f800000:
		clear(qs)
		return float32(math.NaN())
	case amaxBits == 0:
		clear(qs)
		return 0
	}
	amax := float64(math.Float32frombits(amaxBits))
	// d rounds up, so that |x|/d ≤ 127 and every code is the nearest to
	// x/d of the stored d, even where d is subnormal.
	d := float32(amax / 127)
	if float64(d)*127 < amax {
		d = math.Nextafter32(d, math.MaxFloat32)
	}
	inv64 := 1 / float64(d)
	if inv64 > math.MaxFloat32/2 {
		for j, v := range xb {
			qs[j] = int8(max(-127, min(127, math.RoundToEven(float64(v)*inv64))))
		}
		return d
	}
	inv := float32(inv64)
	for j, v := range xb {
		// Adding 1.5·2²³ rounds to an integer (to nearest even) in float32
		// arithmetic; |v·inv| ≤ 127·(1+2⁻²³)² < 127.5.
		r := float32(float32(v*inv)+roundMagic) - roundMagic
		qs[j] = int8(int32(r))
	}
	return d
}

const roundMagic float32 = 12582912 // 1.5·2²³

// scaleMinInt is scaleMin as integers.
func scaleMinInt(j int, q []byte) (sc, m int32) {
	if j < 4 {
		return int32(q[j] & 63), int32(q[j+4] & 63)
	}
	return int32(q[j+4]&0xf | (q[j-4]>>6)<<4), int32(q[j+4]>>4 | (q[j]>>6)<<4)
}

// dotQ4KQ8 is the reference Q4_K × q8 dot. Per block, in exact integers:
// sumi = Σ_sub scale_sub·Σ q4·q8 and summ = Σ_sub min_sub·Σ q8; then
// s += ((sumi·d) − (summ·dmin))·d8 in float32, each op rounded in this
// order (the explicit conversions forbid fusing): the assembly does the
// same ops and must give the same bits.
func dotQ4KQ8(w []byte, x []q8Block, _ []float32) float32 {
	nb := len(w) / 144
	x = x[:nb]
	var s float32
	for i := range x {
		b := w[i*144 : i*144+144 : i*144+144]
		xb := &x[i]
		sc := b[4:16]
		var sumi, summ int32
		for j := 0; j < 4; j++ {
			q := b[16+32*j : 48+32*j]
			var lo, hi int32
			for l := 0; l < 32; l++ {
				lo += int32(q[l]&15) * int32(xb.qs[64*j+l])
				hi += int32(q[l]>>4) * int32(xb.qs[64*j+32+l])
			}
			s1, m1 := scaleMinInt(2*j, sc)
			s2, m2 := scaleMinInt(2*j+1, sc)
			sumi += s1*lo + s2*hi
			summ += m1*int32(xb.bsums[4*j]+xb.bsums[4*j+1]) + m2*int32(xb.bsums[4*j+2]+xb.bsums[4*j+3])
		}
		fs := float32(float32(sumi) * f16(b))
		fm := float32(float32(summ) * f16(b[2:]))
		s += float32((fs - fm) * xb.d)
	}
	return s
}

// dotQ6KQ8 is the reference Q6_K × q8 dot: per block, in exact integers,
// sumi = Σ_k scale_k·(Σ (q+32)·q8 − 32·bsum_k) over the 16 sub-blocks of
// 16 (q+32 is the stored unsigned code); then s += ((sumi·d)·d8).
func dotQ6KQ8(w []byte, x []q8Block, _ []float32) float32 {
	nb := len(w) / 210
	x = x[:nb]
	var s float32
	for i := range x {
		b := w[i*210 : i*210+210 : i*210+210]
		xb := &x[i]
		var u [256]int32 // unsigned codes in element order
		for n := 0; n < 2; n++ {
			ql := b[64*n : 64*n+64]
			qh := b[128+32*n : 160+32*n]
			e := u[128*n : 128*n+128]
			for l := 0; l < 32; l++ {
				h := qh[l]
				e[l] = int32(ql[l]&0xf | (h&3)<<4)
				e[l+32] = int32(ql[l+32]&0xf | (h>>2&3)<<4)
				e[l+64] = int32(ql[l]>>4 | (h>>4&3)<<4)
				e[l+96] = int32(ql[l+32]>>4 | (h>>6&3)<<4)
			}
		}
		var sumi int32
		for k := 0; k < 16; k++ {
			var p int32
			for j := 16 * k; j < 16*k+16; j++ {
				p += u[j] * int32(xb.qs[j])
			}
			sumi += int32(int8(b[192+k])) * (p - 32*int32(xb.bsums[k]))
		}
		s += float32(float32(float32(sumi)*f16(b[208:])) * xb.d)
	}
	return s
}

// matmulInt is matmul's integer path: x's rows are quantized once, then
// every weight row is dotted with each of them.
func (b *Backend) matmulInt(dst []float32, ds int, x, xs []float32, n int, w *Weight, o0, nOut int, ip intPath) {
	cols, rb, nbx := w.cols, w.rowBytes, w.cols/32
	var xq []q8Block
	var xq32 []q8Block32
	nbq := cols / 256
	if ip.k256 != nil {
		xq = make([]q8Block, n*nbq)
		for r := 0; r < n; r++ {
			q8Quantize(xq[r*nbq:(r+1)*nbq], x[r*cols:(r+1)*cols])
		}
	} else {
		xq32 = make([]q8Block32, n*nbx)
		for r := 0; r < n; r++ {
			q8Quantize32(xq32[r*nbx:(r+1)*nbx], x[r*cols:(r+1)*cols])
		}
	}
	b.pool.parallel(nOut, 4, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			wr := w.raw[(o0+o)*rb : (o0+o+1)*rb]
			for r := 0; r < n; r++ {
				if ip.k256 != nil {
					dst[r*ds+o] = ip.k256(wr, xq[r*nbq:(r+1)*nbq], xs[r*nbx:(r+1)*nbx])
				} else {
					dst[r*ds+o] = ip.k32(wr, xq32[r*nbx:(r+1)*nbx], xs[r*nbx:(r+1)*nbx])
				}
			}
		}
	})
	w.applyScale(dst, ds, n, o0, nOut)
}

// The 32-block kernels keep eight float lanes, lane l summing block
// products over elements 4l..4l+3 (what VPMADDWD leaves), and reduce them
// as the assembly does; the offset terms (m·Σx) go to a separate sum.

// lanes8 returns the eight 4-element integer dot sums of one block.
func lanes8(q *[32]int16, x *[32]int8) (s [8]int32) {
	for l := range s {
		s[l] = int32(q[4*l])*int32(x[4*l]) + int32(q[4*l+1])*int32(x[4*l+1]) +
			int32(q[4*l+2])*int32(x[4*l+2]) + int32(q[4*l+3])*int32(x[4*l+3])
	}
	return s
}

// addLanes does acc[l] += (float32(s[l])·d)·d8, rounding each op (d·d8
// first would underflow for tiny activations).
func addLanes(acc *[8]float32, s [8]int32, d, d8 float32) {
	for l := range acc {
		acc[l] += float32(float32(float32(s[l])*d) * d8)
	}
}

// reduceLanes is the assembly's horizontal sum (high half onto low, then
// two pairwise adds) plus the offset sum.
func reduceLanes(acc *[8]float32, sacc float32) float32 {
	h0, h1, h2, h3 := acc[0]+acc[4], acc[1]+acc[5], acc[2]+acc[6], acc[3]+acc[7]
	return float32(float32(h0+h1)+float32(h2+h3)) + sacc
}

// nibbles32 unpacks a Q4_0/Q4_1 block's 16 bytes in element order (low
// nibbles are elements 0-15, high nibbles 16-31).
func nibbles32(q []byte) (v [32]int16) {
	q = q[:16]
	for j, c := range q {
		v[j], v[j+16] = int16(c&15), int16(c>>4)
	}
	return v
}

// dotQ4_1Q8: Σ(d·q + m)·x ≈ (Σq·q8)·d·d8 + m·Σx, with Σx exact (xs).
func dotQ4_1Q8(w []byte, x []q8Block32, xs []float32) float32 {
	nb := len(w) / 20
	x, xs = x[:nb], xs[:nb]
	var acc [8]float32
	var sacc float32
	for i := range x {
		b := w[i*20 : i*20+20 : i*20+20]
		q := nibbles32(b[4:])
		addLanes(&acc, lanes8(&q, &x[i].qs), f16(b), x[i].d)
		sacc += float32(f16(b[2:]) * xs[i])
	}
	return reduceLanes(&acc, sacc)
}

// dotQ4_0Q8: Σ d·(q − 8)·x ≈ (Σq·q8)·d·d8 − 8d·Σx.
func dotQ4_0Q8(w []byte, x []q8Block32, xs []float32) float32 {
	nb := len(w) / 18
	x, xs = x[:nb], xs[:nb]
	var acc [8]float32
	var sacc float32
	for i := range x {
		b := w[i*18 : i*18+18 : i*18+18]
		q := nibbles32(b[2:])
		d := f16(b)
		addLanes(&acc, lanes8(&q, &x[i].qs), d, x[i].d)
		sacc += float32(float32(-8*d) * xs[i])
	}
	return reduceLanes(&acc, sacc)
}

// dotQ8_0Q8: Σ d·q·x ≈ (Σq·q8)·d·d8.
func dotQ8_0Q8(w []byte, x []q8Block32, _ []float32) float32 {
	nb := len(w) / 34
	x = x[:nb]
	var acc [8]float32
	for i := range x {
		b := w[i*34 : i*34+34 : i*34+34]
		var q [32]int16
		for j := range q {
			q[j] = int16(int8(b[2+j]))
		}
		addLanes(&acc, lanes8(&q, &x[i].qs), f16(b), x[i].d)
	}
	return reduceLanes(&acc, 0)
}
