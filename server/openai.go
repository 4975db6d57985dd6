package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/sample"
)

// OpenAI chat completions: request types.
type oaChatRequest struct {
	Model               string            `json:"model"`
	Messages            []oaMessage       `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *oaStreamOptions  `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Seed                *int64            `json:"seed"`
	Stop                json.RawMessage   `json:"stop"`
	Tools               []oaTool          `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ResponseFormat      *oaResponseFormat `json:"response_format"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	N                   *int              `json:"n"`
	FrequencyPenalty    *float64          `json:"frequency_penalty"`
	PresencePenalty     *float64          `json:"presence_penalty"`
}

type oaStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaResponseFormat struct {
	Type       string        `json:"type"`
	JSONSchema *oaJSONSchema `json:"json_schema"`
}

type oaJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []oaToolCall    `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Reasoning  string          `json:"reasoning_content"`
}

type oaContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// responseFormat compiles response_format into the answer's JSON
// constraint (nil for text).
func responseFormat(rf *oaResponseFormat) (*sample.Schema, *apiError) {
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return sample.AnyJSONObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || string(rf.JSONSchema.Schema) == "null" {
			return nil, badRequest("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema (a JSON Schema object)")
		}
		var m map[string]any
		if err := json.Unmarshal(rf.JSONSchema.Schema, &m); err != nil {
			return nil, badRequest("response_format.json_schema.schema", "response_format.json_schema.schema: expected a JSON Schema object")
		}
		js, err := sample.CompileJSONSchema(m)
		if err != nil {
			return nil, badRequest("response_format.json_schema.schema", "%s", err.Error())
		}
		return js, nil
	}
	return nil, badRequest("response_format", "response_format type %q: supported are text, json_object and json_schema", truncate(rf.Type, 40))
}

// checkForceCall checks a forced tool call (tool_choice required or
// named) against the request's tools: there must be tools, a named one
// must be among them, and a JSON response format cannot hold a call.
func checkForceCall(force *engine.ForceCall, tools []engine.Tool, param string, jsonFormat bool) *apiError {
	if force == nil {
		return nil
	}
	if len(tools) == 0 {
		return badRequest(param, "%s forces a tool call but the request has no tools", param)
	}
	if jsonFormat {
		return badRequest(param, "%s forces a tool call, which a JSON response format cannot hold", param)
	}
	if force.Name == "" {
		return nil
	}
	for _, t := range tools {
		if t.Name == force.Name {
			return nil
		}
	}
	return badRequest(param, "%s names the tool %q, which is not among the request's tools", param, truncate(force.Name, 64))
}

// chatParams is a parsed, checked chat completions request.
type chatParams struct {
	model        string
	stream       bool
	includeUsage bool
	req          engine.BatchRequest
}

// parseChatRequest reads and checks a chat completions body; it needs no
// engine, so the fuzz target runs it alone.
func parseChatRequest(body []byte, lim Limits) (*chatParams, *apiError) {
	var r oaChatRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	p := &chatParams{model: r.Model, stream: r.Stream}
	if r.StreamOptions != nil {
		if !r.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		p.includeUsage = r.StreamOptions.IncludeUsage
	}
	if r.N != nil && *r.N != 1 {
		return nil, badRequest("n", "n %d: this server returns one choice (n: 1)", *r.N)
	}
	for _, f := range []struct {
		v    *float64
		name string
	}{{r.FrequencyPenalty, "frequency_penalty"}, {r.PresencePenalty, "presence_penalty"}} {
		if f.v != nil && *f.v != 0 {
			return nil, badRequest(f.name, "%s is not supported (only 0)", f.name)
		}
	}
	if r.ResponseFormat != nil {
		js, err := responseFormat(r.ResponseFormat)
		if err != nil {
			return nil, err
		}
		p.req.JSON = js
	}
	if err := checkRange(r.Temperature, "temperature", 0, 2); err != nil {
		return nil, err
	}
	if err := checkRange(r.TopP, "top_p", 0, 1); err != nil {
		return nil, err
	}
	mt, err := checkMaxTokens(r.MaxTokens, "max_tokens")
	if err != nil {
		return nil, err
	}
	if r.MaxCompletionTokens != nil {
		if mt, err = checkMaxTokens(r.MaxCompletionTokens, "max_completion_tokens"); err != nil {
			return nil, err
		}
	}
	stops, err := stringOrList(r.Stop, "stop")
	if err != nil {
		return nil, err
	}
	if stops, err = lim.checkStops(stops, "stop"); err != nil {
		return nil, err
	}
	if r.Logprobs != nil && *r.Logprobs {
		p.req.Logprobs = true
	}
	if r.TopLogprobs != nil {
		if !p.req.Logprobs {
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		if *r.TopLogprobs < 0 || *r.TopLogprobs > engine.MaxTopLogprobs {
			return nil, badRequest("top_logprobs", "top_logprobs %d: must be 0 to %d", *r.TopLogprobs, engine.MaxTopLogprobs)
		}
		p.req.TopLogprobs = *r.TopLogprobs
	}

	useTools := true
	var force *engine.ForceCall
	if len(r.ToolChoice) > 0 && string(r.ToolChoice) != "null" {
		var choice string
		if json.Unmarshal(r.ToolChoice, &choice) != nil {
			var named struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(r.ToolChoice, &named) != nil || named.Type != "function" || named.Function == nil || named.Function.Name == "" {
				return nil, badRequest("tool_choice", `tool_choice: expected "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`)
			}
			force = &engine.ForceCall{Name: named.Function.Name}
		} else {
			switch choice {
			case "auto":
			case "none":
				useTools = false
			case "required":
				force = &engine.ForceCall{}
			default:
				return nil, badRequest("tool_choice", "tool_choice %q: use \"auto\", \"none\", \"required\" or a named function", truncate(choice, 40))
			}
		}
	}
	if len(r.Tools) > lim.MaxTools {
		return nil, badRequest("tools", "%d tools; at most %d", len(r.Tools), lim.MaxTools)
	}
	var tools []engine.Tool
	for i, t := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badRequest(param+".type", "%s.type %q: only function tools are supported", param, truncate(t.Type, 40))
		}
		if err := toolName(t.Function.Name, param+".function.name"); err != nil {
			return nil, err
		}
		schema, err := schemaObject(t.Function.Parameters, param+".function.parameters")
		if err != nil {
			return nil, err
		}
		tools = append(tools, engine.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: schema})
	}
	if !useTools {
		tools = nil
	}
	if aerr := checkForceCall(force, tools, "tool_choice", p.req.JSON != nil); aerr != nil {
		return nil, aerr
	}
	p.req.ForceCall = force

	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: at least one message is required")
	}
	if len(r.Messages) > lim.MaxMessages {
		return nil, badRequest("messages", "%d messages; at most %d", len(r.Messages), lim.MaxMessages)
	}
	msgs := make([]engine.Message, 0, len(r.Messages))
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		if err := checkRole(role, param+".role"); err != nil {
			return nil, err
		}
		text, err := oaContent(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		em := engine.Message{Role: role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning}
		if len(m.ToolCalls) > 0 && role != "assistant" {
			return nil, badRequest(param+".tool_calls", "%s: only assistant messages have tool_calls", param)
		}
		for j, tc := range m.ToolCalls {
			cp := fmt.Sprintf("%s.tool_calls[%d]", param, j)
			if tc.Type != "" && tc.Type != "function" {
				return nil, badRequest(cp+".type", "%s.type %q: only function calls are supported", cp, truncate(tc.Type, 40))
			}
			if tc.Function.Name == "" {
				return nil, badRequest(cp+".function.name", "%s.function.name is required", cp)
			}
			args := map[string]any{}
			if a := strings.TrimSpace(tc.Function.Arguments); a != "" {
				if err := json.Unmarshal([]byte(a), &args); err != nil {
					return nil, badRequest(cp+".function.arguments", "%s.function.arguments: expected a JSON object in a string", cp)
				}
			}
			em.ToolCalls = append(em.ToolCalls, engine.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		msgs = append(msgs, em)
	}
	p.req.Messages, p.req.Tools, p.req.MaxTokens = msgs, tools, mt
	p.req.Sampling = sampling(r.Temperature, r.TopP, nil, r.Seed)
	p.req.Sampling.Stop = stops
	return p, nil
}

// oaContent reads a message content: a string, null, or text parts.
func oaContent(raw json.RawMessage, param string) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []oaContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s: expected a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, pt := range parts {
		if pt.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), "%s[%d]: content part type %q is not supported (text only)", param, i, truncate(pt.Type, 40))
		}
		b.WriteString(pt.Text)
	}
	return b.String(), nil
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		writeError(w, openAIStyle, aerr)
		return
	}
	p, aerr := parseChatRequest(body, s.lim)
	if aerr == nil {
		aerr = s.resolveModel(p.model)
	}
	if aerr != nil {
		writeError(w, openAIStyle, aerr)
		return
	}
	st, aerr := s.start(r, p.req)
	if aerr != nil {
		writeError(w, openAIStyle, aerr)
		return
	}
	c := &oaCompletion{s: s, p: p, st: st, id: newID("chatcmpl-"), created: time.Now().Unix()}
	if p.stream {
		c.stream(w)
		return
	}
	c.complete(w)
}

