package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// poolHarness drives a Pool together with a HostStore that records, for
// every slot written, the token id and position (exact in fp16), so that
// any page used by two sequences at once shows up as wrong contents.
type poolHarness struct {
	t     *testing.T
	p     *Pool
	store *HostStore
	seqs  []*Sequence
	copy  bool
}

func newHarness(t *testing.T, pages, pageSize int, withCopier bool) *poolHarness {
	l := Layout{Layers: 1, KVHeads: 1, HeadDim: 2, PageSize: pageSize, Pages: pages, DType: F16}
	st, err := NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	var c PageCopier
	if withCopier {
		c = st
	}
	p, err := NewPool(l, c)
	if err != nil {
		t.Fatal(err)
	}
	return &poolHarness{t: t, p: p, store: st, copy: withCopier}
}

// write stores (token, position) for positions [start, Len) as the engine would.
func (h *poolHarness) write(s *Sequence, start int) {
	toks, pages, P := s.Tokens(), s.Pages(), h.p.l.PageSize
	for pos := start; pos < len(toks); pos++ {
		row := []float32{float32(toks[pos]), float32(pos)}
		h.store.WriteRow(0, int(pages[pos/P]), pos%P, row, row)
	}
}

func (h *poolHarness) check(step int, op string) {
	t, p := h.t, h.p
	t.Helper()
	P := p.l.PageSize
	refs := make([]int32, p.l.Pages)
	fill := make([]int, p.l.Pages)
	seqTokens := 0
	kc, _, _, _ := h.store.Raw(0)
	for si, s := range h.seqs {
		toks, pages := s.Tokens(), s.Pages()
		seqTokens += len(toks)
		if len(pages) != ceilDiv(len(toks), P) {
			t.Fatalf("step %d (%s): seq %d holds %d tokens in %d pages", step, op, si, len(toks), len(pages))
		}
		seen := map[int32]bool{}
		for i, pg := range pages {
			if seen[pg] {
				t.Fatalf("step %d (%s): seq %d holds page %d twice", step, op, si, pg)
			}
			seen[pg] = true
			refs[pg]++
			fill[pg] = max(fill[pg], min(P, len(toks)-i*P))
		}
		for pos, tok := range toks {
			idx := p.l.CodeIndex(int(pages[pos/P]), 0, pos%P)
			gotTok := DecodeF16(uint16(kc[2*idx]) | uint16(kc[2*idx+1])<<8)
			gotPos := DecodeF16(uint16(kc[2*idx+2]) | uint16(kc[2*idx+3])<<8)
			if gotTok != float32(tok) || gotPos != float32(pos) {
				t.Fatalf("step %d (%s): seq %d position %d reads (token %g, pos %g), want (%d, %d): page reused while live",
					step, op, si, pos, gotTok, gotPos, tok, pos)
			}
		}
	}
	used, shared, tokens := 0, 0, 0
	for pg, r := range refs {
		if r != p.refs[pg] {
			t.Fatalf("step %d (%s): page %d has refcount %d, %d holders", step, op, pg, p.refs[pg], r)
		}
		if r > 0 {
			used++
			tokens += fill[pg]
		}
		if r > 1 {
			shared++
		}
	}
	free := slices.Clone(p.free)
	slices.Sort(free)
	for i, pg := range free {
		if refs[pg] != 0 || i > 0 && free[i-1] == pg {
			t.Fatalf("step %d (%s): free list holds page %d (refs %d) or a duplicate", step, op, pg, refs[pg])
		}
	}
	st := p.Stats()
	want := PoolStats{PagesUsed: used, PagesFree: p.l.Pages - used, PagesShared: shared, TokensUsed: tokens,
		SeqTokens: seqTokens, Sequences: len(h.seqs), TokensFree: (p.l.Pages - used) * P}
	got := PoolStats{PagesUsed: st.PagesUsed, PagesFree: st.PagesFree, PagesShared: st.PagesShared, TokensUsed: st.TokensUsed,
		SeqTokens: st.SeqTokens, Sequences: st.Sequences, TokensFree: st.TokensFree}
	if got != want || len(p.free) != p.l.Pages-used {
		t.Fatalf("step %d (%s): stats %+v, recount %+v", step, op, got, want)
	}
	if st.BytesUsed != int64(tokens*st.BytesPerToken) || st.BytesReserved != int64(used)*p.l.BytesPerPage() {
		t.Fatalf("step %d (%s): bytes used %d reserved %d for %d tokens %d pages", step, op, st.BytesUsed, st.BytesReserved, tokens, used)
	}
}

