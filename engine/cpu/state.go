package cpu

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// The recurrent state of hybrid models (model.StateBackend): per recurrent
// layer and slot, the conv state [(K-1)][ConvChannels] (oldest input
// first) and one [KeyDim][ValueDim] delta-rule matrix per value head, all
// float32, in two flat slices indexed [layer][slot].

var _ model.StateBackend = (*Backend)(nil)

// stateMemory reports the bytes a new allocation can take; tests replace it.
var stateMemory = kvcache.AvailableMemory

// maxStateDim bounds every StateLayout dimension so that products of two fit
// in an int and a corrupt layout is refused rather than allocated.
const maxStateDim = 1 << 24

type stateStore struct {
	l           model.StateLayout
	conv, delta []float32
}

// AllocState creates the state storage for l, zeroed, replacing any
// previous one. It refuses a layout that does not fit in the memory
// available now, before allocating.
func (b *Backend) AllocState(l model.StateLayout) error {
	b.state = nil
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", l.Layers}, {"Slots", l.Slots}, {"ConvChannels", l.ConvChannels}, {"ConvKernel", l.ConvKernel},
		{"ValueHeads", l.ValueHeads}, {"KeyDim", l.KeyDim}, {"ValueDim", l.ValueDim}} {
		if f.v <= 0 || f.v > maxStateDim {
			return fmt.Errorf("cpu: recurrent state: %s is %d; it must be from 1 to %d", f.name, f.v, maxStateDim)
		}
	}
	conv, ok1 := mul64(uint64(l.Layers), uint64(l.Slots), uint64(l.ConvFloats()))
	delta, ok2 := mul64(uint64(l.Layers), uint64(l.Slots), uint64(l.ValueHeads), uint64(l.KeyDim), uint64(l.ValueDim))
	need, ok3 := mul64(4, conv+delta)
	avail, known := stateMemory()
	if !known {
		avail = 16 << 30
	}
	if !ok1 || !ok2 || !ok3 || need > uint64(avail) || conv+delta > math.MaxInt {
		needS := "more than 8 EiB"
		if ok1 && ok2 && ok3 {
			needS = kvcache.FormatBytes(int64(need))
		}
		return fmt.Errorf("cpu: recurrent state of %d slots (%s per sequence) needs %s, this machine has %s available; run fewer sequences at once",
			l.Slots, kvcache.FormatBytes(l.BytesPerSlot()), needS, kvcache.FormatBytes(avail))
	}
	b.state = &stateStore{l: l, conv: make([]float32, conv), delta: make([]float32, delta)}
	return nil
}

// mul64 multiplies, reporting overflow past MaxInt64.
func mul64(v ...uint64) (uint64, bool) {
	p := uint64(1)
	for _, x := range v {
		hi, lo := bits.Mul64(p, x)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		p = lo
	}
	return p, true
}

// FreeState drops the state storage.
func (b *Backend) FreeState() { b.state = nil }

func (b *Backend) states() *stateStore {
	if b.state == nil {
		panic("cpu: recurrent-state op before AllocState (a hybrid model needs the engine to allocate its state slots)")
	}
	return b.state
}

func (s *stateStore) checkSlot(slot int) {
	if slot < 0 || slot >= s.l.Slots {
		panic(fmt.Sprintf("cpu: state slot %d outside the %d allocated", slot, s.l.Slots))
	}
}

func (s *stateStore) checkLayer(layer int) {
	if layer < 0 || layer >= s.l.Layers {
		panic(fmt.Sprintf("cpu: recurrent layer %d outside the %d of the state layout", layer, s.l.Layers))
	}
}

func (s *stateStore) convOf(layer, slot int) []float32 {
	n := s.l.ConvFloats()
	o := (layer*s.l.Slots + slot) * n
	return s.conv[o : o+n : o+n]
}

func (s *stateStore) deltaOf(layer, slot int) []float32 {
	n := s.l.DeltaFloats()
	o := (layer*s.l.Slots + slot) * n
	return s.delta[o : o+n : o+n]
}

// ClearState zeroes every layer of a slot.
func (b *Backend) ClearState(slot int) {
	s := b.states()
	s.checkSlot(slot)
	for l := range s.l.Layers {
		clear(s.convOf(l, slot))
		clear(s.deltaOf(l, slot))
	}
}

// CopyState copies every layer of slot src into slot dst.
func (b *Backend) CopyState(dst, src int) {
	s := b.states()
	s.checkSlot(dst)
	s.checkSlot(src)
	if dst == src {
		return
	}
	for l := range s.l.Layers {
		copy(s.convOf(l, dst), s.convOf(l, src))
		copy(s.deltaOf(l, dst), s.deltaOf(l, src))
	}
}