// oaCompletion is one chat completion being answered.
type oaCompletion struct {
	s       *Server
	p       *chatParams
	st      *started
	id      string
	created int64
}

func finishReason(stop engine.StopReason) string {
	switch stop {
	case engine.StopMaxTokens, engine.StopPoolFull:
		return "length"
	case engine.StopToolCall:
		return "tool_calls"
	}
	return "stop"
}

func oaLogprobs(lps []engine.TokenLogprob) []any {
	out := make([]any, 0, len(lps))
	for _, lp := range lps {
		top := make([]any, 0, len(lp.Top))
		for _, t := range lp.Top {
			top = append(top, map[string]any{"token": t.Token, "logprob": t.Logprob, "bytes": byteList(t.Bytes)})
		}
		out = append(out, map[string]any{"token": lp.Token, "logprob": lp.Logprob, "bytes": byteList(lp.Bytes), "top_logprobs": top})
	}
	return out
}

// byteList writes bytes as a JSON array of numbers, as OpenAI does.
func byteList(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func (c *oaCompletion) usage(u engine.Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
	}
}

func (c *oaCompletion) toolCall(tc *engine.ToolCall) map[string]any {
	args := tc.ArgsJSON // the text a streamed XML call's deltas add up to
	if args == "" {
		b, _ := json.Marshal(tc.Arguments)
		args = string(b)
	}
	return map[string]any{"id": newID("call_"), "type": "function", "function": map[string]any{"name": tc.Name, "arguments": args}}
}

