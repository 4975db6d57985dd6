package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

func agentTestModel(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FTCHAT_TEST_MODEL")
	if p == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Skip("no cache dir")
		}
		p = filepath.Join(base, "ftchat", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("default model not present (%s): run `make model`", p)
	}
	return p
}

func TestAgentNeedsATask(t *testing.T) {
	var out, errOut bytes.Buffer
	err := agentMain(context.Background(), Config{Print: true, Agent: true}, "  ", agentIO{
		in: strings.NewReader(""), out: &out, errOut: &errOut, dir: t.TempDir(),
	})
	if err == nil || !strings.Contains(err.Error(), "nothing to do") {
		t.Fatalf("err %v", err)
	}
}

func TestWithPiped(t *testing.T) {
	got := withPiped("why?", "a ``` b\n")
	if got != "why?\n\nContext (piped from stdin):\n````\na ``` b\n````" {
		t.Fatalf("%q", got)
	}
	if withPiped("", "log") != "log" || withPiped("q", "") != "q" {
		t.Fatal("empty sides")
	}
}

// TestAgentEndToEnd runs `ftchat -p --agent` and the interactive session
// with the real default model in a scratch project: the wiring (engine,
// tools, prompts, loop, transcript) works and nothing is written.
func TestAgentEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	model := agentTestModel(t)
	dir := t.TempDir()
	main := []byte("package main\n\nfunc main() { println(\"hi\") }\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Engine: engine.Options{Model: model, Device: "cpu", KVTokens: 4096}, Agent: true, MaxTokens: 16}
	for _, interactive := range []bool{false, true} {
		var out, errOut bytes.Buffer
		pio := agentIO{in: strings.NewReader(""), out: &out, errOut: &errOut, dir: dir}
		c := cfg
		if interactive {
			pio.inTTY, pio.outTTY = true, true
			pio.openTTY = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("")), nil }
		} else {
			c.Print = true
		}
		if err := agentMain(context.Background(), c, "Write hello to NOTES.md", pio); err != nil {
			t.Fatalf("interactive=%v: %v\n%s", interactive, err, out.String())
		}
		header := errOut.String()
		if interactive {
			header = out.String()
		}
		for _, want := range []string{"[agent] ", " in " + dir, " · 7 tools · "} {
			if !strings.Contains(header, want) {
				t.Errorf("interactive=%v: header lacks %q: %q", interactive, want, header)
			}
		}
		if interactive && !strings.Contains(out.String(), "writes and commands ask first") {
			t.Errorf("interactive header: %q", out.String())
		}
		if !interactive && !strings.Contains(header, "non-interactive: writes and commands are denied") {
			t.Errorf("print header: %q", header)
		}
		t.Logf("interactive=%v transcript:\n%s", interactive, out.String())
		if _, err := os.Stat(filepath.Join(dir, "NOTES.md")); err == nil {
			t.Fatal("NOTES.md was written without approval")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "main.go")); !bytes.Equal(b, main) {
			t.Fatal("main.go changed")
		}
	}
}
