package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// keyedSource computes argmax and top-k the way the GPU kernels do
// (gpu/kernels/sample.cu): every element ranked by a 64-bit key of an
// order-preserving map of the value (NaN lowest, -0 equal to +0) and ~id,
// the largest keys taken by a full sort. It returns candidates shuffled,
// as a device may. It checks the penalty ids the sampler hands it.
type keyedSource struct {
	t     *testing.T
	lg    []float32
	rng   *rand.Rand
	calls int
}

func ordKey(i int, v float32) uint64 {
	var o uint32
	switch {
	case v != v:
		o = 0
	default:
		if v == 0 {
			v = 0
		}
		u := math.Float32bits(v)
		if u&0x80000000 != 0 {
			o = ^u
		} else {
			o = u | 0x80000000
		}
	}
	return uint64(o)<<32 | uint64(^uint32(i))
}

func (k *keyedSource) Len() int { return len(k.lg) }

func (k *keyedSource) penalised(pen float32, ids []int32) []float32 {
	lg := append([]float32(nil), k.lg...)
	seen := map[int32]bool{}
	for _, t := range ids {
		if t < 0 || int(t) >= len(lg) || seen[t] {
			k.t.Fatalf("sampler passed penalty id %d (duplicate or outside %d)", t, len(lg))
		}
		seen[t] = true
		if lg[t] > 0 {
			lg[t] /= pen
		} else {
			lg[t] *= pen
		}
	}
	return lg
}

func (k *keyedSource) sorted(pen float32, ids []int32) ([]uint64, []float32) {
	lg := k.penalised(pen, ids)
	keys := make([]uint64, len(lg))
	for i, v := range lg {
		keys[i] = ordKey(i, v)
	}
	slices.SortFunc(keys, func(a, b uint64) int { return cmp.Compare(b, a) })
	return keys, lg
}

func (k *keyedSource) Argmax(pen float32, ids []int32) (int32, bool) {
	k.calls++
	keys, lg := k.sorted(pen, ids)
	if lg[0] != lg[0] {
		return 0, true
	}
	return int32(^uint32(keys[0])), true
}

func (k *keyedSource) TopK(n int, pen float32, ids []int32) ([]int32, []float32, bool) {
	k.calls++
	keys, lg := k.sorted(pen, ids)
	top, vals := make([]int32, n), make([]float32, n)
	for i := range n {
		top[i] = int32(^uint32(keys[i]))
		vals[i] = lg[top[i]]
	}
	k.rng.Shuffle(n, func(i, j int) { top[i], top[j], vals[i], vals[j] = top[j], top[i], vals[j], vals[i] })
	return top, vals, true
}

func (k *keyedSource) All() []float32 { return k.lg }

// decliner serves nothing but the whole row.
type decliner []float32

func (d decliner) Len() int                                              { return len(d) }
func (d decliner) Argmax(float32, []int32) (int32, bool)                 { return 0, false }
func (d decliner) All() []float32                                        { return d }
func (d decliner) TopK(int, float32, []int32) ([]int32, []float32, bool) { return nil, nil, false }

// randomRow draws logits with many exact ties (values on a coarse grid),
// signed zeros and, when nan is set, NaNs (index 0 included sometimes).
// One row in four is flat: signed zeros and a few small positive and
// negative values, so that the argmax and the top-k boundary fall among
// zeros of both signs.
func randomRow(r *rand.Rand, n int, nan bool) []float32 {
	lg := make([]float32, n)
	if r.IntN(4) == 0 {
		for i := range lg {
			switch x := r.IntN(100); {
			case x < 3:
				lg[i] = float32(r.IntN(3) + 1)
			case x < 20:
				lg[i] = -float32(r.IntN(3) + 1)
			default:
				lg[i] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
			}
		}
		return lg
	}
	for i := range lg {
		switch x := r.IntN(100); {
		case x < 40:
			lg[i] = float32(r.IntN(16)-8) / 2 // ties
		case x < 45:
			lg[i] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
		case x < 48 && nan:
			lg[i] = float32(math.NaN())
		default:
			lg[i] = float32(r.NormFloat64() * 3)
		}
	}
	if nan && r.IntN(4) == 0 {
		lg[0] = float32(math.NaN())
	}
	return lg
}

