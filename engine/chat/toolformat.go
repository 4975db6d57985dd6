package chat

import (
	"strings"
)

// ToolFormat is how a model family writes tool calls in its output.
type ToolFormat int

const (
	// ToolNone: the template offers no tools; output is text (and thinking).
	ToolNone ToolFormat = iota
	// ToolHermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
	// (Qwen2.5/Qwen3, Hermes, and ftchat's ChatML fallback).
	ToolHermes
	// ToolLlama3JSON: a JSON object {"name": ..., "parameters": {...}} as the
	// reply, optionally after <|python_tag|> (Llama 3.1/3.2/3.3).
	ToolLlama3JSON
	// ToolQwenXML: <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...
	// </function>\n</tool_call>, values typed by the tool's schema
	// (Qwen3.5, Qwen3.6, Qwen3-Coder; see xmlcall.go).
	ToolQwenXML
)

func (f ToolFormat) String() string {
	switch f {
	case ToolHermes:
		return "hermes"
	case ToolLlama3JSON:
		return "llama3-json"
	case ToolQwenXML:
		return "qwen-xml"
	}
	return "none"
}

// ToolFormatFor decides the tool-call format from the template text: what
// the model was shown is what it writes. arch (GGUF general.architecture) is
// part of the signature for families whose templates do not reveal their
// format; none of the supported families needs it yet. An empty template
// means the ChatML fallback, which uses Hermes calls.
func ToolFormatFor(arch, template string) ToolFormat {
	if strings.TrimSpace(template) == "" {
		template = chatMLSource
	}
	switch {
	case strings.Contains(template, "<tool_call>") && strings.Contains(template, xmlFuncOpen) && strings.Contains(template, xmlParamOpen):
		return ToolQwenXML
	case strings.Contains(template, "<tool_call>"):
		return ToolHermes
	case strings.Contains(template, "<|python_tag|>"),
		strings.Contains(template, "<|start_header_id|>") && (strings.Contains(template, "ipython") || strings.Contains(template, "tools")):
		return ToolLlama3JSON
	}
	return ToolNone
}

// PromptOpensThinking reports whether a rendered prompt ends inside an open
// <think> block (templates that start the assistant turn with "<think>\n"),
// so the generated text begins as thinking: pass it to NewStreamParser.
func PromptOpensThinking(prompt string) bool {
	open := strings.LastIndex(prompt, thinkOpen)
	if open < 0 {
		return false
	}
	if strings.LastIndex(prompt, thinkClose) > open {
		return false
	}
	return strings.TrimSpace(prompt[open+len(thinkOpen):]) == ""
}

// AssistantContent is an assistant turn's reasoning and answer as one
// content: "<think>\n" + thinking + "\n</think>\n\n" + text, the shape
// thinking templates (Qwen3, Qwen3.5) split back apart when they get no
// reasoning_content. With no thinking it is text unchanged. ftchat's own
// history does not use it: it keeps the thinking in Message.Reasoning (with
// RenderOptions.ContentIsAnswer), so an answer is never split.
func AssistantContent(thinking, text string) string {
	if thinking == "" {
		return text
	}
	return thinkOpen + "\n" + thinking + "\n" + thinkClose + "\n\n" + text
}

// CallExample is a tool call written in format f, for telling a model that
// wrote a malformed call what one looks like.
func CallExample(f ToolFormat) string {
	switch f {
	case ToolQwenXML:
		return "<tool_call>\n<function=read_file>\n<parameter=path>\nREADME.md\n</parameter>\n</function>\n</tool_call>"
	case ToolLlama3JSON:
		return `{"name": "read_file", "parameters": {"path": "README.md"}}`
	}
	return `<tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>`
}
