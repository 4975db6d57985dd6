package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
	"github.com/ftchat/ftchat/server"
)

// The --engine tests run ftchat as a child process (this test binary,
// re-executed into TestRemoteChild) against a server on loopback: ftchat's
// own `serve` handler in-process, and llama-cpp-python's llama_cpp.server,
// an independent implementation of the OpenAI API.

const remoteChildEnv = "FTCHAT_REMOTE_CHILD" // the child's arguments, as JSON

// TestRemoteChild is ftchat's main in a child process.
func TestRemoteChild(t *testing.T) {
	raw := os.Getenv(remoteChildEnv)
	if raw == "" {
		t.Skip("child process of the --engine tests")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "bad", remoteChildEnv, err)
		os.Exit(3)
	}
	root := newRoot(viper.New())
	root.SetArgs(args)
	ctx := context.Background()
	code := exitCode(ctx, root.ExecuteContext(ctx), os.Stderr)
	if os.Getenv(remoteChildEnv+"_HOLD") != "" {
		fmt.Println("CHILD EXITED")
		time.Sleep(time.Minute) // keep the tmux pane for the parent to read
	}
	os.Exit(code)
}

// childEnv is the environment of a child ftchat: no user config, sessions
// in a temporary directory.
func childEnv(t *testing.T, args []string, extra ...string) []string {
	t.Helper()
	a, _ := json.Marshal(args)
	tmp := t.TempDir()
	env := []string{remoteChildEnv + "=" + string(a), "XDG_CONFIG_HOME=" + filepath.Join(tmp, "config"), "XDG_DATA_HOME=" + filepath.Join(tmp, "data"), "NO_PROXY=*", "no_proxy=*"}
	return append(env, extra...)
}

