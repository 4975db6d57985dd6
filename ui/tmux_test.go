package ui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

const tmuxChildEnv = "FTCHAT_UI_TMUX_CHILD"

// slowSession streams a fixed answer with a delay per token, like a model.
type slowSession struct{ fakeSession }

func (s *slowSession) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	ch := make(chan engine.Event)
	last := req.Messages[len(req.Messages)-1].Content
	go func() {
		defer close(ch)
		words := strings.Fields("Here is my **answer** to: " + last + ". " + strings.Repeat("more words follow here ", 60))
		for i, w := range words {
			select {
			case <-ctx.Done():
				ch <- engine.Event{Kind: engine.EventDone, Stop: engine.StopCancelled}
				return
			case <-time.After(5 * time.Millisecond):
			}
			ch <- engine.Event{Kind: engine.EventText, Text: w + " "}
			if i == 5 {
				ch <- engine.Event{Kind: engine.EventText, Text: "\n\n```go\nx := 1\n```\n\n"}
			}
		}
		ch <- engine.Event{Kind: engine.EventDone, Stop: engine.StopEOS}
	}()
	return ch
}

// TestTmuxChild runs the real Bubble Tea program on a scripted engine; it
// is started by TestTmuxFakeEngine inside tmux.
func TestTmuxChild(t *testing.T) {
	dir := os.Getenv(tmuxChildEnv)
	if dir == "" {
		t.Skip("child process of TestTmuxFakeEngine")
	}
	eng := newFakeEngine()
	eng.reconfDelay = 400 * time.Millisecond // a switch takes about 1.6 s
	err := Run(context.Background(), Config{Engine: eng, Session: &slowSession{}, SessionDir: dir, Piped: os.Getenv(tmuxChildEnv + "_PIPED")})
	if err != nil {
		fmt.Println("RUN ERROR:", err)
	}
	fmt.Println("CHILD EXITED")
	time.Sleep(time.Minute) // keep the pane for the parent to read
}

