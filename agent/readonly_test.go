//go:build unix

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// within runs a tool call with ctx and fails the test if it has not
// returned after d (on a loaded machine too: d is generous).
func within(t *testing.T, d time.Duration, ctx context.Context, tools *Tools, name string, args map[string]any) (string, error) {
	t.Helper()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := tools.Plan(engine.ToolCall{Name: name, Arguments: args})
		if err != nil {
			done <- result{"", err}
			return
		}
		out, err := p.Run(ctx)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(d):
		t.Fatalf("%s %v still running after %s", name, args, d)
		return "", nil
	}
}

// TestReadOnlyToolsDoNotBlockOnFIFOs guards read_file, list, grep, glob
// and edit against named pipes in the tree or named directly: opening one
// for reading waits for a writer forever.
func TestReadOnlyToolsDoNotBlockOnFIFOs(t *testing.T) {
	tools, dir := toolsIn(t, map[string]string{"a.txt": "x marks\n", "sub/b.txt": "x too\n"}, DefaultLimits)
	for _, p := range []string{"pipe", "sub/pipe2"} {
		if err := syscall.Mkfifo(filepath.Join(dir, p), 0o644); err != nil {
			t.Skip("mkfifo:", err)
		}
	}
	cases := []struct {
		tool    string
		args    map[string]any
		want    string // in the output, or in the error when wantErr
		wantErr bool
	}{
		{"read_file", map[string]any{"path": "pipe"}, "named pipe", true},
		{"read_file", map[string]any{"path": "sub/pipe2"}, "named pipe", true},
		{"list", map[string]any{"path": "pipe"}, "named pipe", true},
		{"grep", map[string]any{"pattern": "x", "path": "pipe"}, "named pipe", true},
		{"edit", map[string]any{"path": "pipe", "old_text": "a", "new_text": "b"}, "named pipe", true},
		{"write_file", map[string]any{"path": "pipe", "content": "b"}, "named pipe", true},
		{"grep", map[string]any{"pattern": "x"}, "sub/b.txt:1: x too", false},
		{"grep", map[string]any{"pattern": "x", "path": "sub"}, "sub/b.txt:1: x too", false},
		{"glob", map[string]any{"pattern": "**/*"}, "a.txt\nsub/b.txt\n", false},
		{"list", map[string]any{"path": "."}, "pipe", false},
	}
	for _, c := range cases {
		out, err := within(t, 5*time.Second, context.Background(), tools, c.tool, c.args)
		if c.wantErr {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %v: %q, %v; want an error about %q", c.tool, c.args, out, err, c.want)
			}
			continue
		}
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%s %v: %q, %v; want %q", c.tool, c.args, out, err, c.want)
		}
	}
}

// deepTree makes a chain of depth directories d0/d1/..., with f.txt in each.
func deepTree(t *testing.T, depth int) map[string]string {
	files := map[string]string{}
	p := ""
	for i := range depth {
		p = filepath.Join(p, "d"+string(rune('a'+i%26)))
		files[filepath.Join(p, "f.txt")] = "needle\n"
	}
	return files
}

// TestWalksStopOnCancelAndLimits guards glob, grep and list: a cancelled
// context stops them, a pattern of many "**" over a deep tree is fast, and
// a walk over its time or entry budget returns what it found with a note.
func TestWalksStopOnCancelAndLimits(t *testing.T) {
	tools, _ := toolsIn(t, deepTree(t, 40), DefaultLimits)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"glob", map[string]any{"pattern": "**/f.txt"}},
		{"grep", map[string]any{"pattern": "needle"}},
		{"list", map[string]any{"path": "."}},
	} {
		out, err := within(t, 5*time.Second, cancelled, tools, c.tool, c.args)
		if err == nil || !strings.Contains(err.Error(), "cancelled") {
			t.Errorf("%s with a cancelled context: %q, %v; want a cancelled error", c.tool, out, err)
		}
	}

	// Eight "**" took time exponential in them when nothing matched.
	for _, c := range []struct{ name, want string }{{"f.txt", "f.txt\n"}, {"nothing.txt", "no files match"}} {
		out, err := within(t, 5*time.Second, context.Background(), tools, "glob", map[string]any{"pattern": strings.Repeat("**/", 8) + c.name})
		if err != nil || strings.Count(out, c.want) != map[bool]int{true: 40, false: 1}[c.name == "f.txt"] {
			t.Errorf("glob of eight ** then %s: %q, %v", c.name, out, err)
		}
	}

	for _, c := range []struct {
		name string
		lim  func(*Limits)
		want string
	}{
		{"time", func(l *Limits) { l.WalkTime = time.Nanosecond }, "stopped after 1ns of searching"},
		{"entries", func(l *Limits) { l.WalkEntries = 5 }, "stopped after 5 directory entries"},
	} {
		lim := DefaultLimits
		c.lim(&lim)
		tools, _ := toolsIn(t, deepTree(t, 40), lim)
		for _, tool := range []string{"glob", "grep"} {
			args := map[string]any{"pattern": "**/f.txt"}
			if tool == "grep" {
				args = map[string]any{"pattern": "needle"}
			}
			out, err := within(t, 5*time.Second, context.Background(), tools, tool, args)
			if err != nil || !strings.Contains(out, c.want) || strings.Count(out, "f.txt") >= 40 {
				t.Errorf("%s over the %s budget: %q, %v; want partial results and %q", tool, c.name, out, err, c.want)
			}
		}
	}
}

// TestReadFileHugeSparseFile guards read_file, edit and grep against a
// 6 GiB file (sparse: no disk used): bounded time, memory and output.
func TestReadFileHugeSparseFile(t *testing.T) {
	text := strings.Repeat("some text on a line\n", 500) // 10,000 bytes of text, then zeros
	tools, dir := toolsIn(t, map[string]string{"huge.txt": text}, DefaultLimits)
	if err := os.Truncate(filepath.Join(dir, "huge.txt"), 6<<30); err != nil {
		t.Skip("cannot make a sparse file:", err)
	}
	start := time.Now()
	out, err := within(t, 5*time.Second, context.Background(), tools, "read_file", map[string]any{"path": "huge.txt"})
	if err != nil || len(out) > 2*DefaultLimits.ReadBytes || !strings.Contains(out, "6.0 GiB") {
		t.Errorf("read_file: %d bytes %q..., %v; want bounded output that names the size", len(out), out[:min(len(out), 200)], err)
	}
	if _, err := within(t, 5*time.Second, context.Background(), tools, "edit", map[string]any{"path": "huge.txt", "old_text": "some", "new_text": "x"}); err == nil || !strings.Contains(err.Error(), "6.0 GiB") {
		t.Errorf("edit of a 6 GiB file: %v; want it refused with the size", err)
	}
	if out, err := within(t, 5*time.Second, context.Background(), tools, "grep", map[string]any{"pattern": "text"}); err != nil || !strings.Contains(out, "no matches") {
		t.Errorf("grep skips files over GrepFileSize: %q, %v", out, err)
	}
	t.Logf("took %s", time.Since(start))

	// A text file longer than FileSize: the head, said to be cut.
	lim := DefaultLimits
	lim.FileSize = 1 << 10
	tools, _ = toolsIn(t, map[string]string{"long.txt": numbered(1000)}, lim)
	out, err = within(t, 5*time.Second, context.Background(), tools, "read_file", map[string]any{"path": "long.txt"})
	if err != nil || !strings.Contains(out, "read_file reads only its first 1.0 KiB") || strings.Contains(out, "line 1000") {
		t.Errorf("read_file over FileSize: %q, %v", out, err)
	}
}
