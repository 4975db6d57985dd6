package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// The hybrid-state ops are checked against float64 loops written straight
// from the formulas of model/state.go, on random inputs, with outputs
// poisoned with NaN. Each case runs two sequences in slots that are not
// 0 and 1, over several batches that split them differently (a prefill
// chunk, then a decode row beside a prefill chunk), so the state carried
// across batches and the per-slot state are checked against one pass over
// each whole sequence from a zero state.

// seqSchedule: per batch, how many new tokens each sequence brings (0 = absent).
var seqSchedule = [][2]int{{5, 3}, {1, 4}, {3, 0}, {1, 1}}

// seqSlots are the slots of the two sequences.
var seqSlots = [2]int{2, 0}

// scheduledBatches yields, for each batch of seqSchedule, the batch and
// for each of its rows the (sequence, position) it holds.
func scheduledBatches() (bs []*model.Batch, rows [][][2]int, total [2]int) {
	for _, sc := range seqSchedule {
		b := &model.Batch{}
		var rs [][2]int
		for s, n := range sc {
			if n == 0 {
				continue
			}
			b.Seqs = append(b.Seqs, model.SeqSpan{Offset: len(b.Tokens), Cached: total[s], NewTokens: n, State: seqSlots[s]})
			for i := range n {
				b.Tokens = append(b.Tokens, 0)
				b.Pos = append(b.Pos, int32(total[s]+i))
				rs = append(rs, [2]int{s, total[s] + i})
			}
			total[s] += n
		}
		bs = append(bs, b)
		rows = append(rows, rs)
	}
	return bs, rows, total
}

func f32Weight(t *testing.T, b *Backend, name string, dims []uint64, data []float32) model.Weight {
	t.Helper()
	w, _ := makeWeight(t, b, name, gguf.F32, dims, data)
	return w
}

// relMax is max|got-want| / max|want|.
func relMax(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	if math.IsNaN(num) || den == 0 {
		return math.Inf(1)
	}
	return num / den
}

func TestCausalConvMatchesReference(t *testing.T) {
	for _, c := range []struct{ ch, K, threads int }{{100, 4, 3}, {64, 2, 1}, {130, 1, 2}, {24, 6, 4}} {
		t.Run(fmt.Sprintf("ch%d_K%d_t%d", c.ch, c.K, c.threads), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.ch), uint64(c.K)))
			b := New(Options{Threads: c.threads})
			defer b.Close()
			l := model.StateLayout{Layers: 2, Slots: 3, ConvChannels: c.ch, ConvKernel: c.K, ValueHeads: 1, KeyDim: 1, ValueDim: 1}
			if err := b.AllocState(l); err != nil {
				t.Fatal(err)
			}
			wdata := randVec(r, c.K*c.ch, 0.5)
			w := f32Weight(t, b, "conv", []uint64{uint64(c.K), uint64(c.ch)}, wdata)
			bs, rows, total := scheduledBatches()
			// Whole-sequence inputs and the float64 reference.
			var in [2][]float32
			var want [2][]float64
			for s := range 2 {
				in[s] = randVec(r, total[s]*c.ch, 1)
				want[s] = make([]float64, total[s]*c.ch)
				for tk := range total[s] {
					for ch := range c.ch {
						var acc float64
						for i := range c.K {
							if src := tk - c.K + 1 + i; src >= 0 {
								acc += float64(wdata[ch*c.K+i]) * float64(in[s][src*c.ch+ch])
							}
						}
						want[s][tk*c.ch+ch] = acc / (1 + math.Exp(-acc))
					}
				}
			}
			const layer = 1
			for bi, bt := range bs {
				n := len(bt.Tokens)
				x := b.NewTensor(n, c.ch).(*Tensor)
				for i, sp := range rows[bi] {
					copy(x.row(i), in[sp[0]][sp[1]*c.ch:(sp[1]+1)*c.ch])
				}
				dst := poisoned(b, n, c.ch)
				b.CausalConv(dst, x, w, layer, bt)
				for i, sp := range rows[bi] {
					if e := relMax(dst.row(i), want[sp[0]][sp[1]*c.ch:(sp[1]+1)*c.ch]); e > 1e-6 {
						t.Fatalf("batch %d row %d (seq %d pos %d): relative error %.3g > 1e-6", bi, i, sp[0], sp[1], e)
					}
				}
			}
			// Layer 0 was never touched; slot 1 neither.
			for _, v := range b.state.convOf(0, 2) {
				if v != 0 {
					t.Fatal("layer 0 state changed")
				}
			}
			for _, v := range b.state.convOf(1, 1) {
				if v != 0 {
					t.Fatal("slot 1 state changed")
				}
			}
		})
	}
}

