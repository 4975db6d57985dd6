package engine

import (
	"context"
	"strings"
	"testing"
)

// Esc during a prefill: the final stats must count only the tokens that
// were computed, not the whole prompt as cached and prefilled.
func TestCancelledPrefillIsNotCountedAsCached(t *testing.T) {
	e := load(t, Options{PrefillChunk: 16})
	s := e.NewSession()
	before := e.Stats()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 80)
	var done Event
	total := 0
	for ev := range s.Generate(ctx, Request{Messages: []Message{{Role: "user", Content: prompt}}, MaxTokens: 4}) {
		switch ev.Kind {
		case EventProgress:
			total = ev.Total
			if ev.Done > 0 {
				cancel()
			}
		case EventDone:
			done = ev
		case EventError:
			t.Fatal(ev.Err)
		}
	}
	if done.Stop != StopCancelled {
		t.Fatalf("stop = %q, want cancelled", done.Stop)
	}
	held := s.Tokens()
	if held >= total {
		t.Fatalf("the session holds %d tokens of a %d-token prompt cancelled in its prefill", held, total)
	}
	final := done.Stats
	if final.TokensUsed != held {
		t.Errorf("final stats: %d tokens in the cache, the session holds %d", final.TokensUsed, held)
	}
	if got := final.LastPrefillTokens; got != held {
		t.Errorf("final stats: last turn prefilled %d tokens, %d were computed", got, held)
	}
	if got := final.PrefillTokens - before.PrefillTokens; got != int64(held) {
		t.Errorf("final stats: prefilled total grew by %d, %d were computed", got, held)
	}
	if st := e.Stats(); st.TokensUsed != final.TokensUsed {
		t.Errorf("after the stream: %d tokens in the cache, the final stats said %d", st.TokensUsed, final.TokensUsed)
	}
}
