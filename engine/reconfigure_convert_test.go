package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// storedRows reads back every K/V row a session holds, layer by layer
// (layers: the first that many; 0 for all).
func storedRows(t *testing.T, e *Engine, s *Session, layers int) []float32 {
	t.Helper()
	hs := e.be.(*cpu.Backend).KVStore()
	l := hs.Layout()
	hw := l.KVHeads * l.HeadDim
	k, v := make([]float32, hw), make([]float32, hw)
	pages := s.seq.Pages()
	var out []float32
	for pos := range s.seq.Len() {
		for layer := range l.Layers {
			if layers > 0 && layer >= layers {
				break
			}
			hs.ReadRow(layer, int(pages[pos/l.PageSize]), pos%l.PageSize, k, v)
			out = append(out, k...)
			out = append(out, v...)
		}
	}
	return out
}

func rowsRelErr(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		x := float64(got[i]) - float64(want[i])
		d += x * x
		n += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / n)
}

// TestSwitchKVConvertsLikeReprefill checks the direct conversion of the
// stored pages against the re-prefill it replaces: the same dtype,
// capacity and tokens; layer 0 (whose K/V do not depend on the cache)
// within the tolerance of one extra rounding; and all layers at least as
// close to the cache before the switch as the re-prefilled ones, whose
// deeper layers attend over the new dtype's rounded K/V.
func TestSwitchKVConvertsLikeReprefill(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "Summarise this.\n" + longText(150)}}
	for _, tc := range []struct {
		from, to string
		layer0   float64 // relative L2 distance of the layer-0 rows to the re-prefilled ones
		long     bool    // skipped with -short
	}{
		{"bf16", "fp8_e4m3", 0.02, false},
		{"bf16", "fp8_e5m2", 0.03, true},
		{"fp8_e4m3", "bf16", 0.05, false}, // widened fp8 rows against fresh bf16 ones: fp8's own error
		{"bf16", "fp16", 0.005, true},
	} {
		t.Run(tc.from+"->"+tc.to, func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("-short: the e4m3 cases cover the conversion")
			}
			conv, ref := load(t, Options{KVTokens: 1024, KVDType: tc.from}), load(t, Options{KVTokens: 1024, KVDType: tc.from})
			cs, rs := conv.NewSession(), ref.NewSession()
			collect(t, cs.Generate(context.Background(), greedy(2, msgs...)))
			collect(t, rs.Generate(context.Background(), greedy(2, msgs...)))
			held, src := cs.Tokens(), storedRows(t, conv, cs, 0)
			var calls, firstDone, lastDone, lastTotal int
			var mu sync.Mutex
			if err := conv.SwitchKV(context.Background(), tc.to, func(d, tot int) {
				mu.Lock()
				defer mu.Unlock()
				if calls == 0 {
					firstDone = d
				}
				calls, lastDone, lastTotal = calls+1, d, tot
			}); err != nil {
				t.Fatal(err)
			}
			if err := ref.Reconfigure(context.Background(), tc.to, nil); err != nil {
				t.Fatal(err)
			}
			if calls < 2 || firstDone != 0 || lastDone != held || lastTotal != held {
				t.Fatalf("progress: %d calls, first %d, last %d / %d; want 0 / %d first, %d / %d last", calls, firstDone, lastDone, lastTotal, held, held, held)
			}
			cst, rst := conv.Stats(), ref.Stats()
			if cst.KVDType != rst.KVDType || cst.TokensCapacity != rst.TokensCapacity || cst.TokensUsed != rst.TokensUsed || cs.Tokens() != held {
				t.Fatalf("converted %+v\nre-prefilled %+v", cst, rst)
			}
			l0 := rowsRelErr(storedRows(t, conv, cs, 1), storedRows(t, ref, rs, 1))
			toSrcConv, toSrcRef := rowsRelErr(storedRows(t, conv, cs, 0), src), rowsRelErr(storedRows(t, ref, rs, 0), src)
			t.Logf("layer 0 converted vs re-prefilled %.5f; all layers to the old cache: converted %.5f, re-prefilled %.5f", l0, toSrcConv, toSrcRef)
			if l0 > tc.layer0 {
				t.Errorf("layer-0 rows: converted vs re-prefilled %.5f (relative L2), want <= %.3f", l0, tc.layer0)
			}
			if toSrcConv > toSrcRef*1.01 {
				t.Errorf("converted rows are %.5f from the old cache, re-prefilled ones %.5f: the conversion lost more", toSrcConv, toSrcRef)
			}
			// The converted cache serves the next turn with prefix reuse.
			next := append(append([]Message(nil), msgs...), Message{Role: "user", Content: "Shorter."})
			collect(t, cs.Generate(context.Background(), greedy(2, next...)))
			if st := conv.Stats(); st.LastPrefillTokens > 40 {
				t.Fatalf("after the conversion the next turn prefilled %d tokens", st.LastPrefillTokens)
			}
		})
	}
}

// TestSwitchKVCancelKeepsTheOldCache cancels the switch part way: the
// pool keeps its dtype, its capacity and the very same rows.
func TestSwitchKVCancelKeepsTheOldCache(t *testing.T) {
	e := load(t, Options{KVTokens: 2048})
	s := e.NewSession()
	collect(t, s.Generate(context.Background(), greedy(4, Message{Role: "user", Content: longText(150)})))
	before, rows := e.Stats(), storedRows(t, e, s, 0)
	ctx, cancel := context.WithCancel(context.Background())
	// Cancelled as it starts (the UI's Esc): the conversion stops before
	// anything is swapped in.
	err := e.SwitchKV(ctx, "fp8_e4m3", func(done, total int) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	after := e.Stats()
	if after.KVDType != "bf16" || after.TokensCapacity != before.TokensCapacity || after.TokensUsed != before.TokensUsed {
		t.Fatalf("cancel changed the pool: %+v -> %+v", before, after)
	}
	if got := rowsRelErr(storedRows(t, e, s, 0), rows); got != 0 {
		t.Fatalf("cancel changed the stored rows (relative L2 %g)", got)
	}
	if e.be.(*cpu.Backend).KVStore().Layout().DType != kvcache.BF16 {
		t.Fatal("the backend's store is not the old one")
	}
}

// The re-prefill path (the GPU's) cancelled part way goes back to the old
// dtype and rebuilds the cache there: same dtype, capacity, tokens and rows.
func TestSwitchByPrefillCancelRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: re-prefills 300 tokens twice")
	}
	e := load(t, Options{KVTokens: 2048, PrefillChunk: 64})
	s := e.NewSession()
	collect(t, s.Generate(context.Background(), greedy(2, Message{Role: "user", Content: longText(150)})))
	before, rows := e.Stats(), storedRows(t, e, s, 0)
	ctx, cancel := context.WithCancel(context.Background())
	err := e.switchByPrefill(ctx, "fp8_e4m3", func(done, total int) {
		if done > 0 {
			cancel() // after the first chunk
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	after := e.Stats()
	if after.KVDType != "bf16" || after.TokensCapacity != before.TokensCapacity || after.TokensUsed != before.TokensUsed || s.Tokens() != before.TokensUsed {
		t.Fatalf("cancel did not restore the pool: %+v -> %+v (session %d tokens)", before, after, s.Tokens())
	}
	if got := rowsRelErr(storedRows(t, e, s, 0), rows); got > 1e-6 {
		t.Fatalf("the rebuilt rows differ from the old ones (relative L2 %g)", got)
	}
}
