// Package sample turns logits into tokens: greedy, temperature, top-k,
// top-p, min-p and repetition penalty, with a seeded generator so a run is
// reproducible; and stop handling (end-of-generation ids, stop strings).
package sample

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params selects the sampling rule. The zero value is greedy decoding.
type Params struct {
	Temperature   float32 // 0 = greedy (argmax after penalties)
	TopK          int     // keep the k most likely tokens; 0 = off
	TopP          float32 // keep the smallest set with probability ≥ TopP; 0 or 1 = off
	MinP          float32 // drop tokens below MinP × the top probability; 0 = off
	RepeatPenalty float32 // > 1 discourages tokens seen in the last RepeatLastN; 0 or 1 = off
	RepeatLastN   int     // history window for RepeatPenalty; 0 = 64, -1 = all
	Seed          uint64
}

// Validate reports the first out-of-range parameter.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || isNaN(p.Temperature):
		return fmt.Errorf("sample: temperature %v must be ≥ 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top-k %d must be ≥ 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || isNaN(p.TopP):
		return fmt.Errorf("sample: top-p %v must be in [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || isNaN(p.MinP):
		return fmt.Errorf("sample: min-p %v must be in [0, 1]", p.MinP)
	case p.RepeatPenalty < 0 || isNaN(p.RepeatPenalty):
		return fmt.Errorf("sample: repetition penalty %v must be > 0 (1 = off)", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("sample: repeat-last-n %d must be ≥ -1", p.RepeatLastN)
	}
	return nil
}

func isNaN(f float32) bool { return f != f }

// Sampler draws tokens according to Params. Not safe for concurrent use.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	work []float32
	cand []cand
	seen map[int32]bool
	ids  []int32 // the penalised ids of the last call
}

type cand struct {
	id int32
	p  float32 // logit, then probability
}

// New returns a Sampler whose random stream is fixed by p.Seed.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15)), seen: map[int32]bool{}}, nil
}

// Sample picks the next token from logits (one per vocabulary entry; not
// modified) given the tokens so far (for the repetition penalty).
//
// Order: repetition penalty, then greedy argmax if Temperature is 0;
// otherwise logits/temperature, top-k, softmax, top-p, min-p, renormalise
// and draw. Empty logits give -1.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	if len(logits) == 0 {
		return -1
	}
	p := s.p
	lg := logits
	if pen, ids := s.penalty(history, len(logits)); ids != nil {
		s.work = append(s.work[:0], logits...)
		lg = s.work
		penalise(lg, pen, ids)
	}
	if p.Temperature == 0 {
		return Argmax(lg)
	}

	c := s.cand[:0]
	if p.TopK > 0 && p.TopK < len(lg) {
		c = topK(c, lg, p.TopK)
	} else {
		for i, v := range lg {
			c = append(c, cand{int32(i), v})
		}
	}
	return s.draw(c, len(lg))
}

// SampleFrom is Sample over a logits source that may hold the row
// elsewhere (on a device): greedy asks it for the penalised argmax, and a
// top-k of 0 < TopK < Len for the penalised candidates; the rest of the
// draw is Sample's own code, so for the same seed the token is the one
// Sample would pick from src.All(). Whatever the source declines (ok
// false) falls back to Sample(src.All(), history). SampleFrom is Query,
// Ask and Finish in a row.
func (s *Sampler) SampleFrom(src Logits, history []int32) int32 {
	n := src.Len()
	if n == 0 {
		return -1
	}
	if q, ok := s.Query(n, history); ok {
		if id, ok := s.Finish(q, Ask(src, q), n); ok {
			return id
		}
	}
	return s.Sample(src.All(), history)
}

// Query returns what SampleFrom asks of an n-entry row given history, and
// false when it reads the whole row instead (a temperature without a top-k
// below n). q.IDs is the sampler's own buffer: valid until its next call.
func (s *Sampler) Query(n int, history []int32) (Query, bool) {
	p := s.p
	if n <= 0 || p.Temperature != 0 && (p.TopK <= 0 || p.TopK >= n) {
		return Query{}, false
	}
	pen, ids := s.penalty(history, n)
	q := Query{Penalty: pen, IDs: ids}
	if p.Temperature != 0 {
		q.K = p.TopK
	}
	return q, true
}

