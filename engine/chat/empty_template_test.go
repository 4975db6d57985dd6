package chat

import (
	"strings"
	"testing"
)

// anyMeta also answers Value, as *gguf.File does, so that FromGGUF can
// tell a template of the wrong type from a missing one.
type anyMeta map[string]any

func (m anyMeta) String(k string) (string, bool) { s, ok := m[k].(string); return s, ok }
func (m anyMeta) Value(k string) (any, bool)     { v, ok := m[k]; return v, ok }

// TestEmptyChatTemplateFallsBackWithReason guards the empty-template case:
// an empty, blank or non-string tokenizer.chat_template falls back to
// ChatML like a missing one, saying which it was, and a template that
// renders nothing for a conversation is an error naming the key (it used
// to reach the model as an empty prompt: "token id -1 ... outside the
// vocabulary").
func TestEmptyChatTemplateFallsBackWithReason(t *testing.T) {
	fallbacks := []struct {
		name   string
		md     MetadataGetter
		reason string
	}{
		{"missing", anyMeta{}, "the model has no template"},
		{"empty", anyMeta{KeyChatTemplate: ""}, KeyChatTemplate + " is empty"},
		{"blank", anyMeta{KeyChatTemplate: " \n\t"}, KeyChatTemplate + " is empty"},
		{"not a string", anyMeta{KeyChatTemplate: uint32(7)}, KeyChatTemplate + " is a uint32, not a string"},
		{"string array", anyMeta{KeyChatTemplate: []string{"x"}}, "is a []string, not a string"},
	}
	for _, c := range fallbacks {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := FromGGUF(c.md)
			if err != nil || !tmpl.Fallback || !strings.Contains(tmpl.FallbackReason, c.reason) {
				t.Fatalf("got %+v, %v; want ChatML fallback because %q", tmpl, err, c.reason)
			}
			if got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, nil, RenderOptions{AddGenerationPrompt: true}); err != nil || !strings.Contains(got, "<|im_start|>user\nhi") {
				t.Fatalf("fallback render %q, %v", got, err)
			}
		})
	}
	for _, src := range []string{"{{ '' }}", "{% if false %}x{% endif %}", "{% for m in messages %} {% endfor %}"} {
		tmpl, err := FromGGUF(anyMeta{KeyChatTemplate: src})
		if err != nil || tmpl.Fallback {
			t.Fatalf("%q: %+v, %v", src, tmpl, err)
		}
		_, err = tmpl.Render([]Message{{Role: "user", Content: "hi"}}, nil, RenderOptions{AddGenerationPrompt: true})
		if err == nil || !strings.Contains(err.Error(), "empty prompt") || !strings.Contains(err.Error(), KeyChatTemplate) {
			t.Errorf("%q: render error %v, want one saying the prompt is empty and naming %s", src, err, KeyChatTemplate)
		}
	}
}
