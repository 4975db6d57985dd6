package engine

import (
	"os"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/chat"
)

func templateFrom(t *testing.T, file string) *chatTemplate {
	t.Helper()
	src, err := os.ReadFile("chat/testdata/templates/" + file)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := chat.New(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return &chatTemplate{t: ct, format: chat.ToolFormatFor("", string(src))}
}

var readFileTool = Tool{Name: "read_file", Description: "Read a file", Parameters: map[string]any{
	"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}}}

func TestToolsInlinedForTemplatesWithoutToolSupport(t *testing.T) {
	ct := templateFrom(t, "smollm2.jinja")
	if ct.format != chat.ToolNone {
		t.Fatalf("SmolLM2's template should have no tool format, got %s", ct.format)
	}
	msgs := []Message{
		{Role: "system", Content: "You are a coding agent."},
		{Role: "user", Content: "Show main.go"},
		{Role: "assistant", ToolCalls: []ToolCall{{Name: "read_file", Arguments: map[string]any{"path": "main.go"}}}},
		{Role: "tool", Name: "read_file", Content: "package main"},
	}
	out, err := ct.Render(msgs, []Tool{readFileTool}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"<|im_start|>system\nYou are a coding agent.\n\n# Tools",
		`"name":"read_file"`,
		"To call a function, reply with only a <tool_call> block",
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\":\"main.go\"}}\n</tool_call><|im_end|>",
		"<|im_start|>user\n<tool_response>\npackage main\n</tool_response><|im_end|>",
		"<|im_start|>assistant\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, out)
		}
	}
	// Without tools the template renders as the model's own.
	plain, err := ct.Render(msgs[:2], nil, true)
	if err != nil || strings.Contains(plain, "# Tools") {
		t.Fatalf("tools leaked into a plain render: %v\n%s", err, plain)
	}
	// Calls are parsed in the Hermes format the inlined prompt asked for.
	p := newOutputParser(ct, out, true)
	evs := append(p.feed("Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.go\"}}\n</tool_call>"), p.flush()...)
	var calls []*ToolCall
	for _, ev := range evs {
		if ev.Kind == EventToolCall {
			calls = append(calls, ev.ToolCall)
		}
	}
	if len(calls) != 1 || calls[0].Name != "read_file" || calls[0].Arguments["path"] != "a.go" || calls[0].ID == "" {
		t.Fatalf("calls = %+v (events %+v)", calls, evs)
	}
}

func TestToolsUseTheTemplateWhenItSupportsThem(t *testing.T) {
	ct := templateFrom(t, "qwen3.jinja")
	if ct.format != chat.ToolHermes {
		t.Fatalf("qwen3 format %s", ct.format)
	}
	out, err := ct.Render([]Message{{Role: "user", Content: "hi"}}, []Tool{readFileTool}, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "reply with only a <tool_call> block") {
		t.Fatal("ftchat's inlined tool text used although the template supports tools")
	}
	if !strings.Contains(out, "read_file") {
		t.Fatal("template did not render the tool")
	}
	p := newOutputParser(ct, out, true)
	evs := append(p.feed("<think>\nhmm\n</think>\n\nHello"), p.flush()...)
	kinds := map[EventKind]string{}
	for _, ev := range evs {
		kinds[ev.Kind] += ev.Text
	}
	if kinds[EventThinking] != "hmm" || kinds[EventText] != "Hello" {
		t.Fatalf("events %+v", evs)
	}
}
