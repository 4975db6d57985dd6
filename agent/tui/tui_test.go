package tui

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func key(s string) tea.KeyPressMsg {
	switch s {
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	}
	r := []rune(s)[0]
	return tea.KeyPressMsg{Code: r, Text: s}
}

// ask runs Approve in a goroutine and returns the ApprovalMsg it sent and
// a channel with its result.
func ask(t *testing.T, ctx context.Context, p *agent.Plan) (ApprovalMsg, chan error, *agent.Decision) {
	t.Helper()
	msgs := make(chan tea.Msg, 1)
	ap := Approver{Send: func(m tea.Msg) { msgs <- m }}
	var dec agent.Decision
	errc := make(chan error, 1)
	go func() {
		d, err := ap.Approve(ctx, p)
		dec = d
		errc <- err
	}()
	select {
	case m := <-msgs:
		return m.(ApprovalMsg), errc, &dec
	case <-time.After(5 * time.Second):
		t.Fatal("no ApprovalMsg sent")
	}
	return ApprovalMsg{}, nil, nil
}

func TestDialogAnswers(t *testing.T) {
	for _, c := range []struct {
		key  string
		want agent.Decision
	}{{"o", agent.AllowOnce}, {"y", agent.AllowOnce}, {"s", agent.AllowSession}, {"d", agent.Deny}, {"esc", agent.Deny}} {
		p := &agent.Plan{Tool: "edit", Summary: "edit a.go", Preview: "--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@\n-x\n+y\n"}
		req, errc, dec := ask(t, context.Background(), p)
		d := NewDialog(req, 60, 12)
		d, cmd := d.Update(key("x")) // not an answer
		if cmd != nil || d.Done() {
			t.Fatal("x must not answer")
		}
		d, cmd = d.Update(key(c.key))
		if cmd == nil || !d.Done() {
			t.Fatalf("%s: no answer", c.key)
		}
		if m := cmd().(DecidedMsg); m.Decision != c.want || m.Plan != p {
			t.Fatalf("%s: DecidedMsg %+v", c.key, m)
		}
		if err := <-errc; err != nil || *dec != c.want {
			t.Fatalf("%s: Approve returned %v, %v; want %v", c.key, *dec, err, c.want)
		}
		if _, cmd := d.Update(key("o")); cmd != nil {
			t.Fatal("a second answer must be ignored")
		}
	}
}

func TestApproverCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	req, errc, dec := ask(t, ctx, &agent.Plan{Tool: "run_shell", Summary: "run_shell: ls"})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || *dec != agent.Deny {
		t.Fatalf("cancel: %v %v", *dec, err)
	}
	req.Answer(agent.AllowOnce) // late answer: must not block or panic
}

func TestDialogViewGolden(t *testing.T) {
	var diff strings.Builder
	diff.WriteString("--- a/main.go\n+++ b/main.go\n@@ -1,12 +1,12 @@\n")
	for i := range 12 {
		if i == 5 {
			diff.WriteString("-\tfmt.Println(\"hello, world\")\n+\tfmt.Println(\"hello, ftchat\")\n")
			continue
		}
		diff.WriteString(" line " + string(rune('a'+i)) + "\n")
	}
	p := &agent.Plan{Tool: "edit", Summary: "edit main.go", Preview: diff.String()}
	req := ApprovalMsg{Plan: p, reply: make(chan agent.Decision, 1), once: &sync.Once{}}
	d := NewDialog(req, 50, 12)
	frames := []string{d.View()}
	for _, k := range []string{"down", "down", "down", "down", "down", "down", "down", "down", "down", "down", "up"} {
		d, _ = d.Update(key(k))
	}
	frames = append(frames, d.View())
	for i, f := range frames {
		for _, l := range strings.Split(f, "\n") {
			if w := lipgloss.Width(l); w > 50 {
				t.Fatalf("frame %d: line wider than 50 cells (%d): %q", i, w, l)
			}
		}
		if n := strings.Count(f, "\n") + 1; n != 12 {
			t.Fatalf("frame %d: %d rows, want 12", i, n)
		}
	}
	got := ansi.Strip(strings.Join(frames, "\n----\n")) + "\n"
	path := filepath.Join("testdata", "dialog.golden")
	if *update {
		os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Fatalf("dialog differs from %s (-update rewrites it):\n%s", path, got)
	}
}

func TestSinkSends(t *testing.T) {
	var got []tea.Msg
	s := Sink{Send: func(m tea.Msg) { got = append(got, m) }}
	var _ agent.Sink = s
	c := engine.ToolCall{Name: "list"}
	s.Text("a")
	s.Thinking("b")
	s.ToolCall(c, "list .")
	s.ToolResult(c, "x", nil)
	s.Note("n")
	want := []tea.Msg{TextMsg{"a"}, ThinkingMsg{"b"}, ToolCallMsg{c, "list ."}, ToolResultMsg{c, "x", nil}, NoteMsg{"n"}}
	if len(got) != len(want) {
		t.Fatalf("%d messages", len(got))
	}
	for i := range want {
		if fmt.Sprintf("%#v", got[i]) != fmt.Sprintf("%#v", want[i]) {
			t.Errorf("message %d: %#v, want %#v", i, got[i], want[i])
		}
	}
}