// TestTmuxFakeEngine drives the real program in a real terminal (tmux):
// keys, streaming, cancel, slash commands, quitting and the resume hint.
func TestTmuxFakeEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tmux")
	}
	dir := t.TempDir()
	// stdin is a pipe: keys must come from the terminal.
	tm := startTmux(t, 100, 30, []string{tmuxChildEnv + "=" + dir, "TERM=xterm-256color"}, "sh", "-c",
		"printf 'piped alpha\\npiped beta\\n' | { "+tmuxChildEnv+"_PIPED=\"$(cat)\" exec "+shellJoin([]string{os.Args[0], "-test.run=^TestTmuxChild$", "-test.count=1", "-test.v=false"})+"; }")
	tm.waitText("16,000 / 65,536 tok", 20*time.Second)
	tm.waitText("stdin: 2 lines (4 tokens) will be attached", 5*time.Second)

	tm.typeText("first line")
	tm.keys("C-j")
	tm.typeText("second line")
	tm.waitText("› second line", 5*time.Second)
	tm.keys("Enter")
	s := tm.waitText("more words follow", 10*time.Second)
	if !strings.Contains(s, "▌ first line") || !strings.Contains(s, "▌ second line") || !strings.Contains(s, "+ stdin context: 4 tokens") {
		t.Fatalf("multi-line message not shown:\n%s", s)
	}
	tm.keys("Escape")
	s = tm.waitFor("stopped", 10*time.Second, func(s string) bool { return strings.Contains(s, "─ stopped") })
	if !strings.Contains(s, "x := 1") {
		t.Errorf("code block not rendered:\n%s", s)
	}

	tm.typeText("/kvd")
	tm.waitText("/kvdtype <dtype>", 5*time.Second) // the command menu
	tm.keys("Tab")
	tm.typeText("fp8_e4m3")
	tm.keys("Enter")
	// Issue 15 item 4: typing during the switch queues the message, which
	// is sent when the switch ends.
	tm.waitText("esc cancels", 5*time.Second)
	tm.typeText("typed during the switch")
	tm.keys("Enter")
	tm.waitText("message queued", 5*time.Second)
	tm.waitText("kv fp8_e4m3", 10*time.Second)
	tm.waitText("16,000 / 131,072 tok", 5*time.Second)
	tm.waitText("▌ typed during the switch", 10*time.Second) // sent: its turn is on screen
	tm.keys("Escape")
	tm.waitFor("stopped", 10*time.Second, func(s string) bool { return strings.Contains(s, "─ stopped") })
	// Esc cancels a switch and keeps the cache.
	tm.typeText("/kvdtype bf16")
	tm.keys("Enter")
	tm.waitText("esc cancels", 5*time.Second)
	tm.keys("Escape")
	tm.waitText("/kvdtype bf16 cancelled; the KV cache is fp8_e4m3 as before", 10*time.Second)

	tm.typeText("/nope")
	tm.keys("Enter")
	tm.waitText("unknown command /nope", 5*time.Second)

	// Issue 15 item 3: a long single line wraps in the input, whole; item
	// 17: /set changes a sampling setting mid-chat.
	long := "start " + strings.Repeat("a long single line that wraps ", 8) + "finish"
	tm.typeText(long)
	tm.waitFor("the long line wrapped in the input", 5*time.Second, func(s string) bool {
		return strings.Contains(s, "› start a long") && strings.Contains(s, "finish")
	})
	tm.keys("C-c") // clears the input
	tm.typeText("/set temp")
	tm.keys("Tab")
	tm.typeText(" 0.2")
	tm.keys("Enter")
	tm.waitText("temperature: 0 → 0.2 (from the next answer)", 5*time.Second)

	// Issue 15 item 6: a pasted tab stays a tab in the input (shown as
	// →; TestPastedTabsReachTheModel checks the request), and is sent.
	tm.paste("func f() {\n\treturn\t1\n}")
	tm.waitText("› "+tabGlyph+"return"+tabGlyph+"1", 5*time.Second)
	tm.keys("Enter")
	tm.waitFor("the pasted turn answered", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "▌     return    1") && strings.Contains(s, "answer to: func") && idle(s)
	})

	// Issue 15 item 17: /copy reaches the terminal's clipboard (OSC 52,
	// which tmux keeps as a paste buffer with set-clipboard on).
	if out, err := exec.Command("tmux", "set-option", "-s", "set-clipboard", "on").CombinedOutput(); err != nil {
		t.Fatalf("tmux set-clipboard: %v: %s", err, out)
	}
	tm.typeText("/copy -2 code")
	tm.keys("Enter")
	tm.waitText("copied code block 1 of 1 (go (1 line)) of answer -2", 5*time.Second)
	if out, err := exec.Command("tmux", "show-buffer").Output(); err != nil || string(out) != "x := 1" {
		t.Errorf("the clipboard (tmux buffer) holds %q (%v), want the code block", out, err)
	}

	tm.keys("C-c")
	tm.waitText("press Ctrl+C again", 5*time.Second)
	tm.keys("C-c")
	s = tm.waitText("CHILD EXITED", 10*time.Second)
	if !strings.Contains(s, "resume with: ftchat --continue") {
		t.Errorf("no resume hint after quitting:\n%s", s)
	}
	// The conversation stays on the main screen (and in the scrollback)
	// after the alternate screen is gone (issue 15 item 17).
	hist := tm.scrollback()
	for _, want := range []string{"KV cache is now fp8_e4m3", "unknown command /nope", "▌     return    1"} {
		if !strings.Contains(hist, want) {
			t.Errorf("transcript lacks %q after quitting:\n%s", want, hist)
		}
	}
	if strings.Contains(s, "RUN ERROR") {
		t.Errorf("Run failed:\n%s", s)
	}
	if names, _ := (&Store{Dir: dir}).List(); len(names) != 1 {
		t.Errorf("sessions saved: %v", names)
	}
}
