package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// script is an engine double: each Generate call plays the next list of
// events and records the request it was given.
type script struct {
	mu    sync.Mutex
	steps [][]engine.Event
	reqs  []engine.Request
}

func (s *script) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Copy the messages: the agent appends to its slice later.
	req.Messages = append([]engine.Message(nil), req.Messages...)
	s.reqs = append(s.reqs, req)
	i := len(s.reqs) - 1
	ch := make(chan engine.Event, 64)
	go func() {
		defer close(ch)
		if i >= len(s.steps) {
			ch <- engine.Event{Kind: engine.EventError, Err: fmt.Errorf("script: no step %d", i+1)}
			return
		}
		for _, ev := range s.steps[i] {
			select {
			case ch <- ev:
			case <-ctx.Done():
				ch <- engine.Event{Kind: engine.EventDone, Stop: engine.StopCancelled}
				return
			}
		}
	}()
	return ch
}

func text(s string) engine.Event { return engine.Event{Kind: engine.EventText, Text: s} }

func done(stop engine.StopReason) engine.Event {
	return engine.Event{Kind: engine.EventDone, Stop: stop}
}

func call(name string, args map[string]any) engine.Event {
	return engine.Event{Kind: engine.EventToolCall, ToolCall: &engine.ToolCall{ID: "call_1", Name: name, Arguments: args}}
}

// chunked splits s into random pieces, as a tokenizer's deltas would.
func chunked(r *rand.Rand, s string) []engine.Event {
	var evs []engine.Event
	for len(s) > 0 {
		n := min(len(s), 1+r.IntN(6))
		evs = append(evs, text(s[:n]))
		s = s[n:]
	}
	return evs
}

func answer(s string) []engine.Event { return []engine.Event{text(s), done(engine.StopEOS)} }

// newTestWorkspace makes a workspace with hello.txt in it.
func newTestWorkspace(t *testing.T) (*Workspace, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi there\nsecond line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws, dir
}

