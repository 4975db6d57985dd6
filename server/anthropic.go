package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ftchat/ftchat/engine"
)

// Anthropic messages: request types.
type anRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []anMessage     `json:"messages"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []anTool        `json:"tools"`
	ToolChoice    *anToolChoice   `json:"tool_choice"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	OutputConfig *struct {
		Format json.RawMessage `json:"format"`
	} `json:"output_config"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type anTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// msgParams is a parsed, checked messages request.
type msgParams struct {
	model  string
	stream bool
	req    engine.BatchRequest
}

// parseMessagesRequest reads and checks a messages body. countOnly is
// count_tokens, where max_tokens is not required.
func parseMessagesRequest(body []byte, lim Limits, countOnly bool) (*msgParams, *apiError) {
	var r anRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	p := &msgParams{model: r.Model, stream: r.Stream}
	if r.MaxTokens == nil && !countOnly {
		return nil, badRequest("max_tokens", "max_tokens: field required")
	}
	mt, err := checkMaxTokens(r.MaxTokens, "max_tokens")
	if err != nil {
		return nil, err
	}
	if err := checkRange(r.Temperature, "temperature", 0, 1); err != nil {
		return nil, err
	}
	if err := checkRange(r.TopP, "top_p", 0, 1); err != nil {
		return nil, err
	}
	if r.TopK != nil && *r.TopK < 0 {
		return nil, badRequest("top_k", "top_k %d: must be 0 or more", *r.TopK)
	}
	if r.Thinking != nil && r.Thinking.Type != "" && r.Thinking.Type != "disabled" {
		return nil, badRequest("thinking", "thinking %q is not supported: the model's template decides whether it thinks; its reasoning comes back as thinking blocks", truncate(r.Thinking.Type, 40))
	}
	if oc := r.OutputConfig; oc != nil && len(oc.Format) > 0 && string(oc.Format) != "null" {
		return nil, badRequest("output_config.format", "output_config.format is not supported: this server has no constrained decoding, so it cannot guarantee JSON; ask for JSON in the prompt and parse the text")
	}
	stops, err := lim.checkStops(r.StopSequences, "stop_sequences")
	if err != nil {
		return nil, err
	}
	useTools := true
	var force *engine.ForceCall
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "", "auto":
		case "none":
			useTools = false
		case "any":
			force = &engine.ForceCall{}
		case "tool":
			if tc.Name == "" {
				return nil, badRequest("tool_choice.name", "tool_choice type \"tool\" needs a name")
			}
			force = &engine.ForceCall{Name: tc.Name}
		default:
			return nil, badRequest("tool_choice", "tool_choice type %q: use \"auto\", \"any\", \"tool\" or \"none\"", truncate(tc.Type, 40))
		}
	}
	if len(r.Tools) > lim.MaxTools {
		return nil, badRequest("tools", "%d tools; at most %d", len(r.Tools), lim.MaxTools)
	}
	var tools []engine.Tool
	for i, t := range r.Tools {
		param := fmt.Sprintf("tools.%d", i)
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(param+".type", "%s.type %q: only custom (client) tools are supported", param, truncate(t.Type, 40))
		}
		if err := toolName(t.Name, param+".name"); err != nil {
			return nil, err
		}
		schema, err := schemaObject(t.InputSchema, param+".input_schema")
		if err != nil {
			return nil, err
		}
		tools = append(tools, engine.Tool{Name: t.Name, Description: t.Description, Parameters: schema})
	}
	if !useTools {
		tools = nil
	}
	if aerr := checkForceCall(force, tools, "tool_choice", false); aerr != nil {
		return nil, aerr
	}

	var msgs []engine.Message
	if len(r.System) > 0 && string(r.System) != "null" {
		sys, err := anText(r.System, "system")
		if err != nil {
			return nil, err
		}
		if sys != "" {
			msgs = append(msgs, engine.Message{Role: "system", Content: sys})
		}
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	if len(r.Messages) > lim.MaxMessages {
		return nil, badRequest("messages", "%d messages; at most %d", len(r.Messages), lim.MaxMessages)
	}
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages.%d", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(param+".role", "%s.role %q: must be user or assistant (the system prompt is the top-level system field)", param, truncate(m.Role, 40))
		}
		out, err := anConvert(m, param)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, out...)
	}
	p.req.Messages, p.req.Tools, p.req.MaxTokens = msgs, tools, mt
	p.req.ForceCall = force
	p.req.Sampling = sampling(r.Temperature, r.TopP, r.TopK, nil)
	p.req.Sampling.Stop = stops
	return p, nil
}

// anBlocks reads content: a string (one text block) or an array of blocks.
func anBlocks(raw json.RawMessage, param string) ([]anBlock, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest(param, "%s: field required", param)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []anBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest(param, "%s: expected a string or an array of content blocks", param)
	}
	return blocks, nil
}

// anText reads content that may hold only text blocks (system, tool results).
func anText(raw json.RawMessage, param string) (string, *apiError) {
	blocks, err := anBlocks(raw, param)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s.%d.type", param, i), "%s.%d: block type %q is not supported here (text only)", param, i, truncate(bl.Type, 40))
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// anConvert turns one Anthropic message into engine messages: tool_result
// blocks become tool messages, tool_use blocks the assistant's tool calls.
func anConvert(m anMessage, param string) ([]engine.Message, *apiError) {
	blocks, err := anBlocks(m.Content, param+".content")
	if err != nil {
		return nil, err
	}
	var out []engine.Message
	cur := engine.Message{Role: m.Role}
	flush := func() {
		if cur.Content != "" || len(cur.ToolCalls) > 0 || cur.Reasoning != "" {
			out = append(out, cur)
		}
		cur = engine.Message{Role: m.Role}
	}
	for i, bl := range blocks {
		bp := fmt.Sprintf("%s.content.%d", param, i)
		switch {
		case bl.Type == "text":
			if len(cur.ToolCalls) > 0 {
				flush()
			}
			cur.Content += bl.Text
		case bl.Type == "thinking" && m.Role == "assistant":
			cur.Reasoning += bl.Thinking
		case bl.Type == "redacted_thinking" && m.Role == "assistant":
		case bl.Type == "tool_use" && m.Role == "assistant":
			if bl.Name == "" {
				return nil, badRequest(bp+".name", "%s.name is required", bp)
			}
			args := map[string]any{}
			if len(bl.Input) > 0 && string(bl.Input) != "null" {
				if err := json.Unmarshal(bl.Input, &args); err != nil {
					return nil, badRequest(bp+".input", "%s.input: expected an object", bp)
				}
			}
			cur.ToolCalls = append(cur.ToolCalls, engine.ToolCall{ID: bl.ID, Name: bl.Name, Arguments: args})
		case bl.Type == "tool_result" && m.Role == "user":
			flush()
			text := ""
			if len(bl.Content) > 0 && string(bl.Content) != "null" {
				var err *apiError
				if text, err = anText(bl.Content, bp+".content"); err != nil {
					return nil, err
				}
			}
			if bl.IsError {
				text = "Error: " + text
			}
			out = append(out, engine.Message{Role: "tool", Content: text, ToolCallID: bl.ToolUseID})
		default:
			return nil, badRequest(bp+".type", "%s: block type %q is not supported in a %s message (text, tool_use, tool_result, thinking)", bp, truncate(bl.Type, 40), m.Role)
		}
	}
	flush()
	if len(out) == 0 {
		out = append(out, engine.Message{Role: m.Role})
	}
	return out, nil
}

func (s *Server) parseMessages(w http.ResponseWriter, r *http.Request, countOnly bool) (*msgParams, bool) {
	body, aerr := s.readBody(w, r)
	if aerr == nil {
		var p *msgParams
		if p, aerr = parseMessagesRequest(body, s.lim, countOnly); aerr == nil {
			if aerr = s.resolveModel(p.model); aerr == nil {
				return p, true
			}
		}
	}
	writeError(w, anthropicStyle, aerr)
	return nil, false
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseMessages(w, r, true)
	if !ok {
		return
	}
	n, err := s.cfg.Engine.PromptTokens(p.req.Request)
	if err != nil {
		writeError(w, anthropicStyle, badRequest("messages", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": n})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseMessages(w, r, false)
	if !ok {
		return
	}
	st, aerr := s.start(r, p.req)
	if aerr != nil {
		writeError(w, anthropicStyle, aerr)
		return
	}
	m := &anMessageOut{s: s, st: st, id: newID("msg_")}
	if p.stream {
		m.stream(w)
		return
	}
	m.complete(w)
}

type anMessageOut struct {
	s  *Server
	st *started
	id string
}

func stopReason(stop engine.StopReason) string {
	switch stop {
	case engine.StopMaxTokens, engine.StopPoolFull:
		return "max_tokens"
	case engine.StopToolCall:
		return "tool_use"
	case engine.StopString:
		return "stop_sequence"
	}
	return "end_turn"
}

// anUsage follows Anthropic: input_tokens excludes the cache reads.
func anUsage(u engine.Usage, final bool) map[string]any {
	out := map[string]any{
		"input_tokens": u.PromptTokens - u.CachedTokens, "cache_read_input_tokens": u.CachedTokens,
		"cache_creation_input_tokens": 0, "output_tokens": u.CompletionTokens,
	}
	if !final {
		out["output_tokens"] = 0
	}
	return out
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func toolUse(tc *engine.ToolCall) map[string]any {
	args := tc.Arguments
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"type": "tool_use", "id": newID("toolu_"), "name": tc.Name, "input": args}
}

func (m *anMessageOut) message(content []any, stop, stopSeq any, u engine.Usage, final bool) map[string]any {
	return map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.s.cfg.ModelID, "content": content,
		"stop_reason": stop, "stop_sequence": stopSeq, "usage": anUsage(u, final),
	}
}

func (m *anMessageOut) complete(w http.ResponseWriter) {
	content := []any{}
	var text, thinking strings.Builder
	flushText := func() {
		if thinking.Len() > 0 {
			content = append(content, map[string]any{"type": "thinking", "thinking": thinking.String(), "signature": ""})
			thinking.Reset()
		}
		if text.Len() > 0 {
			content = append(content, map[string]any{"type": "text", "text": text.String()})
			text.Reset()
		}
	}
	var done engine.BatchEvent
	for ev := range m.st.events {
		switch ev.Kind {
		case engine.EventText, engine.EventToolError:
			text.WriteString(ev.Text)
		case engine.EventThinking:
			thinking.WriteString(ev.Text)
		case engine.EventToolCall:
			flushText()
			content = append(content, toolUse(ev.ToolCall))
		case engine.EventError:
			writeError(w, anthropicStyle, runtimeError(ev.Err))
			return
		case engine.EventDone:
			done = ev
		}
	}
	if done.Kind != engine.EventDone || done.Stop == engine.StopCancelled {
		return
	}
	flushText()
	writeJSON(w, http.StatusOK, m.message(content, stopReason(done.Stop), nullable(done.StopSequence), done.Usage, true))
}

func (m *anMessageOut) stream(w http.ResponseWriter) {
	out := newSSE(w)
	start := engine.Usage{PromptTokens: m.st.prompt, CachedTokens: m.st.cached}
	if out.send("message_start", map[string]any{"type": "message_start", "message": m.message([]any{}, nil, nil, start, false)}) != nil {
		return
	}
	if out.send("ping", map[string]any{"type": "ping"}) != nil {
		return
	}
	index, open := 0, "" // the open content block's type, "" for none
	closeBlock := func() error {
		if open == "" {
			return nil
		}
		open = ""
		err := out.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
		return err
	}
	openBlock := func(block map[string]any) error {
		if err := closeBlock(); err != nil {
			return err
		}
		open = block["type"].(string)
		return out.send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": block})
	}
	delta := func(d map[string]any) error {
		return out.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d})
	}
	calls, streamed, streamedArgs := 0, -1, 0 // as in the OpenAI stream
	for ev := range m.st.events {
		var err error
		switch ev.Kind {
		case engine.EventText, engine.EventToolError:
			if open != "text" {
				err = openBlock(map[string]any{"type": "text", "text": ""})
			}
			if err == nil {
				err = delta(map[string]any{"type": "text_delta", "text": ev.Text})
			}
		case engine.EventThinking:
			if open != "thinking" {
				err = openBlock(map[string]any{"type": "thinking", "thinking": "", "signature": ""})
			}
			if err == nil {
				err = delta(map[string]any{"type": "thinking_delta", "thinking": ev.Text})
			}
		case engine.EventToolCallDelta:
			d := ev.CallDelta
			if d.Name != "" {
				streamed, streamedArgs = d.Index, 0
				err = openBlock(map[string]any{"type": "tool_use", "id": newID("toolu_"), "name": d.Name, "input": map[string]any{}})
			}
			if err == nil && d.Index == streamed && open == "tool_use" && d.Args != "" {
				streamedArgs += len(d.Args)
				err = delta(map[string]any{"type": "input_json_delta", "partial_json": d.Args})
			}
		case engine.EventToolCall:
			tu := toolUse(ev.ToolCall)
			args, _ := json.Marshal(tu["input"])
			tu["input"] = map[string]any{}
			if streamed != calls || open != "tool_use" {
				err = openBlock(tu)
				streamedArgs = 0
			}
			if err == nil && streamedArgs == 0 {
				err = delta(map[string]any{"type": "input_json_delta", "partial_json": string(args)})
			}
			if err == nil {
				err = closeBlock()
			}
			calls++
		case engine.EventError:
			out.send("error", (runtimeError(ev.Err)).body(anthropicStyle))
			return
		case engine.EventDone:
			if ev.Stop == engine.StopCancelled || closeBlock() != nil {
				return
			}
			if out.send("message_delta", map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": stopReason(ev.Stop), "stop_sequence": nullable(ev.StopSequence)},
				"usage": anUsage(ev.Usage, true)}) != nil {
				return
			}
			out.send("message_stop", map[string]any{"type": "message_stop"})
			return
		}
		if err != nil {
			return
		}
	}
}
