package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

func runTool(t *testing.T, tools *Tools, name string, args map[string]any) (string, error) {
	t.Helper()
	p, err := tools.Plan(engine.ToolCall{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	return p.Run(context.Background())
}

func toolsIn(t *testing.T, files map[string]string, limits Limits) (*Tools, string) {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	tools, err := NewTools(ws, limits)
	if err != nil {
		t.Fatal(err)
	}
	return tools, dir
}

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestReadFile(t *testing.T) {
	lim := DefaultLimits
	lim.ReadBytes = 40
	tools, _ := toolsIn(t, map[string]string{
		"a.txt": numbered(10), "empty.txt": "", "bin.dat": "ab\x00cd", "long.txt": strings.Repeat("z", 100),
		"nonl.txt": "no newline", "utf8.txt": "x" + strings.Repeat("é", 30),
	}, lim)
	cases := []struct {
		args map[string]any
		want string
		err  string
	}{
		{args: map[string]any{"path": "a.txt", "start_line": 2, "end_line": 3}, want: "a.txt (lines 2-3 of 10)\nline 2\nline 3\n"},
		{args: map[string]any{"path": "a.txt", "start_line": "9"}, want: "a.txt (lines 9-10 of 10)\nline 9\nline 10\n"},
		{args: map[string]any{"path": "a.txt"}, want: "a.txt (lines 1-5 of 10)\nline 1\nline 2\nline 3\nline 4\nline 5\n[cut at 40 bytes; read on with start_line 6]\n"},
		{args: map[string]any{"path": "long.txt"}, want: "long.txt (lines 1-1 of 1)\n" + strings.Repeat("z", 40) + "\n"},
		{args: map[string]any{"path": "utf8.txt"}, want: "utf8.txt (lines 1-1 of 1)\nx" + strings.Repeat("é", 19) + "\n"}, // 40 bytes would split a rune,
		{args: map[string]any{"path": "nonl.txt"}, want: "nonl.txt (lines 1-1 of 1)\nno newline\n"},
		{args: map[string]any{"path": "empty.txt"}, want: "empty.txt is empty"},
		{args: map[string]any{"path": "a.txt", "start_line": 11}, err: "a.txt has 10 lines; start_line 11 is past the end"},
		{args: map[string]any{"path": "a.txt", "start_line": 5, "end_line": 2}, err: "end_line 2 is before start_line 5"},
		{args: map[string]any{"path": "a.txt", "start_line": 1.5}, err: `argument "start_line" must be an integer`},
		{args: map[string]any{"path": "bin.dat"}, err: "binary file"},
		{args: map[string]any{"path": "."}, err: "is a directory"},
		{args: map[string]any{"path": 3}, err: `argument "path" must be a string`},
	}
	for _, c := range cases {
		got, err := runTool(t, tools, "read_file", c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v:\ngot  %q (%v)\nwant %q", c.args, got, err, c.want)
		}
	}
}

func TestListGlobGrep(t *testing.T) {
	lim := DefaultLimits
	lim.GrepMatches = 3
	tools, dir := toolsIn(t, map[string]string{
		"main.go": "package main\n// TODO one\n", "a/b/c.go": "package b\n// TODO two\n", "a/x.txt": "TODO three\nTODO four\n",
		".git/config": "TODO in git\n", "bin/tool": "TODO\x00binary", "README.md": "readme\n",
	}, lim)
	if err := os.Symlink("main.go", filepath.Join(dir, "alias.go")); err != nil {
		t.Fatal(err)
	}
	got, err := runTool(t, tools, "list", map[string]any{})
	if want := ".: 6 entries\n.git/\nREADME.md\na/\nalias.go@\nbin/\nmain.go\n"; err != nil || got != want {
		t.Errorf("list: %q %v", got, err)
	}
	for pattern, want := range map[string]string{
		"**/*.go":  "a/b/c.go\nmain.go\n",
		"*.go":     "a/b/c.go\nmain.go\n",
		"a/*":      "a/x.txt\n",
		"a/**":     "a/b/c.go\na/x.txt\n",
		"**/b/*":   "a/b/c.go\n",
		"nothing*": "no files match nothing*",
	} {
		if got, err := runTool(t, tools, "glob", map[string]any{"pattern": pattern}); err != nil || got != want {
			t.Errorf("glob %s: %q %v, want %q", pattern, got, err, want)
		}
	}
	got, err = runTool(t, tools, "grep", map[string]any{"pattern": "TODO", "glob": "**/*.go"})
	if want := "a/b/c.go:2: // TODO two\nmain.go:2: // TODO one\n"; err != nil || got != want {
		t.Errorf("grep: %q %v, want %q", got, err, want)
	}
	got, err = runTool(t, tools, "grep", map[string]any{"pattern": "TODO"})
	if err != nil || !strings.HasSuffix(got, "[stopped after 3 matches; narrow the pattern or path]\n") || strings.Contains(got, "git") || strings.Contains(got, "binary") {
		t.Errorf("grep capped: %q %v", got, err)
	}
	got, err = runTool(t, tools, "grep", map[string]any{"pattern": "four", "path": "a/x.txt"})
	if err != nil || got != "a/x.txt:2: TODO four\n" {
		t.Errorf("grep one file: %q %v", got, err)
	}
	if _, err := runTool(t, tools, "grep", map[string]any{"pattern": "("}); err == nil || !strings.Contains(err.Error(), "bad regular expression") {
		t.Errorf("bad regexp: %v", err)
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pat, p string
		want   bool
	}{
		{"**/*.go", "x.go", true}, {"**/*.go", "a/b/x.go", true}, {"**", "a/b", true},
		{"a/**/z", "a/z", true}, {"a/**/z", "a/b/c/z", true}, {"a/**/z", "b/z", false},
		{"a/*.go", "a/b/x.go", false}, {"*.md", "docs/x.md", true}, {"docs/*.md", "x.md", false},
	}
	for _, c := range cases {
		if got := matchGlob(c.pat, c.p); got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v", c.pat, c.p, got)
		}
	}
}

func TestWriteAndEditPreviews(t *testing.T) {
	tools, dir := toolsIn(t, map[string]string{"f.txt": numbered(20)}, DefaultLimits)
	p, err := tools.Plan(engine.ToolCall{Name: "edit", Arguments: map[string]any{"path": "f.txt", "old_text": "line 10\n", "new_text": "line ten\nline 10.5\n"}})
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := "--- a/f.txt\n+++ b/f.txt\n@@ -7,7 +7,8 @@\n line 7\n line 8\n line 9\n-line 10\n+line ten\n+line 10.5\n line 11\n line 12\n line 13\n"
	if p.Preview != wantDiff || !p.NeedsApproval || p.Summary != "edit f.txt" {
		t.Fatalf("edit plan: %q %v %q", p.Preview, p.NeedsApproval, p.Summary)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != numbered(20) {
		t.Fatal("planning must not write")
	}
	p, err = tools.Plan(engine.ToolCall{Name: "write_file", Arguments: map[string]any{"path": "new/n.txt", "content": "a\nb"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "--- /dev/null\n+++ b/new/n.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n"; p.Preview != want {
		t.Fatalf("write preview %q", p.Preview)
	}
	if p.Summary != "write_file new/n.txt (new file, 2 lines)" {
		t.Fatalf("summary %q", p.Summary)
	}
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new", "n.txt")); string(b) != "a\nb" {
		t.Fatalf("written %q", b)
	}
}

// applyDiff applies a unified diff made by UnifiedDiff to old.
func applyDiff(t *testing.T, old, diff string) string {
	t.Helper()
	src := splitLines(old)
	var out []string
	pos := 0
	lines := strings.SplitAfter(diff, "\n")
	for i := 2; i < len(lines); i++ {
		l := lines[i]
		if l == "" {
			continue
		}
		switch l[0] {
		case '@':
			var os, ol, ns, nl int
			if _, err := fmt.Sscanf(l, "@@ -%d,%d +%d,%d @@", &os, &ol, &ns, &nl); err != nil {
				// single-line ranges omit the count
				parts := strings.Fields(l)
				os, _ = strconv.Atoi(strings.Split(strings.TrimPrefix(parts[1], "-"), ",")[0])
				if strings.Contains(parts[1], ",0") {
					os++
				}
			} else if ol == 0 {
				os++
			}
			for pos < os-1 {
				out = append(out, src[pos])
				pos++
			}
		case ' ', '-':
			if src[pos] != l[1:] && src[pos] != strings.TrimSuffix(l[1:], "\n") {
				t.Fatalf("diff context %q does not match source line %q", l, src[pos])
			}
			if l[0] == ' ' {
				out = append(out, src[pos])
			}
			pos++
		case '+':
			out = append(out, l[1:])
		case '\\':
			if lines[i-1][0] != '-' { // the marker belongs to the line before it
				out[len(out)-1] = strings.TrimSuffix(out[len(out)-1], "\n")
			}
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, "")
}

func TestUnifiedDiffRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	words := []string{"a\n", "b\n", "c\n", "d\n", "e\n", "f\n"}
	gen := func() string {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(words[r.IntN(len(words))])
		}
		if r.IntN(4) == 0 {
			b.WriteString("tail")
		}
		return b.String()
	}
	for i := range 500 {
		old := gen()
		// new: old with random edits, so there is shared context
		lines := splitLines(old)
		for range r.IntN(4) {
			k := r.IntN(len(lines) + 1)
			switch r.IntN(3) {
			case 0:
				lines = append(lines[:k], append([]string{words[r.IntN(len(words))]}, lines[k:]...)...)
			case 1:
				if k < len(lines) {
					lines = append(lines[:k], lines[k+1:]...)
				}
			case 2:
				if k < len(lines) && strings.HasSuffix(lines[k], "\n") {
					lines[k] = "X" + lines[k]
				}
			}
		}
		updated := strings.Join(lines, "")
		if i%5 == 0 {
			updated = gen()
		}
		d := UnifiedDiff("f", old, updated, true)
		if old == updated {
			continue
		}
		if got := applyDiff(t, old, d); got != updated {
			t.Fatalf("case %d: applying the diff gives\n%q\nwant\n%q\ndiff:\n%s", i, got, updated, d)
		}
	}
}

func TestRunShell(t *testing.T) {
	lim := DefaultLimits
	lim.ShellOutput = 64
	tools, dir := toolsIn(t, map[string]string{"f.txt": "x"}, lim)
	got, err := runTool(t, tools, "run_shell", map[string]any{"command": "ls; echo err >&2; exit 3"})
	if err != nil || got != "exit code 3\nf.txt\nerr\n" {
		t.Fatalf("%q %v", got, err)
	}
	got, err = runTool(t, tools, "run_shell", map[string]any{"command": "seq 1 1000"})
	if err != nil || !strings.HasPrefix(got, "exit code 0\n1\n2\n") || !strings.Contains(got, "bytes of output cut") || !strings.HasSuffix(got, "999\n1000\n") {
		t.Fatalf("capped output: %q %v", got, err)
	}
	if _, err := runTool(t, tools, "run_shell", map[string]any{"command": "true", "timeout": 100000}); err == nil {
		t.Fatal("a timeout above the maximum must be refused")
	}

	// Timeout and cancellation kill the whole process group, background
	// children included.
	for _, how := range []string{"timeout", "cancel"} {
		pidFile := filepath.Join(dir, how+".pid")
		cmd := fmt.Sprintf("sleep 60 & echo $! > %s; wait", pidFile)
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		args := map[string]any{"command": cmd, "timeout": 60}
		if how == "timeout" {
			args["timeout"] = 2
		} else {
			go func() { // cancel once the child runs: a loaded machine may take a while to start it
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
						break
					}
				}
				cancel()
			}()
		}
		p, err := tools.Plan(engine.ToolCall{Name: "run_shell", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Run(ctx)
		cancel()
		if how == "timeout" && (err != nil || !strings.Contains(got, "timed out after 2s")) {
			t.Fatalf("timeout: %q %v", got, err)
		}
		if how == "cancel" && (err == nil || !strings.Contains(err.Error(), "cancelled")) {
			t.Fatalf("cancel: %q %v", got, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("%s took %s", how, d)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: background child %d still alive", how, pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// alive reports whether pid is a live process (a zombie waiting to be
// reaped counts as dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
