package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// TestServeWithPythonClients starts `ftchat serve` on a free port with the
// real model and runs scripts/serve_clients_test.py, which drives it with
// the real openai and anthropic Python packages. It skips only when
// python3 or those packages are missing (CI installs them: .ci/run).
func TestServeWithPythonClients(t *testing.T) {
	model := testmodel.Require(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the openai/anthropic client test needs it (pip install openai anthropic)")
	}
	if out, err := exec.Command(py, "-c", "import openai, anthropic").CombinedOutput(); err != nil {
		t.Skipf("the openai and anthropic Python packages are missing (pip install openai anthropic): %s", strings.TrimSpace(string(out)))
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no user config file
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	root := newRoot(viper.New())
	root.SetErr(pw)
	root.SetOut(io.Discard)
	const key = "test-key-1"
	root.SetArgs([]string{"serve", "--port", "0", "--device", "cpu", "--model", model, "--api-key", key, "--kv-tokens", "4096"})
	done := make(chan error, 1)
	go func() {
		done <- root.ExecuteContext(ctx)
		pw.Close()
	}()
	addr := make(chan string, 1)
	var log strings.Builder
	go func() {
		re := regexp.MustCompile(`on (http://\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-addr:
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start:\n%s", log.String())
	}
	cmd := exec.Command(py, "scripts/serve_clients_test.py")
	cmd.Env = append(os.Environ(), "FTCHAT_BASE_URL="+base, "FTCHAT_API_KEY="+key, "NO_PROXY=*", "no_proxy=*")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Errorf("the client checks failed: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("serve did not stop after its context ended")
	}
}
