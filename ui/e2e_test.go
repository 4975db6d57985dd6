package ui

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// tmux drives a program in a detached tmux session of a fixed size.
type tmux struct {
	t    *testing.T
	name string
}

func startTmux(t *testing.T, w, h int, env []string, argv ...string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed")
	}
	tm := &tmux{t: t, name: fmt.Sprintf("ftchat-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	// env(1) passes the environment: tmux sessions inherit the server's.
	cmd := append([]string{"env"}, env...)
	cmd = append(cmd, argv...)
	args := []string{"-f", "/dev/null", "new-session", "-d", "-s", tm.name, "-x", strconv.Itoa(w), "-y", strconv.Itoa(h)}
	args = append(args, shellJoin(cmd))
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	exec.Command("tmux", "set-option", "-t", tm.name, "remain-on-exit", "on").Run()
	t.Cleanup(func() { exec.Command("tmux", "kill-session", "-t", tm.name).Run() })
	return tm
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func (tm *tmux) screen() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-t", tm.name).Output()
	if err != nil {
		tm.t.Fatalf("capture-pane: %v", err)
	}
	return string(out)
}

// scrollback is the pane's history and screen (what scrolling back shows).
func (tm *tmux) scrollback() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-S", "-", "-t", tm.name).Output()
	if err != nil {
		tm.t.Fatalf("capture-pane: %v", err)
	}
	return string(out)
}

// keys sends tmux key names (Enter, Escape, C-c, ...).
func (tm *tmux) keys(k ...string) {
	args := append([]string{"send-keys", "-t", tm.name}, k...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		tm.t.Fatalf("send-keys: %v: %s", err, out)
	}
}

// typeText sends literal text.
func (tm *tmux) typeText(s string) { tm.keys("-l", s) }

// kvdtypeRefused marks a /kvdtype refusal on the screen: the UI ends every
// one with it (commands.go). Not the word "refused": the command popup
// that "/" opens mentions "a refused message" (/drop's help), and a screen
// taken while the command is still being typed would match that.
const kvdtypeRefused = "nothing changed"

// paste pastes s as the terminal does (bracketed, when the program asked).
func (tm *tmux) paste(s string) {
	buf := tm.name + "-paste"
	for _, args := range [][]string{{"set-buffer", "-b", buf, "--", s}, {"paste-buffer", "-p", "-d", "-b", buf, "-t", tm.name}} {
		if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
			tm.t.Fatalf("tmux %s: %v: %s", args[0], err, out)
		}
	}
}

