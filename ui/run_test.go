package ui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

func TestPrintMode(t *testing.T) {
	eng, sess := newFakeEngine(), &fakeSession{}
	sess.push(think("hmm"), text("The answer"), engine.Event{Kind: engine.EventStats, Stats: eng.Stats()}, text(" is **42**."), done(engine.StopEOS))
	var out bytes.Buffer
	err := PrintMode(context.Background(), Config{Engine: eng, Session: sess, SessionDir: t.TempDir(), InitialPrompt: "what is it?", Piped: "data\n", Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "The answer is **42**.\n" {
		t.Fatalf("output = %q (only the answer text, no thinking, no escape codes)", got)
	}
	if c := sess.lastReq().Messages[0].Content; !strings.Contains(c, "what is it?") || !strings.Contains(c, "Context (piped from stdin):\n```\ndata\n```") {
		t.Errorf("request = %q", c)
	}
}

func TestPrintModeErrors(t *testing.T) {
	tests := []struct {
		name   string
		cfg    func(c *Config, s *fakeSession)
		errHas string
	}{
		{"no prompt", func(c *Config, s *fakeSession) { c.InitialPrompt = "" }, "nothing to answer"},
		{"piped too big", func(c *Config, s *fakeSession) { c.Piped = strings.Repeat("w ", 70000) }, "the piped input (70,000 tokens) does not fit the KV pool: prompt needs 70007 tokens"},
		{"engine error", func(c *Config, s *fakeSession) {
			s.push(text("par"), engine.Event{Kind: engine.EventError, Err: errors.New("decode failed")})
		}, "decode failed"},
		{"no engine", func(c *Config, s *fakeSession) { c.Engine = nil }, "Config.Engine and Config.Session are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess := &fakeSession{}
			cfg := Config{Engine: newFakeEngine(), Session: sess, SessionDir: t.TempDir(), InitialPrompt: "q", Out: io.Discard}
			tc.cfg(&cfg, sess)
			err := PrintMode(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("error = %v, want %q", err, tc.errHas)
			}
		})
	}
}

// With only piped text, the piped text is the prompt.
func TestPrintModePipedOnly(t *testing.T) {
	eng, sess := newFakeEngine(), &fakeSession{}
	sess.push(text("ok\n"), done(engine.StopEOS))
	var out bytes.Buffer
	if err := PrintMode(context.Background(), Config{Engine: eng, Session: sess, SessionDir: t.TempDir(), Piped: "explain x\n", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if c := sess.lastReq().Messages[0].Content; c != "explain x" {
		t.Errorf("prompt = %q", c)
	}
	if out.String() != "ok\n" {
		t.Errorf("out = %q", out.String())
	}
}

func TestReadPiped(t *testing.T) {
	// A pipe that sends a little and never closes must not hang when a
	// prompt was given.
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("partial input\n"))
	start := time.Now()
	got, err := ReadPiped(pr, true, 100*time.Millisecond, 0)
	if err != nil || got != "partial input\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	// Without a prompt it reads to EOF, however slow.
	pr2, pw2 := io.Pipe()
	go func() {
		pw2.Write([]byte("a"))
		time.Sleep(150 * time.Millisecond)
		pw2.Write([]byte("b"))
		pw2.Close()
	}()
	got, err = ReadPiped(pr2, false, 50*time.Millisecond, 0)
	if err != nil || got != "ab" {
		t.Fatalf("got %q, %v", got, err)
	}
	// Limit.
	_, err = ReadPiped(strings.NewReader(strings.Repeat("x", 2000)), false, time.Second, 1024)
	if err == nil || !strings.Contains(err.Error(), "stdin is larger than 1.00 KiB") {
		t.Fatalf("limit error = %v", err)
	}
}

func TestStableCut(t *testing.T) {
	tests := []struct {
		in   string
		want string // the stable prefix
	}{
		{"", ""},
		{"no newline yet", ""},
		{"para one\n", ""},
		{"para one\n\npara two", "para one\n\n"},
		{"a\n\nb\n\nc", "a\n\nb\n\n"},
		{"a\n\n```go\nx\n\ny\n", "a\n\n"}, // blank line inside an open fence is no boundary
		{"a\n\n```go\nx\n\ny\n```\nz", "a\n\n```go\nx\n\ny\n```\n"}, // a closed fence ends a block
		{"a\n\n\n\nb", "a\n\n"},
	}
	for _, tc := range tests {
		if got := tc.in[:stableCut(tc.in)]; got != tc.want {
			t.Errorf("stableCut(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Rendering a streamed answer in pieces ends, once finished, exactly as
// rendering it whole.
func TestStreamFinalRenderMatchesWhole(t *testing.T) {
	md := "Intro paragraph.\n\n```go\nfunc f() {\n\treturn\n}\n```\n\n1. one\n2. two\n\nDone."
	r := newRenderer(80, "dark")
	e := &entry{kind: entryAssistant, streaming: true}
	for i := 1; i <= len(md); i += 7 {
		e.text = md[:i]
		e.valid = false
		r.render(e, false)
	}
	e.text, e.streaming, e.valid = md, false, false
	got := strings.Join(r.render(e, false), "\n")
	want := strings.Join(r.markdown(md), "\n")
	if got != want {
		t.Fatalf("final render differs from a whole render:\n%s\n---\n%s", got, want)
	}
	if !strings.Contains(stripFrame(got), "func f() {") {
		t.Error("code block missing")
	}
}

func TestFormat(t *testing.T) {
	ints := map[int64]string{0: "0", 999: "999", 1000: "1,000", 131072: "131,072", -1234567: "-1,234,567"}
	for in, want := range ints {
		if got := formatInt(in); got != want {
			t.Errorf("formatInt(%d) = %q, want %q", in, got, want)
		}
	}
	bytes := map[int64]string{512: "512 B", 1536: "1.50 KiB", 786 << 20: "786 MiB", 2684354560: "2.50 GiB", 12 << 30: "12.0 GiB"}
	for in, want := range bytes {
		if got := formatBytes(in); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", in, got, want)
		}
	}
	bars := []struct {
		f    float64
		want string
	}{{0, "▕░░░░▏"}, {0.01, "▕█░░░▏"}, {0.5, "▕██░░▏"}, {1, "▕████▏"}, {2, "▕████▏"}}
	for _, b := range bars {
		if got := bar(b.f, 4); got != b.want {
			t.Errorf("bar(%v) = %q, want %q", b.f, got, b.want)
		}
	}
	if formatRate(0) != "-" || formatRate(87.25) != "87.2" || formatRate(12345.6) != "12,346" {
		t.Error("formatRate")
	}
}

// Run with plain pipes for input and output (no terminal): keys are read
// from In, the session is saved, and the resume hint is printed.
func TestRunWithPipes(t *testing.T) {
	eng, sess := newFakeEngine(), &fakeSession{}
	sess.push(text("pipe answer"), done(engine.StopEOS))
	dir := t.TempDir()
	pr, pw := io.Pipe()
	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), Config{Engine: eng, Session: sess, SessionDir: dir, In: pr, Out: &out, Width: 80, Height: 24, Style: "dark"})
	}()
	pw.Write([]byte("hello pipes\r"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if names, _ := (&Store{Dir: dir}).List(); len(names) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn was not saved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pw.Write([]byte{0x04}) // ctrl+d
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctrl+d")
	}
	if r := sess.lastReq(); r.Messages[0].Content != "hello pipes" {
		t.Errorf("sent %+v", r.Messages)
	}
	if !strings.Contains(out.String(), "resume with: ftchat --continue") {
		t.Errorf("no resume hint in the output tail: %q", tail(out.String(), 200))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
