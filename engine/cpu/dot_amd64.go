//go:build !purego

package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/ftchat/ftchat/engine/gguf"
)

//go:noescape
func dotQ4_1AVX2(w *byte, x *float32, xs *float32, nb int) float32

//go:noescape
func dotQ4_0AVX2(w *byte, x *float32, xs *float32, nb int) float32

//go:noescape
func dotQ8_0AVX2(w *byte, x *float32, nb int) float32

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotF16AVX2(w *byte, x *float32, n int) float32

var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// The wrappers check lengths (bounds) once per row, so the assembly can
// run without per-element checks.

func dotQ4_1Fast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 20
	if nb == 0 {
		return 0
	}
	_, _ = x[nb*32-1], xs[nb-1]
	return dotQ4_1AVX2(&w[0], &x[0], &xs[0], nb)
}

func dotQ4_0Fast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 18
	if nb == 0 {
		return 0
	}
	_, _ = x[nb*32-1], xs[nb-1]
	return dotQ4_0AVX2(&w[0], &x[0], &xs[0], nb)
}

func dotQ8_0Fast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 34
	if nb == 0 {
		return 0
	}
	_ = x[nb*32-1]
	return dotQ8_0AVX2(&w[0], &x[0], nb)
}

func dotF16Fast(w []byte, x, _ []float32) float32 {
	n := len(w) / 2
	m := n &^ 15
	var s float32
	if m > 0 {
		_ = x[m-1]
		s = dotF16AVX2(&w[0], &x[0], m)
	}
	if m < n {
		s += dotF16(w[2*m:], x[m:], nil)
	}
	return s
}

func dotF32Fast(a, b []float32) float32 {
	m := len(a) &^ 31
	var s float32
	if m > 0 {
		_ = b[m-1]
		s = dotF32AVX2(&a[0], &b[0], m)
	}
	if m < len(a) {
		s += dotF32Go(a[m:], b[m:])
	}
	return s
}

func init() {
	if !hasAVX2 {
		return
	}
	fastKernels = map[gguf.Type]rowKernel{
		gguf.Q4_0: dotQ4_0Fast,
		gguf.Q4_1: dotQ4_1Fast,
		gguf.Q8_0: dotQ8_0Fast,
		gguf.F16:  dotF16Fast,
	}
	dotF32 = dotF32Fast
}

//go:noescape
func dotQ4_1x4AVX2(w *byte, x *float32, xstride int, xs *float32, xsstride int, nb int, out *[4]float32)

//go:noescape
func dotQ4_0x4AVX2(w *byte, x *float32, xstride int, xs *float32, xsstride int, nb int, out *[4]float32)

// x4 adapts a four-row assembly kernel: x holds 4 rows of stride xstride
// (≥ the row length), xs 4 rows of block sums of stride xsstride.
func x4(k func(*byte, *float32, int, *float32, int, int, *[4]float32), blockBytes int) rowKernel4 {
	return func(w []byte, x []float32, xstride int, xs []float32, xsstride int, out *[4]float32) {
		nb := len(w) / blockBytes
		if nb == 0 {
			*out = [4]float32{}
			return
		}
		_, _ = x[3*xstride+nb*32-1], xs[3*xsstride+nb-1]
		k(&w[0], &x[0], xstride, &xs[0], xsstride, nb, out)
	}
}

func init() {
	if !hasAVX2 {
		return
	}
	fastKernels4 = map[gguf.Type]rowKernel4{
		gguf.Q4_0: x4(dotQ4_0x4AVX2, 18),
		gguf.Q4_1: x4(dotQ4_1x4AVX2, 20),
	}
}

//go:noescape
func dotQ4KBlocksAVX2(q *byte, x *float32, sc *float32, nb int) float32

//go:noescape
func dotQ6KBlocksAVX2(b *byte, x *float32, sc *float32, nb int) float32

// kBatch is how many k-quant blocks share one assembly call (their scales
// are unpacked into a stack buffer first).
const kBatch = 8

func dotQ4_KFast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 144
	_, _ = x[nb*256-1], xs[nb*8-1]
	var sc [8 * kBatch]float32
	var s float32
	for i0 := 0; i0 < nb; i0 += kBatch {
		n := min(kBatch, nb-i0)
		mins := kScalesMins(w, 144, i0, n, xs, sc[:])
		s += dotQ4KBlocksAVX2(&w[i0*144+16], &x[i0*256], &sc[0], n) - mins
	}
	return s
}

// kScalesMins unpacks the 6-bit sub-block scales of n Q4_K/Q5_K blocks
// (blockBytes long, from block i0) into sc as d*scale, and returns the
// dmin*min correction those blocks subtract from the dot with x (xs holds
// x's sums per 32-value sub-block).
func kScalesMins(w []byte, blockBytes, i0, n int, xs, sc []float32) float32 {
	var mins float32
	for i := i0; i < i0+n; i++ {
		b := w[i*blockBytes : i*blockBytes+16]
		d, dmin := f16(b), f16(b[2:])
		var macc float32
		for j := 0; j < 8; j++ {
			s1, m1 := scaleMin(j, b[4:16])
			sc[(i-i0)*8+j] = d * s1
			macc += m1 * xs[i*8+j]
		}
		mins += dmin * macc
	}
	return mins
}

