package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/chat"
)

// TestConversationThroughRealTemplates checks that the conversation the
// loop builds (assistant ToolCalls, role "tool" results, tools in
// Request.Tools) renders through real tool-aware templates (Qwen3's from the
// chat package's fixtures, and ftchat's ChatML fallback) with the tools, the
// call and its result in place. Templates without a tool format are the
// engine's to handle (it inlines the tools); TestRealEngine covers SmolLM2's.
func TestConversationThroughRealTemplates(t *testing.T) {
	cases := []struct {
		file, arch string
		format     chat.ToolFormat
		want       []string
	}{
		{"tokenizer_config_qwen3.json", "qwen3", chat.ToolHermes, []string{
			"<tools>\n" + `{"type": "function", "function": {"name": "read_file"`,
			"<tool_call>\n" + `{"name": "read_file", "arguments": {"path": "hello.txt"}}` + "\n</tool_call>",
			"<tool_response>\nhello.txt (lines 1-2 of 2)\nhi there\nsecond line\n\n</tool_response>",
		}},
		{"", "", chat.ToolHermes, []string{ // ftchat's ChatML fallback for models without a template
			"<tools>\n" + `{"type": "function", "function": {"name": "read_file"`,
			"<tool_call>\n" + `{"name": "read_file", "arguments": {"path": "hello.txt"}}` + "\n</tool_call>",
			"<|im_start|>user\n<tool_response>\nhello.txt (lines 1-2 of 2)\nhi there\nsecond line\n\n</tool_response><|im_end|>",
		}},
	}
	for _, c := range cases {
		name := c.arch
		if name == "" {
			name = "chatml-fallback"
		}
		t.Run(name, func(t *testing.T) {
			tmpl, src := chat.ChatML(), ""
			if c.file != "" {
				var err error
				if tmpl, err = chat.LoadTokenizerConfig("../engine/chat/testdata/" + c.file); err != nil {
					t.Fatal(err)
				}
				src = tmpl.Source
			}
			if f := chat.ToolFormatFor(c.arch, src); f != c.format {
				t.Fatalf("format %v, want %v", f, c.format)
			}
			s := &script{steps: [][]engine.Event{
				{call("read_file", map[string]any{"path": "hello.txt"}), done(engine.StopToolCall)},
				answer("It says hi there."),
			}}
			a, _, _ := newTestAgent(t, s, nil)
			if _, err := a.Run(context.Background(), "what is in hello.txt?"); err != nil {
				t.Fatal(err)
			}
			req := s.reqs[1]
			// engine.Message and engine.Tool are the chat package's types.
			out, err := tmpl.Render(req.Messages, req.Tools, chat.RenderOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("rendered prompt lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