// waitFor polls the screen until ok returns true, failing after timeout.
func (tm *tmux) waitFor(what string, timeout time.Duration, ok func(string) bool) string {
	tm.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := tm.screen()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("timed out after %v waiting for %s; screen:\n%s", timeout, what, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (tm *tmux) waitText(sub string, timeout time.Duration) string {
	tm.t.Helper()
	return tm.waitFor(strconv.Quote(sub), timeout, func(s string) bool { return strings.Contains(s, sub) })
}

var (
	poolRe  = regexp.MustCompile(`([\d,]+) / ([\d,]+) tok\b`)
	dtypeRe = regexp.MustCompile(`kv (bf16|fp16|fp8_e4m3|fp8_e5m2|f32|\S+) ·`)
)

// poolTokens parses "used / capacity tok" from the status pane.
func poolTokens(t *testing.T, screen string) (used, capacity int) {
	t.Helper()
	m := poolRe.FindStringSubmatch(screen)
	if m == nil {
		t.Fatalf("no pool usage in the status pane:\n%s", screen)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(strings.ReplaceAll(s, ",", "")); return n }
	return atoi(m[1]), atoi(m[2])
}

var prefillRe = regexp.MustCompile(`prefill [\d,]+ / [\d,]+ tokens`)

// idle reports that the notice line shows no generation or switch running.
func idle(s string) bool {
	return !strings.Contains(s, "answering ·") && !prefillRe.MatchString(s) && !strings.Contains(s, "re-prefilling") && !strings.Contains(s, "stopping…")
}

// TestE2ETmux runs the real ftchat binary with the real default model in
// tmux. Set FTCHAT_E2E=1 to run it; FTCHAT_E2E_ARGS adds flags (e.g.
// "--device cuda --gpu-memory 2GiB").
func TestE2ETmux(t *testing.T) {
	if os.Getenv("FTCHAT_E2E") != "1" {
		t.Skip("set FTCHAT_E2E=1 to run the end-to-end test (needs tmux, the model and the engine)")
	}
	model := testmodel.Require(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "ftchat")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Greedy answers of at most 256 tokens: a sampled answer of the small
	// model can ramble on for minutes on a loaded CI machine.
	argv := append([]string{bin, "--temperature", "0", "--max-tokens", "256"}, strings.Fields(os.Getenv("FTCHAT_E2E_ARGS"))...)
	env := []string{"XDG_DATA_HOME=" + filepath.Join(tmp, "data"), "FTCHAT_TEST_MODEL=" + model, "TERM=xterm-256color"}
	if c := os.Getenv("XDG_CACHE_HOME"); c != "" {
		env = append(env, "XDG_CACHE_HOME="+c)
	}
	tm := startTmux(t, 120, 40, env, argv...)

	// The status pane appears once the model is loaded.
	tm.waitFor("the status pane", 3*time.Minute, func(s string) bool { return poolRe.MatchString(s) && strings.Contains(s, "decode ") })

	prompt := "What is the capital of France?"
	tm.typeText(prompt)
	tm.keys("Enter")
	tm.waitText(prompt, 30*time.Second)
	s := tm.waitFor("the answer", 5*time.Minute, func(s string) bool {
		return idle(s) && strings.Count(s, "▌ you") >= 1 && !strings.Contains(s, "(no answer)") && regexp.MustCompile(`decode [\d.,]+ tok/s`).MatchString(s)
	})
	used0, cap0 := poolTokens(t, s)
	if used0 == 0 {
		t.Fatalf("the status pane shows no tokens used after a turn:\n%s", s)
	}
	t.Logf("after the first turn: %d / %d tokens\n%s", used0, cap0, s)

	switchTo := func(dtype string) string {
		t.Helper()
		tm.typeText("/kvdtype " + dtype)
		tm.keys("Enter")
		return tm.waitFor("the switch to "+dtype, 5*time.Minute, func(s string) bool {
			return idle(s) && (strings.Contains(s, "KV cache is now "+dtype) || strings.Contains(s, kvdtypeRefused))
		})
	}
	if m := dtypeRe.FindStringSubmatch(s); m == nil || m[1] != "bf16" {
		s = switchTo("bf16")
		if strings.Contains(s, kvdtypeRefused) {
			t.Fatalf("/kvdtype bf16 refused:\n%s", s)
		}
		used0, cap0 = poolTokens(t, s)
	}
	s = switchTo("fp8_e4m3")
	if strings.Contains(s, kvdtypeRefused) {
		t.Fatalf("/kvdtype fp8_e4m3 refused:\n%s", s)
	}
	used1, cap1 := poolTokens(t, s)
	ratio := float64(cap1) / float64(cap0)
	t.Logf("capacity %d -> %d tokens (x%.3f), used %d -> %d\n%s", cap0, cap1, ratio, used0, used1, s)
	if ratio < 1.7 || ratio > 2.1 {
		t.Errorf("pool capacity went from %d to %d tokens (x%.2f); fp8 should roughly double it", cap0, cap1, ratio)
	}
	if used1 != used0 {
		t.Errorf("the conversation's tokens changed across the switch: %d -> %d", used0, used1)
	}
	if !strings.Contains(s, prompt) {
		t.Errorf("the conversation is no longer shown after /kvdtype:\n%s", s)
	}
	if !strings.Contains(s, "kv fp8_e4m3") {
		t.Errorf("the status pane does not show the new dtype:\n%s", s)
	}

	// The session goes on in the new cache.
	tm.typeText("And of Italy?")
	tm.keys("Enter")
	tm.waitFor("the second answer", 5*time.Minute, func(s string) bool {
		u, _ := poolTokens(t, s)
		return idle(s) && strings.Contains(s, "And of Italy?") && u > used1
	})

	// Esc stops an answer in progress; the conversation goes on after it.
	tm.typeText("Write a long story about a dragon and a knight.")
	tm.keys("Enter")
	tm.waitText("answering ·", 2*time.Minute)
	time.Sleep(time.Second)
	tm.keys("Escape")
	tm.waitFor("the answer to stop", 20*time.Second, func(s string) bool { return idle(s) && strings.Contains(s, "stopped") })
	tm.typeText("Thanks!")
	tm.keys("Enter")
	tm.waitFor("an answer after the stop", 5*time.Minute, func(s string) bool {
		return idle(s) && strings.Contains(s, "Thanks!") && !strings.Contains(s, "error:")
	})

	tm.typeText("/quit")
	tm.keys("Enter")
	// Once (a CI run of 2026-12-03, a loaded machine) the pane died with
	// status 0 and the transcript on screen but no resume hint within 30 s:
	// wait longer, and keep the pane's whole history if it happens again.
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(tm.screen(), "resume with: ftchat --continue"); {
		if time.Now().After(deadline) {
			t.Fatalf("no resume hint 90 s after /quit; the pane's whole history:\n%s", tm.scrollback())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
