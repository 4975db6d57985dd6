package engine

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/tokenizer"
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
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			cm[i].ToolCalls = append(cm[i].ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
	}
	var ct []chat.Tool
	for _, t := range tools {
		ct = append(ct, chat.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return c.t.Render(cm, ct, chat.RenderOptions{AddGenerationPrompt: addGen, BOS: c.bos, EOS: c.eos})
}

// outputParser splits the generated text into answer text, thinking and
// tool calls, in the model family's own tool-call format.
type outputParser struct {
	p     *chat.StreamParser
	calls int
}

func newOutputParser(r renderer, prompt string, tools bool) *outputParser {
	format := chat.ToolNone
	if ct, ok := r.(*chatTemplate); ok && tools {
		format = ct.format
	}
	return &outputParser{p: chat.NewStreamParser(format, chat.PromptOpensThinking(prompt))}
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
