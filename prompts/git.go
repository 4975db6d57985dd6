package prompts

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ftchat/ftchat/internal/safefile"
)

// The prompt is built before the user has approved anything, in
// repositories the user may not trust. A repository's own configuration
// can make git run commands (core.fsmonitor, filter drivers named in
// .gitattributes, hooks, includes of other files, submodules with
// configuration of their own, promisor fetches through core.sshCommand
// ...), and the list grows with every git release. So git never sees that
// configuration: the branch is read from HEAD directly, and `git status`
// runs against a throwaway git directory that holds only HEAD, a minimal
// config we write ourselves and links to the repository's objects and
// refs, with system and global configuration off and submodules ignored.
// Nothing that git reads as configuration, hooks or attributes comes from
// the repository.

// maxMetaFile bounds reads of .git, HEAD, commondir and config.
const maxMetaFile = 64 << 10

// maxStatusBytes bounds the `git status` output kept.
const maxStatusBytes = 64 << 10

// repo is a work tree and where its git data lives.
type repo struct {
	top    string // work tree root
	gitDir string // per-worktree git directory (HEAD, index)
	common string // shared git directory (objects, refs, config)
}

// findRepo walks up from dir to the first directory holding .git (a
// directory, or a file "gitdir: <path>" for linked worktrees).
func findRepo(dir string) (repo, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return repo{}, false
	}
	for d := abs; ; d = filepath.Dir(d) {
		dotgit := filepath.Join(d, ".git")
		if st, err := os.Lstat(dotgit); err == nil {
			r := repo{top: d}
			switch {
			case st.IsDir():
				r.gitDir = dotgit
			case st.Mode().IsRegular():
				b, ok := readMeta(dotgit)
				rest, found := strings.CutPrefix(strings.TrimSpace(b), "gitdir:")
				if !ok || !found {
					return repo{}, false
				}
				r.gitDir = relTo(d, strings.TrimSpace(rest))
			default:
				return repo{}, false
			}
			r.common = r.gitDir
			if c, ok := readMeta(filepath.Join(r.gitDir, "commondir")); ok {
				r.common = relTo(r.gitDir, strings.TrimSpace(c))
			}
			return r, true
		}
		if filepath.Dir(d) == d {
			return repo{}, false
		}
	}
}

func relTo(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// readMeta reads the first maxMetaFile bytes of a small regular file; a
// FIFO, device or directory in .git is refused without being waited on
// (safefile checks the opened descriptor too, so one swapped in after the
// check cannot block either).
func readMeta(p string) (string, bool) {
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	f, _, err := safefile.Open(p, "")
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetaFile))
	return string(b), err == nil
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// branch reads HEAD: the branch name, "(detached at abc1234)", or "".
func (r repo) branch() string {
	head, ok := readMeta(filepath.Join(r.gitDir, "HEAD"))
	if !ok {
		return ""
	}
	head = strings.TrimSpace(head)
	if ref, ok := strings.CutPrefix(head, "ref:"); ok {
		ref = strings.TrimSpace(ref)
		if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok && b != ".invalid" { // reftable keeps a placeholder HEAD
			return b
		}
		return ""
	}
	if hexHash.MatchString(head) {
		return "(detached at " + head[:7] + ")"
	}
	return ""
}

var extValue = regexp.MustCompile(`^[a-z0-9-]+$`)

// extensions reads the two repository extensions git needs to read the
// repository at all (object format and ref storage) from its config; any
// other key is left behind on purpose.
func (r repo) extensions() map[string]string {
	cfg, _ := readMeta(filepath.Join(r.common, "config"))
	ext := map[string]string{}
	section := ""
	for _, line := range strings.Split(cfg, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = strings.ToLower(strings.Trim(line, "[] \t"))
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if section != "extensions" || !ok {
			continue
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.ToLower(strings.TrimSpace(v))
		if (k == "objectformat" || k == "refstorage") && extValue.MatchString(v) {
			ext[k] = v
		}
	}
	return ext
}

// status runs `git status --short` for r, from dir, without the
// repository's configuration (see the comment at the top of this file).
func (r repo) status(ctx context.Context, dir string) (head string, lines int, ok bool) {
	git, err := exec.LookPath("git")
	if err != nil {
		return "", 0, false
	}
	headRef, ok := readMeta(filepath.Join(r.gitDir, "HEAD"))
	if !ok {
		return "", 0, false
	}
	shadow, err := os.MkdirTemp("", "ftchat-git-")
	if err != nil {
		return "", 0, false
	}
	defer os.RemoveAll(shadow)
	cfg := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
	if ext := r.extensions(); len(ext) > 0 {
		cfg = "[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n"
		for k, v := range ext {
			cfg += fmt.Sprintf("\t%s = %s\n", k, v)
		}
	}
	if os.WriteFile(filepath.Join(shadow, "HEAD"), []byte(headRef), 0o600) != nil ||
		os.WriteFile(filepath.Join(shadow, "config"), []byte(cfg), 0o600) != nil {
		return "", 0, false
	}
	for _, name := range []string{"objects", "refs", "packed-refs", "reftable"} {
		if _, err := os.Lstat(filepath.Join(r.common, name)); err == nil {
			if os.Symlink(filepath.Join(r.common, name), filepath.Join(shadow, name)) != nil {
				return "", 0, false
			}
		}
	}
	cmd := exec.CommandContext(ctx, git,
		"-c", "core.fsmonitor=false", "-c", "core.hooksPath="+os.DevNull, "-c", "core.pager=cat",
		"status", "--short", "--ignore-submodules=all")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + shadow, // nothing of the user's either: ~/.gitconfig, ~/.config/git
		"LC_ALL=C",
		"GIT_DIR=" + shadow,
		"GIT_WORK_TREE=" + r.top,
		"GIT_INDEX_FILE=" + filepath.Join(r.gitDir, "index"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_OPTIONAL_LOCKS=0", // never write the index (and so no index hooks)
		"GIT_TERMINAL_PROMPT=0",
		"GIT_NO_LAZY_FETCH=1",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_PAGER=cat",
	}
	var out headBuf
	cmd.Stdout = &out
	if cmd.Run() != nil {
		return "", 0, false
	}
	return out.buf.String(), out.lines, true
}

// headBuf keeps the first maxStatusBytes written and counts every line,
// so a repository with a million untracked files costs no memory.
type headBuf struct {
	buf   bytes.Buffer
	lines int
}

func (h *headBuf) Write(p []byte) (int, error) {
	h.lines += bytes.Count(p, []byte{'\n'})
	h.buf.Write(p[:min(len(p), maxStatusBytes-h.buf.Len())])
	return len(p), nil
}
