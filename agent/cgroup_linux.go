package agent

import (
	"bufio"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// shellCgroup is a cgroup v2 group made for one run_shell command. The
// shell is started inside it (clone3 CLONE_INTO_CGROUP, so not even its
// first fork happens outside), every descendant stays in it whatever
// session or environment it gives itself, and cgroup.kill ends them all at
// once. Where no writable cgroup v2 hierarchy is found (no delegation, an
// old kernel) run_shell falls back to the session and marker scan of
// killTree.
type shellCgroup struct {
	dir string
	fd  int
}

// newShellCgroup makes a child of this process's own cgroup v2 group, or
// returns nil.
func newShellCgroup() *shellCgroup {
	mount := cgroup2Mount()
	if mount == "" {
		return nil
	}
	own := ownCgroup2()
	if own == "" {
		return nil
	}
	dir := filepath.Join(mount, own, "ftchat-shell-"+rand.Text()[:12])
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	// cgroup.kill (Linux 5.14) is what makes the group worth having.
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		os.Remove(dir)
		return nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil
	}
	return &shellCgroup{dir: dir, fd: fd}
}

// cgroup2Mount finds where the unified hierarchy is mounted: /sys/fs/cgroup
// on pure v2 systems, /sys/fs/cgroup/unified on hybrid ones.
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// ownCgroup2 reads this process's v2 group ("0::/path") from /proc.
func ownCgroup2() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			return p
		}
	}
	return ""
}

// attach makes cmd start inside the group.
func (g *shellCgroup) attach(cmd *exec.Cmd) {
	if g == nil {
		return
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = g.fd
}

// kill ends every process in the group and waits (briefly) until none is
// left, so the caller's scan finds only what escaped before the group.
func (g *shellCgroup) kill() {
	if g == nil {
		return
	}
	os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return
		}
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// release removes the group; a group still holding processes (a command
// that left background children after a normal exit) cannot be removed
// and stays until they end, as a shell would leave them.
func (g *shellCgroup) release() {
	if g == nil {
		return
	}
	syscall.Close(g.fd)
	os.Remove(g.dir)
}
