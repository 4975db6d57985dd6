package cpu

import (
	"math"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// f32Store keeps K and V in float32 with the pool's page geometry
// ([page][kv_head][slot][head_dim]). It exists for reference runs
// (Options.F32KV): comparing whole-model logits with a float32 framework
// must not include the rounding of a 16-bit or FP8 cache.
type f32Store struct {
	l    kvcache.Layout
	k, v [][]float32 // per layer
}

func newF32Store(l kvcache.Layout) *f32Store {
	s := &f32Store{l: l, k: make([][]float32, l.Layers), v: make([][]float32, l.Layers)}
	n := l.Pages * l.KVHeads * l.PageSize * l.HeadDim
	for i := range s.k {
		s.k[i], s.v[i] = make([]float32, n), make([]float32, n)
	}
	return s
}

func (s *f32Store) off(page, head, slot int) int {
	return ((page*s.l.KVHeads+head)*s.l.PageSize + slot) * s.l.HeadDim
}

func (s *f32Store) WriteRow(layer, page, slot int, k, v []float32) {
	d := s.l.HeadDim
	for h := 0; h < s.l.KVHeads; h++ {
		o := s.off(page, h, slot)
		copy(s.k[layer][o:o+d], k[h*d:(h+1)*d])
		copy(s.v[layer][o:o+d], v[h*d:(h+1)*d])
	}
}

// Attend: softmax(scale·q·k) weighted sum of v over the first n tokens,
// per query head (GQA: head h reads kv head h/(heads/KVHeads)), float32
// accumulation with max subtraction.
func (s *f32Store) Attend(out, q []float32, layer int, pages []int32, n, heads int, scale float32) {
	d, ps := s.l.HeadDim, s.l.PageSize
	g := heads / s.l.KVHeads
	scores := make([]float32, n)
	for h := 0; h < heads; h++ {
		qh := q[h*d : (h+1)*d]
		kvh := h / g
		mx := float32(math.Inf(-1))
		for t := 0; t < n; t++ {
			o := s.off(int(pages[t/ps]), kvh, t%ps)
			sc := scale * dotF32(qh, s.k[layer][o:o+d])
			scores[t] = sc
			mx = max(mx, sc)
		}
		var sum float32
		for t := range scores {
			scores[t] = float32(math.Exp(float64(scores[t] - mx)))
			sum += scores[t]
		}
		oh := out[h*d : (h+1)*d]
		clear(oh)
		for t := 0; t < n; t++ {
			o := s.off(int(pages[t/ps]), kvh, t%ps)
			w := scores[t] / sum
			for i, x := range s.v[layer][o : o+d] {
				oh[i] += w * x
			}
		}
	}
}

// AttendRows is Attend for consecutive causal query rows.
func (s *f32Store) AttendRows(out, q []float32, rows, layer int, pages []int32, first, heads int, scale float32) {
	w := heads * s.l.HeadDim
	for r := 0; r < rows; r++ {
		s.Attend(out[r*w:(r+1)*w], q[r*w:(r+1)*w], layer, pages, first+r+1, heads, scale)
	}
}
