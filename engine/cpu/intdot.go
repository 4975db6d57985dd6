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

// intKernel is a rowKernel over a quantized activation row; xs holds the
// float sums of x over 32-element blocks, as for rowKernel.
type intKernel func(w []byte, x []q8Block, xs []float32) float32

// intKernels holds the portable (reference) integer kernels; fastIntKernels,
// filled at init on CPUs with AVX2, take precedence and must match them
// bit for bit.
var intKernels = map[gguf.Type]intKernel{
	gguf.Q4_K: dotQ4KQ8,
}

var fastIntKernels map[gguf.Type]intKernel

func intKernelFor(t gguf.Type) intKernel {
	if k, ok := fastIntKernels[t]; ok {
		return k
	}
	return intKernels[t]
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
		xb := x[256*i : 256*i+256 : 256*i+256]
		// max |x| on the bits: |x| orders as its bit pattern, and
		// patterns ≥ Inf's are Inf or NaN.
		var amaxBits uint32
		for _, v := range xb {
			amaxBits = max(amaxBits, math.Float32bits(v)&0x7fffffff)
		}
		switch {
		case amaxBits >= 0x7f800000:
			*b = q8Block{d: float32(math.NaN())}
			continue
		case amaxBits == 0:
			*b = q8Block{}
			continue
		}
		amax := float64(math.Float32frombits(amaxBits))
		// d rounds up, so that |x|/d ≤ 127 and every code is the nearest
		// to x/d of the stored d, even where d is subnormal.
		d := float32(amax / 127)
		if float64(d)*127 < amax {
			d = math.Nextafter32(d, math.MaxFloat32)
		}
		b.d = d
		inv64 := 1 / float64(d)
		if inv64 > math.MaxFloat32/2 {
			for j, v := range xb {
				b.qs[j] = int8(max(-127, min(127, math.RoundToEven(float64(v)*inv64))))
			}
		} else {
			inv := float32(inv64)
			for j, v := range xb {
				// Adding 1.5·2²³ rounds to an integer (to nearest even) in
				// float32 arithmetic; |v·inv| ≤ 127·(1+2⁻²³)² < 127.5.
				r := float32(float32(v*inv)+roundMagic) - roundMagic
				b.qs[j] = int8(int32(r))
			}
		}
		for k := 0; k < 16; k++ {
			var s int16
			for _, q := range b.qs[16*k : 16*k+16] {
				s += int16(q)
			}
			b.bsums[k] = s
		}
	}
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

// matmulInt is matmul's integer path: x's rows are quantized once, then
// every weight row is dotted with each of them.
func (b *Backend) matmulInt(dst []float32, ds int, x, xs []float32, n int, w *Weight, o0, nOut int, ik intKernel) {
	cols, rb, nbq, nbx := w.cols, w.rowBytes, w.cols/256, w.cols/32
	xq := make([]q8Block, n*nbq)
	for r := 0; r < n; r++ {
		q8Quantize(xq[r*nbq:(r+1)*nbq], x[r*cols:(r+1)*cols])
	}
	b.pool.parallel(nOut, 4, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			wr := w.raw[(o0+o)*rb : (o0+o+1)*rb]
			for r := 0; r < n; r++ {
				dst[r*ds+o] = ik(wr, xq[r*nbq:(r+1)*nbq], xs[r*nbx:(r+1)*nbx])
			}
		}
	})
	w.applyScale(dst, ds, n, o0, nOut)
}
