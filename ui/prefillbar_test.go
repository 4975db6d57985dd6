package ui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

func TestPrefillBar(t *testing.T) {
	tests := []struct {
		done, upto float64
		want       string
	}{
		{0.25, 0.75, "▕████▒▒▒▒▒▒▒▒░░░░▏"},
		{0, 0.5, "▕▒▒▒▒▒▒▒▒░░░░░░░░▏"},
		{0.5, 0.5, "▕████████░░░░░░░░▏"},
		{0.99, 1.2, "▕████████████████▏"},
		{0.001, 0.002, "▕█▒░░░░░░░░░░░░░░▏"},
	}
	for _, tc := range tests {
		if got := prefillBar(tc.done, tc.upto, 16); got != tc.want {
			t.Errorf("prefillBar(%v, %v) = %s, want %s", tc.done, tc.upto, got, tc.want)
		}
	}
}

// Issue 15 item 14: the status bar moves while a long prompt is
// prefilled (it stood still until the answer began).
func TestStatusBarMovesDuringPrefill(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(
		engine.Event{Kind: engine.EventProgress, Done: 0, Total: 32000},
		engine.Event{Kind: engine.EventProgress, Done: 8000, Total: 32000},
		engine.Event{Kind: waitCancel},
	)
	d.submit("a long prompt")
	status := func() string { return ansi.Strip(strings.Join(d.m.statusView(), "\n")) }
	got := status()
	if !strings.Contains(got, "KV ▕██████▒▒▒▒▒▒░░░░▏  37% · 16,000 / 65,536 tok") {
		t.Fatalf("status during prefill:\n%s", got)
	}
	checkGolden(t, "prefill_progress_80x24", d.frame())
	d.send(eventsMsg{id: d.m.gen.id, events: []engine.Event{{Kind: engine.EventProgress, Done: 24000, Total: 32000}}})
	if later := status(); !strings.Contains(later, "KV ▕██████████▒▒░░░░▏  61%") {
		t.Errorf("the bar did not move:\n%s", later)
	}
	d.key(keyEsc)
	d.settle()
	if after := status(); strings.Contains(after, "▒") {
		t.Errorf("prefill still shown after the turn:\n%s", after)
	}
}
