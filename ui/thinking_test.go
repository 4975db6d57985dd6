package ui

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// TestThinkingBlockGolden renders an answer's thinking block collapsed
// (one line: word count and the key) and expanded (dimmed, wrapped, each
// line marked), for a finished answer, a streaming one still thinking, and
// one that ended inside its thinking (a Qwen3.5 model starts there).
func TestThinkingBlockGolden(t *testing.T) {
	long := "The user asks for a loop.\n\nGo has only `for`; a while loop is a for with a condition. " +
		"I should show both forms and keep it short, since the question is simple."
	cases := []struct {
		name string
		e    entry
	}{
		{"finished", entry{kind: entryAssistant, text: "Use `for cond { }`.", think: long}},
		{"streaming", entry{kind: entryAssistant, think: long, streaming: true}},
		{"only thinking", entry{kind: entryAssistant, think: "Still weighing it", note: "stopped: token limit reached"}},
		{"no thinking", entry{kind: entryAssistant, text: "Plain answer."}},
	}
	var b strings.Builder
	for _, show := range []bool{false, true} {
		for _, c := range cases {
			r := newRenderer(60, "notty")
			e := c.e
			b.WriteString("=== " + c.name)
			if show {
				b.WriteString(" (expanded)")
			}
			b.WriteString("\n")
			b.WriteString(stripFrame(strings.Join(r.render(&e, show), "\n")))
			b.WriteString("\n")
		}
	}
	checkGolden(t, "thinking_block_60", b.String())
}

// -p prints only the answer on stdout; the thinking goes to
// Config.Thinking (stderr with --verbose) under a "thinking: " header, or
// nowhere.
func TestPrintModeThinking(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		sess := &fakeSession{}
		sess.push(think("Let me"), think(" think.\n"), think("Done"), text("The answer."), done(engine.StopEOS))
		var out, errOut bytes.Buffer
		cfg := Config{Engine: newFakeEngine(), Session: sess, InitialPrompt: "q", Out: &out}
		if verbose {
			cfg.Thinking = &errOut
		}
		if err := PrintMode(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if out.String() != "The answer.\n" {
			t.Errorf("verbose %v: stdout %q", verbose, out.String())
		}
		want := ""
		if verbose {
			want = "thinking: Let me think.\nDone\n"
		}
		if errOut.String() != want {
			t.Errorf("verbose %v: thinking written %q, want %q", verbose, errOut.String(), want)
		}
	}
}

// A turn's thinking is saved with the session (reasoning_content) and a
// resumed session shows it collapsed again; the next request carries it.
func TestThinkingSavedAndResumed(t *testing.T) {
	dir := t.TempDir()
	d := newDriver(t, func(c *Config) { c.SessionDir = dir })
	d.sess.push(think("weighing the options"), text("the answer"), done(engine.StopEOS))
	d.submit("a question")
	d.settle()
	st := &Store{Dir: dir}
	name, err := st.Latest()
	if err != nil || name == "" {
		t.Fatalf("no saved session: %q %v", name, err)
	}
	f, err := st.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Messages); n != 2 || f.Messages[1].Reasoning != "weighing the options" || f.Messages[1].Content != "the answer" {
		t.Fatalf("saved %+v", f.Messages)
	}
	d2 := newDriver(t, func(c *Config) { c.SessionDir = dir; c.Continue = true })
	if fr := d2.frame(); !strings.Contains(fr, "▸ thinking (3 words)") || strings.Contains(fr, "weighing") {
		t.Fatalf("resumed frame:\n%s", fr)
	}
	d2.sess.push(text("more"), done(engine.StopEOS))
	d2.submit("next")
	d2.settle()
	if r := d2.sess.lastReq(); r.Messages[1].Reasoning != "weighing the options" {
		t.Fatalf("request %+v", r.Messages)
	}
}
