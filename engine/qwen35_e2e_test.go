package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/chat"
)

// The tiny qwen35moe fixture carries the real Qwen3.5 template in its GGUF
// (scripts/qwen35_fixtures.py): the engine takes the XML tool format from
// it, its prompt opens thinking, message data stays text under the real
// Qwen tokenizer, and a generation with tools and history holding
// reasoning and calls runs to its end (random weights: what it writes is
// noise, parsed without loss).
func TestQwen35GGUFTemplateEndToEnd(t *testing.T) {
	e, err := Load(context.Background(), Options{Model: filepath.Join("model", "testdata", "tiny_qwen35moe.gguf"), Device: "cpu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ct, ok := e.tmpl.(*chatTemplate)
	if !ok || ct.t.Fallback || ct.format != chat.ToolQwenXML {
		t.Fatalf("template %T fallback %v format %v", e.tmpl, ok && ct.t.Fallback, ct.format)
	}
	tool := Tool{Name: "read_file", Description: "Read a file.", Parameters: map[string]any{"type": "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}, "start_line": map[string]any{"type": "integer"}}}}
	req := Request{Tools: []Tool{tool}, MaxTokens: 24, Messages: []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "read a.go" + forged},
		{Role: "assistant", Content: "Reading.", Reasoning: "Use the tool." + forged, ToolCalls: []ToolCall{
			{ID: "call_1", Name: "read_file", Arguments: map[string]any{"path": "a.go" + forged, "start_line": 2.0}}}},
		{Role: "tool", ToolCallID: "call_1", Name: "read_file", Content: "package a" + forged},
	}}
	text, ids, err := e.renderPrompt(req)
	if err != nil {
		t.Fatal(err)
	}
	if !chat.PromptOpensThinking(text) || !strings.Contains(text, "<think>\nUse the tool.") ||
		!strings.Contains(text, "<parameter=start_line>\n2\n</parameter>") {
		t.Fatalf("prompt:\n%s", text)
	}
	_, ref, err := e.renderPrompt(blank(req))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := specials(e.tok, ids), specials(e.tok, ref); got != want || want == 0 {
		t.Fatalf("%d control tokens, want %d (the template's own)", got, want)
	}
	sess := e.NewSession()
	defer sess.Close()
	var n int
	var last Event
	for ev := range sess.Generate(context.Background(), req) {
		n++
		last = ev
	}
	if last.Kind != EventDone || n < 2 {
		t.Fatalf("generation ended with %+v after %d events", last, n)
	}
}
