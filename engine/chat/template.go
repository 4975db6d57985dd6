// Package chat renders conversations with a model's own Jinja chat template
// (package chat/jinja, byte-identical to transformers' apply_chat_template)
// and parses the model's streamed output into text, thinking and tool calls.
//
// The types here mirror engine.Message, engine.ToolCall and engine.Tool
// (same fields, same JSON tags); package engine converts, because engine
// imports chat and chat must not import engine.
package chat

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine/chat/jinja"
	"github.com/ftchat/ftchat/internal/safefile"
)

// Message is one chat turn (mirror of engine.Message).
type Message struct {
	Role    string `json:"role"` // system, user, assistant, tool
	Content string `json:"content"`
	// Reasoning is an assistant turn's thinking, apart from its answer in
	// Content; templates read it as reasoning_content and decide whether
	// the next prompt shows it (Qwen3.5 keeps it only for the turns after
	// the last user query).
	Reasoning  string     `json:"reasoning_content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is a function call the model asked for (mirror of engine.ToolCall).
type ToolCall struct {
	ID        string         `json:"id,omitempty"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	// ArgsJSON, for a call parsed from a format whose arguments are not
	// JSON (ToolQwenXML), is Arguments as JSON text in the order the model
	// wrote them (XMLArgsJSON): what a stream of the call's arguments adds
	// up to. Empty otherwise.
	ArgsJSON string `json:"-"`
}

// Tool is a function definition offered to the model (mirror of engine.Tool).
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"` // JSON schema
}

// RenderOptions are the template variables besides messages and tools.
type RenderOptions struct {
	AddGenerationPrompt bool
	// BOS and EOS become bos_token / eos_token (left undefined when empty;
	// Template.BOS/EOS, from a tokenizer_config.json, fill them when set).
	BOS, EOS string
	// EnableThinking becomes enable_thinking when non-nil (Qwen3 reads it).
	EnableThinking *bool
	// ContentIsAnswer says an assistant message's Content is its answer
	// alone, its thinking being in Reasoning (ftchat's own history). Then
	// reasoning_content is passed, even empty, when Content holds
	// "</think>" (an answer that talks about the tag): templates that split
	// <think>...</think> out of a content when they get no reasoning_content
	// string (Qwen3, Qwen3.5) leave the answer whole. Off, a conversation
	// renders exactly as transformers renders the same messages.
	ContentIsAnswer bool
	// Extra variables, set last (they override the ones above).
	Extra map[string]any
}

// Template is a model's chat template, ready to render.
type Template struct {
	// Source is the template text (the default one for named templates).
	Source string
	// Fallback is true when the model carried no usable template and
	// ChatML is used; FallbackReason says why, for the model info line.
	Fallback       bool
	FallbackReason string
	// BOS and EOS are defaults from a tokenizer_config.json, used when
	// RenderOptions leaves them empty.
	BOS, EOS string
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
	// Origin names where the template came from (the model file) in
	// render errors; the loader's caller sets it.
	Origin string

	def     *jinja.Template
	toolUse *jinja.Template // transformers picks a "tool_use" named template when tools are given
}

//go:embed chatml.jinja
var chatMLSource string

// ChatML returns ftchat's fallback template for models without one: ChatML
// turns ("<|im_start|>role\n...<|im_end|>\n"), tools offered and called in
// the Hermes style (<tool_call>{"name", "arguments"}</tool_call>), tool
// results as <tool_response> blocks in a user turn. Fallback is set.
func ChatML() *Template {
	t, err := New(chatMLSource)
	if err != nil {
		panic("chat: embedded ChatML template does not parse: " + err.Error())
	}
	t.Fallback, t.FallbackReason = true, "the model has no template"
	return t
}