// checkStateBatch validates the slots and rows of bt against the state.
func (s *stateStore) checkStateBatch(bt *model.Batch, layer, rows int) {
	s.checkLayer(layer)
	for _, sq := range bt.Seqs {
		s.checkSlot(sq.State)
		if sq.Offset < 0 || sq.NewTokens < 0 || sq.Offset+sq.NewTokens > rows {
			panic(fmt.Sprintf("cpu: sequence rows [%d,%d) outside a %d-row tensor", sq.Offset, sq.Offset+sq.NewTokens, rows))
		}
	}
}

// convChunk is the channel block one worker convolves: its window of K-1
// inputs per channel stays in registers and L1.
const convChunk = 64

// CausalConv runs the depthwise causal conv + SiLU of each sequence's rows,
// continuing from and updating the slot's conv state.
func (b *Backend) CausalConv(dst, x model.Tensor, w model.Weight, layer int, bt *model.Batch) {
	s := b.states()
	d, xs, cw := ten(dst), ten(x), wt(w)
	l := s.l
	ch, K := l.ConvChannels, l.ConvKernel
	if xs.cols != ch || d.cols != ch || d.rows != xs.rows || cw.cols != K || cw.rows != ch {
		panic(fmt.Sprintf("cpu: CausalConv shapes: x %dx%d, dst %dx%d, %s [%d, %d]; want %d channels, kernel %d",
			xs.rows, xs.cols, d.rows, d.cols, cw.info.Name, cw.cols, cw.rows, ch, K))
	}
	s.checkStateBatch(bt, layer, xs.rows)
	wf := cw.floats()
	for _, sq := range bt.Seqs {
		st := s.convOf(layer, sq.State)
		b.pool.parallel(ch, convChunk, func(lo, hi int) {
			for c0 := lo; c0 < hi; c0 += convChunk {
				causalConvBlock(d.Data, xs.Data, wf, st, ch, K, sq.Offset, sq.NewTokens, c0, min(c0+convChunk, hi))
			}
		})
	}
}

// causalConvBlock convolves channels [c0, c1) of rows [off, off+n).
func causalConvBlock(dst, x, w, st []float32, ch, K, off, n, c0, c1 int) {
	m := c1 - c0
	var winBuf [16 * convChunk]float32
	var win []float32
	if (K-1)*m <= len(winBuf) {
		win = winBuf[:(K-1)*m]
	} else {
		win = make([]float32, (K-1)*m)
	}
	// win[i*m+c] is input t-K+1+i of channel c0+c: oldest first.
	for i := 0; i < K-1; i++ {
		copy(win[i*m:(i+1)*m], st[i*ch+c0:i*ch+c1])
	}
	for t := 0; t < n; t++ {
		xr := x[(off+t)*ch+c0 : (off+t)*ch+c1]
		dr := dst[(off+t)*ch+c0 : (off+t)*ch+c1]
		for c := range m {
			wc := w[(c0+c)*K : (c0+c+1)*K]
			acc := wc[K-1] * xr[c]
			for i := 0; i < K-1; i++ {
				acc += wc[i] * win[i*m+c]
			}
			dr[c] = silu(acc)
		}
		// Shift the window by one input (cheap: K-1 is small).
		if K > 1 {
			copy(win, win[m:])
			copy(win[(K-2)*m:], xr)
		}
	}
	for i := 0; i < K-1; i++ {
		copy(st[i*ch+c0:i*ch+c1], win[i*m:(i+1)*m])
	}
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// softplus is torch's: log(1+e^x), x itself above 20.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// l2eps is the epsilon of the q/k l2 normalisation (model.GatedDeltaNet).
const l2eps = 1e-6

// GatedDeltaRule runs the delta-rule recurrence of every (sequence, value
// head) pair in parallel, one token at a time, from and into the slots'
// states (the fast path; deltaRuleRef is the plain form it is tested
// against).
func (b *Backend) GatedDeltaRule(dst, qkv, alpha, beta model.Tensor, g *model.GatedDeltaNet, layer int, bt *model.Batch) {
	b.gatedDeltaRule(dst, qkv, alpha, beta, g, layer, bt, deltaHeadFast)
}

// deltaHead runs the recurrence of one value head over n tokens; q, k and
// v give token t's vectors, out its output, gate its decay exp(g) and beta.
type deltaHead func(S []float32, n, dk, dv int, tok func(t int) (q, k, v, out []float32, decay, beta float32))

func (b *Backend) gatedDeltaRule(dst, qkv, alpha, beta model.Tensor, g *model.GatedDeltaNet, layer int, bt *model.Batch, run deltaHead) {
	s := b.states()
	d, x, al, be := ten(dst), ten(qkv), ten(alpha), ten(beta)
	l := s.l
	Hk, Hv, dk, dv := g.KeyHeads, g.ValueHeads, g.KeyDim, g.ValueDim
	if Hk <= 0 || Hv <= 0 || Hv%Hk != 0 || dk != l.KeyDim || dv != l.ValueDim || Hv != l.ValueHeads || 2*Hk*dk+Hv*dv != l.ConvChannels {
		panic(fmt.Sprintf("cpu: GatedDeltaRule: %d key heads, %d value heads, dims %d/%d do not match the state layout %+v", Hk, Hv, dk, dv, l))
	}
	n := x.rows
	if x.cols != l.ConvChannels || d.rows != n || d.cols != Hv*dv || al.rows != n || al.cols != Hv || be.rows != n || be.cols != Hv {
		panic(fmt.Sprintf("cpu: GatedDeltaRule shapes: qkv %dx%d, alpha %dx%d, beta %dx%d, dst %dx%d",
			x.rows, x.cols, al.rows, al.cols, be.rows, be.cols, d.rows, d.cols))
	}
	s.checkStateBatch(bt, layer, n)
	A, dt := wt(g.A).floats(), wt(g.DtBias).floats()
	if len(A) != Hv || len(dt) != Hv {
		panic(fmt.Sprintf("cpu: GatedDeltaRule: A has %d values and DtBias %d, want %d", len(A), len(dt), Hv))
	}
	ratio := Hv / Hk
	qscale := float32(1 / math.Sqrt(float64(dk)))
	seqs := bt.Seqs
	b.pool.parallel(len(seqs)*Hv, 1, func(lo, hi int) {
		qn, kn := make([]float32, dk), make([]float32, dk)
		for job := lo; job < hi; job++ {
			sq, j := seqs[job/Hv], job%Hv
			kh := j / ratio
			if g.Tiled {
				kh = j % Hk
			}
			S := s.deltaOf(layer, sq.State)[j*dk*dv : (j+1)*dk*dv]
			run(S, sq.NewTokens, dk, dv, func(t int) (q, k, v, out []float32, decay, bet float32) {
				r := sq.Offset + t
				row := x.row(r)
				l2normTo(qn, row[kh*dk:(kh+1)*dk], qscale)
				l2normTo(kn, row[Hk*dk+kh*dk:Hk*dk+(kh+1)*dk], 1)
				v = row[2*Hk*dk+j*dv : 2*Hk*dk+(j+1)*dv]
				gl := float64(A[j]) * softplus(float64(al.row(r)[j])+float64(dt[j]))
				return qn, kn, v, d.row(r)[j*dv : (j+1)*dv], float32(math.Exp(gl)), sigmoid(be.row(r)[j])
			})
		}
	})
}

// l2normTo writes x * rsqrt(sum x^2 + 1e-6) * scale into dst.
func l2normTo(dst, x []float32, scale float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1/math.Sqrt(ss+l2eps)) * scale
	for i, v := range x {
		dst[i] = v * inv
	}
}

