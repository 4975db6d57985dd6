package engine

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/sample"
)

// TestForcedArgsSchema: keywords the JSON constraint cannot enforce are
// dropped and the rest of the schema still holds; what cannot compile
// even so accepts any object.
func TestForcedArgsSchema(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]any
		doc    string
		ok     bool
	}{
		{"nil params", nil, `{"x":[1]}`, true},
		{"minimum dropped, type kept", map[string]any{"type": "object", "properties": map[string]any{
			"n": map[string]any{"type": "integer", "minimum": 3.0}}, "required": []any{"n"}}, `{"n":1}`, true},
		{"type still enforced", map[string]any{"type": "object", "properties": map[string]any{
			"n": map[string]any{"type": "integer", "minimum": 3.0}}, "required": []any{"n"}}, `{"n":"one"}`, false},
		{"required still enforced", map[string]any{"type": "object", "properties": map[string]any{
			"s": map[string]any{"type": "string", "maxLength": 4.0, "format": "uri"}}, "required": []any{"s"}}, `{}`, false},
		{"nested items", map[string]any{"type": "object", "properties": map[string]any{
			"l": map[string]any{"type": "array", "minItems": 1.0, "items": map[string]any{"type": "string", "pattern": "^a"}}}}, `{"l":["b"]}`, true},
		{"anyOf gives any object", map[string]any{"anyOf": []any{map[string]any{"type": "object"}}}, `{"z":true}`, true},
	}
	for _, tc := range cases {
		s := forcedArgsSchema(tc.params)
		n, complete := sample.MatchJSON(s, []byte(tc.doc))
		if got := n == len(tc.doc) && complete; got != tc.ok {
			t.Errorf("%s: %s accepted %v, want %v", tc.name, tc.doc, got, tc.ok)
		}
	}
	// The caller's schema is left as it was.
	p := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 3.0}}}
	forcedArgsSchema(p)
	if _, ok := p["properties"].(map[string]any)["n"].(map[string]any)["minimum"]; !ok {
		t.Error("forcedArgsSchema changed the tool's schema")
	}
}

// TestForcedCallPrefixMatchesTemplate: the opening a forced call is held
// to is how the model's own template writes a call of that tool in the
// history, for each call format.
func TestForcedCallPrefixMatchesTemplate(t *testing.T) {
	conv := []Message{{Role: "user", Content: "Read a"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "read_file", Arguments: map[string]any{"path": "a"}}}},
		{Role: "tool", ToolCallID: "c1", Content: "text"}}
	for _, file := range []string{"qwen3.jinja", "qwen35.jinja", "qwen3coder.jinja", "llama3.jinja", "smollm2.jinja"} {
		ct := templateFrom(t, file)
		ct.bos, ct.eos = "<s>", "</s>"
		e := &Engine{tmpl: ct}
		choices, err := e.forcedCallChoices([]Tool{readFileTool}, "read_file")
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		text, err := ct.Render(conv, []Tool{readFileTool}, true)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(choices) != 1 || !strings.Contains(text, choices[0].Prefix) {
			t.Errorf("%s (%v): the template's call does not begin with %q:\n%s", file, ct.format, choices[0].Prefix, text)
		}
	}
	if _, err := (&Engine{tmpl: templateFrom(t, "qwen3.jinja")}).forcedCallChoices([]Tool{readFileTool}, "write_file"); err == nil || !strings.Contains(err.Error(), "write_file") {
		t.Errorf("unknown tool: %v", err)
	}
}