func (c *oaCompletion) complete(w http.ResponseWriter) {
	var text, reasoning strings.Builder
	var calls []any
	var lps []engine.TokenLogprob
	var done engine.BatchEvent
	for ev := range c.st.events {
		lps = append(lps, ev.Logprobs...)
		switch ev.Kind {
		case engine.EventText, engine.EventToolError:
			text.WriteString(ev.Text)
		case engine.EventThinking:
			reasoning.WriteString(ev.Text)
		case engine.EventToolCall:
			calls = append(calls, c.toolCall(ev.ToolCall))
		case engine.EventError:
			writeError(w, openAIStyle, runtimeError(ev.Err))
			return
		case engine.EventDone:
			done = ev
		}
	}
	if done.Stop == engine.StopCancelled || done.Kind != engine.EventDone {
		return // the client is gone
	}
	msg := map[string]any{"role": "assistant", "content": text.String()}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
		if text.Len() == 0 {
			msg["content"] = nil
		}
	}
	if reasoning.Len() > 0 {
		msg["reasoning_content"] = reasoning.String()
	}
	choice := map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(done.Stop), "logprobs": nil}
	if c.p.req.Logprobs {
		choice["logprobs"] = map[string]any{"content": oaLogprobs(lps)}
	}
	if done.Stop == engine.StopPoolFull && done.Err != nil {
		choice["ftchat_stop_detail"] = done.Err.Error()
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": c.id, "object": "chat.completion", "created": c.created, "model": c.s.cfg.ModelID,
		"system_fingerprint": c.s.fingerprint(), "choices": []any{choice}, "usage": c.usage(done.Usage),
	})
}

