package engine

import (
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
