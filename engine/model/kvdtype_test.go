package model_test

import (
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// TestSmolLM2KVDtypes runs the SmolLM2 reference prompts with the KV cache
// in each pool dtype (the serving path, kvcache.HostStore) and bounds the
// logits error against transformers' float32 run. The bounds are about
// twice the errors measured on 2026-11-29 (logged with -v), so a broken
// codec or scale rule fails while honest rounding passes.
func TestSmolLM2KVDtypes(t *testing.T) {
	p := smolPath(t)
	fx := readFixture(t, "smollm2")
	m, _ := loadModel(t, p, 2, false)
	tests := []struct {
		dt  kvcache.DType
		tol float64
	}{
		{kvcache.F16, 3e-3},       // measured 1.34e-3
		{kvcache.BF16, 1.1e-2},    // measured 5.3e-3
		{kvcache.FP8E4M3, 1.3e-1}, // measured 6.6e-2
		{kvcache.FP8E5M2, 1.7e-1}, // measured 8.4e-2
	}
	for _, tc := range tests {
		off, worst := 0, 0.0
		for _, e := range fx.Logits {
			pr := fx.Prompts[e.Prompt]
			s := newSession(t, m, len(pr), tc.dt)
			got := s.feed(t, pr, e.Rows)
			for i := range e.Rows {
				re := relErr(got[i*fx.Vocab:(i+1)*fx.Vocab], fx.data[off:off+fx.Vocab])
				off += fx.Vocab
				worst = max(worst, re)
			}
		}
		// Greedy agreement with the reference continuation (reported only:
		// lossy caches may legitimately diverge after a near-tie).
		pr := fx.Prompts[fx.Greedy.Prompt]
		s := newSession(t, m, len(pr)+len(fx.Greedy.Tokens), tc.dt)
		lg := s.feed(t, pr, []int{len(pr) - 1})
		agree := 0
		for agree < len(fx.Greedy.Tokens) {
			tok := argmax(lg)
			if tok != fx.Greedy.Tokens[agree] {
				break
			}
			agree++
			lg = s.feed(t, []int32{tok}, []int{0})
		}
		t.Logf("%-9v worst relative logits error %.3g (bound %g); greedy agrees for %d/%d tokens",
			tc.dt, worst, tc.tol, agree, len(fx.Greedy.Tokens))
		if worst > tc.tol {
			t.Errorf("%v: relative logits error %.3g > %g", tc.dt, worst, tc.tol)
		}
	}
}