// gdnRef runs one whole sequence through the gated delta rule in float64
// from a zero state: inputs are rows of qkv [2*Hk*dk + Hv*dv], alpha and
// beta [Hv]; it returns rows of [Hv*dv].
func gdnRef(qkv, alpha, beta []float32, n int, g *model.GatedDeltaNet, A, dt []float32) []float64 {
	Hk, Hv, dk, dv := g.KeyHeads, g.ValueHeads, g.KeyDim, g.ValueDim
	C := 2*Hk*dk + Hv*dv
	out := make([]float64, n*Hv*dv)
	for j := range Hv {
		kh := j / (Hv / Hk)
		if g.Tiled {
			kh = j % Hk
		}
		S := make([]float64, dk*dv)
		for t := range n {
			row := qkv[t*C : (t+1)*C]
			norm := func(x []float32, scale float64) []float64 {
				var ss float64
				for _, v := range x {
					ss += float64(v) * float64(v)
				}
				y := make([]float64, len(x))
				for i, v := range x {
					y[i] = float64(v) / math.Sqrt(ss+1e-6) * scale
				}
				return y
			}
			q := norm(row[kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk)))
			k := norm(row[Hk*dk+kh*dk:Hk*dk+(kh+1)*dk], 1)
			v := row[2*Hk*dk+j*dv : 2*Hk*dk+(j+1)*dv]
			bt := 1 / (1 + math.Exp(-float64(beta[t*Hv+j])))
			x := float64(alpha[t*Hv+j]) + float64(dt[j])
			gl := float64(A[j]) * math.Log(1+math.Exp(x))
			for i := range S {
				S[i] *= math.Exp(gl)
			}
			for c := range dv {
				var kv float64
				for i := range dk {
					kv += S[i*dv+c] * k[i]
				}
				u := bt * (float64(v[c]) - kv)
				for i := range dk {
					S[i*dv+c] += k[i] * u
				}
			}
			for c := range dv {
				var o float64
				for i := range dk {
					o += S[i*dv+c] * q[i]
				}
				out[t*Hv*dv+j*dv+c] = o
			}
		}
	}
	return out
}