// TestSampleFromMatchesSample: for the same seed, SampleFrom over a host
// slice, over the GPU kernels' algorithm, and over a source that declines
// everything draws exactly Sample's tokens, step after step, with penalty
// windows holding duplicates and ids outside the vocabulary.
func TestSampleFromMatchesSample(t *testing.T) {
	params := []Params{
		{},
		{RepeatPenalty: 1.3},
		{RepeatPenalty: 0.7, RepeatLastN: 5},
		{RepeatPenalty: 1.5, RepeatLastN: -1},
		{Temperature: 0.8, TopK: 1},
		{Temperature: 0.8, TopK: 40},
		{Temperature: 1.2, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1},
		{Temperature: 0.7, TopK: 256, TopP: 0.95, RepeatPenalty: 1.2, RepeatLastN: 8},
		{Temperature: 1, TopK: 299}, // TopK = vocab-1
		{Temperature: 1, TopK: 300}, // TopK = vocab: no top-k
		{Temperature: 0.9},          // no top-k
	}
	const vocab = 300
	for pi, p := range params {
		for seed := range uint64(25) {
			p.Seed = seed
			nan := p.Temperature == 0 && seed%2 == 1 // host top-k with NaN has no total order
			r := rand.New(rand.NewPCG(seed, uint64(pi)))
			ref, _ := New(p)
			viaSlice, _ := New(p)
			viaKeys, _ := New(p)
			viaDecl, _ := New(p)
			keyed := &keyedSource{t: t, rng: rand.New(rand.NewPCG(seed, 7))}
			hist := []int32{-3, vocab + 5, 7, 7}
			for step := range 30 {
				lg := randomRow(r, vocab, nan)
				keep := append([]float32(nil), lg...)
				want := ref.Sample(lg, hist)
				keyed.lg = lg
				got := [3]int32{viaSlice.SampleFrom(Slice(lg), hist), viaKeys.SampleFrom(keyed, hist), viaDecl.SampleFrom(decliner(lg), hist)}
				for i, g := range got {
					if g != want {
						t.Fatalf("params %+v step %d: source %d drew %d, Sample drew %d", p, step, i, g, want)
					}
				}
				for i := range lg {
					if math.Float32bits(lg[i]) != math.Float32bits(keep[i]) {
						t.Fatalf("params %+v: logits[%d] changed", p, i)
					}
				}
				hist = append(hist, want, want, int32(r.IntN(vocab+20)-10))
			}
			served := p.Temperature == 0 || (p.TopK > 0 && p.TopK < vocab)
			if served != (keyed.calls > 0) {
				t.Errorf("params %+v: the source served %d requests", p, keyed.calls)
			}
		}
	}
}

func TestSampleFromEmpty(t *testing.T) {
	s, _ := New(Params{Temperature: 1, TopK: 5})
	if got := s.SampleFrom(Slice(nil), []int32{1}); got != -1 {
		t.Errorf("empty source drew %d, want -1", got)
	}
}

// TestQueryFinish checks the two halves of SampleFrom that a caller uses
// to answer many rows in one call: Query says what to ask (or that the
// whole row is needed), Ask answers it from a source, and Finish draws
// the token Sample draws from the whole row, step after step with the
// same seed; a malformed answer is refused without consuming a draw.
func TestQueryFinish(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const n = 3000
	lg := make([]float32, n)
	for i := range lg {
		lg[i] = float32(r.IntN(40)) / 4 // ties
	}
	for _, c := range []struct {
		p     Params
		query bool
		k     int
	}{
		{Params{}, true, 0},
		{Params{RepeatPenalty: 1.4}, true, 0},
		{Params{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.2, Seed: 2}, true, 40},
		{Params{Temperature: 1, TopK: 1}, true, 1},
		{Params{Temperature: 0.7, Seed: 3}, false, 0},          // no top-k: the whole row
		{Params{Temperature: 0.7, TopK: n, Seed: 3}, false, 0}, // top-k of all: the whole row
	} {
		s, _ := New(c.p)
		ref, _ := New(c.p)
		hist := []int32{5, 7, 5, int32(Argmax(lg))}
		for step := range 10 {
			q, ok := s.Query(n, hist)
			if ok != c.query || ok && q.K != c.k {
				t.Fatalf("%+v: Query %+v %v, want ok %v k %d", c.p, q, ok, c.query, c.k)
			}
			want := ref.Sample(lg, hist)
			if !ok {
				break
			}
			if (c.p.RepeatPenalty > 1) != (q.IDs != nil) || q.IDs != nil && q.Penalty != c.p.RepeatPenalty {
				t.Fatalf("%+v: penalty %v over %v", c.p, q.Penalty, q.IDs)
			}
			// A wrong-sized or declined answer is refused and draws nothing.
			bad := []Answer{{}, {OK: true, ID: n}, {OK: true, ID: -1}}
			if c.k > 0 {
				bad = []Answer{{}, {OK: true, Top: make([]int32, c.k+1), Vals: make([]float32, c.k+1)},
					{OK: true, Top: make([]int32, c.k), Vals: make([]float32, c.k-1)}}
			}
			for _, a := range bad {
				if _, ok := s.Finish(q, a, n); ok {
					t.Fatalf("%+v: Finish accepted %+v", c.p, a)
				}
			}
			got, ok := s.Finish(q, Ask(Slice(lg), q), n)
			if !ok || got != want {
				t.Fatalf("%+v step %d: Finish %d (ok %v), Sample %d", c.p, step, got, ok, want)
			}
			hist = append(hist, want)
		}
	}
}