func newTestAgent(t *testing.T, s *script, ap Approver) (*Agent, *bytes.Buffer, string) {
	t.Helper()
	ws, dir := newTestWorkspace(t)
	tools, err := NewTools(ws, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a, err := New(Config{Gen: s, Tools: tools, Approver: ap, Sink: &TextSink{W: &out}, System: "You are a test agent."})
	if err != nil {
		t.Fatal(err)
	}
	return a, &out, dir
}

func lastMsg(req engine.Request) engine.Message { return req.Messages[len(req.Messages)-1] }

func TestCallResultAnswer(t *testing.T) {
	s := &script{steps: [][]engine.Event{
		{text("Let me look."), call("read_file", map[string]any{"path": "hello.txt"}), done(engine.StopToolCall)},
		answer("The file says hi there."),
	}}
	a, out, _ := newTestAgent(t, s, nil)
	res, err := a.Run(context.Background(), "what is in hello.txt?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopAnswer || res.Steps != 2 || res.Answer != "The file says hi there." {
		t.Fatalf("result %+v", res)
	}
	if len(s.reqs[0].Tools) != 7 {
		t.Fatalf("the tools go to the engine in the request: got %d", len(s.reqs[0].Tools))
	}
	msgs := s.reqs[1].Messages
	asst, tool := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if asst.Role != "assistant" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].Name != "read_file" || asst.Content != "Let me look." {
		t.Fatalf("assistant message %+v", asst)
	}
	if tool.Role != "tool" || tool.ToolCallID != asst.ToolCalls[0].ID || tool.Name != "read_file" || !strings.Contains(tool.Content, "hi there\nsecond line") {
		t.Fatalf("tool message %+v", tool)
	}
	for _, want := range []string{"Let me look.", "→ read_file {\"path\":\"hello.txt\"}", "│ hello.txt (lines 1-2 of 2)", "The file says hi there."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
}

// TestCallResultAnswerInlinedTools plays what the engine sends for a model
// whose template has no tool format (SmolLM2's): the engine put the tool
// list into the system prompt itself, streamed the text before the call,
// parsed the Hermes call, and stopped after it with StopToolCall. The agent
// must not add a tool list or a stop string of its own, and keeps the call
// and its result in the conversation as ToolCalls and a "tool" message (the
// engine writes them back as <tool_call>/<tool_response> text).
func TestCallResultAnswerInlinedTools(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	step1 := append(chunked(r, "Let me look.\n"),
		call("read_file", map[string]any{"path": "hello.txt", "end_line": float64(1)}), done(engine.StopToolCall))
	s := &script{steps: [][]engine.Event{step1, answer("It says hi there.")}}
	a, out, _ := newTestAgent(t, s, nil)
	res, err := a.Run(context.Background(), "what is in hello.txt?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopAnswer || res.Steps != 2 || res.Answer != "It says hi there." {
		t.Fatalf("result %+v", res)
	}
	r0 := s.reqs[0]
	if len(r0.Tools) != 7 {
		t.Fatalf("the tools go to the engine, which inlines them: got %d", len(r0.Tools))
	}
	if sys := r0.Messages[0]; sys.Role != "system" || sys.Content != "You are a test agent." {
		t.Fatalf("the agent must not append a tool list itself (the engine does):\n%s", sys.Content)
	}
	if len(r0.Sampling.Stop) != 0 {
		t.Fatalf("the engine stops after a call; the agent adds no stop strings: %q", r0.Sampling.Stop)
	}
	msgs := s.reqs[1].Messages
	asst, res1 := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if asst.Role != "assistant" || asst.Content != "Let me look." || len(asst.ToolCalls) != 1 ||
		asst.ToolCalls[0].Name != "read_file" || fmt.Sprint(asst.ToolCalls[0].Arguments) != "map[end_line:1 path:hello.txt]" {
		t.Fatalf("assistant turn %+v", asst)
	}
	if res1.Role != "tool" || res1.ToolCallID != asst.ToolCalls[0].ID || res1.Name != "read_file" || res1.Content != "hello.txt (lines 1-1 of 2)\nhi there\n" {
		t.Fatalf("tool result turn %+v", res1)
	}
	for _, want := range []string{"Let me look.", "→ read_file {\"end_line\":1,\"path\":\"hello.txt\"}", "│ hi there", "It says hi there."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "<tool_call>") {
		t.Fatalf("the raw call leaked into the transcript:\n%s", out)
	}
}

// TestMalformedCallRecovery: the engine reports a call it could not parse
// as EventToolError (its raw text and a *chat.MalformedCallError); the
// agent runs nothing, tells the model what was wrong, and recovers when the
// next call is good.
func TestMalformedCallRecovery(t *testing.T) {
	malformed := func(raw, reason string) engine.Event {
		return engine.Event{Kind: engine.EventToolError, Text: raw, Err: &chat.MalformedCallError{Raw: raw, Reason: reason}}
	}
	cases := []struct {
		name string
		bad  []engine.Event
	}{
		// Unquoted keys: the engine stopped at the end of the block.
		{"bad-json", []engine.Event{malformed(`<tool_call>{"name": "read_file", "arguments": {path: hello.txt}}</tool_call>`,
			"invalid JSON: invalid character 'p' looking for beginning of object key string"), done(engine.StopToolCall)}},
		// The model stopped inside the block: the engine flushes it as malformed.
		{"unterminated", []engine.Event{text("I will read it.\n"), malformed(`<tool_call>{"name": "read_file", "arguments": {"path": "hel`,
			"invalid JSON: unexpected EOF"), done(engine.StopEOS)}},
		// A call without a name.
		{"no-name", []engine.Event{malformed(`<tool_call>{"arguments": {"path": "hello.txt"}}</tool_call>`,
			`no "name" string in the call`), done(engine.StopToolCall)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := []engine.Event{call("read_file", map[string]any{"path": "hello.txt"}), done(engine.StopToolCall)}
			s := &script{steps: [][]engine.Event{c.bad, good, answer("hi there")}}
			a, out, _ := newTestAgent(t, s, nil)
			res, err := a.Run(context.Background(), "read hello.txt")
			if err != nil {
				t.Fatal(err)
			}
			if res.Stop != StopAnswer || res.Steps != 3 {
				t.Fatalf("result %+v", res)
			}
			msgs := s.reqs[1].Messages
			if bad := msgs[len(msgs)-2]; bad.Role != "assistant" || len(bad.ToolCalls) != 0 || !strings.Contains(bad.Content, "<tool_call>{") {
				t.Fatalf("the malformed call stays in the assistant turn as text, not run: %+v", bad)
			}
			fb := lastMsg(s.reqs[1])
			if fb.Role != "user" || !strings.Contains(fb.Content, "Error: malformed tool call") || !strings.Contains(fb.Content, "The call was not run") {
				t.Fatalf("feedback to the model: %+v", fb)
			}
			if got := lastMsg(s.reqs[2]).Content; !strings.Contains(got, "hi there\nsecond line") {
				t.Fatalf("after recovery the model sees the result: %q", got)
			}
			if !strings.Contains(out.String(), "[agent] malformed tool call") {
				t.Fatalf("transcript does not report the malformed call:\n%s", out)
			}
		})
	}
}

func TestStepLimit(t *testing.T) {
	var steps [][]engine.Event
	for range 10 {
		steps = append(steps, []engine.Event{call("list", map[string]any{}), done(engine.StopToolCall)})
	}
	s := &script{steps: steps}
	a, out, _ := newTestAgent(t, s, nil)
	a.cfg.MaxSteps = 3
	res, err := a.Run(context.Background(), "loop forever")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopStepLimit || res.Steps != 3 || len(s.reqs) != 3 {
		t.Fatalf("result %+v after %d generations", res, len(s.reqs))
	}
	if !strings.Contains(out.String(), "[agent] stopped after 3 model turns (the step limit)") {
		t.Fatalf("no step-limit note:\n%s", out)
	}
}

// The caps are on by default: a zero Config still bounds model turns and
// the tokens of each answer (issue 15: an uncapped -p --agent ran for 10
// minutes), and a negative MaxTokens lifts the token cap.
func TestDefaultCaps(t *testing.T) {
	s := &script{steps: [][]engine.Event{answer("ok")}}
	a, _, _ := newTestAgent(t, s, nil)
	if a.cfg.MaxSteps != DefaultMaxSteps || a.cfg.MaxTokens != DefaultMaxTokens {
		t.Fatalf("defaults: %d steps, %d tokens", a.cfg.MaxSteps, a.cfg.MaxTokens)
	}
	if _, err := a.Run(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	if got := s.reqs[0].MaxTokens; got != DefaultMaxTokens {
		t.Fatalf("request MaxTokens %d, want %d", got, DefaultMaxTokens)
	}
	b, err := New(Config{Gen: s, Tools: a.cfg.Tools, Sink: &TextSink{W: io.Discard}, MaxTokens: -1})
	if err != nil {
		t.Fatal(err)
	}
	if b.cfg.MaxTokens != 0 {
		t.Fatalf("MaxTokens -1 became %d, want 0 (no limit)", b.cfg.MaxTokens)
	}
}

// When a cap stops a run, the note says which cap and the setting that
// raises it.
func TestCapNotesNameTheFlag(t *testing.T) {
	loop := [][]engine.Event{
		{call("list", map[string]any{}), done(engine.StopToolCall)},
		{call("list", map[string]any{}), done(engine.StopToolCall)},
	}
	s := &script{steps: loop}
	a, out, _ := newTestAgent(t, s, nil)
	a.cfg.MaxSteps, a.cfg.MaxStepsFlag = 2, "--agent-max-steps"
	res, err := a.Run(context.Background(), "loop")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopStepLimit || !strings.Contains(out.String(), "[agent] stopped after 2 model turns (--agent-max-steps)") {
		t.Fatalf("stop %s, transcript:\n%s", res.Stop, out)
	}

	s = &script{steps: [][]engine.Event{{text("public class Main {"), done(engine.StopMaxTokens)}}}
	a, out, _ = newTestAgent(t, s, nil)
	a.cfg.MaxTokens, a.cfg.MaxTokensFlag = 16, "--max-tokens"
	res, err = a.Run(context.Background(), "list the Go files")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopLength || !strings.Contains(out.String(), "[agent] stopped: the answer reached 16 tokens (--max-tokens)") {
		t.Fatalf("stop %s, transcript:\n%s", res.Stop, out)
	}
}

// A model that answers its first task without a tool call gets the hint
// once per agent, and never one that has called a tool.
func TestNoToolHintOnce(t *testing.T) {
	const hint = "the model answered without calling a tool"
	s := &script{steps: [][]engine.Event{
		{text("public class Main {"), done(engine.StopMaxTokens)},
		answer("Here are the files: a.go, b.go"),
	}}
	a, out, _ := newTestAgent(t, s, nil)
	a.cfg.NoToolHint = hint
	for _, task := range []string{"list the Go files", "list them again"} {
		if _, err := a.Run(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(out.String(), "[agent] "+hint); n != 1 {
		t.Fatalf("hint noted %d times, want 1:\n%s", n, out)
	}
	// The hint follows the stop note, so it is the last word of the run.
	if !strings.Contains(out.String(), "cut short\n[agent] "+hint) {
		t.Fatalf("hint not after the stop note:\n%s", out)
	}

	s = &script{steps: [][]engine.Event{
		{call("list", map[string]any{}), done(engine.StopToolCall)},
		answer("hello.txt"),
		answer("You're welcome."),
	}}
	a, out, _ = newTestAgent(t, s, nil)
	a.cfg.NoToolHint = hint
	for _, task := range []string{"list the files", "thanks"} {
		if _, err := a.Run(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(out.String(), hint) {
		t.Fatalf("hint for a model that calls tools:\n%s", out)
	}
}

func TestDenial(t *testing.T) {
	s := &script{steps: [][]engine.Event{
		{call("write_file", map[string]any{"path": "new.txt", "content": "x"}), done(engine.StopToolCall)},
		{call("run_shell", map[string]any{"command": "touch pwned"}), done(engine.StopToolCall)},
		answer("I could not write the file."),
	}}
	a, out, dir := newTestAgent(t, s, DenyAll{})
	res, err := a.Run(context.Background(), "create new.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Denied) != 2 || !strings.Contains(res.Denied[0], "write_file new.txt") || !strings.Contains(res.Denied[1], "touch pwned") {
		t.Fatalf("denied %q", res.Denied)
	}
	for _, f := range []string{"new.txt", "pwned"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a denial", f)
		}
	}
	if got := lastMsg(s.reqs[1]); got.Role != "tool" || !strings.Contains(got.Content, "The user denied this action") {
		t.Fatalf("the model is told about the denial: %+v", got)
	}
	if !strings.Contains(out.String(), "[agent] denied: write_file new.txt") {
		t.Fatalf("transcript:\n%s", out)
	}
}

// countingApprover answers from a list and counts the questions.
type countingApprover struct {
	answers []Decision
	asked   []string
}

func (c *countingApprover) Approve(_ context.Context, p *Plan) (Decision, error) {
	c.asked = append(c.asked, p.Summary)
	d := c.answers[0]
	c.answers = c.answers[1:]
	return d, nil
}

func TestApproveOnceAndSession(t *testing.T) {
	w := func(name string) []engine.Event {
		return []engine.Event{call("write_file", map[string]any{"path": name, "content": name}), done(engine.StopToolCall)}
	}
	s := &script{steps: [][]engine.Event{w("a.txt"), w("b.txt"), w("c.txt"), w("d.txt"), answer("done")}}
	ap := &countingApprover{answers: []Decision{AllowOnce, Deny, AllowSession}}
	a, _, dir := newTestAgent(t, s, ap)
	if _, err := a.Run(context.Background(), "write four files"); err != nil {
		t.Fatal(err)
	}
	if len(ap.asked) != 3 {
		t.Fatalf("asked %d times (%q); after 'session' write_file is not asked again", len(ap.asked), ap.asked)
	}
	for name, want := range map[string]bool{"a.txt": true, "b.txt": false, "c.txt": true, "d.txt": true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", name, err == nil, want)
		}
	}
}

func TestLineApprover(t *testing.T) {
	cases := []struct {
		in   string
		want Decision
	}{
		{"o\n", AllowOnce}, {"s\n", AllowSession}, {"d\n", Deny}, {"what\nyes\n", AllowOnce}, {"", Deny}, {"maybe", Deny},
	}
	for _, c := range cases {
		var out bytes.Buffer
		ap := &LineApprover{In: strings.NewReader(c.in), Out: &out}
		d, err := ap.Approve(context.Background(), &Plan{Tool: "edit", Summary: "edit a.go", Preview: "--- a/a.go\n+++ b/a.go\n"})
		if err != nil || d != c.want {
			t.Errorf("input %q: %v, %v; want %v", c.in, d, err, c.want)
		}
		if !strings.Contains(out.String(), "edit a.go") || !strings.Contains(out.String(), "+++ b/a.go") {
			t.Errorf("the prompt shows the summary and the diff: %q", out.String())
		}
	}
}

func TestToolErrorsGoBackToTheModel(t *testing.T) {
	s := &script{steps: [][]engine.Event{
		{call("delete_everything", nil), done(engine.StopToolCall)},
		{call("read_file", map[string]any{"file": "hello.txt"}), done(engine.StopToolCall)},
		{call("read_file", map[string]any{"path": "nope.txt"}), done(engine.StopToolCall)},
		answer("ok"),
	}}
	a, _, _ := newTestAgent(t, s, nil)
	if _, err := a.Run(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`there is no tool "delete_everything"`, `missing argument "path"`, "nope.txt does not exist"} {
		if got := lastMsg(s.reqs[i+1]).Content; !strings.HasPrefix(got, "Error: ") || !strings.Contains(got, want) {
			t.Errorf("step %d: %q lacks %q", i+1, got, want)
		}
	}
}

func TestCancel(t *testing.T) {
	s := &script{steps: [][]engine.Event{{text("partial"), done(engine.StopCancelled)}}}
	a, _, _ := newTestAgent(t, s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Run(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// budgetFitter is a pool of capacity tokens where a token is a byte.
type budgetFitter struct{ capacity int }

func (f budgetFitter) CountTokens(s string) int { return len(s) }

func (f budgetFitter) FitCheck(req engine.Request) error {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content) + 4
	}
	if n+1 > f.capacity {
		return &kvcache.PoolFullError{Asked: n + 1, Fit: f.capacity, Capacity: f.capacity}
	}
	return nil
}

func TestContextPolicyDropsOldestTurns(t *testing.T) {
	big := strings.Repeat("x", 300)
	s := &script{steps: [][]engine.Event{answer(big), answer(big), answer(big), answer("fits")}}
	a, out, _ := newTestAgent(t, s, nil)
	a.cfg.Fit = budgetFitter{capacity: 900}
	for i := range 4 {
		if _, err := a.Run(context.Background(), fmt.Sprintf("request %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	last := s.reqs[3].Messages
	if last[0].Role != "system" || lastMsg(s.reqs[3]).Content != "request 3" {
		t.Fatalf("system prompt and current request must stay: %+v", last)
	}
	if len(last) != 6 || last[1].Content != "request 1" { // request 0 and its answer dropped
		var roles []string
		for _, m := range last {
			roles = append(roles, m.Role+":"+clip(m.Content, 12))
		}
		t.Fatalf("messages after the drop: %q", roles)
	}
	if !strings.Contains(out.String(), "[agent] context: the conversation did not fit the KV cache") || !strings.Contains(out.String(), "dropped the 1 oldest request(s)") {
		t.Fatalf("the drop must be reported:\n%s", out)
	}
}

func TestContextPolicyDropsToolResultsThenFails(t *testing.T) {
	s := &script{steps: [][]engine.Event{
		{call("read_file", map[string]any{"path": "big.txt"}), done(engine.StopToolCall)},
		answer("done"),
	}}
	a, out, dir := newTestAgent(t, s, nil)
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("line\n", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	a.cfg.Fit = budgetFitter{capacity: 400}
	if _, err := a.Run(context.Background(), "read big.txt"); err != nil {
		t.Fatal(err)
	}
	got := lastMsg(s.reqs[1])
	if got.Role != "tool" || !strings.HasPrefix(got.Content, droppedMark) {
		t.Fatalf("the tool result should have been dropped: %q", clip(got.Content, 80))
	}
	if !strings.Contains(out.String(), "dropped the output of read_file") {
		t.Fatalf("transcript:\n%s", out)
	}

	// A request that cannot fit at all is an error, not a silent cut.
	a.cfg.Fit = budgetFitter{capacity: 10}
	_, err := a.Run(context.Background(), strings.Repeat("y", 50))
	if err == nil || !strings.Contains(err.Error(), "does not fit the KV cache") {
		t.Fatalf("err %v", err)
	}
}

func TestReset(t *testing.T) {
	s := &script{steps: [][]engine.Event{answer("one"), answer("two")}}
	a, _, _ := newTestAgent(t, s, nil)
	if _, err := a.Run(context.Background(), "first"); err != nil {
		t.Fatal(err)
	}
	a.Reset()
	if _, err := a.Run(context.Background(), "second"); err != nil {
		t.Fatal(err)
	}
	if got := s.reqs[1].Messages; len(got) != 2 || got[0].Role != "system" || got[1].Content != "second" {
		t.Fatalf("after Reset: %+v", got)
	}
}

func TestRestoreKeepsRequestsAndAnswers(t *testing.T) {
	a, _, _ := newTestAgent(t, &script{}, DenyAll{})
	a.Restore([]engine.Message{
		{Role: "system", Content: "old system"},
		{Role: "user", Content: "q1"}, {Role: "assistant", Content: "a1"},
		{Role: "tool", Content: "result"},
		{Role: "user", Content: "q2"}, {Role: "assistant", Content: "a2"},
	})
	got := a.Messages()
	want := []string{"system:You are a test agent.", "user:q1", "assistant:a1", "user:q2", "assistant:a2"}
	if len(got) != len(want) {
		t.Fatalf("messages %+v", got)
	}
	for i, m := range got {
		if m.Role+":"+m.Content != want[i] {
			t.Errorf("message %d = %s:%s, want %s", i, m.Role, m.Content, want[i])
		}
	}
	if len(a.turns) != 2 || a.turns[0] != 1 || a.turns[1] != 3 {
		t.Errorf("turns %v, want [1 3]", a.turns)
	}
}

// progressSink records prefill progress next to a TextSink.
type progressSink struct {
	TextSink
	got [][2]int
}

func (p *progressSink) Progress(done, total int) { p.got = append(p.got, [2]int{done, total}) }

func TestPrefillProgressReachesAProgressSink(t *testing.T) {
	prog := func(d, n int) engine.Event { return engine.Event{Kind: engine.EventProgress, Done: d, Total: n} }
	s := &script{steps: [][]engine.Event{{prog(256, 700), prog(700, 700), text("hi"), done(engine.StopEOS)}}}
	a, _, _ := newTestAgent(t, s, DenyAll{})
	ps := &progressSink{TextSink: TextSink{W: io.Discard}}
	a.cfg.Sink = ps
	if _, err := a.Run(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	if len(ps.got) != 2 || ps.got[0] != [2]int{256, 700} || ps.got[1] != [2]int{700, 700} {
		t.Errorf("progress %v", ps.got)
	}
}
