package chat

import (
	"path/filepath"
	"testing"
)

// qwen35Case is one conversation of testdata/qwen35_cases.json, rendered
// by transformers (scripts/chat_qwen35_fixtures.py).
type qwen35Case struct {
	Name                string       `json:"name"`
	Conversation        conversation `json:"conversation"`
	AddGenerationPrompt bool         `json:"add_generation_prompt"`
	EnableThinking      *bool        `json:"enable_thinking"`
	ContentIsAnswer     bool         `json:"content_is_answer"`
	Out                 *string      `json:"out"`
	Error               *string      `json:"error"`
}

func loadQwen35Cases(t *testing.T, name string) []qwen35Case {
	t.Helper()
	var cases []qwen35Case
	readJSON(t, filepath.Join("testdata", name+"_cases.json"), &cases)
	if len(cases) < 40 {
		t.Fatalf("only %d %s cases", len(cases), name)
	}
	return cases
}

// TestQwen35MatchesTransformers renders the Qwen3.5 template (the model's
// own, from llama.cpp's copy of Qwen/Qwen3.5-4B) for system prompts,
// multi-turn chats, reasoning in reasoning_content and in <think> content,
// tools, assistant tool calls with typed arguments, tool responses and
// enable_thinking on and off, and compares byte for byte with transformers.
// Qwen3-Coder's template, the other one of the XML tool-call family, gets
// the same conversations.
func TestQwen35MatchesTransformers(t *testing.T) {
	for _, name := range []string{"qwen35", "qwen3coder"} {
		tmpl := loadTemplate(t, name)
		if f := ToolFormatFor("", tmpl.Source); f != ToolQwenXML {
			t.Errorf("%s: tool format %v", name, f)
		}
		for _, c := range loadQwen35Cases(t, name) {
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				got, err := tmpl.Render(c.Conversation.Messages, c.Conversation.Tools, RenderOptions{
					AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking,
					ContentIsAnswer: c.ContentIsAnswer,
				})
				switch {
				case c.Out == nil && err == nil:
					t.Fatalf("transformers failed (%s), we rendered", *c.Error)
				case c.Out != nil && err != nil:
					t.Fatal(err)
				case c.Out != nil && got != *c.Out:
					t.Fatalf("render differs from transformers\n%s", firstDiff(got, *c.Out))
				}
			})
		}
	}
}
