package engine

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestPrefillThenGenerateMatchesAFreshTurn: a conversation prefilled by
// Session.Prefill (what /model does after loading another model) answers
// the next message as a session that never saw it does, and that turn
// prefills only its new tokens. Dense and hybrid fixtures.
func TestPrefillThenGenerateMatchesAFreshTurn(t *testing.T) {
	conv := []Message{
		{Role: "user", Content: "What does the mean function return for an empty list?"},
		{Role: "assistant", Content: "It divides by zero and raises an error."},
	}
	next := append(conv[:2:2], Message{Role: "user", Content: "Fix it, please."})
	for _, name := range []string{"default", "tiny_qwen35.gguf"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("model", "testdata", name)
			if name == "default" {
				path = testModel(t) // SmolLM2: dense
			}
			e := loadHybrid(t, path, Options{})
			warm := e.NewSession()
			var reports [][2]int
			if err := warm.Prefill(context.Background(), greedy(0, conv...), func(d, n int) { reports = append(reports, [2]int{d, n}) }); err != nil {
				t.Fatal(err)
			}
			held := warm.Tokens()
			if held == 0 || len(reports) < 2 || reports[0] != [2]int{0, reports[0][1]} || reports[len(reports)-1][0] != reports[0][1] {
				t.Fatalf("prefill held %d tokens, progress %v", held, reports)
			}
			got, _ := answer(t, warm.Generate(context.Background(), greedy(12, next...)))
			st := e.Stats()
			full, err := e.encodePrompt(greedy(0, next...))
			if err != nil {
				t.Fatal(err)
			}
			// A dense model reuses all but the new turn; a hybrid one
			// resumes from the state snapshot at a turn boundary Prefill
			// took, which the template may place before the last answer.
			limit := len(full) - held + 8
			if name != "default" {
				limit = len(full) - 16
			}
			if st.LastPrefillTokens > limit {
				t.Errorf("the turn after Prefill prefilled %d of %d tokens (Prefill held %d)", st.LastPrefillTokens, len(full), held)
			}
			t.Logf("Prefill held %d tokens; the next turn prefilled %d of %d", held, st.LastPrefillTokens, len(full))
			fresh := e.NewSession()
			want, _ := answer(t, fresh.Generate(context.Background(), greedy(12, next...)))
			if got != want {
				t.Errorf("after Prefill: %q\nfresh:         %q", got, want)
			}
		})
	}
}

// TestPrefillCancelledKeepsWhatWasComputed: a cancelled Prefill returns the
// context's error and holds no uncomputed token.
func TestPrefillCancelledKeepsWhatWasComputed(t *testing.T) {
	e := loadHybrid(t, filepath.Join("model", "testdata", "tiny_qwen35.gguf"), Options{})
	s := e.NewSession()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Prefill(ctx, greedy(0, Message{Role: "user", Content: "Hello there."}), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := s.Tokens(); n != 0 {
		t.Errorf("a Prefill cancelled before its first chunk holds %d tokens", n)
	}
}
