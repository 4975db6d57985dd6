package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

func planShell(t *Tools, args map[string]any) (*Plan, error) {
	command := strings.TrimSpace(strArg(args, "command", ""))
	if command == "" {
		return nil, errors.New("empty command")
	}
	timeout := intArg(args, "timeout", t.limits.ShellTimeout)
	if timeout <= 0 {
		timeout = t.limits.ShellTimeout
	}
	if timeout > t.limits.ShellMaxTime {
		return nil, fmt.Errorf("timeout %d s is more than the %d s allowed", timeout, t.limits.ShellMaxTime)
	}
	return &Plan{
		Summary: "run_shell: " + firstLine(command),
		Preview: "$ " + command + "\n",
		run: func(ctx context.Context) (string, error) {
			return runShell(ctx, t.ws.root, command, shellEnv(os.Environ(), t.shellEnv), time.Duration(timeout)*time.Second, t.limits.ShellOutput)
		},
	}, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// runShell runs command with sh -c in dir and environment env, in its own
// session, so that cancelling ctx or the timeout kills everything it
// started (see killTree). Output (stdout and stderr interleaved) keeps its
// head and tail within max bytes.
func runShell(ctx context.Context, dir, command string, env []string, timeout time.Duration, max int) (string, error) {
	marker := shellIDVar + "=" + rand.Text()
	newCmd := func() (*exec.Cmd, *capped) {
		cmd := exec.Command("/bin/sh", "-c", command)
		cmd.Dir = dir
		cmd.Env = append(env[:len(env):len(env)], "PWD="+dir, marker)
		out := &capped{max: max}
		cmd.Stdout, cmd.Stderr = out, out
		setProcessGroup(cmd)
		// A grandchild that escaped the group may hold the pipe open; don't
		// wait for it forever.
		cmd.WaitDelay = 2 * time.Second
		return cmd, out
	}
	// Where a cgroup can be made, everything the command starts stays in
	// it, whatever session or environment it gives itself.
	cg := newShellCgroup()
	defer func() { cg.release() }()
	cmd, out := newCmd()
	cg.attach(cmd)
	err := cmd.Start()
	if err != nil && cg != nil {
		// A kernel or sandbox that refuses to start a process inside the
		// group: run without it (killTree's scan still applies).
		cg.release()
		cg = nil
		cmd, out = newCmd()
		err = cmd.Start()
	}
	if err != nil {
		return "", fmt.Errorf("starting the shell: %w", err)
	}
	kill := func() {
		cg.kill()
		killTree(cmd, marker)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	note := ""
	select {
	case err = <-done:
	case <-timer.C:
		kill()
		err = <-done
		note = fmt.Sprintf("timed out after %s; the command and its children were killed\n", timeout)
	case <-ctx.Done():
		kill()
		<-done
		return "", fmt.Errorf("cancelled; the command and its children were killed")
	}
	code := 0
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case errors.Is(err, exec.ErrWaitDelay):
	default:
		return "", err
	}
	body := out.String()
	if body == "" {
		body = "(no output)\n"
	} else if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	return fmt.Sprintf("%sexit code %d\n%s", note, code, body), nil
}

// shellIDVar marks every process a run_shell command starts (children
// inherit it), so killTree finds the ones that left its session.
const shellIDVar = "FTCHAT_SHELL_ID"

// shellEnvKeep is the environment run_shell passes on by default: what
// commands need to find programs, the home directory, the language and the
// terminal. Everything else (API keys, tokens, provider settings, ftchat's
// own FTCHAT_* variables) stays behind unless the user allows it.
var shellEnvKeep = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TERM", "TMPDIR", "SHELL", "TZ"}

// AllowShellEnv adds environment variables run_shell passes on, beyond
// PATH, HOME, USER, LOGNAME, LANG, LC_*, TERM, TMPDIR, SHELL and TZ. A name
// ending in "*" allows every variable with that prefix ("GO*").
func (t *Tools) AllowShellEnv(names ...string) {
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			t.shellEnv = append(t.shellEnv, n)
		}
	}
}

// shellEnv filters parent ("NAME=value" entries) down to the default names
// and the allowed ones.
func shellEnv(parent, allow []string) []string {
	match := func(pat, name string) bool {
		if p, ok := strings.CutSuffix(pat, "*"); ok {
			return strings.HasPrefix(name, p)
		}
		return pat == name
	}
	pats := append(slices.Clip(shellEnvKeep), allow...)
	var env []string
	for _, kv := range parent {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "PWD" || name == shellIDVar {
			continue
		}
		for _, pat := range pats {
			if match(pat, name) {
				env = append(env, kv)
				break
			}
		}
	}
	return env
}

// capped keeps the first and last max/2 bytes written to it.
type capped struct {
	mu      sync.Mutex
	max     int
	head    []byte
	tail    []byte // ring of the latest bytes once head is full
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	half := c.max / 2
	if room := half - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - (c.max - half); over > 0 {
		c.dropped += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return n, nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped == 0 {
		return string(c.head) + string(c.tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes of output cut ...]\n%s", c.head, c.dropped, c.tail)
}
