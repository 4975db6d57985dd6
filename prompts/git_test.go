package prompts_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/prompts"
)

// gitRepo makes a repository in a temp dir with one commit of a.txt, then
// changes a.txt (same size, so git must hash it to know) and adds new.txt.
func gitRepo(t *testing.T) (dir string, git func(args ...string)) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir = t.TempDir()
	git = func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "work")
	write(t, filepath.Join(dir, "a.txt"), "aaaa\n")
	git("add", "a.txt")
	git("commit", "-q", "-m", "one")
	write(t, filepath.Join(dir, "a.txt"), "bbbb\n")
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "a.txt"), later, later)
	write(t, filepath.Join(dir, "new.txt"), "n\n")
	return dir, git
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestGatherRunsNoRepositoryCommands guards the prompt builder (run by
// `ftchat -p --agent` before anything is approved) against repositories
// whose configuration makes git run a command.
func TestGatherRunsNoRepositoryCommands(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir, marker string)
	}{
		{"core.fsmonitor", func(t *testing.T, dir, m string) {
			appendConfig(t, dir, "[core]\n\tfsmonitor = \"touch "+m+"; false\"\n")
		}},
		{"filter in .gitattributes", func(t *testing.T, dir, m string) {
			write(t, filepath.Join(dir, ".gitattributes"), "* filter=evil\n")
			appendConfig(t, dir, "[filter \"evil\"]\n\tclean = \"sh -c 'touch "+m+"; cat'\"\n\tprocess = \"sh -c 'touch "+m+"'\"\n")
		}},
		{"filter in info/attributes", func(t *testing.T, dir, m string) {
			write(t, filepath.Join(dir, ".git", "info", "attributes"), "* filter=evil\n")
			appendConfig(t, dir, "[filter \"evil\"]\n\tclean = \"sh -c 'touch "+m+"; cat'\"\n")
		}},
		{"included config", func(t *testing.T, dir, m string) {
			write(t, filepath.Join(dir, ".git", "evil.cfg"), "[core]\n\tfsmonitor = \"touch "+m+"; false\"\n")
			appendConfig(t, dir, "[include]\n\tpath = evil.cfg\n[includeIf \"gitdir:/\"]\n\tpath = evil.cfg\n")
		}},
		{"index hook", func(t *testing.T, dir, m string) {
			write(t, filepath.Join(dir, "hooks", "post-index-change"), "#!/bin/sh\ntouch "+m+"\n")
			write(t, filepath.Join(dir, ".git", "hooks", "post-index-change"), "#!/bin/sh\ntouch "+m+"\n")
			appendConfig(t, dir, "[core]\n\thooksPath = hooks\n")
		}},
		{"pager, external diff, ssh, alias", func(t *testing.T, dir, m string) {
			appendConfig(t, dir, "[core]\n\tpager = \"touch "+m+"\"\n\tsshCommand = \"touch "+m+"\"\n"+
				"[diff]\n\texternal = \"touch "+m+"\"\n[pager]\n\tstatus = \"touch "+m+"\"\n"+
				"[alias]\n\tstatus = \"!touch "+m+"\"\n[status]\n\tshowUntrackedFiles = no\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := gitRepo(t)
			marker := filepath.Join(t.TempDir(), "ran")
			c.setup(t, dir, marker)
			// Sanity: git itself, left to the repository's configuration,
			// does run the command (so the case tests something).
			cmd := exec.Command("git", "status", "--short")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_PAGER=", "PAGER=")
			cmd.Run()
			exposed := exists(marker)
			os.Remove(marker)

			f := prompts.Gather(context.Background(), dir, time.Now())
			if exists(marker) {
				t.Fatalf("building the prompt ran the repository's command (%s)", c.name)
			}
			// The facts are still there.
			if f.GitBranch != "work" || !strings.Contains(f.GitStatus, " M a.txt") || !strings.Contains(f.GitStatus, "?? new.txt") {
				t.Errorf("branch %q, status %q", f.GitBranch, f.GitStatus)
			}
			t.Logf("plain git status runs it: %v", exposed)
		})
	}
}

func appendConfig(t *testing.T, dir, s string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestGatherGitLayouts guards what the prompt says in a subdirectory, a
// linked worktree, on a detached HEAD, and when .git holds a FIFO.
func TestGatherGitLayouts(t *testing.T) {
	dir, git := gitRepo(t)
	sub := filepath.Join(dir, "sub")
	write(t, filepath.Join(sub, "s.txt"), "s\n")
	wt := filepath.Join(t.TempDir(), "wt")
	git("worktree", "add", "-q", "-b", "side", wt)
	write(t, filepath.Join(wt, "a.txt"), "cccc\n")

	f := prompts.Gather(context.Background(), sub, time.Now())
	if f.GitBranch != "work" || !strings.Contains(f.GitStatus, "?? ./") && !strings.Contains(f.GitStatus, "?? s.txt") {
		t.Errorf("subdirectory: branch %q, status %q", f.GitBranch, f.GitStatus)
	}
	f = prompts.Gather(context.Background(), wt, time.Now())
	if f.GitBranch != "side" || f.GitStatus != " M a.txt" {
		t.Errorf("worktree: branch %q, status %q", f.GitBranch, f.GitStatus)
	}
	git("checkout", "-q", "--detach")
	f = prompts.Gather(context.Background(), dir, time.Now())
	if !strings.HasPrefix(f.GitBranch, "(detached at ") {
		t.Errorf("detached: branch %q", f.GitBranch)
	}
}
