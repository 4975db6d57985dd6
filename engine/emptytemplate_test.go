package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestEmptyChatTemplateIsNamed: a model whose chat template is empty runs
// on the ChatML fallback and its info says so; one whose template renders
// nothing fails each turn with a message about the template, not about
// token id -1.
func TestEmptyChatTemplateIsNamed(t *testing.T) {
	base := synthModel(t, "qwen3-tiny", gguf.F32)
	cases := []struct {
		src, info, turnErr string
	}{
		{"", "tokenizer.chat_template is empty", ""},
		{" \n", "tokenizer.chat_template is empty", ""},
		{"{{ '' }}", "gguf", "empty prompt"},
	}
	for _, c := range cases {
		p := rewrite(t, base, func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return setKV(kv, "tokenizer.chat_template", c.src), ts
		})
		e, err := Load(context.Background(), Options{Model: p, Device: "cpu", KVTokens: 1024}, nil)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		if !strings.Contains(e.Info().Template, c.info) {
			t.Errorf("%q: template %q, want it to mention %q", c.src, e.Info().Template, c.info)
		}
		var last Event
		for ev := range e.NewSession().Generate(context.Background(), Request{Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 1}) {
			last = ev
		}
		if c.turnErr == "" && last.Err != nil || c.turnErr != "" && (last.Err == nil || !strings.Contains(last.Err.Error(), c.turnErr)) {
			t.Errorf("%q: turn ended with %v, want %q", c.src, last.Err, c.turnErr)
		}
		e.Close()
	}
}