// New parses a template source.
func New(source string) (*Template, error) {
	jt, err := jinja.Parse(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{Source: source, def: jt}, nil
}

// MetadataGetter is the part of *gguf.File the loader needs.
type MetadataGetter interface {
	String(key string) (string, bool)
}

// GGUF metadata keys: the default template, and named ones (llama.cpp
// stores "tokenizer.chat_template.<name>").
const (
	KeyChatTemplate        = "tokenizer.chat_template"
	KeyChatTemplateToolUse = "tokenizer.chat_template.tool_use"
)

// FromGGUF loads tokenizer.chat_template (and the "tool_use" named template
// when present). A model without a template gets ChatML() (Fallback true);
// so does one whose template is empty or not a string, with the reason in
// FallbackReason.
func FromGGUF(md MetadataGetter) (*Template, error) {
	src, ok := md.String(KeyChatTemplate)
	if !ok || strings.TrimSpace(src) == "" {
		t := ChatML()
		if vg, canValue := md.(interface{ Value(string) (any, bool) }); canValue && !ok {
			if v, present := vg.Value(KeyChatTemplate); present {
				t.FallbackReason = fmt.Sprintf("%s is a %T, not a string", KeyChatTemplate, v)
			}
		}
		if ok {
			t.FallbackReason = KeyChatTemplate + " is empty"
		}
		return t, nil
	}
	t, err := New(src)
	if err != nil {
		return nil, fmt.Errorf("GGUF %s: %w", KeyChatTemplate, err)
	}
	if tu, ok := md.String(KeyChatTemplateToolUse); ok && strings.TrimSpace(tu) != "" {
		jt, err := jinja.Parse(tu)
		if err != nil {
			return nil, fmt.Errorf("GGUF %s: %w", KeyChatTemplateToolUse, err)
		}
		t.toolUse = jt
	}
	return t, nil
}

// LoadTokenizerConfig reads a tokenizer_config.json file.
func LoadTokenizerConfig(path string) (*Template, error) {
	data, err := safefile.ReadFile(path, 64<<20, "chat template")
	if err != nil {
		return nil, err
	}
	t, err := FromTokenizerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// FromTokenizerConfig takes the chat_template of a tokenizer_config.json:
// a string, or a list of {"name", "template"} (then "default" is used, and
// "tool_use" when tools are given, as transformers does). bos_token and
// eos_token (strings or {"content": ...}) become the BOS/EOS defaults. No
// chat_template gives ChatML() (Fallback true).
func FromTokenizerConfig(data []byte) (*Template, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json is not valid JSON: %w", err)
	}
	var t *Template
	raw := strings.TrimSpace(string(cfg.ChatTemplate))
	switch {
	case raw == "" || raw == "null":
		t = ChatML()
	case strings.HasPrefix(raw, "\""):
		var src string
		if err := json.Unmarshal(cfg.ChatTemplate, &src); err != nil {
			return nil, fmt.Errorf("chat_template: %w", err)
		}
		var err error
		if t, err = New(src); err != nil {
			return nil, err
		}
	case strings.HasPrefix(raw, "["):
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
			return nil, fmt.Errorf("chat_template: expected a string or a list of {name, template}: %w", err)
		}
		byName := map[string]string{}
		var names []string
		for _, n := range named {
			byName[n.Name] = n.Template
			names = append(names, n.Name)
		}
		def, ok := byName["default"]
		if !ok {
			return nil, fmt.Errorf("chat_template has named templates %v but none named \"default\"", names)
		}
		var err error
		if t, err = New(def); err != nil {
			return nil, fmt.Errorf("chat_template %q: %w", "default", err)
		}
		if tu, ok := byName["tool_use"]; ok {
			if t.toolUse, err = jinja.Parse(tu); err != nil {
				return nil, fmt.Errorf("chat_template %q: %w", "tool_use", err)
			}
		}
	default:
		return nil, fmt.Errorf("chat_template: expected a string or a list of {name, template}, got %.40s", raw)
	}
	t.BOS = specialToken(cfg.BOS)
	t.EOS = specialToken(cfg.EOS)
	return t, nil
}

// specialToken reads "tok" or {"content": "tok", ...}.
func specialToken(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

// Render renders the conversation as the prompt text, the way
// apply_chat_template(messages, tools=tools, tokenize=False, ...) does.
func (t *Template) Render(messages []Message, tools []Tool, opts RenderOptions) (string, error) {
	jt := t.def
	if len(tools) > 0 && t.toolUse != nil {
		jt = t.toolUse
	}
	if jt == nil {
		return "", fmt.Errorf("chat template: not loaded (use New, FromGGUF or FromTokenizerConfig)")
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = messageValue(m, opts.ContentIsAnswer)
	}
	vars := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": opts.AddGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
	}
	if len(tools) > 0 {
		tv := make([]any, len(tools))
		for i, tl := range tools {
			tv[i] = toolValue(tl)
		}
		vars["tools"] = tv
	}
	if bos := firstNonEmpty(opts.BOS, t.BOS); bos != "" {
		vars["bos_token"] = bos
	}
	if eos := firstNonEmpty(opts.EOS, t.EOS); eos != "" {
		vars["eos_token"] = eos
	}
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = *opts.EnableThinking
	}
	for k, v := range opts.Extra {
		vars[k] = toValue(v)
	}
	rt := *jt
	rt.Now = t.Now
	rt.Limits = renderLimits(messages, tools)
	out, err := rt.Render(vars)
	if err != nil {
		if t.Origin != "" {
			return "", fmt.Errorf("chat template of %s: %w", t.Origin, err)
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	// An empty prompt would reach the model as no tokens at all.
	if len(messages) > 0 && strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("chat template rendered an empty prompt for %d messages; the model's %s is unusable: use a model file with a working template", len(messages), KeyChatTemplate)
	}
	return out, nil
}

