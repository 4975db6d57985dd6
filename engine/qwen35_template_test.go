package engine

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/chat"
)

// The Qwen3.5 template splits <think> out of assistant contents, branches
// on whether a user turn is only a <tool_response>, and trims contents:
// RenderSpans must still accept the conversations ftchat builds and give
// the prompt Render gives (which matches transformers: engine/chat's
// TestQwen35MatchesTransformers).
func TestQwen35RenderSpans(t *testing.T) {
	for _, name := range []string{"qwen35", "qwen3coder"} {
		t.Run(name, func(t *testing.T) { testXMLFamilyRenderSpans(t, name) })
	}
}

func testXMLFamilyRenderSpans(t *testing.T, name string) {
	ct := templateFrom(t, name+".jinja")
	if ct.format != chat.ToolQwenXML {
		t.Fatalf("format %v, want qwen-xml", ct.format)
	}
	data, err := os.ReadFile("chat/testdata/" + name + "_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name         string `json:"name"`
		Conversation struct {
			Messages []Message `json:"messages"`
			Tools    []Tool    `json:"tools"`
		} `json:"conversation"`
		AddGenerationPrompt bool    `json:"add_generation_prompt"`
		EnableThinking      *bool   `json:"enable_thinking"`
		ContentIsAnswer     bool    `json:"content_is_answer"`
		Out                 *string `json:"out"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Out == nil || c.EnableThinking != nil {
			continue
		}
		msgs, tools := c.Conversation.Messages, c.Conversation.Tools
		want, err := ct.Render(msgs, tools, c.AddGenerationPrompt)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if c.ContentIsAnswer && want != *c.Out {
			t.Errorf("%s: Render differs from transformers", c.Name)
		}
		got, spans, err := ct.RenderSpans(msgs, tools, c.AddGenerationPrompt)
		if err != nil {
			t.Errorf("%s: refused: %v", c.Name, err)
			continue
		}
		if got != want {
			t.Errorf("%s: RenderSpans gives a different prompt", c.Name)
		}
		for _, sp := range spans {
			if sp[0] < 0 || sp[1] > len(got) || sp[0] > sp[1] {
				t.Fatalf("%s: bad span %v", c.Name, sp)
			}
		}
	}
}

// Message data of every kind, thinking included, stays text with the
// Qwen3.5 template: the forged turns in it give no control tokens.
func TestQwen35DataNeverBecomesControlTokens(t *testing.T) {
	e := load(t, Options{})
	tok := e.Tokenizer()
	ct := templateFrom(t, "qwen35.jinja")
	ct.tok = tok
	te := &Engine{tmpl: ct, tok: tok}
	tools := []Tool{readFileTool}
	req := Request{Tools: tools, Messages: []Message{
		{Role: "system", Content: forged},
		{Role: "user", Content: forged},
		{Role: "assistant", Content: forged + "</think>" + forged, Reasoning: forged, ToolCalls: []ToolCall{
			{ID: forged, Name: "read_file", Arguments: map[string]any{"path": forged}}}},
		{Role: "tool", Name: "read_file", ToolCallID: forged, Content: forged},
		{Role: "assistant", Content: forged, Reasoning: forged},
		{Role: "user", Content: forged},
		{Role: "assistant", Content: "<think>\n" + forged + "\n</think>\n\n" + forged, Reasoning: forged, ToolCalls: []ToolCall{
			{Name: "read_file", Arguments: map[string]any{"path": forged, "n": 3.0, "ok": true,
				"opts": map[string]any{forged: []any{forged, 1.5, nil}}}}}},
		{Role: "tool", Content: forged},
	}}
	text, ids, err := te.renderPrompt(req)
	if err != nil {
		t.Fatal(err)
	}
	_, ref, err := te.renderPrompt(blank(req))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := specials(tok, ids), specials(tok, ref); got != want {
		t.Errorf("%d control tokens, want %d (the template's own)", got, want)
	}
	if tok.Decode(ids) != text {
		t.Error("decoding does not give the prompt")
	}
	// The answer that holds </think> is rendered whole, not split.
	if !strings.Contains(text, forged+"</think>"+forged) {
		t.Error("an answer holding </think> was split by the template")
	}
}

// The engine's output parser for a Qwen3.5 prompt: the answer starts inside
// the thinking the template opened, and XML calls come out as calls whose
// values the request's tool schemas typed. With enable_thinking false the
// prompt closes the block itself and the answer is text.
func TestQwen35OutputParser(t *testing.T) {
	ct := templateFrom(t, "qwen35.jinja")
	tool := Tool{Name: "read_file", Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"path": map[string]any{"type": "string"}, "start_line": map[string]any{"type": "integer"}}}}
	msgs := []Message{{Role: "user", Content: "read a.go from line 3"}}
	prompt, err := ct.Render(msgs, []Tool{tool}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(prompt, "<|im_start|>assistant\n<think>\n") {
		t.Fatalf("prompt ends %q", prompt[max(0, len(prompt)-40):])
	}
	p := newOutputParser(ct, prompt, true, tool)
	out := "Read it.\n</think>\n\nOK.\n\n<tool_call>\n<function=read_file>\n<parameter=path>\na.go\n</parameter>\n<parameter=start_line>\n3\n</parameter>\n</function>\n</tool_call>"
	var evs []Event
	for i := 0; i < len(out); i += 5 {
		evs = append(evs, p.feed(out[i:min(len(out), i+5)])...)
	}
	evs = append(evs, p.flush()...)
	var kinds []EventKind
	var call *ToolCall
	for _, ev := range evs {
		if n := len(kinds); n == 0 || kinds[n-1] != ev.Kind {
			kinds = append(kinds, ev.Kind)
		}
		if ev.Kind == EventToolCall {
			call = ev.ToolCall
		}
	}
	if want := []EventKind{EventThinking, EventText, EventToolCall}; !slices.Equal(kinds, want) {
		t.Fatalf("event kinds %v, want %v", kinds, want)
	}
	if call.Name != "read_file" || call.Arguments["path"] != "a.go" || call.Arguments["start_line"] != 3.0 || call.ID == "" {
		t.Fatalf("call %+v", call)
	}
	off := false
	pr, err := ct.t.Render(msgs, nil, chat.RenderOptions{AddGenerationPrompt: true, EnableThinking: &off})
	if err != nil {
		t.Fatal(err)
	}
	if chat.PromptOpensThinking(pr) {
		t.Fatalf("enable_thinking=false prompt %q opens thinking", pr)
	}
}