func randTokens(r *rand.Rand, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(1000))
	}
	return t
}

func (h *poolHarness) append(s *Sequence, toks []int32) error {
	before, beforePages := s.Tokens(), s.Pages()
	start, err := s.Append(toks...)
	var full *PoolFullError
	if errors.As(err, &full) {
		if !slices.Equal(s.Tokens(), before) || !slices.Equal(s.Pages(), beforePages) {
			h.t.Fatal("failed Append changed the sequence")
		}
		if full.Asked != len(toks) || full.Fit >= len(toks) || full.Fit < 0 {
			h.t.Fatalf("PoolFullError asked %d fit %d for %d tokens", full.Asked, full.Fit, len(toks))
		}
		return err
	}
	if err != nil {
		h.t.Fatal(err)
	}
	if start > len(before) || h.copy && start != len(before) {
		h.t.Fatalf("Append start %d after %d tokens (copier %v)", start, len(before), h.copy)
	}
	h.write(s, start)
	return nil
}

func TestPoolProperties(t *testing.T) {
	for _, cfg := range []struct {
		pages, pageSize int
		copier          bool
	}{{64, 4, true}, {64, 4, false}, {40, 16, true}, {200, 1, false}, {30, 8, false}} {
		t.Run(fmt.Sprintf("pages%d_p%d_copy%v", cfg.pages, cfg.pageSize, cfg.copier), func(t *testing.T) {
			for seed := range uint64(8) {
				runPoolOps(t, cfg.pages, cfg.pageSize, cfg.copier, seed)
			}
		})
	}
}

