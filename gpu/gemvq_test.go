package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// tolGemvq bounds gemvq against exact float arithmetic: int16 activations
// (rounding 2^-16 of each block's largest |x|) and float32 sums.
const tolGemvq = 1e-4

// setGemvq switches gemvq on or off on the device thread, after the ops
// queued so far.
func setGemvq(tb testing.TB, g *Backend, on bool) {
	tb.Helper()
	setOpts(tb, g, func(o *BackendOptions) { o.NoGEMVQ = !on })
}

// packI16x32 is gemvq_pack on the host, in float32: per block of 32,
// q = rint(x·(32767/max|x|)), the scale max/32767 and the block's sum in
// the kernel's butterfly order.
func packI16x32(x []float32) (xq []int16, xd, xs []float32) {
	nb := len(x) / 32
	xq, xd, xs = make([]int16, len(x)), make([]float32, nb), make([]float32, nb)
	for b := range nb {
		vals := x[32*b : 32*b+32]
		var a float32
		var sums [32]float32
		for l, v := range vals {
			a = max(a, float32(math.Abs(float64(v))))
			sums[l] = v
		}
		var inv float32
		if a > 0 {
			inv = 32767 / a
		}
		for i, v := range vals {
			xq[32*b+i] = int16(math.RoundToEven(float64(v * inv)))
		}
		xd[b], xs[b] = a/32767, butterfly32(sums)
	}
	return xq, xd, xs
}

// butterfly32 sums 32 lanes as the kernels' shuffles do (lane l adds lane
// l^o for o = 16, 8, 4, 2, 1) and returns lane 0's total.
func butterfly32(v [32]float32) float32 {
	for o := 16; o > 0; o >>= 1 {
		var next [32]float32
		for l := range next {
			next[l] = v[l] + v[l^o]
		}
		v = next
	}
	return v[0]
}

// quantizeI16x32 returns x as gemvq_pack rounds it: q·(max/32767) per
// block of 32.
func quantizeI16x32(x []float32) []float32 {
	xq, xd, _ := packI16x32(x)
	out := make([]float32, len(x))
	for i, q := range xq {
		out[i] = float32(q) * xd[i/32]
	}
	return out
}

// gemvqRef is the float64 reference for gemvq's arithmetic on one row x:
// the nibble part of each Q4_K weight (w − w0, w0 = −dmin·m the weight of
// a zero nibble) times the int16-rounded activations, plus w0 times the
// exact x (gemvq takes each block's float sum for the mins).
// Q6_K has no mins: its reference is the product on the rounded
// activations.
func gemvqRef(typ gguf.Type, raw []byte, rows, cols int, x []float32) []float32 {
	if typ == gguf.Q6_K {
		return refMatMul(typ, raw, rows, cols, quantizeI16x32(x), 1)
	}
	zero := append([]byte(nil), raw...)
	for b := 0; b < len(zero); b += 144 {
		clear(zero[b+16 : b+144]) // qs: every nibble 0
	}
	rx := quantizeI16x32(x)
	w := refMatMul(gguf.Q4_K, raw, rows, cols, rx, 1)
	w0q := refMatMul(gguf.Q4_K, zero, rows, cols, rx, 1)
	w0x := refMatMul(gguf.Q4_K, zero, rows, cols, x, 1)
	out := make([]float32, rows)
	for i := range out {
		out[i] = float32(float64(w[i]) - float64(w0q[i]) + float64(w0x[i]))
	}
	return out
}