func TestGatedDeltaRuleMatchesReference(t *testing.T) {
	cases := []struct {
		Hk, Hv, dk, dv, threads int
		tiled                   bool
	}{
		{2, 4, 16, 16, 3, true},
		{2, 4, 16, 16, 2, false},
		{1, 1, 8, 24, 1, false},
		{3, 6, 32, 20, 4, true},
		{2, 2, 12, 8, 5, false},
	}
	paths := []struct {
		name string
		run  deltaHead
	}{{"fast", deltaHeadFast}, {"plain", deltaHeadRef}}
	for _, c := range cases {
		for _, p := range paths {
			t.Run(fmt.Sprintf("%s_Hk%d_Hv%d_dk%d_dv%d_tiled%v", p.name, c.Hk, c.Hv, c.dk, c.dv, c.tiled), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(c.Hk*100+c.Hv), uint64(c.dk*100+c.dv)))
				b := New(Options{Threads: c.threads})
				defer b.Close()
				C := 2*c.Hk*c.dk + c.Hv*c.dv
				l := model.StateLayout{Layers: 3, Slots: 3, ConvChannels: C, ConvKernel: 4, ValueHeads: c.Hv, KeyDim: c.dk, ValueDim: c.dv}
				if err := b.AllocState(l); err != nil {
					t.Fatal(err)
				}
				A := make([]float32, c.Hv)
				dt := randVec(r, c.Hv, 1)
				for i := range A {
					A[i] = -float32(math.Exp(r.NormFloat64()))
				}
				g := &model.GatedDeltaNet{KeyHeads: c.Hk, ValueHeads: c.Hv, KeyDim: c.dk, ValueDim: c.dv, Tiled: c.tiled,
					A: f32Weight(t, b, "A", []uint64{uint64(c.Hv)}, A), DtBias: f32Weight(t, b, "dt", []uint64{uint64(c.Hv)}, dt)}
				bs, rows, total := scheduledBatches()
				var qkv, al, be [2][]float32
				var want [2][]float64
				for s := range 2 {
					qkv[s] = randVec(r, total[s]*C, 1)
					al[s] = randVec(r, total[s]*c.Hv, 1)
					be[s] = randVec(r, total[s]*c.Hv, 2)
					want[s] = gdnRef(qkv[s], al[s], be[s], total[s], g, A, dt)
				}
				const layer = 2
				O := c.Hv * c.dv
				for bi, bt := range bs {
					n := len(bt.Tokens)
					x, a, bb := b.NewTensor(n, C).(*Tensor), b.NewTensor(n, c.Hv).(*Tensor), b.NewTensor(n, c.Hv).(*Tensor)
					for i, sp := range rows[bi] {
						s, pos := sp[0], sp[1]
						copy(x.row(i), qkv[s][pos*C:(pos+1)*C])
						copy(a.row(i), al[s][pos*c.Hv:(pos+1)*c.Hv])
						copy(bb.row(i), be[s][pos*c.Hv:(pos+1)*c.Hv])
					}
					dst := poisoned(b, n, O)
					b.gatedDeltaRule(dst, x, a, bb, g, layer, bt, p.run)
					// Tolerance: float32 accumulation over a few dozen
					// tokens of a contracting recurrence.
					const tol = 2e-5
					for i, sp := range rows[bi] {
						if e := relMax(dst.row(i), want[sp[0]][sp[1]*O:(sp[1]+1)*O]); e > tol {
							t.Fatalf("batch %d row %d (seq %d pos %d): relative error %.3g > %g", bi, i, sp[0], sp[1], e, tol)
						}
					}
				}
			})
		}
	}
}

// TestGatedDeltaRuleFastEqualsPlain runs both paths through the backend
// on the same long random input (a prefill of 300 tokens, then decode
// rows), state included, and bounds their difference.
func TestGatedDeltaRuleFastEqualsPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const Hk, Hv, dk, dv, n = 2, 4, 64, 64, 300
	C := 2*Hk*dk + Hv*dv
	l := model.StateLayout{Layers: 1, Slots: 1, ConvChannels: C, ConvKernel: 4, ValueHeads: Hv, KeyDim: dk, ValueDim: dv}
	qkv, al, be := randVec(r, n*C, 1), randVec(r, n*Hv, 1), randVec(r, n*Hv, 2)
	A, dt := make([]float32, Hv), randVec(r, Hv, 1)
	for i := range A {
		A[i] = -float32(math.Exp(r.NormFloat64() - 2)) // slow decay: long memory
	}
	var outs [2][]float32
	var states [2][]float32
	for pi, run := range []deltaHead{deltaHeadFast, deltaHeadRef} {
		b := New(Options{Threads: 4})
		if err := b.AllocState(l); err != nil {
			t.Fatal(err)
		}
		g := &model.GatedDeltaNet{KeyHeads: Hk, ValueHeads: Hv, KeyDim: dk, ValueDim: dv, Tiled: true,
			A: f32Weight(t, b, "A", []uint64{Hv}, A), DtBias: f32Weight(t, b, "dt", []uint64{Hv}, dt)}
		for off, step := 0, n-20; off < n; off, step = off+step, 1 {
			bt := &model.Batch{Tokens: make([]int32, step), Pos: make([]int32, step), Seqs: []model.SeqSpan{{Cached: off, NewTokens: step}}}
			dst := poisoned(b, step, Hv*dv)
			b.gatedDeltaRule(dst, tensorOf(b, step, C, qkv[off*C:]), tensorOf(b, step, Hv, al[off*Hv:]), tensorOf(b, step, Hv, be[off*Hv:]), g, 0, bt, run)
			outs[pi] = append(outs[pi], dst.Data...)
		}
		states[pi] = b.state.deltaOf(0, 0)
		b.Close()
	}
	want := make([]float64, len(outs[1]))
	for i, v := range outs[1] {
		want[i] = float64(v)
	}
	if e := relMax(outs[0], want); e > 1e-5 {
		t.Errorf("outputs: fast vs plain relative error %.3g > 1e-5", e)
	}
	ws := make([]float64, len(states[1]))
	for i, v := range states[1] {
		ws[i] = float64(v)
	}
	if e := relMax(states[0], ws); e > 1e-5 {
		t.Errorf("state: fast vs plain relative error %.3g > 1e-5", e)
	}
}