// deltaHeadRef is the recurrence written as the formulas read:
// S = exp(g) S; u = beta (v - S^T k); S = S + k u^T; o = S^T q.
func deltaHeadRef(S []float32, n, dk, dv int, tok func(t int) (q, k, v, out []float32, decay, beta float32)) {
	kv := make([]float32, dv)
	u := make([]float32, dv)
	for t := 0; t < n; t++ {
		q, k, v, out, decay, beta := tok(t)
		for i := range S {
			S[i] *= decay
		}
		for j := 0; j < dv; j++ {
			var a float32
			for i := 0; i < dk; i++ {
				a += S[i*dv+j] * k[i]
			}
			kv[j] = a
		}
		for j := range u {
			u[j] = beta * (v[j] - kv[j])
		}
		for i := 0; i < dk; i++ {
			for j := 0; j < dv; j++ {
				S[i*dv+j] += k[i] * u[j]
			}
		}
		for j := 0; j < dv; j++ {
			var a float32
			for i := 0; i < dk; i++ {
				a += S[i*dv+j] * q[i]
			}
			out[j] = a
		}
	}
}

// deltaHeadFast is deltaHeadRef in two passes over S per token, each row
// of S read once per pass: decay and S^T k together, then the rank-one
// update and S^T q together (vectorised kernels where the CPU has them).
func deltaHeadFast(S []float32, n, dk, dv int, tok func(t int) (q, k, v, out []float32, decay, beta float32)) {
	kv := make([]float32, dv)
	for t := 0; t < n; t++ {
		q, k, v, out, decay, beta := tok(t)
		clear(kv)
		for i := 0; i < dk; i++ {
			scaleAxpy(S[i*dv:(i+1)*dv], decay, k[i], kv)
		}
		for j := range kv {
			kv[j] = beta * (v[j] - kv[j])
		}
		clear(out)
		for i := 0; i < dk; i++ {
			axpyAxpy(S[i*dv:(i+1)*dv], kv, k[i], q[i], out)
		}
	}
}

