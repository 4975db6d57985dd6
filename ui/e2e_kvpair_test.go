package ui

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// TestE2EKVPairTmux runs the real ftchat binary with the real default
// model in tmux, K and V in different dtypes: started with --cache-type-k
// bf16 --cache-type-v fp8_e4m3, the status pane names the pair; /kvdtype
// v=bf16 and /kvdtype k=fp8_e4m3 v=bf16 switch one half at a time, keeping
// the conversation, and the next turn answers. FTCHAT_E2E=1 runs it.
func TestE2EKVPairTmux(t *testing.T) {
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
	argv := []string{bin, "--device", "cpu", "--temperature", "0", "--max-tokens", "24", "--kv-tokens", "2048",
		"--cache-type-k", "bf16", "--cache-type-v", "fp8_e4m3"}
	env := []string{"XDG_DATA_HOME=" + filepath.Join(tmp, "data"), "FTCHAT_TEST_MODEL=" + model, "TERM=xterm-256color"}
	if c := os.Getenv("XDG_CACHE_HOME"); c != "" {
		env = append(env, "XDG_CACHE_HOME="+c)
	}
	tm := startTmux(t, 120, 40, env, argv...)
	tm.waitFor("the status pane", 3*time.Minute, func(s string) bool { return poolRe.MatchString(s) && strings.Contains(s, "decode ") })
	if s := tm.screen(); !strings.Contains(s, "kv k=bf16 v=fp8_e4m3 ·") {
		t.Fatalf("the status pane does not name the K/V pair:\n%s", s)
	}
	decoded := regexp.MustCompile(`decode [\d.,]+ tok/s`)
	ask := func(prompt string, turns int) string {
		t.Helper()
		tm.typeText(prompt)
		tm.keys("Enter")
		return tm.waitFor("the answer to "+prompt, 5*time.Minute, func(s string) bool {
			return idle(s) && strings.Count(s, "▌ you") >= turns && decoded.MatchString(s)
		})
	}
	s := ask("What is the capital of France?", 1)
	used0, _ := poolTokens(t, s)
	if used0 == 0 {
		t.Fatalf("no tokens used after a turn:\n%s", s)
	}
	for _, c := range []struct{ arg, now string }{{"v=bf16", "bf16"}, {"k=fp8_e4m3 v=bf16", "k=fp8_e4m3 v=bf16"}} {
		tm.typeText("/kvdtype " + c.arg)
		tm.keys("Enter")
		s = tm.waitFor("the switch to "+c.arg, 5*time.Minute, func(s string) bool {
			return idle(s) && (strings.Contains(s, "KV cache is now "+c.now+":") || strings.Contains(s, kvdtypeRefused))
		})
		if strings.Contains(s, kvdtypeRefused) || !strings.Contains(s, "kv "+c.now+" ·") {
			t.Fatalf("/kvdtype %s:\n%s", c.arg, s)
		}
		if used, _ := poolTokens(t, s); used != used0 {
			t.Fatalf("/kvdtype %s: %d tokens held, %d before:\n%s", c.arg, used, used0, s)
		}
	}
	s = ask("And of Italy?", 2)
	if used, _ := poolTokens(t, s); used <= used0 {
		t.Fatalf("the second turn added no tokens (%d, %d before):\n%s", used, used0, s)
	}
	t.Logf("final screen:\n%s", s)
}
