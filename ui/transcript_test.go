package ui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// Issue 15 item 17: the conversation stays in the terminal's scrollback
// after quitting: Run prints it after leaving the alternate screen, then
// the session line.
func TestRunLeavesTranscriptInScrollback(t *testing.T) {
	out, _ := runTurnAndQuit(t, t.TempDir())
	// The program's frames are on the alternate screen, which the
	// terminal drops on leaving it (CSI ?1049l); the transcript follows.
	i := strings.LastIndex(out, "\x1b[?1049l")
	if i < 0 {
		t.Fatalf("the program never left the alternate screen:\n%q", out)
	}
	tail := ansi.Strip(out[i:])
	for _, want := range []string{"▌ you\n▌ keep this question\n", "◆ SmolLM2-135M-Instruct\n", "an answer worth keeping", "saved · resume with: ftchat --continue"} {
		if !strings.Contains(tail, want) {
			t.Errorf("transcript lacks %q:\n%s", want, tail)
		}
	}
	if strings.Index(tail, "an answer worth keeping") > strings.Index(tail, "resume with") {
		t.Error("the session line must come after the transcript")
	}
}