func runPoolOps(t *testing.T, pages, pageSize int, copier bool, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	h := newHarness(t, pages, pageSize, copier)
	fulls := 0
	for step := range 1500 {
		op := "new"
		switch x := r.IntN(100); {
		case len(h.seqs) == 0 || x < 8:
			h.seqs = append(h.seqs, h.p.NewSequence())
		case x < 45:
			op = "append"
			s := h.seqs[r.IntN(len(h.seqs))]
			k := r.IntN(3*pageSize + 2)
			if err := h.append(s, randTokens(r, k)); err != nil {
				fulls++
				var full *PoolFullError
				errors.As(err, &full)
				// Exactly Fit tokens fit; one more does not.
				if full.Fit > 0 {
					if err := h.append(s, randTokens(r, full.Fit)); err != nil {
						t.Fatalf("step %d: %d tokens said to fit, Append: %v", step, full.Fit, err)
					}
					op = "append-fit"
				}
				h.check(step, op)
				if err := h.append(s, randTokens(r, 1)); err == nil && full.Fit > 0 {
					t.Fatalf("step %d: a token beyond Fit was accepted", step)
				}
			}
		case x < 58:
			op = "fork"
			c, err := h.seqs[r.IntN(len(h.seqs))].Fork()
			if err != nil {
				t.Fatal(err)
			}
			h.seqs = append(h.seqs, c)
		case x < 72:
			op = "truncate"
			s := h.seqs[r.IntN(len(h.seqs))]
			s.Truncate(r.IntN(s.Len() + 2))
		case x < 84:
			op = "free"
			i := r.IntN(len(h.seqs))
			h.seqs[i].Free()
			h.seqs[i].Free() // idempotent
			h.seqs = slices.Delete(h.seqs, i, i+1)
		default:
			op = "reuse"
			s := h.seqs[r.IntN(len(h.seqs))]
			old := s.Tokens()
			keep := r.IntN(len(old) + 1)
			prompt := append(slices.Clone(old[:keep]), randTokens(r, 1+r.IntN(2*pageSize))...)
			want := s.CommonPrefix(prompt)
			start, err := s.Reuse(prompt)
			var full *PoolFullError
			switch {
			case errors.As(err, &full):
				if !slices.Equal(s.Tokens(), old) {
					t.Fatalf("step %d: failed Reuse changed the sequence", step)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if start > want || copier && start != want || !slices.Equal(s.Tokens(), prompt) {
					t.Fatalf("step %d: Reuse start %d, common prefix %d", step, start, want)
				}
				h.write(s, start)
			}
		}
		h.check(step, op)
	}
	for _, s := range h.seqs {
		s.Free()
		if _, err := s.Append(1); !errors.Is(err, ErrFreed) {
			t.Fatalf("Append after Free: %v", err)
		}
	}
	h.seqs = nil
	h.check(-1, "free all")
	if st := h.p.Stats(); st.PagesUsed != 0 || st.TokensUsed != 0 {
		t.Fatalf("leak after freeing everything: %+v", st)
	}
	if fulls == 0 && seed == 0 {
		t.Log("pool never filled up")
	}
}

func TestPoolFullMessage(t *testing.T) {
	// SmolLM2-135M shape, bf16, 4 pages of 16 tokens.
	l := Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 16, Pages: 4, DType: BF16}
	p, err := NewPool(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := p.NewSequence()
	if _, err := s.Append(make([]int32, 50)...); err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(make([]int32, 20)...)
	var full *PoolFullError
	if !errors.As(err, &full) {
		t.Fatalf("err = %v, want *PoolFullError", err)
	}
	// 64 slots, 50 used: 14 fit. Pool bytes 64*23040; fp8 page = 16*12240 bytes -> 7 pages = 112 tokens.
	want := PoolFullError{Asked: 20, Fit: 14, Held: 50, Capacity: 64, Used: 50, DType: BF16, BytesPerToken: 23040, E4M3Capacity: 112}
	if *full != want {
		t.Errorf("got %+v\nwant %+v", *full, want)
	}
	msg := err.Error()
	for _, w := range []string{"20 new tokens", "only 14", "/clear", "fp8_e4m3", "about 112 tokens", "--gpu-memory", "--kv-tokens"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
	if s.Len() != 50 {
		t.Errorf("sequence changed to %d tokens", s.Len())
	}
	// An fp8 pool does not suggest fp8.
	l.DType = FP8E5M2
	p, _ = NewPool(l, nil)
	s = p.NewSequence()
	_, err = s.Append(make([]int32, 65)...)
	if !errors.As(err, &full) || full.E4M3Capacity != 0 || strings.Contains(err.Error(), "switch") || full.Fit != 64 {
		t.Errorf("fp8 pool full: %v", err)
	}
}

// A follow-up turn prefills only the new tokens.
func TestReusePrefillsOnlyNewTurn(t *testing.T) {
	l := Layout{Layers: 1, KVHeads: 1, HeadDim: 8, PageSize: 64, Pages: 100, DType: FP8E4M3}
	p, _ := NewPool(l, nil)
	s := p.NewSequence()
	r := rand.New(rand.NewPCG(3, 3))
	turn1 := randTokens(r, 2000)
	if start, err := s.Reuse(turn1); err != nil || start != 0 {
		t.Fatal(start, err)
	}
	reply := randTokens(r, 150)
	if _, err := s.Append(reply...); err != nil {
		t.Fatal(err)
	}
	// The chat template re-renders the whole conversation plus the new turn.
	prompt := append(append(slices.Clone(turn1), reply...), randTokens(r, 37)...)
	start, err := s.Reuse(prompt)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(prompt) - start; got != 37 {
		t.Errorf("prefilled %d tokens, want 37", got)
	}
	if st := p.Stats(); st.ReusedTokens != 2150 || st.ComputedTokens != 2000+150+37 {
		t.Errorf("counters: reused %d computed %d; want 2150, 2187", st.ReusedTokens, st.ComputedTokens)
	}
	// Same prompt again (regenerate): only the last token is recomputed.
	if start, _ := s.Reuse(prompt); len(prompt)-start != 1 {
		t.Errorf("regenerate prefills %d tokens, want 1", len(prompt)-start)
	}
	// An edit in the middle keeps the prefix before it.
	edited := slices.Clone(prompt)
	edited[1000]++
	if start, _ := s.Reuse(edited); start != 1000 {
		t.Errorf("edit at 1000: start %d", start)
	}
}

// Forked sequences share full pages; writes never touch a shared page.
func TestForkCopyOnWrite(t *testing.T) {
	for _, withCopier := range []bool{true, false} {
		h := newHarness(t, 10, 4, withCopier)
		a := h.p.NewSequence()
		h.seqs = append(h.seqs, a)
		if err := h.append(a, []int32{1, 2, 3, 4, 5, 6}); err != nil {
			t.Fatal(err)
		}
		b, _ := a.Fork()
		h.seqs = append(h.seqs, b)
		h.check(0, "fork")
		if st := h.p.Stats(); st.PagesUsed != 2 || st.PagesShared != 2 || st.TokensUsed != 6 || st.SeqTokens != 12 {
			t.Fatalf("after fork: %+v", st)
		}
		// b writes into the shared half-full page: it must get its own.
		start, err := b.Append(7)
		if err != nil {
			t.Fatal(err)
		}
		if wantStart := map[bool]int{true: 6, false: 4}[withCopier]; start != wantStart {
			t.Errorf("copier %v: start %d, want %d", withCopier, start, wantStart)
		}
		h.write(b, start)
		h.check(1, "cow")
		if a.Pages()[1] == b.Pages()[1] || a.Pages()[0] != b.Pages()[0] {
			t.Errorf("pages a %v b %v", a.Pages(), b.Pages())
		}
		st := h.p.Stats()
		if st.PagesUsed != 3 || st.PagesShared != 1 || st.TokensUsed != 4+2+3 || st.CowCopies+st.CowDrops != 1 {
			t.Errorf("after cow: %+v", st)
		}
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 131072: "131,072", -1234567: "-1,234,567"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q want %q", n, got, want)
		}
	}
}

func TestPoolRejectsBadLayout(t *testing.T) {
	_, err := NewPool(Layout{Layers: 1, KVHeads: 1, HeadDim: 64, PageSize: 3, Pages: 4, DType: BF16}, nil)
	if err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Errorf("err = %v", err)
	}
}

