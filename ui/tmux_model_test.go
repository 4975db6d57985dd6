package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
)

const tmuxModelEnv = "FTCHAT_UI_TMUX_MODELS"

// TestTmuxModelSwitchChild runs the real program on the real engine with
// the default model and a cache holding it and the tiny hybrid fixture; it
// is started by TestTmuxModelSwitch inside tmux.
func TestTmuxModelSwitchChild(t *testing.T) {
	dir := os.Getenv(tmuxModelEnv)
	if dir == "" {
		t.Skip("child process of TestTmuxModelSwitch")
	}
	opts := engine.Options{Device: "cpu", KVTokens: 4096}
	o := opts
	o.Model = filepath.Join(dir, "cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
	eng, err := engine.Load(context.Background(), o, nil)
	if err != nil {
		fmt.Println("LOAD ERROR:", err)
		time.Sleep(time.Minute)
		return
	}
	sess := eng.NewSession()
	models := NewCacheModels(opts, eng, sess, nil)
	defer models.Close()
	err = Run(context.Background(), Config{Engine: eng, Session: sess, Models: models, SessionDir: filepath.Join(dir, "sessions"),
		MaxTokens: 12, Sampling: engine.Sampling{Temperature: 0}})
	if err != nil {
		fmt.Println("RUN ERROR:", err)
	}
	fmt.Println("CHILD EXITED")
	time.Sleep(time.Minute) // keep the pane for the parent to read
}

// TestTmuxModelSwitch: in a real terminal, /model lists the two cached
// models, /model tiny_qwen35 switches from SmolLM2 to the tiny hybrid with
// the conversation prefilled on it (the status pane names the new model
// and counts the conversation's tokens), the next message is answered by
// it under its name while the first answer keeps SmolLM2's, and a model
// that cannot be loaded leaves the chat on the current one.
func TestTmuxModelSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tmux")
	}
	smol := testmodel.Require(t)
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tiny, err := filepath.Abs(filepath.Join("..", "engine", "model", "testdata", "tiny_qwen35.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if smol, err = filepath.Abs(smol); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"SmolLM2-135M-Instruct.Q4_1.gguf": smol, "tiny_qwen35.gguf": tiny} {
		if err := os.Symlink(target, filepath.Join(cache, name)); err != nil {
			t.Fatal(err)
		}
	}
	tm := startTmux(t, 120, 40, []string{tmuxModelEnv + "=" + dir, "FTCHAT_CACHE_DIR=" + cache, "TERM=xterm-256color"},
		os.Args[0], "-test.run=^TestTmuxModelSwitchChild$", "-test.count=1", "-test.v=false")
	s := tm.waitFor("the status pane", 30*time.Second, func(s string) bool {
		return poolRe.MatchString(s) || strings.Contains(s, "LOAD ERROR")
	})
	if strings.Contains(s, "LOAD ERROR") {
		t.Fatalf("the model did not load:\n%s", s)
	}
	tm.typeText("What is the capital of France?")
	tm.keys("Enter")
	tm.waitFor("the first answer", 60*time.Second, func(s string) bool {
		u, _ := poolTokens(t, s)
		return idle(s) && u > 0 && strings.Contains(s, "◆ SmolLM2")
	})

	tm.typeText("/model")
	tm.keys("Enter")
	s = tm.waitText("tiny_qwen35.gguf", 10*time.Second)
	if !strings.Contains(s, "* 1  SmolLM2-135M-Instruct.Q4_1.gguf") || !strings.Contains(s, "2  tiny_qwen35.gguf") {
		t.Fatalf("/model does not list the cache with the model in use marked:\n%s", s)
	}

	tm.typeText("/model 2")
	tm.keys("Enter")
	s = tm.waitFor("the switch", 60*time.Second, func(s string) bool {
		return strings.Contains(s, "holds the conversation") || strings.Contains(s, "failed") || strings.Contains(s, "prefill stopped")
	})
	if !strings.Contains(s, "now on tiny_qwen35") || !strings.Contains(s, "tiny_qwen35 holds the conversation") {
		t.Fatalf("/model 2 did not switch:\n%s", s)
	}
	used, _ := poolTokens(t, s)
	if used == 0 {
		t.Errorf("the new model's pool holds no token after the prefill:\n%s", s)
	}

	tm.typeText("Thanks.")
	tm.keys("Enter")
	s = tm.waitFor("the answer of the new model", 60*time.Second, func(s string) bool {
		return idle(s) && strings.Contains(s, "◆ tiny_qwen35")
	})
	if !strings.Contains(s, "◆ SmolLM2") || !strings.Contains(s, "What is the capital of France?") {
		t.Errorf("the first turn or its model's name is gone after the switch:\n%s", s)
	}
	t.Logf("after the switch:\n%s", s)

	tm.typeText("/model " + filepath.Join(dir, "missing.gguf"))
	tm.keys("Enter")
	s = tm.waitText("still on tiny_qwen35", 20*time.Second)
	if !strings.Contains(s, "failed") {
		t.Errorf("a missing model did not fail plainly:\n%s", s)
	}

	tm.keys("C-c")
	tm.waitText("press Ctrl+C again", 5*time.Second)
	tm.keys("C-c")
	s = tm.waitText("CHILD EXITED", 10*time.Second)
	if strings.Contains(s, "RUN ERROR") {
		t.Errorf("Run failed:\n%s", s)
	}
}