func TestStateClearAndCopy(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const ch, K = 40, 3
	if err := b.AllocState(model.StateLayout{Layers: 2, Slots: 3, ConvChannels: ch, ConvKernel: K, ValueHeads: 1, KeyDim: 1, ValueDim: 1}); err != nil {
		t.Fatal(err)
	}
	w := f32Weight(t, b, "conv", []uint64{K, ch}, randVec(r, K*ch, 1))
	run := func(slot, cached int, x []float32) []float32 {
		n := len(x) / ch
		bt := &model.Batch{Tokens: make([]int32, n), Pos: make([]int32, n), Seqs: []model.SeqSpan{{Cached: cached, NewTokens: n, State: slot}}}
		dst := poisoned(b, n, ch)
		b.CausalConv(dst, tensorOf(b, n, ch, x), w, 1, bt)
		return dst.Data
	}
	prefix, next := randVec(r, 4*ch, 1), randVec(r, 2*ch, 1)
	run(0, 0, prefix)
	b.CopyState(2, 0)
	a := run(0, 4, next)
	c := run(2, 4, next)
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("copied slot differs at %d: %v vs %v", i, a[i], c[i])
		}
	}
	// ClearState: slot 2 now behaves like a fresh sequence (slot 1).
	b.ClearState(2)
	fresh, cleared := run(1, 0, next), run(2, 0, next)
	for i := range fresh {
		if fresh[i] != cleared[i] {
			t.Fatalf("cleared slot differs from a fresh one at %d", i)
		}
	}
}

func TestGatedRMSNormSigmoidMulSplitHeads(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := New(Options{Threads: 3})
	defer b.Close()
	const rows, heads, hd = 5, 3, 16
	const eps = 1e-6
	x, z := randVec(r, rows*heads*hd, 1), randVec(r, rows*heads*hd, 2)
	wv := randVec(r, hd, 1)
	w := f32Weight(t, b, "norm", []uint64{hd}, wv)
	want := make([]float64, len(x))
	for h := 0; h < len(x); h += hd {
		var ss float64
		for _, v := range x[h : h+hd] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/hd+eps)
		for i := range hd {
			zz := float64(z[h+i])
			want[h+i] = float64(x[h+i]) * inv * float64(wv[i]) * zz / (1 + math.Exp(-zz))
		}
	}
	dst := poisoned(b, rows, heads*hd)
	b.GatedRMSNorm(dst, tensorOf(b, rows, heads*hd, x), tensorOf(b, rows, heads*hd, z), w, hd, eps)
	if e := relMax(dst.Data, want); e > 1e-6 {
		t.Errorf("GatedRMSNorm: relative error %.3g > 1e-6", e)
	}
	// In place.
	xt := tensorOf(b, rows, heads*hd, x)
	b.GatedRMSNorm(xt, xt, tensorOf(b, rows, heads*hd, z), w, hd, eps)
	if e := relMax(xt.Data, want); e > 1e-6 {
		t.Errorf("GatedRMSNorm in place: relative error %.3g > 1e-6", e)
	}

	for _, gcols := range []int{heads * hd, 1} {
		g := randVec(r, rows*gcols, 2)
		xt := tensorOf(b, rows, heads*hd, x)
		b.SigmoidMul(xt, tensorOf(b, rows, gcols, g))
		for i := range x {
			gv := float64(g[i/(heads*hd)*gcols+min(i%(heads*hd), gcols-1)])
			want[i] = float64(x[i]) / (1 + math.Exp(-gv))
		}
		if e := relMax(xt.Data, want); e > 1e-6 {
			t.Errorf("SigmoidMul gate cols %d: relative error %.3g > 1e-6", gcols, e)
		}
	}

	src := randVec(r, rows*heads*2*hd, 1)
	d1, d2 := poisoned(b, rows, heads*hd), poisoned(b, rows, heads*hd)
	b.SplitHeads(d1, d2, tensorOf(b, rows, 2*heads*hd, src), heads, hd)
	for rr := range rows {
		for h := range heads {
			for i := range hd {
				s := rr*2*heads*hd + h*2*hd + i
				if d1.Data[rr*heads*hd+h*hd+i] != src[s] || d2.Data[rr*heads*hd+h*hd+i] != src[s+hd] {
					t.Fatalf("SplitHeads row %d head %d dim %d wrong", rr, h, i)
				}
			}
		}
	}
}