// TestMatMulGemvq checks the single-row GEMV on int16 activations
// (MatMul's and MatMulShared's choice for one row of Q4_K and Q6_K):
//   - against a float64 reference on the exact weights and the
//     activations rounded to int16 per 32 as the pack rounds them
//     (gemvqRef), to 1e-5: a slip in the nibble order, the scales, the
//     mins or the block indexing moves the result by O(1);
//   - against the CPU backend's float path and the exact float64 product
//     within tolGemvq;
//   - bit-identical run to run, in a recorded step, with 2 or 4 rows a
//     warp, and grouped (MatMulShared, one launch for three weights) equal
//     to each weight alone: a row's arithmetic does not depend on what
//     shares its warp or grid.
//
// Outputs and the packed-activation workspace are NaN-poisoned first.
// Shapes: rows off the 4-row CTA, one super-block, wide rows (14,336).
func TestMatMulGemvq(t *testing.T) {
	p := newPair(t)
	g := p.g
	r := rand.New(rand.NewPCG(13, 31))
	for _, tc := range []struct {
		typ        gguf.Type
		rows, cols int
	}{
		{gguf.Q4_K, 300, 4096},
		{gguf.Q4_K, 197, 256},
		{gguf.Q4_K, 70, 14336},
		{gguf.Q4_K, 1041, 1536},
		{gguf.Q4_K, 33, 512},
		{gguf.Q6_K, 300, 4096},
		{gguf.Q6_K, 197, 256},
		{gguf.Q6_K, 70, 14336},
		{gguf.Q6_K, 1041, 1536},
	} {
		sh := tc
		name := fmt.Sprintf("%s %dx%d", tc.typ, sh.rows, sh.cols)
		raw := randWeight(r, tc.typ, sh.rows, sh.cols)
		info := gguf.TensorInfo{Name: "gemvq", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: tc.typ}
		gw, cw := p.weight(info, raw)
		var takes bool
		if err := g.dev.Do(func(*Ctx) error { takes = g.useGemvq(1, gw.(*Weight)); return nil }); err != nil || !takes {
			t.Fatalf("%s: MatMul would not take gemvq (%v)", name, err)
		}
		x := randVec(r, sh.cols, 1)
		gx, cx := p.tensor(1, sh.cols, x)
		gy, cy := p.tensor(1, sh.rows, nil)
		gy2, _ := p.tensor(1, sh.rows, nil)
		gy3, _ := p.tensor(1, sh.rows, nil)
		runRepeated(g, func() { poisonGemmqWS(t, g) },
			func() { g.MatMul(gy, gx, gw) },
			func() { g.MatMul(gy2, gx, gw) },
			func() { g.MatMul(gy3, gx, gw) })
		p.c.MatMul(cy, cx, cw)
		p.compare(name+" gemvq vs cpu", gy, cy, tolGemvq)
		got := download(t, g, gy)
		if e, err := relErr(got, gemvqRef(tc.typ, raw, sh.rows, sh.cols, x)); err != nil || e > 1e-5 {
			t.Errorf("%s: gemvq vs float64 on the int16 activations: error %.3g (tol 1e-5) %v", name, e, err)
		}
		if e, err := relErr(got, refMatMul(tc.typ, raw, sh.rows, sh.cols, x, 1)); err != nil || e > tolGemvq {
			t.Errorf("%s: gemvq vs the exact product: error %.3g (tol %.0g) %v", name, e, tolGemvq, err)
		}
		checkBitsRepeat(t, name, got, download(t, g, gy2), download(t, g, gy3), nil)
		for _, per := range []int{1, 2, 4} { // rows a warp: the same bits as the default
			setOpts(t, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = per })
			gyr, _ := p.tensor(1, sh.rows, nil)
			poisonGemmqWS(t, g)
			g.MatMul(gyr, gx, gw)
			setOpts(t, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = 0 })
			r := download(t, g, gyr)
			checkBitsRepeat(t, fmt.Sprintf("%s, %d rows a warp", name, per), r, got, got, nil)
		}
	}

	// q, k, v of one x in one launch, 2 rows a warp (a warp's rows cross
	// from one weight to the next): each equal to its MatMul alone.
	const cols = 2048
	rows := []int{513, 131, 130}
	gws := make([]model.Weight, len(rows))
	x := randVec(r, cols, 1)
	gx, _ := p.tensor(1, cols, x)
	alone := make([][]float32, len(rows))
	for i, n := range rows {
		gws[i], _ = p.weight(gguf.TensorInfo{Name: fmt.Sprintf("gemvq%d", i), Dims: []uint64{cols, uint64(n)}, Type: gguf.Q4_K}, randWeight(r, gguf.Q4_K, n, cols))
		y, _ := p.tensor(1, n, nil)
		g.MatMul(y, gx, gws[i])
		alone[i] = download(t, g, y)
	}
	before := groupCalls(t, g)
	ys := make([]model.Tensor, len(rows))
	for i, n := range rows {
		ys[i], _ = p.tensor(1, n, nil)
	}
	poisonGemmqWS(t, g)
	setOpts(t, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = 2 })
	g.MatMulShared(ys, gx, gws)
	setOpts(t, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = 0 })
	if groupCalls(t, g)-before != 1 {
		t.Errorf("MatMulShared of three Q4_K weights, one row: %d grouped launches, want 1", groupCalls(t, g)-before)
	}
	for i := range rows {
		checkBitsRepeat(t, fmt.Sprintf("grouped weight %d", i), download(t, g, ys[i]), alone[i], alone[i], nil)
	}

	// A Q6_K weight right after a Q4_K one on the same x (a Q4_K_M layer's
	// v after q, k) reuses the int16 pack, and is still right.
	reuses := func() (k int) {
		if err := g.dev.Do(func(*Ctx) error { k = g.packReuses; return nil }); err != nil {
			t.Fatal(err)
		}
		return k
	}
	raw6 := randWeight(r, gguf.Q6_K, 96, cols)
	w6, _ := p.weight(gguf.TensorInfo{Name: "gemvq q6", Dims: []uint64{cols, 96}, Type: gguf.Q6_K}, raw6)
	y4, _ := p.tensor(1, rows[0], nil)
	y6, _ := p.tensor(1, 96, nil)
	start := reuses()
	g.MatMul(y4, gx, gws[0])
	g.MatMul(y6, gx, w6)
	if got := reuses() - start; got != 1 {
		t.Errorf("Q4_K then Q6_K on one x: %d pack reuses, want 1", got)
	}
	if e, err := relErr(download(t, g, y6), gemvqRef(gguf.Q6_K, raw6, 96, cols, x)); err != nil || e > 1e-5 {
		t.Errorf("Q6_K after Q4_K on one x: error %.3g against float64 on the int16 activations (tol 1e-5) %v", e, err)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}