func dotQ6_KFast(w []byte, x, _ []float32) float32 {
	nb := len(w) / 210
	_ = x[nb*256-1]
	var sc [16 * kBatch]float32
	var s float32
	for i0 := 0; i0 < nb; i0 += kBatch {
		n := min(kBatch, nb-i0)
		for i := i0; i < i0+n; i++ {
			b := w[i*210 : i*210+210 : i*210+210]
			d := f16(b[208:])
			for j := 0; j < 16; j++ {
				sc[(i-i0)*16+j] = d * float32(int8(b[192+j]))
			}
		}
		s += dotQ6KBlocksAVX2(&w[i0*210], &x[i0*256], &sc[0], n)
	}
	return s
}

func init() {
	if hasAVX2 {
		fastKernels[gguf.Q4_K] = dotQ4_KFast
		fastKernels[gguf.Q6_K] = dotQ6_KFast
	}
}

//go:noescape
func dotQ5KBlocksAVX2(b *byte, x *float32, sc *float32, nb int) float32

func dotQ5_KFast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 176
	_, _ = x[nb*256-1], xs[nb*8-1]
	var sc [8 * kBatch]float32
	var s float32
	for i0 := 0; i0 < nb; i0 += kBatch {
		n := min(kBatch, nb-i0)
		mins := kScalesMins(w, 176, i0, n, xs, sc[:])
		s += dotQ5KBlocksAVX2(&w[i0*176], &x[i0*256], &sc[0], n) - mins
	}
	return s
}

func init() {
	if hasAVX2 {
		fastKernels[gguf.Q5_K] = dotQ5_KFast
	}
}

//go:noescape
func dotQ4Kx4BlocksAVX2(q *byte, x *float32, xstride int, sc *float32, nb int, out *[4]float32)

//go:noescape
func dotQ6Kx4BlocksAVX2(b *byte, x *float32, xstride int, sc *float32, nb int, out *[4]float32)

func dotQ4_Kx4(w []byte, x []float32, xstride int, xs []float32, xsstride int, out *[4]float32) {
	nb := len(w) / 144
	*out = [4]float32{}
	if nb == 0 {
		return
	}
	_, _ = x[3*xstride+nb*256-1], xs[3*xsstride+nb*8-1]
	var sc [8 * kBatch]float32
	for i0 := 0; i0 < nb; i0 += kBatch {
		n := min(kBatch, nb-i0)
		var mins [4]float32
		for i := i0; i < i0+n; i++ {
			b := w[i*144 : i*144+144 : i*144+144]
			d, dmin := f16(b), f16(b[2:])
			for j := 0; j < 8; j++ {
				s1, m1 := scaleMin(j, b[4:16])
				sc[(i-i0)*8+j] = d * s1
				dm := dmin * m1
				for r := range mins {
					mins[r] += dm * xs[r*xsstride+i*8+j]
				}
			}
		}
		var o [4]float32
		dotQ4Kx4BlocksAVX2(&w[i0*144+16], &x[i0*256], xstride, &sc[0], n, &o)
		for r := range out {
			out[r] += o[r] - mins[r]
		}
	}
}

func dotQ6_Kx4(w []byte, x []float32, xstride int, _ []float32, _ int, out *[4]float32) {
	nb := len(w) / 210
	*out = [4]float32{}
	if nb == 0 {
		return
	}
	_ = x[3*xstride+nb*256-1]
	var sc [16 * kBatch]float32
	for i0 := 0; i0 < nb; i0 += kBatch {
		n := min(kBatch, nb-i0)
		for i := i0; i < i0+n; i++ {
			b := w[i*210 : i*210+210 : i*210+210]
			d := f16(b[208:])
			for j := 0; j < 16; j++ {
				sc[(i-i0)*16+j] = d * float32(int8(b[192+j]))
			}
		}
		var o [4]float32
		dotQ6Kx4BlocksAVX2(&w[i0*210], &x[i0*256], xstride, &sc[0], n, &o)
		for r := range out {
			out[r] += o[r]
		}
	}
}

func init() {
	if hasAVX2 {
		fastKernels4[gguf.Q4_K] = dotQ4_Kx4
		fastKernels4[gguf.Q6_K] = dotQ6_Kx4
	}
}

//go:noescape
func dotQ5_0AVX2(w *byte, x *float32, xs *float32, nb int) float32

//go:noescape
func dotQ5_1AVX2(w *byte, x *float32, xs *float32, nb int) float32

func dotQ5_0Fast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 22
	if nb == 0 {
		return 0
	}
	_, _ = x[nb*32-1], xs[nb-1]
	return dotQ5_0AVX2(&w[0], &x[0], &xs[0], nb)
}

func dotQ5_1Fast(w []byte, x, xs []float32) float32 {
	nb := len(w) / 24
	if nb == 0 {
		return 0
	}
	_, _ = x[nb*32-1], xs[nb-1]
	return dotQ5_1AVX2(&w[0], &x[0], &xs[0], nb)
}

func init() {
	if hasAVX2 {
		fastKernels[gguf.Q5_0] = dotQ5_0Fast
		fastKernels[gguf.Q5_1] = dotQ5_1Fast
	}
}