// Finish draws the token from a, a source's answer to q (from Query over
// the same n-entry row, with no other call of s between): the token
// SampleFrom would draw. False when a does not answer q (declined, or of
// the wrong size): nothing was drawn, and the caller falls back to Sample
// over the whole row.
func (s *Sampler) Finish(q Query, a Answer, n int) (int32, bool) {
	if !a.OK {
		return -1, false
	}
	if q.K == 0 {
		return a.ID, a.ID >= 0 && int(a.ID) < n
	}
	if len(a.Top) != q.K || len(a.Vals) != q.K {
		return -1, false
	}
	c := s.cand[:0]
	for i, id := range a.Top {
		c = append(c, cand{id, a.Vals[i]})
	}
	slices.SortFunc(c, func(a, b cand) int { return cmp.Compare(a.id, b.id) }) // topK's order
	return s.draw(c, n), true
}

// penalty returns the repetition penalty and the distinct vocabulary ids
// of history's window it applies to (ids outside [0, n) dropped, first
// occurrences in order); ids is nil when the penalty is off.
func (s *Sampler) penalty(history []int32, n int) (float32, []int32) {
	p := s.p
	if p.RepeatPenalty <= 0 || p.RepeatPenalty == 1 || len(history) == 0 {
		return 1, nil
	}
	w := p.RepeatLastN
	if w == 0 {
		w = 64
	}
	h := history
	if w > 0 && len(h) > w {
		h = h[len(h)-w:]
	}
	clear(s.seen)
	ids := s.ids[:0]
	for _, t := range h {
		if t < 0 || int(t) >= n || s.seen[t] {
			continue
		}
		s.seen[t] = true
		ids = append(ids, t)
	}
	s.ids = ids
	if ids == nil {
		ids = []int32{} // off only when the penalty is
	}
	return p.RepeatPenalty, ids
}

// penalise applies the CTRL-style repetition penalty in place to each of
// the distinct ids: positive logits shrink, negative ones go further down.
func penalise(lg []float32, pen float32, ids []int32) {
	for _, t := range ids {
		if lg[t] > 0 {
			lg[t] /= pen
		} else {
			lg[t] *= pen
		}
	}
}

// draw finishes a temperature draw from the candidates (logits, in id
// order) of an n-entry vocabulary: softmax of logits/T, min-p, top-p,
// renormalise and draw.
func (s *Sampler) draw(c []cand, n int) int32 {
	p := s.p
	// Softmax of logits/T, max-subtracted, in float64.
	inv := 1 / float64(p.Temperature)
	mx := float64(math.Inf(-1))
	for _, x := range c {
		mx = max(mx, float64(x.p))
	}
	var sum float64
	for i := range c {
		e := math.Exp((float64(c[i].p) - mx) * inv)
		c[i].p = float32(e)
		sum += e
	}
	top := float32(0)
	for i := range c {
		c[i].p = float32(float64(c[i].p) / sum)
		top = max(top, c[i].p)
	}
	if p.MinP > 0 {
		th := p.MinP * top
		c = slices.DeleteFunc(c, func(x cand) bool { return x.p < th })
	}
	if p.TopP > 0 && p.TopP < 1 {
		// Tokens below (1-TopP)/V together hold less than 1-TopP, so the
		// nucleus lies entirely above that bound: filter before sorting.
		th := (1 - p.TopP) / float32(n)
		c = slices.DeleteFunc(c, func(x cand) bool { return x.p < th })
		slices.SortStableFunc(c, func(a, b cand) int { return cmp.Compare(b.p, a.p) })
		var acc float32
		for i := range c {
			acc += c[i].p
			if acc >= p.TopP {
				c = c[:i+1]
				break
			}
		}
	}
	s.cand = c
	var tot float64
	for _, x := range c {
		tot += float64(x.p)
	}
	r := s.rng.Float64() * tot
	for _, x := range c {
		r -= float64(x.p)
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// Argmax returns the index of the largest value (the first on ties).
func Argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// topK keeps the k largest logits (ties: lower id first), in id order.
func topK(dst []cand, lg []float32, k int) []cand {
	h := minHeap(dst[:0])
	for i, v := range lg {
		if len(h) < k {
			heap.Push(&h, cand{int32(i), v})
		} else if v > h[0].p {
			h[0] = cand{int32(i), v}
			heap.Fix(&h, 0)
		}
	}
	slices.SortFunc(h, func(a, b cand) int { return cmp.Compare(a.id, b.id) })
	return h
}

type minHeap []cand

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	if h[i].p != h[j].p {
		return h[i].p < h[j].p
	}
	return h[i].id > h[j].id // among equals, evict the higher id first
}
func (h minHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)   { *h = append(*h, x.(cand)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
