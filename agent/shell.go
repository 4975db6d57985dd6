package agent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
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
			return runShell(ctx, t.ws.root, command, time.Duration(timeout)*time.Second, t.limits.ShellOutput)
		},
	}, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// runShell runs command with sh -c in dir, in its own process group, so
// that cancelling ctx or the timeout kills everything it started. Output
// (stdout and stderr interleaved) keeps its head and tail within max bytes.
func runShell(ctx context.Context, dir, command string, timeout time.Duration, max int) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = dir
	out := &capped{max: max}
	cmd.Stdout, cmd.Stderr = out, out
	setProcessGroup(cmd)
	// A grandchild that escaped the group may hold the pipe open; don't wait
	// for it forever.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting the shell: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	note := ""
	select {
	case err = <-done:
	case <-timer.C:
		killGroup(cmd)
		err = <-done
		note = fmt.Sprintf("timed out after %s; the command and its children were killed\n", timeout)
	case <-ctx.Done():
		killGroup(cmd)
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
