package ui

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// TestPrintModePoolFullIsAnError: -p whose answer the full KV pool cut
// short prints what it has, then fails (non-zero exit) saying what to do.
func TestPrintModePoolFullIsAnError(t *testing.T) {
	eng := newFakeEngine()
	st := eng.Stats()
	st.TokensUsed = st.TokensCapacity
	cases := []struct {
		name string
		stop engine.StopReason
		want string // "" = no error
	}{
		{"complete", engine.StopEOS, ""},
		{"pool full", engine.StopPoolFull, "cut short: the KV pool is full (65,536 / 65,536 tokens); give it more memory (--kv-tokens"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sess := &fakeSession{}
			sess.push(engine.Event{Kind: engine.EventText, Text: "partial"}, engine.Event{Kind: engine.EventDone, Stop: tc.stop, Stats: st})
			var out bytes.Buffer
			err := PrintMode(context.Background(), Config{Engine: eng, Session: sess, InitialPrompt: "q", Out: &out})
			if out.String() != "partial\n" {
				t.Errorf("printed %q, want the answer so far", out.String())
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
