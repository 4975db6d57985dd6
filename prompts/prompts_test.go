package prompts_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/tokenizer"
	"github.com/ftchat/ftchat/prompts"

	"github.com/ftchat/ftchat/internal/testmodel"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var facts = prompts.Facts{
	Cwd: "/home/u/project", OS: "linux", Arch: "amd64", Date: "2026-11-29",
	GitBranch: "main", GitStatus: " M main.go\n?? notes.txt",
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (-update rewrites it):\n%s", name, got)
	}
}

func TestRenderGolden(t *testing.T) {
	noGit := facts
	noGit.GitBranch, noGit.GitStatus = "", ""
	for name, f := range map[string]func() (string, error){
		"agent.txt":       func() (string, error) { return prompts.Agent(facts) },
		"agent_nogit.txt": func() (string, error) { return prompts.Agent(noGit) },
		"chat.txt":        func() (string, error) { return prompts.Chat(facts) },
		"tools_block.txt": func() (string, error) { return prompts.ToolsBlock([]string{`{"name":"a"}`, `{"name":"b"}`}) },
	} {
		got, err := f()
		if err != nil {
			t.Fatal(err)
		}
		golden(t, name, got+"\n")
	}
}

func TestToolDescriptions(t *testing.T) {
	for _, name := range []string{"read_file", "list", "glob", "grep", "write_file", "edit", "run_shell"} {
		d, err := prompts.Tool(name)
		if err != nil || d == "" || strings.Contains(d, "\n") {
			t.Errorf("%s: %q %v (want one line)", name, d, err)
		}
	}
	if _, err := prompts.Tool("nope"); err == nil || !strings.Contains(err.Error(), "prompts/tools/nope.md") {
		t.Errorf("missing tool: %v", err)
	}
}

func TestGather(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	f := prompts.Gather(context.Background(), dir, now)
	if f.Cwd != dir || f.Date != "2026-11-29" || f.OS == "" || f.GitBranch != "" || f.GitStatus != "" {
		t.Fatalf("not a repository: %+v", f)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "trunk")
	for i := range 14 {
		os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i))), []byte("x"), 0o644)
	}
	f = prompts.Gather(context.Background(), dir, now)
	lines := strings.Split(f.GitStatus, "\n")
	if f.GitBranch != "trunk" || len(lines) != prompts.MaxStatusLines+1 || lines[0] != "?? fa" || lines[len(lines)-1] != "... and 4 more" {
		t.Fatalf("repository: branch %q status %q", f.GitBranch, f.GitStatus)
	}
}

// TestAgentPromptTokens measures the agent's system prompt, with and
// without the tool block, in the default model's tokens: SmolLM2-135M has
// an 8K context and every token of prompt is one less for the work.
func TestAgentPromptTokens(t *testing.T) {
	path := testmodel.Require(t)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	count := func(s string) int { return len(tok.EncodeWith(s, tokenizer.EncodeOptions{PlainSpecials: true})) }
	sys, err := prompts.Agent(facts)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := agent.OpenWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	tools, err := agent.NewTools(ws, agent.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Gen: nil, Tools: tools, Sink: &agent.TextSink{}, System: sys})
	if err == nil {
		t.Fatal("a nil generator must be refused")
	}
	_ = a
	a, err = agent.New(agent.Config{Gen: noGen{}, Tools: tools, Sink: &agent.TextSink{}, System: sys})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Messages()[0].Content; got != sys {
		t.Fatalf("the agent's system message is the prompt itself (the engine adds the tools): %q", got)
	}
	// The tool list as the engine inlines it for SmolLM2's template, which
	// has no tool format: the same system message rendered with and without
	// the tools.
	eng, err := engine.Load(context.Background(), engine.Options{Model: path, Device: "cpu", KVTokens: 1024}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	msgs := []engine.Message{{Role: "system", Content: sys}}
	withTools, err := eng.RenderPrompt(engine.Request{Messages: msgs, Tools: tools.Defs()})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := eng.RenderPrompt(engine.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	n := count(sys)
	nFull := n + count(withTools) - count(bare)
	t.Logf("agent system prompt: %d tokens; with the tool list the engine inlines: %d tokens", n, nFull)
	// Budgets: about a tenth of SmolLM2's 8K context for the prompt and its
	// tools. (850 with tools: the engine wraps each signature in the OpenAI
	// {"type":"function","function":...} form, 56 tokens more than the bare
	// signatures the agent used to inline, measured at 784.)
	if n > 250 || nFull > 850 {
		t.Errorf("agent prompt too long for a small model: %d tokens (budget 250), %d with tools (budget 850)", n, nFull)
	}
}

type noGen struct{}

func (noGen) Generate(context.Context, engine.Request) <-chan engine.Event { return nil }