// The two inner loops of deltaHeadFast; amd64 swaps in AVX2 versions.
var (
	scaleAxpy = scaleAxpyGo
	axpyAxpy  = axpyAxpyGo
)

// scaleAxpyGo: row *= s; acc += a*row.
func scaleAxpyGo(row []float32, s, a float32, acc []float32) {
	acc = acc[:len(row)]
	i := 0
	for ; i+4 <= len(row); i += 4 {
		r0, r1, r2, r3 := row[i]*s, row[i+1]*s, row[i+2]*s, row[i+3]*s
		row[i], row[i+1], row[i+2], row[i+3] = r0, r1, r2, r3
		acc[i] += a * r0
		acc[i+1] += a * r1
		acc[i+2] += a * r2
		acc[i+3] += a * r3
	}
	for ; i < len(row); i++ {
		row[i] *= s
		acc[i] += a * row[i]
	}
}

// axpyAxpyGo: row += a*u; acc += c*row.
func axpyAxpyGo(row, u []float32, a, c float32, acc []float32) {
	u = u[:len(row)]
	acc = acc[:len(row)]
	i := 0
	for ; i+4 <= len(row); i += 4 {
		r0, r1, r2, r3 := row[i]+a*u[i], row[i+1]+a*u[i+1], row[i+2]+a*u[i+2], row[i+3]+a*u[i+3]
		row[i], row[i+1], row[i+2], row[i+3] = r0, r1, r2, r3
		acc[i] += c * r0
		acc[i+1] += c * r1
		acc[i+2] += c * r2
		acc[i+3] += c * r3
	}
	for ; i < len(row); i++ {
		row[i] += a * u[i]
		acc[i] += c * row[i]
	}
}

// GatedRMSNorm: for each headDim slice, dst = rmsnorm(x) * w * silu(z).
// dst may be x.
func (b *Backend) GatedRMSNorm(dst, x, z model.Tensor, w model.Weight, headDim int, eps float32) {
	d, s, zt, g := ten(dst), ten(x), ten(z), wt(w).floats()
	if headDim <= 0 || s.cols%headDim != 0 || len(g) != headDim || d.rows != s.rows || d.cols != s.cols || zt.rows != s.rows || zt.cols != s.cols {
		panic(fmt.Sprintf("cpu: GatedRMSNorm shapes: x %dx%d, z %dx%d, dst %dx%d, weight %d, head dim %d",
			s.rows, s.cols, zt.rows, zt.cols, d.rows, d.cols, len(g), headDim))
	}
	b.pool.parallel(s.rows, 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, zr, dr := s.row(r), zt.row(r), d.row(r)
			for h := 0; h < len(xr); h += headDim {
				rmsnorm(dr[h:h+headDim], xr[h:h+headDim], g, eps)
				for i := h; i < h+headDim; i++ {
					dr[i] *= silu(zr[i])
				}
			}
		}
	})
}

// SigmoidMul: x *= sigmoid(gate), gate of x's shape or one column.
func (b *Backend) SigmoidMul(x, gate model.Tensor) {
	s, g := ten(x), ten(gate)
	if g.rows != s.rows || (g.cols != s.cols && g.cols != 1) {
		panic(fmt.Sprintf("cpu: SigmoidMul shapes: x %dx%d, gate %dx%d", s.rows, s.cols, g.rows, g.cols))
	}
	b.pool.parallel(s.rows, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, gr := s.row(r), g.row(r)
			if len(gr) == 1 {
				sg := sigmoid(gr[0])
				for i := range xr {
					xr[i] *= sg
				}
				continue
			}
			for i := range xr {
				xr[i] *= sigmoid(gr[i])
			}
		}
	})
}

// SplitHeads splits each head's [first | second] halves of src into dst1 and dst2.
func (b *Backend) SplitHeads(dst1, dst2, src model.Tensor, heads, headDim int) {
	d1, d2, s := ten(dst1), ten(dst2), ten(src)
	w := heads * headDim
	if heads <= 0 || headDim <= 0 || s.cols != 2*w || d1.cols != w || d2.cols != w || d1.rows != s.rows || d2.rows != s.rows {
		panic(fmt.Sprintf("cpu: SplitHeads shapes: src %dx%d, dst %dx%d and %dx%d, %d heads of %d",
			s.rows, s.cols, d1.rows, d1.cols, d2.rows, d2.cols, heads, headDim))
	}
	for r := 0; r < s.rows; r++ {
		sr, a, c := s.row(r), d1.row(r), d2.row(r)
		for h := range heads {
			copy(a[h*headDim:(h+1)*headDim], sr[2*h*headDim:(2*h+1)*headDim])
			copy(c[h*headDim:(h+1)*headDim], sr[(2*h+1)*headDim:(2*h+2)*headDim])
		}
	}
}
