package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/chat"
)

// rawModel is an engine double one level lower than script: each step is
// the raw text a Qwen3.5 model writes after the prompt's "<think>\n", and
// it goes through what the engine does with it: the prompt is rendered with
// the model's template and the text is parsed in the template's tool-call
// format (the XML one), in random deltas, with the request's tools typing
// the values.
type rawModel struct {
	tmpl    *chat.Template
	steps   []string
	mu      sync.Mutex
	prompts []string
	reqs    []engine.Request
	rng     *rand.Rand
}

func (m *rawModel) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	req.Messages = append([]engine.Message(nil), req.Messages...)
	m.reqs = append(m.reqs, req)
	ch := make(chan engine.Event, 256)
	defer close(ch)
	prompt, err := m.tmpl.Render(req.Messages, req.Tools, chat.RenderOptions{AddGenerationPrompt: true, ContentIsAnswer: true})
	if err != nil {
		ch <- engine.Event{Kind: engine.EventError, Err: err}
		return ch
	}
	m.prompts = append(m.prompts, prompt)
	i := len(m.prompts) - 1
	if i >= len(m.steps) {
		ch <- engine.Event{Kind: engine.EventError, Err: fmt.Errorf("rawModel: no step %d", i+1)}
		return ch
	}
	format := chat.ToolFormatFor("qwen35moe", m.tmpl.Source)
	p := chat.NewStreamParser(format, chat.PromptOpensThinking(prompt))
	p.SetTools(req.Tools)
	var segs []chat.Segment
	for s := m.steps[i]; s != ""; {
		n := min(len(s), 1+m.rng.IntN(7))
		segs = append(segs, p.Feed(s[:n])...)
		s = s[n:]
	}
	segs = append(segs, p.Flush()...)
	calls := 0
	for _, sg := range segs {
		switch sg.Kind {
		case chat.SegText:
			ch <- engine.Event{Kind: engine.EventText, Text: sg.Text}
		case chat.SegThinking:
			ch <- engine.Event{Kind: engine.EventThinking, Text: sg.Text}
		case chat.SegToolCall:
			calls++
			ch <- engine.Event{Kind: engine.EventToolCall, ToolCall: &engine.ToolCall{Name: sg.Call.Name, Arguments: sg.Call.Arguments}}
		case chat.SegToolError:
			ch <- engine.Event{Kind: engine.EventToolError, Text: sg.Text, Err: sg.Err}
		}
	}
	stop := engine.StopEOS
	if calls > 0 {
		stop = engine.StopToolCall
	}
	ch <- engine.Event{Kind: engine.EventDone, Stop: stop}
	return ch
}

// TestQwen35XMLToolCallsEndToEnd: a Qwen3.5 model thinks, calls two tools
// in the XML format (an integer parameter among them), then answers; the
// agent runs the calls, and the next prompt holds the turn exactly as the
// model wrote it (so the KV cache reuses it whole), reasoning included,
// which the template drops once a new user query follows. A malformed call
// is answered with an example in the XML format.
func TestQwen35XMLToolCallsEndToEnd(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "engine", "chat", "testdata", "templates", "qwen35.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.New(string(src))
	if err != nil {
		t.Fatal(err)
	}
	step1 := "The user wants line 2 of hello.txt and the listing.\n</think>\n\nLet me look.\n\n" +
		"<tool_call>\n<function=read_file>\n<parameter=path>\nhello.txt\n</parameter>\n<parameter=start_line>\n2\n</parameter>\n</function>\n</tool_call>\n" +
		"<tool_call>\n<function=list>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call>"
	step2 := "I have both.\n</think>\n\nLine 2 is \"second line\"."
	step3 := "Bad call.\n</think>\n\n<tool_call>\n<function=read_file>\n<parameter=path>\na\n</parameter>\n<parameter=path>\nb\n</parameter>\n</function>\n</tool_call>"
	step4 := "\n</think>\n\nSorry."
	m := &rawModel{tmpl: tmpl, steps: []string{step1, step2, step3, step4}, rng: rand.New(rand.NewPCG(1, 2))}
	s := &script{} // only for newTestAgent's signature
	a, out, _ := newTestAgent(t, s, nil)
	a.cfg.Gen = m
	res, err := a.Run(context.Background(), "what is on line 2 of hello.txt?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != StopAnswer || res.Answer != `Line 2 is "second line".` || res.Steps != 2 {
		t.Fatalf("result %+v\n%s", res, out)
	}
	msgs := m.reqs[1].Messages
	asst := msgs[len(msgs)-3]
	if len(asst.ToolCalls) != 2 || asst.ToolCalls[0].Arguments["start_line"] != 2.0 || asst.ToolCalls[1].Name != "list" {
		t.Fatalf("assistant turn %+v", asst)
	}
	if asst.Reasoning != "The user wants line 2 of hello.txt and the listing." || asst.Content != "Let me look." {
		t.Fatalf("reasoning %q content %q", asst.Reasoning, asst.Content)
	}
	if r := msgs[len(msgs)-2].Content; !strings.Contains(r, "second line") || strings.Contains(r, "hi there") {
		t.Fatalf("read_file did not start at line 2: %q", r)
	}
	// The second prompt has the first answer exactly as generated.
	if want := "<|im_start|>assistant\n<think>\n" + step1 + "<|im_end|>\n<|im_start|>user\n<tool_response>\n"; !strings.Contains(m.prompts[1], want) {
		t.Fatalf("prompt 2 does not hold the turn as the model wrote it:\n%s", m.prompts[1])
	}
	res, err = a.Run(context.Background(), "now read a and b")
	if err != nil {
		t.Fatal(err)
	}
	// After a new user query, earlier reasoning is dropped by the template.
	if strings.Contains(m.prompts[2], "The user wants line 2") || !strings.Contains(m.prompts[2], "<|im_start|>assistant\nLine 2 is") {
		t.Fatalf("prompt 3 keeps old reasoning:\n%s", m.prompts[2])
	}
	fb := lastMsg(m.reqs[3]).Content
	if !strings.Contains(fb, "given twice") || !strings.Contains(fb, "<function=read_file>\n<parameter=path>") {
		t.Fatalf("malformed-call feedback %q", fb)
	}
	if res.Answer != "Sorry." {
		t.Fatalf("result %+v", res)
	}
}
