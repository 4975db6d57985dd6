package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// Issue 15 item 16: FitCheck's refusal counts the whole prompt and says
// what the cached conversation holds; it read "this conversation holds 0
// tokens … 256 in use" and called the whole prompt "new tokens".
func TestFitCheckMessageCountsTheConversation(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	s := e.NewSession()
	msgs := []Message{{Role: "user", Content: "Name three colours."}}
	collect(t, s.Generate(context.Background(), greedy(8, msgs...)))
	held := s.Tokens()
	err := e.FitCheck(greedy(0, append(msgs, Message{Role: "user", Content: longText(400)})...))
	var full *kvcache.PoolFullError
	if !errors.As(err, &full) {
		t.Fatalf("FitCheck = %v, want a PoolFullError", err)
	}
	if full.Held != held {
		t.Errorf("Held = %d, want the %d tokens the session caches", full.Held, held)
	}
	for _, want := range []string{
		fmt.Sprintf("the conversation needs %d tokens but only %d fit", full.Asked, full.Fit),
		fmt.Sprintf("%d in use, %d of them by the conversations it caches", full.Used, held),
		"/drop the oldest turns",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%s", want, err)
		}
	}
}