// emulateGemvq runs gemvq_q4_k's lane arithmetic on the host for one row
// (the pack, the lane map, the scale words, dp4a, the fixed butterfly
// sum), so the kernel's indexing is checked on machines without a GPU.
func emulateGemvq(raw []byte, rows, cols int, x []float32) []float32 {
	xq, xd, xs := packI16x32(x)
	word := binary.LittleEndian.Uint32
	dot4 := func(q uint32, xs []int16) int32 { // dp2a.lo then dp2a.hi
		var s int32
		for k := range 4 {
			s += int32(int8(q>>(8*k))) * int32(xs[k])
		}
		return s
	}
	rowBytes, nsb := cols/256*144, cols/256
	y := make([]float32, rows)
	for r := range rows {
		var acc [32]float32
		for lane := range 32 {
			grp, i := lane>>3, lane&7
			j, l0 := i>>1, 16*(i&1)
			sh := 16 * (j & 1)
			for sb := grp; sb < nsb; sb += 4 {
				blk := raw[r*rowBytes+sb*144:]
				hy, hz, hw := word(blk[4:]), word(blk[8:]), word(blk[12:])
				sc := [4]uint32{hy & 0x3F3F3F3F, (hw & 0x0F0F0F0F) | ((hy >> 2) & 0x30303030),
					hz & 0x3F3F3F3F, ((hw >> 4) & 0x0F0F0F0F) | ((hz >> 2) & 0x30303030)}
				d := gguf.F16ToF32(uint16(blk[0]) | uint16(blk[1])<<8)
				dmin := gguf.F16ToF32(uint16(blk[2]) | uint16(blk[3])<<8)
				e0 := 256*sb + 64*j + l0
				var s0, s1 int32
				for k := range 4 {
					q := word(blk[16+16*i+4*k:])
					s0 += dot4(q&0x0F0F0F0F, xq[e0+4*k:])
					s1 += dot4((q>>4)&0x0F0F0F0F, xq[e0+32+4*k:])
				}
				xb := 8*sb + 2*j
				scw, mw := sc[0], sc[2]
				if j >= 2 {
					scw, mw = sc[1], sc[3]
				}
				c0, c1 := float32((scw>>sh)&0xFF), float32((scw>>(sh+8))&0xFF)
				part := c0*xd[xb]*float32(s0) + c1*xd[xb+1]*float32(s1)
				var mins float32
				if l0 == 0 {
					mins = float32((mw>>sh)&0xFF)*xs[xb] + float32((mw>>(sh+8))&0xFF)*xs[xb+1]
				}
				acc[lane] += d*part - dmin*mins
			}
		}
		y[r] = butterfly32(acc)
	}
	return y
}

