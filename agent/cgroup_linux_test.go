package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunShellKillsChildrenThatDropTheMarker guards the run_shell timeout
// against a child that both leaves the session (setsid) and clears its
// environment (env -i), so neither the process group nor the marker scan
// finds it: only the command's cgroup does.
func TestRunShellKillsChildrenThatDropTheMarker(t *testing.T) {
	for _, tool := range []string{"setsid", "env"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	probe := newShellCgroup()
	if probe == nil {
		t.Skip("no writable cgroup v2 hierarchy with cgroup.kill here: run_shell falls back to the session and marker scan")
	}
	probe.release()
	tools, dir := toolsIn(t, map[string]string{"f.txt": "x"}, DefaultLimits)
	pidFile := filepath.Join(dir, "escaped.pid")
	cmd := fmt.Sprintf(`setsid env -i /bin/sh -c 'echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 60' </dev/null >/dev/null 2>&1 &
while [ ! -e %[1]s ]; do sleep 0.05; done
sleep 60`, pidFile)
	got, err := runTool(t, tools, "run_shell", map[string]any{"command": cmd, "timeout": 3})
	if err != nil || !strings.Contains(got, "timed out") {
		t.Fatalf("run_shell: %q %v", got, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the command did not start its child: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d left the session and cleared its environment, and survived the timeout", pid)
		}
	}
}

// TestShellCgroupIsRemoved guards against leaving a cgroup directory
// behind for every command.
func TestShellCgroupIsRemoved(t *testing.T) {
	g := newShellCgroup()
	if g == nil {
		t.Skip("no writable cgroup v2 hierarchy here")
	}
	g.release()
	if _, err := os.Stat(g.dir); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s still exists after release: %v", g.dir, err)
	}
}
