package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
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

// runTurnAndQuit runs the UI over pipes: one message, its answer, then
// ctrl+d. It returns what Run printed to Out and to Err.
func runTurnAndQuit(t *testing.T, sessionDir string) (out, errOut string) {
	t.Helper()
	eng, sess := newFakeEngine(), &fakeSession{}
	sess.push(text("an answer worth keeping"), done(engine.StopEOS))
	pr, pw := io.Pipe()
	var o, e bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), Config{Engine: eng, Session: sess, SessionDir: sessionDir, In: pr, Out: &o, Err: &e, Width: 80, Height: 24, Style: "dark"})
	}()
	pw.Write([]byte("keep this question\r"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		sess.mu.Lock()
		n := len(sess.reqs)
		sess.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message was not sent")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the answer and its autosave attempt
	pw.Write([]byte{0x04})             // ctrl+d
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctrl+d")
	}
	return o.String(), e.String()
}

// A session directory that cannot be written (here: under a regular file,
// which stops root too) must not end with "saved": exit says it was not,
// and the conversation is recovered to a fallback file, or to Err when
// that cannot be written either.
func TestRunFailedSaveIsNotReportedAsSaved(t *testing.T) {
	tests := []struct {
		name          string
		fallbackWorks bool
	}{
		{"fallback file", true},
		{"fallback impossible, stderr", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			blocker := filepath.Join(base, "not-a-dir")
			if err := os.WriteFile(blocker, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(base, "cache")
			if !tc.fallbackWorks {
				cache = filepath.Join(blocker, "cache")
				t.Setenv("TMPDIR", filepath.Join(blocker, "tmp"))
			}
			t.Setenv("XDG_CACHE_HOME", cache)
			out, errOut := runTurnAndQuit(t, filepath.Join(blocker, "sessions"))
			end := tail(out, 1500)
			if strings.Contains(out, "saved · resume with") {
				t.Fatalf("a failed save was reported as saved: %q", end)
			}
			if !strings.Contains(end, "was NOT saved") || !strings.Contains(end, "not a directory") {
				t.Fatalf("exit does not say plainly that the session was not saved and why: %q", end)
			}
			if !tc.fallbackWorks {
				if !strings.Contains(errOut, "keep this question") || !strings.Contains(errOut, "an answer worth keeping") {
					t.Fatalf("the conversation is not on stderr: %q", errOut)
				}
				return
			}
			matches, _ := filepath.Glob(filepath.Join(cache, "ftchat", "unsaved", "ftchat-session-*.json"))
			if len(matches) != 1 || !strings.Contains(end, matches[0]) {
				t.Fatalf("fallback files %v, exit text %q", matches, end)
			}
			data, err := os.ReadFile(matches[0])
			if err != nil {
				t.Fatal(err)
			}
			var f SessionFile
			if err := json.Unmarshal(data, &f); err != nil {
				t.Fatalf("the fallback is not a session file: %v", err)
			}
			if len(f.Messages) != 2 || f.Messages[0].Content != "keep this question" || f.Messages[1].Content != "an answer worth keeping" {
				t.Fatalf("fallback holds %+v", f.Messages)
			}
		})
	}
}