// emulateGemvq6 is emulateGemvq for Q6_K, word for word as gemvq6_body
// computes it: half n = i/4 and l0 = 8·(i&3) per lane, the ql/qh/scale
// words, the bit-pair shifts, q − 32 per byte (__vsub4), dp2a lo/hi
// against the int16 activations, one scale and activation block per 8
// elements, no mins.
func emulateGemvq6(raw []byte, rows, cols int, x []float32) []float32 {
	xq, xd, _ := packI16x32(x)
	word := binary.LittleEndian.Uint32
	vsub4 := func(a, b uint32) uint32 { // per-byte a − b, wrapping
		var out uint32
		for k := range 4 {
			out |= uint32(byte(a>>(8*k))-byte(b>>(8*k))) << (8 * k)
		}
		return out
	}
	dp2a := func(xs []int16, q uint32, hi bool, acc int32) int32 { // two int16 times bytes 0,1 (lo) or 2,3 (hi) of q
		sh := 0
		if hi {
			sh = 16
		}
		return acc + int32(xs[0])*int32(int8(q>>sh)) + int32(xs[1])*int32(int8(q>>(sh+8)))
	}
	dot8 := func(q0, q1 uint32, xs []int16) int32 {
		acc := dp2a(xs[0:], q0, false, 0)
		acc = dp2a(xs[2:], q0, true, acc)
		acc = dp2a(xs[4:], q1, false, acc)
		return dp2a(xs[6:], q1, true, acc)
	}
	rowBytes, nsb := cols/256*210, cols/256
	y := make([]float32, rows)
	for r := range rows {
		var acc [32]float32
		for lane := range 32 {
			grp, i := lane>>3, lane&7
			n, l0 := i>>2, 8*(i&3)
			sb8 := 8 * ((i & 3) >> 1)
			for sb := grp; sb < nsb; sb += 4 {
				blk := raw[r*rowBytes+sb*210:]
				ql, qh := blk[64*n+l0:], blk[128+32*n+l0:]
				aw := [2]uint32{word(ql), word(ql[4:])}
				bw := [2]uint32{word(ql[32:]), word(ql[36:])}
				hw := [2]uint32{word(qh), word(qh[4:])}
				s0, s1 := word(blk[192+8*n:]), word(blk[196+8*n:])
				d := gguf.F16ToF32(uint16(blk[208]) | uint16(blk[209])<<8)
				var q [4][2]uint32
				for w := range 2 {
					q[0][w] = vsub4(aw[w]&0x0F0F0F0F|(hw[w]<<4)&0x30303030, 0x20202020)
					q[1][w] = vsub4(bw[w]&0x0F0F0F0F|(hw[w]<<2)&0x30303030, 0x20202020)
					q[2][w] = vsub4((aw[w]>>4)&0x0F0F0F0F|hw[w]&0x30303030, 0x20202020)
					q[3][w] = vsub4((bw[w]>>4)&0x0F0F0F0F|(hw[w]>>2)&0x30303030, 0x20202020)
				}
				c := [4]float32{float32(int8(s0 >> sb8)), float32(int8(s0 >> (sb8 + 16))), float32(int8(s1 >> sb8)), float32(int8(s1 >> (sb8 + 16)))}
				var part float32
				for m := range 4 {
					e := 256*sb + 128*n + 32*m + l0
					part += c[m] * xd[8*sb+4*n+m] * float32(dot8(q[m][0], q[m][1], xq[e:]))
				}
				acc[lane] += d * part
			}
		}
		y[r] = butterfly32(acc)
	}
	return y
}

// TestGemvqEmulation checks, without a GPU, that gemvq's lane arithmetic
// for each type (emulateGemvq, emulateGemvq6: transcriptions of the
// kernels) computes what gemvqRef says to 1e-5, that the int16 rounding
// costs something but stays within tolGemvq of the exact product, and that
// the emulation does too.
func TestGemvqEmulation(t *testing.T) {
	for _, tc := range []struct {
		typ     gguf.Type
		emulate func(raw []byte, rows, cols int, x []float32) []float32
		seed    uint64
	}{
		{gguf.Q4_K, emulateGemvq, 5},
		{gguf.Q6_K, emulateGemvq6, 6},
	} {
		r := rand.New(rand.NewPCG(tc.seed, 11*tc.seed))
		for _, sh := range []struct{ rows, cols int }{{37, 256}, {20, 1536}, {9, 4096}} {
			name := fmt.Sprintf("%s %dx%d", tc.typ, sh.rows, sh.cols)
			raw := randWeight(r, tc.typ, sh.rows, sh.cols)
			x := randVec(r, sh.cols, 1)
			emu, ref := tc.emulate(raw, sh.rows, sh.cols, x), gemvqRef(tc.typ, raw, sh.rows, sh.cols, x)
			if e, err := relErr(emu, ref); err != nil || e > 1e-5 {
				t.Errorf("%s: emulated gemvq vs its float64 reference: %.3g (tol 1e-5) %v", name, e, err)
			}
			exact := refMatMul(tc.typ, raw, sh.rows, sh.cols, x, 1)
			if e, err := relErr(ref, exact); err != nil || e > tolGemvq || e == 0 {
				t.Errorf("%s: int16 reference vs the exact product: %.3g (want in (0, %.0g]) %v", name, e, tolGemvq, err)
			} else {
				t.Logf("%s: int16 activations cost %.2g relative", name, e)
			}
			if e, err := relErr(emu, exact); err != nil || e > tolGemvq {
				t.Errorf("%s: emulated gemvq vs the exact product: %.3g (tol %.0g) %v", name, e, tolGemvq, err)
			}
		}
	}
}