// renderLimits gives a render the default memory budget plus room in
// proportion to the conversation, which templates walk a few times (a long
// agent session must not hit a limit meant for hostile templates), ...
func renderLimits(messages []Message, tools []Tool) jinja.Limits {
	n := int64(0)
	for _, m := range messages {
		n += int64(len(m.Content) + len(m.Reasoning) + len(m.Role) + len(m.Name) + len(m.ToolCallID))
		for _, c := range m.ToolCalls {
			n += int64(len(c.ID)+len(c.Name)) + approxSize(c.Arguments)
		}
	}
	for _, tl := range tools {
		n += int64(len(tl.Name)+len(tl.Description)) + approxSize(tl.Parameters)
	}
	// and time: a second more per MiB, for a loaded machine
	return jinja.Limits{MaxBytes: jinja.DefaultMaxBytes + 16*n, Timeout: jinja.DefaultTimeout + time.Duration(n>>20)*time.Second}
}

// approxSize is about the JSON size of v.
func approxSize(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x)) + 2
	case map[string]any:
		n := int64(2)
		for k, e := range x {
			n += int64(len(k)) + 4 + approxSize(e)
		}
		return n
	case []any:
		n := int64(2)
		for _, e := range x {
			n += 2 + approxSize(e)
		}
		return n
	}
	return 8
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// messageValue builds the dict HF templates expect. Keys in the order of
// the OpenAI/HF message shape; empty optional fields are absent (not None),
// as transformers drops None-valued keys.
//
// An assistant's Reasoning becomes reasoning_content, and thinking too, as
// transformers aliases it (gpt-oss templates read thinking). With
// answerOnly (RenderOptions.ContentIsAnswer) an assistant Content that
// holds "</think>" gets reasoning_content even when Reasoning is empty.
func messageValue(m Message, answerOnly bool) *jinja.Dict {
	d := jinja.NewDict()
	reasoning := m.Role == "assistant" && (m.Reasoning != "" || answerOnly && strings.Contains(m.Content, thinkClose))
	if reasoning {
		d.Set("thinking", m.Reasoning)
	}
	d.Set("role", m.Role)
	d.Set("content", m.Content)
	if reasoning {
		d.Set("reasoning_content", m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			cd := jinja.NewDict()
			if c.ID != "" {
				cd.Set("id", c.ID)
			}
			cd.Set("type", "function")
			fn := jinja.NewDict()
			fn.Set("name", c.Name)
			args := c.Arguments
			if args == nil {
				args = map[string]any{}
			}
			fn.Set("arguments", toValue(args))
			cd.Set("function", fn)
			calls[i] = cd
		}
		d.Set("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		d.Set("name", m.Name)
	}
	return d
}

func toolValue(t Tool) *jinja.Dict {
	fn := jinja.NewDict()
	fn.Set("name", t.Name)
	fn.Set("description", t.Description)
	params := t.Parameters
	if params == nil {
		params = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	fn.Set("parameters", toValue(params))
	d := jinja.NewDict()
	d.Set("type", "function")
	d.Set("function", fn)
	return d
}

// toValue converts JSON-shaped Go data for the template. Map keys are
// sorted (Go maps have no order; a stable order keeps renders, and so the
// KV-cache prefix, identical turn after turn). A float64 with an integral
// value becomes an int: encoding/json decodes every number as float64, and
// Python would hold the JSON integer 3 as int (rendered "3", not "3.0").
func toValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			d.Set(k, toValue(x[k]))
		}
		return d
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toValue(e)
		}
		return out
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case float32:
		return toValue(float64(x))
	}
	return jinja.FromGo(v)
}
