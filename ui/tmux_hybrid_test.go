package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

const tmuxHybridEnv = "FTCHAT_UI_TMUX_HYBRID"

// hybridModel is the tiny hybrid fixture the TUI test chats with (Gated
// DeltaNet + attention, converted by llama.cpp's converter).
var hybridModel = filepath.Join("..", "engine", "model", "testdata", "tiny_qwen35moe.gguf")

// TestTmuxHybridChild runs the real program on the real engine with the
// tiny hybrid model; it is started by TestTmuxHybridModel inside tmux.
func TestTmuxHybridChild(t *testing.T) {
	dir := os.Getenv(tmuxHybridEnv)
	if dir == "" {
		t.Skip("child process of TestTmuxHybridModel")
	}
	eng, err := engine.Load(context.Background(), engine.Options{Model: hybridModel, Device: "cpu", KVTokens: 4096}, nil)
	if err != nil {
		fmt.Println("LOAD ERROR:", err)
		time.Sleep(time.Minute)
		return
	}
	defer eng.Close()
	sess := eng.NewSession()
	err = Run(context.Background(), Config{Engine: eng, Session: sess, SessionDir: dir, MaxTokens: 24, Continue: true})
	if err != nil {
		fmt.Println("RUN ERROR:", err)
	}
	fmt.Println("CHILD EXITED")
	time.Sleep(time.Minute) // keep the pane for the parent to read
}

var stateRe = regexp.MustCompile(`state [\d.]+ KiB/seq, 4 slots = [\d.]+ KiB`)

// TestTmuxHybridModel: a hybrid model chats in the TUI end to end. The
// answer appears, the status pane shows the KV and the recurrent state
// apart, /kvdtype fp8_e4m3 keeps the conversation (same tokens held, the
// next turn resumes from a state snapshot and reuses them), and /stats
// counts it. The conversation starts from a saved one (--continue): the
// tiny model only ever thinks, and the chat keeps no turn without an
// answer in the history.
func TestTmuxHybridModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tmux")
	}
	dir := t.TempDir()
	saved := &SessionFile{Version: 1, Name: "mean", Created: time.Now(), Updated: time.Now(), Messages: []engine.Message{
		{Role: "user", Content: "What does the mean function return for an empty list?"},
		{Role: "assistant", Content: "It divides by zero and raises an error."},
	}}
	if err := (&Store{Dir: dir}).Save(saved, 1); err != nil {
		t.Fatal(err)
	}
	tm := startTmux(t, 120, 40, []string{tmuxHybridEnv + "=" + dir, "TERM=xterm-256color"},
		os.Args[0], "-test.run=^TestTmuxHybridChild$", "-test.count=1", "-test.v=false")
	s := tm.waitFor("the status pane", 30*time.Second, func(s string) bool {
		return poolRe.MatchString(s) && stateRe.MatchString(s) || strings.Contains(s, "LOAD ERROR")
	})
	if strings.Contains(s, "LOAD ERROR") {
		t.Fatalf("the model did not load:\n%s", s)
	}
	if !strings.Contains(s, "KV ▕") || !strings.Contains(s, "kv bf16") {
		t.Fatalf("the status pane lacks the KV items:\n%s", s)
	}

	if !strings.Contains(s, "It divides by zero") {
		t.Fatalf("the saved conversation is not shown:\n%s", s)
	}
	tm.typeText("Fix it, please.")
	tm.keys("Enter")
	s = tm.waitFor("the answer", 60*time.Second, func(s string) bool {
		u, _ := poolTokens(t, s)
		return idle(s) && u > 0 && strings.Contains(s, "thinking (")
	})
	if strings.Contains(s, "error:") {
		t.Fatalf("the turn failed:\n%s", s)
	}
	used0, cap0 := poolTokens(t, s)
	t.Logf("after the first turn: %d / %d tokens\n%s", used0, cap0, s)

	tm.typeText("/kvdtype fp8_e4m3")
	tm.keys("Enter")
	s = tm.waitFor("the switch", 60*time.Second, func(s string) bool {
		return idle(s) && (strings.Contains(s, "KV cache is now fp8_e4m3") || strings.Contains(s, kvdtypeRefused) || strings.Contains(s, "error:"))
	})
	if !strings.Contains(s, "KV cache is now fp8_e4m3") || !strings.Contains(s, "kv fp8_e4m3") {
		t.Fatalf("/kvdtype fp8_e4m3 did not switch:\n%s", s)
	}
	used1, cap1 := poolTokens(t, s)
	if used1 != used0 || cap1 <= cap0 {
		t.Errorf("after /kvdtype fp8_e4m3: %d / %d tokens, was %d / %d", used1, cap1, used0, cap0)
	}
	if !stateRe.MatchString(s) || !strings.Contains(s, "It divides by zero") {
		t.Errorf("the state or the conversation is gone after the switch:\n%s", s)
	}

	tm.typeText("Return 0 instead.")
	tm.keys("Enter")
	tm.waitFor("the second answer", 60*time.Second, func(s string) bool {
		return idle(s) && strings.Contains(s, "Return 0 instead.") && strings.Count(s, "thinking (") >= 2
	})
	tm.typeText("/stats")
	tm.keys("Enter")
	s = tm.waitText("state resumed (total)", 10*time.Second)
	reused := regexp.MustCompile(`reused from cache \(total\)\s+([\d,]+)`).FindStringSubmatch(s)
	if reused == nil || reused[1] == "0" {
		t.Errorf("the second turn reused nothing after the switch:\n%s", s)
	}
	if !regexp.MustCompile(`state resumed \(total\)\s+1 from a snapshot, 0 from token 0`).MatchString(s) {
		t.Errorf("the second turn did not resume from a snapshot:\n%s", s)
	}
	if !regexp.MustCompile(`state per sequence\s+[\d.]+ KiB \([\d,]+ B: 3 recurrent layers`).MatchString(s) {
		t.Errorf("/stats lacks the state per sequence:\n%s", s)
	}
	if !regexp.MustCompile(`bytes per token\s+144 \(attention layers only\)`).MatchString(s) {
		t.Errorf("/stats lacks the fp8 KV bytes per token of the attention layers:\n%s", s)
	}
	t.Logf("after the second turn:\n%s", s)
	tm.typeText("/model")
	tm.keys("Enter")
	tm.waitText("state   16.5 KiB per sequence (3 recurrent layers, float32), 4 slots = 66.0 KiB", 10*time.Second)

	tm.keys("C-c")
	tm.waitText("press Ctrl+C again", 5*time.Second)
	tm.keys("C-c")
	s = tm.waitText("CHILD EXITED", 10*time.Second)
	if strings.Contains(s, "RUN ERROR") {
		t.Errorf("Run failed:\n%s", s)
	}
}
