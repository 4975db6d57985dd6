//go:build !purego

package kvcache

import "golang.org/x/sys/cpu"

// AVX2 kernels of the host attention (simd_amd64.s). The wrappers check
// the lengths once, so the assembly runs without per-element checks, and
// handle the tail that is not a multiple of 8 in Go.

//go:noescape
func bf16ToF32AVX2(dst *float32, src *byte, n int)

//go:noescape
func fp8DecodeAVX2(dst *float32, src *byte, n int, shift uint64, ebias int32, submul float32, sublim, thrm1, infc int32)

//go:noescape
func dotF32x8(a, b *float32, n int) float32

//go:noescape
func axpyF32x8(y, x *float32, n int, w float32)

var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// decodeBF16 writes the float32 values of the bf16 codes in src
// (little-endian, 2 bytes each) to dst.
func decodeBF16(dst []float32, src []byte) {
	m := 0
	if hasAVX2 {
		m = len(dst) &^ 7
		if m > 0 {
			_ = src[2*m-1]
			bf16ToF32AVX2(&dst[0], &src[0], m)
		}
	}
	decodeBF16Go(dst[m:], src[2*m:])
}

// fp8Params are fp8DecodeAVX2's arguments for a format.
// ebias rebiases a normal code's exponent (127-bias, in place); a
// subnormal code (magnitude below sublim) is its magnitude times submul =
// 2^(1-bias-mantissa bits).
type fp8Params struct {
	shift               uint64
	ebias               int32
	submul              float32
	sublim, thrm1, infc int32
}

var (
	e4m3Params = fp8Params{shift: 20, ebias: 120 << 23, submul: 0x1p-9, sublim: 8, thrm1: 0x7e, infc: 0x7e}  // 0x7f: NaN
	e5m2Params = fp8Params{shift: 21, ebias: 112 << 23, submul: 0x1p-16, sublim: 4, thrm1: 0x7b, infc: 0x7c} // 0x7c: Inf, above: NaN
)

// decodeFP8 writes the values of the E4M3 (e4m3 true) or E5M2 codes in
// src to dst: the decode tables' values, with the codes widened by bit
// placement.
func decodeFP8(dst []float32, src []byte, e4m3 bool) {
	lut, p := &e5m2Table, e5m2Params
	if e4m3 {
		lut, p = &e4m3Table, e4m3Params
	}
	m := 0
	if hasAVX2 {
		m = len(dst) &^ 7
		if m > 0 {
			_ = src[m-1]
			fp8DecodeAVX2(&dst[0], &src[0], m, p.shift, p.ebias, p.submul, p.sublim, p.thrm1, p.infc)
		}
	}
	decodeLUTGo(dst[m:], src[m:], lut)
}

// dot is the float32 dot product of a and b[:len(a)].
func dot(a, b []float32) float32 {
	if !hasAVX2 {
		return dotGo(a, b)
	}
	m := len(a) &^ 7
	var s float32
	if m > 0 {
		_ = b[m-1]
		s = dotF32x8(&a[0], &b[0], m)
	}
	if m < len(a) {
		s += dotGo(a[m:], b[m:])
	}
	return s
}

// axpy adds w*x to y (fused multiply-add per element on AVX2).
func axpy(y, x []float32, w float32) {
	if !hasAVX2 {
		axpyGo(y, x, w)
		return
	}
	m := len(y) &^ 7
	if m > 0 {
		_ = x[m-1]
		axpyF32x8(&y[0], &x[0], m, w)
	}
	if m < len(y) {
		axpyGo(y[m:], x[m:], w)
	}
}
