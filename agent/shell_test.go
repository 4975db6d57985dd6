//go:build unix

package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// TestRunShellKillsSetsidChildren guards the run_shell timeout and
// cancellation against children that left the process group with setsid,
// directly or by a double fork that re-parents them to init.
func TestRunShellKillsSetsidChildren(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc")
	}
	tools, dir := toolsIn(t, map[string]string{"f.txt": "x"}, DefaultLimits)
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			p1, p2 := filepath.Join(dir, how+"1.pid"), filepath.Join(dir, how+"2.pid")
			// The shell waits until both children have written their pids,
			// so a slow machine cannot time it out before they exist.
			cmd := fmt.Sprintf(`setsid sh -c 'echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 60' </dev/null >/dev/null 2>&1 &
setsid sh -c '(sleep 60 </dev/null >/dev/null 2>&1 & echo $! > %[2]s.tmp; mv %[2]s.tmp %[2]s)' &
while [ ! -e %[1]s ] || [ ! -e %[2]s ]; do sleep 0.05; done
sleep 60`, p1, p2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args := map[string]any{"command": cmd, "timeout": 60}
			if how == "timeout" {
				args["timeout"] = 3
			} else {
				go func() { // cancel once both children run
					for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
						if _, err := os.Stat(p2); err == nil {
							if _, err := os.Stat(p1); err == nil {
								break
							}
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
			if how == "timeout" && (err != nil || !strings.Contains(got, "timed out")) {
				t.Fatalf("timeout: %q %v", got, err)
			}
			if how == "cancel" && err == nil {
				t.Fatalf("cancel: %q", got)
			}
			for _, f := range []string{p1, p2} {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatalf("the command did not start its children: %v", err)
				}
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				t.Cleanup(func() {
					if alive(pid) {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				})
				deadline := time.Now().Add(5 * time.Second)
				for alive(pid) {
					if time.Now().After(deadline) {
						t.Errorf("setsid child %d (%s) survived the %s", pid, filepath.Base(f), how)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
}

// TestRunShellFiltersEnvironment guards against the shell inheriting
// secrets: only the default names and the allowed ones reach it.
func TestRunShellFiltersEnvironment(t *testing.T) {
	secrets := []string{"OPENAI_API_KEY", "HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
		"MY_CREDENTIALS", "FTCHAT_MODEL", "HTTPS_PROXY", "SOMETHING_ELSE"}
	for _, k := range secrets {
		t.Setenv(k, "hunter2")
	}
	t.Setenv("LC_ALL", "C")
	t.Setenv("ALLOWED_ONE", "yes")
	t.Setenv("GOFLAGS", "-mod=mod")
	tools, _ := toolsIn(t, map[string]string{"f.txt": "x"}, DefaultLimits)
	tools.AllowShellEnv("ALLOWED_ONE", "GO*")
	got, err := runTool(t, tools, "run_shell", map[string]any{"command": "env"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(got, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	for _, k := range secrets {
		if _, ok := env[k]; ok {
			t.Errorf("%s reached the shell", k)
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Errorf("a secret value reached the shell:\n%s", got)
	}
	want := map[string]string{"PATH": os.Getenv("PATH"), "LC_ALL": "C", "ALLOWED_ONE": "yes", "GOFLAGS": "-mod=mod", "PWD": tools.Workspace().Root()}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}
