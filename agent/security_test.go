package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// jail builds <tmp>/ws (the workspace) beside <tmp>/outside (a secret and
// a directory), with symlinks from inside pointing out. The workspace is
// opened through a symlink to itself, which must be fine.
func jail(t *testing.T) (*Tools, string, string) {
	t.Helper()
	base := t.TempDir()
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, out, filepath.Join(ws, "sub"), filepath.Join(out, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(out, "secret.txt"):    "secret\n",
		filepath.Join(out, "dir", "x.txt"):  "outside x\n",
		filepath.Join(ws, "real.txt"):       "real one\nreal two\n",
		filepath.Join(ws, "sub", "code.go"): "package sub\n",
		filepath.Join(ws, "dup.txt"):        "a\nb\na\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"link_file":     "../outside/secret.txt",          // file symlink out (relative)
		"abs_link":      filepath.Join(out, "secret.txt"), // file symlink out (absolute)
		"link_dir":      "../outside/dir",                 // directory symlink out
		"sub/up":        "../..",                          // symlinked parent leading out
		"dangling":      "../outside/new.txt",             // dangling: writing would create it outside
		"inside_link":   "real.txt",                       // stays inside: allowed
		"sub/link_back": "../real.txt",                    // stays inside: allowed
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(ws, alias); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWorkspace(alias)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	tools, err := NewTools(w, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return tools, ws, out
}

// snapshot records every path, its type, link target and content under dir.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			lines = append(lines, rel+" -> "+tg)
		case d.IsDir():
			lines = append(lines, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			st, _ := os.Stat(p)
			lines = append(lines, rel+" "+st.Mode().String()+" "+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestConfinement(t *testing.T) {
	tools, ws, out := jail(t)
	outAbs := filepath.Join(out, "secret.txt")
	wsAbsEscape := filepath.Join(ws, "..", "outside", "secret.txt")
	type args = map[string]any
	cases := []struct {
		name string
		tool string
		args args
		want string // part of the error
	}{
		{"dotdot read", "read_file", args{"path": "../outside/secret.txt"}, "outside the workspace"},
		{"dotdot deep", "read_file", args{"path": "sub/../../outside/secret.txt"}, "outside the workspace"},
		{"absolute outside", "read_file", args{"path": outAbs}, "outside the workspace"},
		{"absolute via ws/..", "read_file", args{"path": wsAbsEscape}, "outside the workspace"},
		{"absolute root", "list", args{"path": "/"}, "outside the workspace"},
		{"file symlink out", "read_file", args{"path": "link_file"}, "resolves through a symlink"},
		{"absolute file symlink out", "read_file", args{"path": "abs_link"}, "resolves through a symlink"},
		{"dir symlink out", "read_file", args{"path": "link_dir/x.txt"}, "resolves through a symlink"},
		{"list dir symlink out", "list", args{"path": "link_dir"}, "resolves through a symlink"},
		{"symlinked parent", "read_file", args{"path": "sub/up/outside/secret.txt"}, "resolves through a symlink"},
		{"grep through symlink", "grep", args{"pattern": "secret", "path": "link_dir"}, "resolves through a symlink"},
		{"glob dotdot", "glob", args{"pattern": "../outside/*"}, "cannot leave"},
		{"glob absolute", "glob", args{"pattern": out + "/*"}, "cannot leave"},
		{"write dotdot", "write_file", args{"path": "../outside/pwned.txt", "content": "x"}, "outside the workspace"},
		{"write absolute", "write_file", args{"path": filepath.Join(out, "pwned.txt"), "content": "x"}, "outside the workspace"},
		{"write over file symlink out", "write_file", args{"path": "link_file", "content": "x"}, "resolves through a symlink"},
		{"write into dir symlink out", "write_file", args{"path": "link_dir/new.txt", "content": "x"}, "resolves through a symlink"},
		{"write under symlinked parent", "write_file", args{"path": "sub/up/outside/new.txt", "content": "x"}, "resolves through a symlink"},
		{"write dangling symlink", "write_file", args{"path": "dangling", "content": "x"}, "does not exist; refusing"},
		{"edit through symlink", "edit", args{"path": "link_file", "old_text": "secret", "new_text": "x"}, "resolves through a symlink"},
		{"edit absolute", "edit", args{"path": outAbs, "old_text": "secret", "new_text": "x"}, "outside the workspace"},
		{"empty path", "read_file", args{"path": ""}, "empty path"},
		{"nul byte", "read_file", args{"path": "real.txt\x00"}, "NUL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			beforeWS, beforeOut := snapshot(t, ws), snapshot(t, out)
			_, err := tools.Plan(engine.ToolCall{Name: c.tool, Arguments: c.args})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
			if snapshot(t, ws) != beforeWS || snapshot(t, out) != beforeOut {
				t.Fatal("the filesystem changed")
			}
		})
	}
}

// TestConfinementThroughAgent drives escapes and unapproved changes
// through the whole loop, with and without approval, and checks nothing
// outside (or, without approval, inside) changed.
func TestConfinementThroughAgent(t *testing.T) {
	type args = map[string]any
	cases := []struct {
		name     string
		call     engine.ToolCall
		approver Approver
		inside   bool // the workspace may change
	}{
		{"write without approval", engine.ToolCall{Name: "write_file", Arguments: args{"path": "new.txt", "content": "x"}}, DenyAll{}, false},
		{"edit without approval", engine.ToolCall{Name: "edit", Arguments: args{"path": "real.txt", "old_text": "one", "new_text": "1"}}, DenyAll{}, false},
		{"shell without approval", engine.ToolCall{Name: "run_shell", Arguments: args{"command": "echo x > made.txt; echo x > ../outside/made.txt"}}, DenyAll{}, false},
		{"nil approver denies", engine.ToolCall{Name: "write_file", Arguments: args{"path": "new.txt", "content": "x"}}, nil, false},
		{"approved write escaping", engine.ToolCall{Name: "write_file", Arguments: args{"path": "link_dir/new.txt", "content": "x"}}, AllowAll{}, false},
		{"approved write dangling", engine.ToolCall{Name: "write_file", Arguments: args{"path": "dangling", "content": "x"}}, AllowAll{}, false},
		{"approved write inside", engine.ToolCall{Name: "write_file", Arguments: args{"path": "sub/new/deep.txt", "content": "x"}}, AllowAll{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tools, ws, out := jail(t)
			beforeWS, beforeOut := snapshot(t, ws), snapshot(t, out)
			s := &script{steps: [][]engine.Event{{{Kind: engine.EventToolCall, ToolCall: &c.call}, done(engine.StopToolCall)}, answer("ok")}}
			a, err := New(Config{Gen: s, Tools: tools, Approver: c.approver, Sink: &TextSink{W: &strings.Builder{}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Run(context.Background(), "do it"); err != nil {
				t.Fatal(err)
			}
			if snapshot(t, out) != beforeOut {
				t.Fatal("the directory outside the workspace changed")
			}
			if changed := snapshot(t, ws) != beforeWS; changed != c.inside {
				t.Fatalf("workspace changed=%v, want %v; tool said %q", changed, c.inside, lastMsg(s.reqs[1]).Content)
			}
		})
	}
}

func TestSymlinksInsideAreFollowed(t *testing.T) {
	tools, ws, _ := jail(t)
	p, err := tools.Plan(engine.ToolCall{Name: "edit", Arguments: map[string]any{"path": "sub/link_back", "old_text": "real one", "new_text": "REAL ONE"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "real.txt"))
	if string(b) != "REAL ONE\nreal two\n" {
		t.Fatalf("real.txt = %q", b)
	}
	if tg, err := os.Readlink(filepath.Join(ws, "sub", "link_back")); err != nil || tg != "../real.txt" {
		t.Fatalf("the symlink must stay a symlink: %q %v", tg, err)
	}
}

func TestGrepAndGlobDoNotFollowSymlinksOut(t *testing.T) {
	tools, _, _ := jail(t)
	for _, c := range []engine.ToolCall{
		{Name: "grep", Arguments: map[string]any{"pattern": "secret|outside"}},
		{Name: "glob", Arguments: map[string]any{"pattern": "**/*.txt"}},
	} {
		p, err := tools.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, "secret.txt") || strings.Contains(got, ": secret") || strings.Contains(got, "x.txt") || strings.Contains(got, ": outside x") {
			t.Fatalf("%s reached outside: %q", c.Name, got)
		}
	}
}

func TestEditRefusals(t *testing.T) {
	tools, ws, _ := jail(t)
	cases := []struct {
		name, file, old, want string
	}{
		{"missing", "real.txt", "not there", "old_text was not found in real.txt"},
		{"whitespace differs", "real.txt", "real  one", "different spaces"},
		{"ambiguous", "dup.txt", "a\n", "matches 2 times in dup.txt (at lines 1, 3)"},
		{"empty", "real.txt", "", "old_text is empty"},
		{"directory", "sub", "x", "is a directory"},
		{"missing file", "nope.txt", "x", "nope.txt does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, ws)
			_, err := tools.Plan(engine.ToolCall{Name: "edit", Arguments: map[string]any{"path": c.file, "old_text": c.old, "new_text": "NEW"}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if snapshot(t, ws) != before {
				t.Fatal("the workspace changed")
			}
		})
	}
}

func TestEditRefusesWhenFileChangedAfterPlan(t *testing.T) {
	tools, ws, _ := jail(t)
	p, err := tools.Plan(engine.ToolCall{Name: "edit", Arguments: map[string]any{"path": "real.txt", "old_text": "one", "new_text": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "real.txt"), []byte("someone else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "changed since") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "real.txt")); string(b) != "someone else\n" {
		t.Fatalf("content %q", b)
	}
}

func TestWriteFailureKeepsTheFile(t *testing.T) {
	tools, ws, _ := jail(t)
	if err := os.Chmod(filepath.Join(ws, "real.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, ws)
	saved := writeAll
	t.Cleanup(func() { writeAll = saved })
	writeAll = func(f *os.File, data []byte) error {
		f.Write(data[:len(data)/2]) // half written, then the disk "fails"
		return errors.New("disk full")
	}
	for _, c := range []engine.ToolCall{
		{Name: "write_file", Arguments: map[string]any{"path": "real.txt", "content": "replacement text\n"}},
		{Name: "edit", Arguments: map[string]any{"path": "real.txt", "old_text": "one", "new_text": "1"}},
	} {
		p, err := tools.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("%s: err %v", c.Name, err)
		}
		if after := snapshot(t, ws); after != before {
			t.Fatalf("%s: a failed write changed the workspace (or left a temp file):\n%s\nwant\n%s", c.Name, after, before)
		}
	}
	writeAll = saved
	p, err := tools.Plan(engine.ToolCall{Name: "write_file", Arguments: map[string]any{"path": "real.txt", "content": "new\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(ws, "real.txt"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the file's mode must be kept: %v", st.Mode())
	}
}
