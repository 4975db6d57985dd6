package engine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/tokenizer"
	"github.com/ftchat/ftchat/prompts"
)

// renderer turns a conversation into the model's prompt text.
type renderer interface {
	Render(msgs []Message, tools []Tool, addGenerationPrompt bool) (string, error)
}

// chatTemplate renders with the model's own Jinja template.
type chatTemplate struct {
	t        *chat.Template
	bos, eos string
	format   chat.ToolFormat
}

func newRenderer(f *gguf.File, tok *tokenizer.Tokenizer) (renderer, string, error) {
	t, err := chat.FromGGUF(f)
	if err != nil {
		return nil, "", err
	}
	ct := &chatTemplate{t: t}
	if tok.BOS() >= 0 {
		ct.bos = tok.Piece(tok.BOS())
	}
	if tok.EOS() >= 0 {
		ct.eos = tok.Piece(tok.EOS())
	}
	arch, _ := f.String("general.architecture")
	src := t.Source
	if t.Fallback {
		src = ""
	}
	ct.format = chat.ToolFormatFor(arch, src)
	name := "gguf"
	if t.Fallback {
		name = "chatml (fallback: the model has no template)"
	}
	return ct, name, nil
}

func (c *chatTemplate) Render(msgs []Message, tools []Tool, addGen bool) (string, error) {
	if len(tools) > 0 && c.format == chat.ToolNone {
		var err error
		if msgs, err = inlineTools(msgs, tools); err != nil {
			return "", err
		}
		tools = nil
	}
	return c.t.Render(msgs, tools, chat.RenderOptions{AddGenerationPrompt: addGen, BOS: c.bos, EOS: c.eos})
}

// inlineTools rewrites a conversation for a template without tool support
// (SmolLM2, Llama 3.0): the tool list (prompts/tools.md) is appended to the
// system message, earlier calls become <tool_call> text in the assistant
// turn, and tool results become user turns wrapped in <tool_response>.
// Calls are then parsed in the Hermes format that text asks for.
func inlineTools(msgs []chat.Message, tools []chat.Tool) ([]chat.Message, error) {
	sigs := make([]string, len(tools))
	for i, t := range tools {
		sig, err := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		sigs[i] = string(sig)
	}
	block, err := prompts.ToolsBlock(sigs)
	if err != nil {
		return nil, err
	}
	out := make([]chat.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		sys := msgs[0]
		sys.Content = strings.TrimRight(sys.Content, "\n") + "\n\n" + block
		out = append(out, sys)
		msgs = msgs[1:]
	} else {
		out = append(out, chat.Message{Role: "system", Content: block})
	}
	for _, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			var c strings.Builder
			c.WriteString(m.Content)
			for _, tc := range m.ToolCalls {
				args, _ := json.Marshal(tc.Arguments)
				if c.Len() > 0 {
					c.WriteString("\n")
				}
				fmt.Fprintf(&c, "<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", tc.Name, args)
			}
			out = append(out, chat.Message{Role: "assistant", Content: c.String()})
		case m.Role == "tool":
			// Consecutive results share one user turn.
			block := "<tool_response>\n" + m.Content + "\n</tool_response>"
			if n := len(out); n > 0 && out[n-1].Role == "user" && strings.HasPrefix(out[n-1].Content, "<tool_response>") {
				out[n-1].Content += "\n" + block
			} else {
				out = append(out, chat.Message{Role: "user", Content: block})
			}
		default:
			out = append(out, m)
		}
	}
	return out, nil
}

// outputParser splits the generated text into answer text, thinking and
// tool calls, in the model family's own tool-call format.
type outputParser struct {
	p     *chat.StreamParser
	calls int
	// stopAtCall ends generation after the first complete call when the
	// tools were inlined: such models were never trained to stop there and
	// go on to invent the tool's answer.
	stopAtCall bool
}

func newOutputParser(r renderer, prompt string, tools bool) *outputParser {
	format, inlined := chat.ToolNone, false
	if ct, ok := r.(*chatTemplate); ok && tools {
		format = ct.format
		if format == chat.ToolNone {
			format, inlined = chat.ToolHermes, true
		}
	}
	return &outputParser{p: chat.NewStreamParser(format, chat.PromptOpensThinking(prompt)), stopAtCall: inlined}
}

func (p *outputParser) feed(s string) []Event {
	if s == "" {
		return nil
	}
	return p.events(p.p.Feed(s))
}

func (p *outputParser) flush() []Event { return p.events(p.p.Flush()) }

func (p *outputParser) events(segs []chat.Segment) []Event {
	var out []Event
	for _, sg := range segs {
		switch sg.Kind {
		case chat.SegText:
			out = append(out, Event{Kind: EventText, Text: sg.Text})
		case chat.SegThinking:
			out = append(out, Event{Kind: EventThinking, Text: sg.Text})
		case chat.SegToolCall:
			p.calls++
			out = append(out, Event{Kind: EventToolCall, ToolCall: &ToolCall{
				ID: fmt.Sprintf("call_%d", p.calls), Name: sg.Call.Name, Arguments: sg.Call.Arguments}})
		case chat.SegToolError:
			out = append(out, Event{Kind: EventToolError, Text: sg.Text, Err: sg.Err})
		}
	}
	return out
}