// ReuseAt keeps at most limit tokens of the common prefix (hybrid models
// resume where a recurrent-state snapshot is) and counts what it kept.
func TestReuseAtLimit(t *testing.T) {
	history := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		name   string
		prompt []int32
		limit  int
		want   int
	}{
		{"extends, no limit", append(slices.Clone(history), 11, 12), 12, 10},
		{"extends, limit below history", append(slices.Clone(history), 11, 12), 6, 6},
		{"limit zero recomputes", append(slices.Clone(history), 11), 0, 0},
		{"diverges before limit", []int32{1, 2, 3, 99, 5}, 8, 3},
		{"same prompt keeps all but the last", slices.Clone(history), 100, 9},
		{"negative limit is zero", slices.Clone(history), -3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPool(Layout{Layers: 1, KVHeads: 1, HeadDim: 8, PageSize: 4, Pages: 8, DType: BF16}, nil)
			s := p.NewSequence()
			if _, err := s.Append(history...); err != nil {
				t.Fatal(err)
			}
			start, err := s.ReuseAt(tc.prompt, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if start != tc.want {
				t.Errorf("start %d, want %d", start, tc.want)
			}
			if !slices.Equal(s.Tokens(), tc.prompt) {
				t.Errorf("history %v, want the prompt %v", s.Tokens(), tc.prompt)
			}
			if st := p.Stats(); st.ReusedTokens != int64(tc.want) {
				t.Errorf("reused %d, want %d", st.ReusedTokens, tc.want)
			}
		})
	}
}
