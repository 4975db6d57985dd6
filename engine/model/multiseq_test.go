package model_test

import (
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// TestMultiSequenceBatch runs two sequences (a decode row and a prefill
// chunk) in one batch with interleaved page ids, and checks the logits
// against running each sequence alone.
func TestMultiSequenceBatch(t *testing.T) {
	m, be := loadModel(t, filepath.Join("testdata", "tiny_qwen3moe.gguf"), 2, true)
	const page = 4
	if err := be.AllocKV(m.Config.KVLayout(page, 12, kvcache.F16)); err != nil {
		t.Fatal(err)
	}
	a := []int32{5, 17, 300, 42, 9, 77, 123} // 6 cached + 1 new
	bq := []int32{400, 2, 3, 99, 250}        // 5 new
	pa, pb := []int32{0, 2}, []int32{1, 3}

	run := func(b *model.Batch, rows []int) []float32 {
		t.Helper()
		lg, err := m.Forward(b, rows)
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}
	span := func(off, cached, n int, pages []int32) model.SeqSpan {
		return model.SeqSpan{Offset: off, Cached: cached, NewTokens: n, Pages: pages}
	}
	pos := func(from, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(from + i)
		}
		return p
	}
	// Cache the first 6 tokens of a alone.
	run(&model.Batch{Tokens: a[:6], Pos: pos(0, 6), Seqs: []model.SeqSpan{span(0, 0, 6, pa)}}, nil)
	// Mixed batch: a's 7th token, then all of b.
	mixed := &model.Batch{
		Tokens: append([]int32{a[6]}, bq...),
		Pos:    append(pos(6, 1), pos(0, 5)...),
		Seqs:   []model.SeqSpan{span(0, 6, 1, pa), span(1, 0, 5, pb)},
	}
	got := run(mixed, []int{0, 5})

	// Reference: each sequence alone, in fresh pages.
	ra := run(&model.Batch{Tokens: a, Pos: pos(0, 7), Seqs: []model.SeqSpan{span(0, 0, 7, []int32{4, 5})}}, []int{6})
	rb := run(&model.Batch{Tokens: bq, Pos: pos(0, 5), Seqs: []model.SeqSpan{span(0, 0, 5, []int32{6, 7})}}, []int{4})
	V := m.Config.Vocab
	if e := relErr(got[:V], ra); e > 1e-5 {
		t.Errorf("sequence a: relative error %.3g", e)
	}
	if e := relErr(got[V:], rb); e > 1e-5 {
		t.Errorf("sequence b: relative error %.3g", e)
	}
}

// plainBackend hides the CPU backend's optional GatherRows, so Forward
// takes its host-copy path.
type plainBackend struct{ model.Backend }

func TestLogitsRowsWithoutGatherer(t *testing.T) {
	f, err := gguf.Open(filepath.Join("testdata", "tiny_qwen2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	be := cpu.New(cpu.Options{Threads: 1, F32KV: true})
	defer be.Close()
	var ms [2]*model.Model
	for i, b := range []model.Backend{be, plainBackend{be}} {
		if ms[i], err = model.Load(f, b); err != nil {
			t.Fatal(err)
		}
	}
	toks := []int32{1, 2, 3, 4, 5}
	var out [2][]float32
	for i, m := range ms {
		s := newSession(t, m, 8, kvcache.F16)
		out[i] = s.feed(t, toks, []int{3, 1})
	}
	if len(out[0]) != 2*ms[0].Config.Vocab {
		t.Fatalf("%d logits", len(out[0]))
	}
	for i := range out[0] {
		if out[0][i] != out[1][i] {
			t.Fatalf("logit %d: gather %v, host copy %v", i, out[0][i], out[1][i])
		}
	}
}