func TestAllocStateRefusals(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	defer func(f func() (int64, bool)) { stateMemory = f }(stateMemory)
	stateMemory = func() (int64, bool) { return 1 << 20, true }
	ok := model.StateLayout{Layers: 2, Slots: 2, ConvChannels: 64, ConvKernel: 4, ValueHeads: 2, KeyDim: 16, ValueDim: 16}
	if err := b.AllocState(ok); err != nil {
		t.Fatalf("small state refused: %v", err)
	}
	big := ok
	big.Slots = 1000
	huge := ok
	huge.Layers, huge.Slots, huge.ValueHeads, huge.KeyDim, huge.ValueDim = 1<<24, 1<<24, 1<<24, 1<<24, 1<<24
	zero := ok
	zero.KeyDim = 0
	for _, c := range []struct {
		l    model.StateLayout
		want string
	}{{big, "1000 slots"}, {huge, "more than 8 EiB"}, {zero, "KeyDim is 0"}} {
		err := b.AllocState(c.l)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AllocState(%+v) = %v, want an error containing %q", c.l, err, c.want)
		}
	}
	// A refused allocation leaves no state: ops say so.
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "before AllocState") {
			t.Errorf("op without state: panic %v, want one naming AllocState", r)
		}
	}()
	b.ClearState(0)
}

// TestDeltaKernelsAgree: the vector kernels deltaHeadFast runs on (AVX2
// on amd64) equal the Go loops to float32 rounding (FMA) at every length,
// tails included.
func TestDeltaKernelsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for n := 0; n <= 41; n++ {
		row, u, acc := randVec(r, n, 1), randVec(r, n, 1), randVec(r, n, 1)
		s, a, c := float32(r.Float64()), float32(r.NormFloat64()), float32(r.NormFloat64())
		r1, a1 := append([]float32(nil), row...), append([]float32(nil), acc...)
		r2, a2 := append([]float32(nil), row...), append([]float32(nil), acc...)
		scaleAxpy(r1, s, a, a1)
		scaleAxpyGo(r2, s, a, a2)
		axpyAxpy(r1, u, a, c, a1)
		axpyAxpyGo(r2, u, a, c, a2)
		for i := range n {
			if math.Abs(float64(r1[i]-r2[i])) > 1e-6*(1+math.Abs(float64(r2[i]))) || math.Abs(float64(a1[i]-a2[i])) > 1e-5*(1+math.Abs(float64(a2[i]))) {
				t.Fatalf("n=%d i=%d: row %v vs %v, acc %v vs %v", n, i, r1[i], r2[i], a1[i], a2[i])
			}
		}
	}
}