func (s *Server) fingerprint() string { return "ftchat-" + s.cfg.Version }

func (c *oaCompletion) chunk(delta map[string]any, finish any, lps []engine.TokenLogprob) map[string]any {
	choice := map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}
	if c.p.req.Logprobs && len(lps) > 0 {
		choice["logprobs"] = map[string]any{"content": oaLogprobs(lps)}
	}
	ch := map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.s.cfg.ModelID,
		"system_fingerprint": c.s.fingerprint(), "choices": []any{choice}}
	if c.p.includeUsage {
		ch["usage"] = nil
	}
	return ch
}

func (c *oaCompletion) stream(w http.ResponseWriter) {
	out := newSSE(w)
	if out.send("", c.chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)) != nil {
		return
	}
	calls := 0
	streamed := -1    // index of the call whose arguments were streamed, -1 none
	streamedArgs := 0 // argument bytes sent for it
	for ev := range c.st.events {
		var delta map[string]any
		switch ev.Kind {
		case engine.EventToolCallDelta:
			d := ev.CallDelta
			if d.Name != "" {
				streamed, streamedArgs = d.Index, 0
				delta = map[string]any{"tool_calls": []any{map[string]any{"index": d.Index, "id": newID("call_"), "type": "function",
					"function": map[string]any{"name": d.Name, "arguments": d.Args}}}}
			} else if d.Index == streamed {
				delta = map[string]any{"tool_calls": []any{map[string]any{"index": d.Index, "function": map[string]any{"arguments": d.Args}}}}
			}
			if streamed == d.Index {
				streamedArgs += len(d.Args)
			}
		case engine.EventText, engine.EventToolError:
			delta = map[string]any{"content": ev.Text}
		case engine.EventThinking:
			delta = map[string]any{"reasoning_content": ev.Text}
		case engine.EventToolCall:
			tc := c.toolCall(ev.ToolCall)
			switch {
			case streamed != calls:
				tc["index"] = calls
				delta = map[string]any{"tool_calls": []any{tc}}
			case streamedArgs == 0:
				// Named early, but its arguments were not streamed (not
				// an object as written): all of them now.
				delta = map[string]any{"tool_calls": []any{map[string]any{"index": calls, "function": map[string]any{"arguments": tc["function"].(map[string]any)["arguments"]}}}}
			}
			calls++
		case engine.EventError:
			out.send("", (runtimeError(ev.Err)).body(openAIStyle))
			return
		case engine.EventDone:
			if ev.Stop == engine.StopCancelled {
				return
			}
			last := c.chunk(map[string]any{}, finishReason(ev.Stop), ev.Logprobs)
			if ev.Stop == engine.StopPoolFull && ev.Err != nil {
				last["choices"].([]any)[0].(map[string]any)["ftchat_stop_detail"] = ev.Err.Error()
			}
			if out.send("", last) != nil {
				return
			}
			if c.p.includeUsage {
				u := c.chunk(nil, nil, nil)
				u["choices"] = []any{}
				u["usage"] = c.usage(ev.Usage)
				if out.send("", u) != nil {
					return
				}
			}
			out.raw("data: [DONE]\n\n")
			return
		}
		if delta != nil && out.send("", c.chunk(delta, nil, ev.Logprobs)) != nil {
			return // the client is gone; its context cancels the request
		}
	}
}
