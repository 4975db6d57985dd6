package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/pflag"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/agent/tui"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/ui"
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

// The agent's caps are on by default and the stop notes name the flag
// that raises them; the no-tool hint points at a pullable model.
func TestAgentConfigCapsByDefault(t *testing.T) {
	f := pflag.NewFlagSet("chat", pflag.ContinueOnError)
	ChatFlags(f)
	if d := f.Lookup("agent-max-steps").DefValue; d != "20" {
		t.Fatalf("--agent-max-steps defaults to %s", d)
	}
	// Zero caps are agent.New's defaults: 20 turns, 2048 tokens an answer.
	ac := agentConfig(Config{})
	if ac.MaxSteps != 0 || ac.MaxTokens != 0 || agent.DefaultMaxSteps != 20 || agent.DefaultMaxTokens != 2048 {
		t.Fatalf("caps %d, %d", ac.MaxSteps, ac.MaxTokens)
	}
	if ac.MaxStepsFlag != "--agent-max-steps" || !strings.Contains(ac.MaxTokensFlag, "--max-tokens") {
		t.Fatalf("flags named: %q, %q", ac.MaxStepsFlag, ac.MaxTokensFlag)
	}
	if !strings.Contains(ac.NoToolHint, "ftchat pull bartowski/Qwen_Qwen3-0.6B-GGUF Qwen_Qwen3-0.6B-Q4_K_M.gguf") {
		t.Fatalf("hint: %q", ac.NoToolHint)
	}
	ac = agentConfig(Config{AgentMaxSteps: 5, MaxTokens: 100})
	if ac.MaxSteps != 5 || ac.MaxTokens != 100 || ac.MaxTokensFlag != "--max-tokens" {
		t.Fatalf("set caps not passed on: %+v", ac)
	}
}

// -p fails when a cap or the pool cut the run short, and only then.
func TestAgentExitOnCap(t *testing.T) {
	for stop, want := range map[agent.Stop]bool{
		agent.StopAnswer: false, agent.StopStepLimit: true, agent.StopLength: true, agent.StopPoolFull: true,
	} {
		err := agentExit(agent.Result{Stop: stop})
		var exit ExitError
		if got := errors.As(err, &exit) && exit.Code == 2; got != want || (!want && err != nil) {
			t.Errorf("stop %s: %v", stop, err)
		}
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

func TestTUIApprover(t *testing.T) {
	var sent []tea.Msg
	send := func(m tea.Msg) { sent = append(sent, m) }
	tests := []struct {
		yolo bool
		want agent.Approver
	}{
		{true, agent.AllowAll{}},
		{false, tui.Approver{}},
	}
	for _, tc := range tests {
		got := tuiApprover(tc.yolo, send)
		if reflect.TypeOf(got) != reflect.TypeOf(tc.want) {
			t.Errorf("yolo=%v: approver %T, want %T", tc.yolo, got, tc.want)
		}
	}
	// The TUI approver asks through send; a cancelled context denies.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := tuiApprover(false, send).Approve(ctx, &agent.Plan{Tool: "write_file", NeedsApproval: true})
	if d != agent.Deny || err == nil || len(sent) != 1 {
		t.Errorf("cancelled approval: %v, %v, %d messages sent", d, err, len(sent))
	}
	if _, ok := sent[0].(tui.ApprovalMsg); !ok {
		t.Errorf("sent %T, want tui.ApprovalMsg", sent[0])
	}
}

// TestAgentEndToEnd runs `ftchat -p --agent` and the interactive agent
// with the real default model in a scratch project: the wiring (engine,
// tools, prompts, loop, transcript or TUI hook) works and nothing is
// written without approval. The interactive run replaces ui.Run with a
// driver that builds the agent through Config.Agent, denies every
// approval request and collects what the TUI would show.
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
		var header string
		var shown []tea.Msg
		if interactive {
			pio.inTTY, pio.outTTY = true, true
			pio.runTUI = func(ctx context.Context, uc ui.Config) error {
				header = uc.AgentInfo
				if uc.Engine == nil || uc.Session == nil || uc.Agent == nil || uc.NoSave {
					t.Errorf("ui.Config not set up for agent mode: %+v", uc)
				}
				r, err := uc.Agent(func(m tea.Msg) {
					if a, ok := m.(tui.ApprovalMsg); ok {
						a.Answer(agent.Deny)
					}
					shown = append(shown, m)
				})
				if err != nil {
					return err
				}
				_, err = r.Run(ctx, uc.InitialPrompt)
				return err
			}
		} else {
			c.Print = true
		}
		err := agentMain(context.Background(), c, "Write hello to NOTES.md", pio)
		// 16 tokens may cut the answer short: -p then exits 2, after saying so.
		var exit ExitError
		if !interactive && errors.As(err, &exit) && exit.Code == 2 && strings.Contains(out.String(), "[agent] stopped") {
			err = nil
		}
		if err != nil {
			t.Fatalf("interactive=%v: %v\n%s", interactive, err, out.String())
		}
		if !interactive {
			header = errOut.String()
		}
		for _, want := range []string{"[agent] ", " in " + dir, " · 7 tools · "} {
			if !strings.Contains(header, want) {
				t.Errorf("interactive=%v: header lacks %q: %q", interactive, want, header)
			}
		}
		if interactive {
			if !strings.Contains(header, "writes and commands ask first") {
				t.Errorf("interactive header: %q", header)
			}
			if len(shown) == 0 {
				t.Error("the agent sent nothing to the TUI")
			}
			if out.Len() != 0 {
				t.Errorf("interactive mode wrote to stdout outside the TUI: %q", out.String())
			}
			t.Logf("interactive: %d messages to the TUI: %+v", len(shown), shown)
		} else {
			if !strings.Contains(header, "non-interactive: writes and commands are denied") {
				t.Errorf("print header: %q", header)
			}
			t.Logf("print transcript:\n%s", out.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "NOTES.md")); err == nil {
			t.Fatal("NOTES.md was written without approval")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "main.go")); !bytes.Equal(b, main) {
			t.Fatal("main.go changed")
		}
	}
}

// Issue 15 (small): -p --agent reports a full KV pool like plain -p, with
// flag advice instead of the chat's slash commands.
func TestAgentPrintModeErrorsGiveFlagAdvice(t *testing.T) {
	model := agentTestModel(t)
	cfg := Config{Engine: engine.Options{Model: model, Device: "cpu", KVTokens: 256}, Agent: true, Print: true, MaxTokens: 8}
	var out, errOut bytes.Buffer
	err := agentMain(context.Background(), cfg, "list the Go files", agentIO{in: strings.NewReader(""), out: &out, errOut: &errOut, dir: t.TempDir()})
	if err == nil {
		t.Fatalf("a 256-token pool held the agent's prompt:\n%s", out.String())
	}
	msg := err.Error()
	if strings.Contains(msg, "/clear") || strings.Contains(msg, "/kvdtype") || strings.Contains(msg, "/drop") {
		t.Errorf("-p --agent suggests chat commands: %s", msg)
	}
	if !strings.Contains(msg, "--kv-cache-dtype fp8_e4m3") && !strings.Contains(msg, "--ctx-size") && !strings.Contains(msg, "--kv-tokens") {
		t.Errorf("no flag advice: %s", msg)
	}
	t.Log(msg)
}