// runFtchat runs ftchat with args and returns stdout, stderr and the status.
func runFtchat(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoteChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv(t, args)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ftchat %q did not end in 2 minutes; stderr:\n%s", args, errOut.String())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// ftchatServe serves the default model with ftchat's server handler.
func ftchatServe(t *testing.T) string {
	t.Helper()
	path := testmodel.Require(t)
	e, err := engine.Load(context.Background(), engine.Options{Model: path, Device: "cpu", KVTokens: 2048}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := e.NewBatcher(engine.BatcherOptions{})
	ts := httptest.NewServer(server.New(server.Config{Engine: e, Batcher: b, ModelID: "SmolLM2-135M-Instruct", Version: "test"}))
	t.Cleanup(func() {
		ts.Close()
		b.Close()
		e.Close()
	})
	return ts.URL + "/v1"
}

const question = "What is the capital of France?"

func TestEngineFlagWithFtchatServe(t *testing.T) {
	url := ftchatServe(t)
	t.Run("print mode", func(t *testing.T) {
		out, errOut, code := runFtchat(t, "--engine", url, "-p", "-t", "0", "-n", "30", question)
		if code != 0 || !strings.Contains(out, "Paris") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("environment and errors", func(t *testing.T) {
		// FTCHAT_ENGINE and FTCHAT_REMOTE_MODEL work like the flags.
		t.Setenv("FTCHAT_ENGINE", url)
		t.Setenv("FTCHAT_REMOTE_MODEL", "nope")
		_, errOut, code := runFtchat(t, "-p", "hi")
		if code != 1 || !strings.Contains(errOut, `has no model "nope"; it serves: SmolLM2-135M-Instruct (--remote-model)`) {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		os.Unsetenv("FTCHAT_REMOTE_MODEL")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String() + "/v1"
		ln.Close()
		_, errOut, code = runFtchat(t, "--engine", closed, "-p", "hi")
		if code != 1 || !strings.Contains(errOut, "cannot reach the engine at "+closed) {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		out, errOut, code := runFtchat(t, "--engine", url, "--kv-cache-dtype", "fp8_e4m3", "-p", "-n", "4", "hi")
		if code != 0 || out == "" || !strings.Contains(errOut, "ignoring --kv-cache-dtype (the server owns its KV cache)") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		_, errOut, code = runFtchat(t, "--engine", url, "--remote-timeout", "0s", "-p", "hi")
		if code != 1 || !strings.Contains(errOut, "--remote-timeout 0s: not above 0") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("tui", func(t *testing.T) {
		tm := tuiAnswers(t, url)
		// The server's /metrics in the status pane.
		s := tm.screen()
		for _, want := range []string{"server KV ▕", "/ 2,048 tok (all clients)", "kv bf16", "from ftchat serve /metrics", "first token "} {
			if !strings.Contains(s, want) {
				t.Errorf("status pane lacks %q:\n%s", want, s)
			}
		}
		tm.typeText("/kvdtype fp8_e4m3")
		tm.keys("Enter")
		if s := tm.waitText("the remote server owns its KV cache", 10*time.Second); strings.Contains(s, "switching the KV cache") {
			t.Errorf("/kvdtype started a switch on a remote engine:\n%s", s)
		}
		tm.typeText("/model other")
		tm.keys("Enter")
		tm.waitText("a remote engine's model is chosen at start", 10*time.Second)
		quit(tm)
	})
}

// TestEngineFlagWithLlamaCppServer drives llama-cpp-python's server
// (PyPI llama-cpp-python[server]) serving the default model's GGUF.
func TestEngineFlagWithLlamaCppServer(t *testing.T) {
	model := testmodel.Require(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the llama-cpp-python server test needs it")
	}
	if out, err := exec.Command(py, "-c", "import llama_cpp.server").CombinedOutput(); err != nil {
		t.Skipf("llama-cpp-python[server] is not installed (make test-deps installs it): %s", lastLine(out))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var log bytes.Buffer
	// One thread: llama.cpp's spinning worker threads crawl when the cores
	// are shared with the other tests (51 s with two, 17 s with one here).
	srv := exec.Command(py, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--n_ctx", "2048", "--n_threads", "1")
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(url + "/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) || srv.ProcessState != nil {
			t.Fatalf("llama_cpp.server did not come up on %s:\n%s", url, log.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Run("print mode", func(t *testing.T) {
		out, errOut, code := runFtchat(t, "--engine", url, "-p", "-t", "0", "-n", "30", question)
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Fatalf("exit %d, stdout %q, stderr %q\nserver log:\n%s", code, out, errOut, log.String())
		}
		t.Logf("llama_cpp.server answered: %q", out)
	})
	t.Run("tui", func(t *testing.T) {
		tm := tuiAnswers(t, url)
		if s := tm.screen(); !strings.Contains(s, "server KV: not reported (no /metrics)") {
			t.Errorf("status pane of a server without /metrics:\n%s", s)
		}
		quit(tm)
	})
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// tuiAnswers starts the chat TUI on url in tmux, asks the question and
// waits for the answer (the status pane's decode rate is measured then).
func tuiAnswers(t *testing.T, url string) *tmuxPane {
	t.Helper()
	args := []string{"--engine", url, "-t", "0", "-n", "30"}
	env := childEnv(t, args, remoteChildEnv+"_HOLD=1", "TERM=xterm-256color")
	tm := startPane(t, 110, 32, env, os.Args[0], "-test.run=^TestRemoteChild$", "-test.count=1", "-test.v=false")
	tm.waitText("decode - tok/s", 30*time.Second)
	tm.typeText(question)
	tm.keys("Enter")
	s := tm.waitFor("an answer", 90*time.Second, func(s string) bool {
		return strings.Contains(s, "decode ") && !strings.Contains(s, "decode - tok/s") && !strings.Contains(s, "answering ·")
	})
	after := s[strings.Index(s, question)+len(question):]
	if strings.TrimSpace(strings.Split(after, "server KV")[0]) == "" {
		t.Fatalf("no answer on screen:\n%s", s)
	}
	return tm
}

func quit(tm *tmuxPane) {
	tm.keys("C-c")
	tm.waitText("press Ctrl+C again", 5*time.Second)
	tm.keys("C-c")
	tm.waitText("CHILD EXITED", 10*time.Second)
}

// tmuxPane is a program running in a detached tmux session.
type tmuxPane struct {
	t    *testing.T
	name string
}

func startPane(t *testing.T, w, h int, env []string, argv ...string) *tmuxPane {
	t.Helper()
	if testing.Short() {
		t.Skip("starts tmux")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed")
	}
	tm := &tmuxPane{t: t, name: fmt.Sprintf("ftchat-remote-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	var q []string
	for _, a := range append(append([]string{"env"}, env...), argv...) {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	if out, err := exec.Command("tmux", "-f", "/dev/null", "new-session", "-d", "-s", tm.name, "-x", strconv.Itoa(w), "-y", strconv.Itoa(h), strings.Join(q, " ")).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	exec.Command("tmux", "set-option", "-t", tm.name, "remain-on-exit", "on").Run()
	t.Cleanup(func() { exec.Command("tmux", "kill-session", "-t", tm.name).Run() })
	return tm
}

func (tm *tmuxPane) screen() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-t", tm.name).Output()
	if err != nil {
		tm.t.Fatalf("capture-pane: %v", err)
	}
	return string(out)
}

func (tm *tmuxPane) keys(k ...string) {
	if out, err := exec.Command("tmux", append([]string{"send-keys", "-t", tm.name}, k...)...).CombinedOutput(); err != nil {
		tm.t.Fatalf("send-keys: %v: %s", err, out)
	}
}

func (tm *tmuxPane) typeText(s string) { tm.keys("-l", s) }

func (tm *tmuxPane) waitFor(what string, timeout time.Duration, ok func(string) bool) string {
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

func (tm *tmuxPane) waitText(sub string, timeout time.Duration) string {
	tm.t.Helper()
	return tm.waitFor(strconv.Quote(sub), timeout, func(s string) bool { return strings.Contains(s, sub) })
}
