package chat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"

	"github.com/ftchat/ftchat/internal/testmodel"
)

type conversation struct {
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools"`
}

type renderCase struct {
	Template            string `json:"template"`
	Conversation        string `json:"conversation"`
	AddGenerationPrompt bool   `json:"add_generation_prompt"`
	EnableThinking      *bool  `json:"enable_thinking"`
	BOS                 string `json:"bos"`
	EOS                 string `json:"eos"`
	Golden              string `json:"golden"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with python3 scripts/chat_fixtures.py)", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadTemplate(t *testing.T, name string) *Template {
	t.Helper()
	if name == "chatml" {
		return ChatML()
	}
	src, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tmpl
}

// firstDiff describes where two renders part ways, with context.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	line := strings.Count(want[:i], "\n") + 1
	lo := max(0, i-60)
	return fmt.Sprintf("first difference at byte %d (line %d):\n got ...%q\nwant ...%q",
		i, line, got[lo:min(len(got), i+60)], want[lo:min(len(want), i+60)])
}

// TestRenderMatchesTransformers renders every fixture conversation with the
// real templates and compares byte for byte with what transformers'
// apply_chat_template produced (scripts/chat_fixtures.py).
func TestRenderMatchesTransformers(t *testing.T) {
	var convs map[string]conversation
	readJSON(t, "testdata/conversations.json", &convs)
	var cases []renderCase
	readJSON(t, "testdata/render_cases.json", &cases)
	if len(cases) < 30 {
		t.Fatalf("only %d render cases", len(cases))
	}
	templates := map[string]*Template{}
	for _, c := range cases {
		name := strings.TrimSuffix(c.Golden, ".txt")
		t.Run(name, func(t *testing.T) {
			tmpl := templates[c.Template]
			if tmpl == nil {
				tmpl = loadTemplate(t, c.Template)
				templates[c.Template] = tmpl
			}
			conv, ok := convs[c.Conversation]
			if !ok {
				t.Fatalf("no conversation %q", c.Conversation)
			}
			want, err := os.ReadFile(filepath.Join("testdata", "golden", c.Golden))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(conv.Messages, conv.Tools, RenderOptions{
				AddGenerationPrompt: c.AddGenerationPrompt, BOS: c.BOS, EOS: c.EOS, EnableThinking: c.EnableThinking,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("render differs from transformers\n%s", firstDiff(got, string(want)))
			}
		})
	}
}

func TestFromTokenizerConfig(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tmpl, err := LoadTokenizerConfig(filepath.Join("testdata", "tokenizer_config_"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
		if tmpl.Source != string(src) || tmpl.Fallback {
			t.Errorf("%s: template source not taken from chat_template", name)
		}
		if name == "llama3" && (tmpl.BOS != "<|begin_of_text|>" || tmpl.EOS != "<|end_of_text|>") {
			t.Errorf("llama3 BOS/EOS = %q/%q", tmpl.BOS, tmpl.EOS)
		}
		if name == "qwen3" && (tmpl.BOS != "" || tmpl.EOS != "<|im_end|>") {
			t.Errorf("qwen3 BOS/EOS = %q/%q", tmpl.BOS, tmpl.EOS)
		}
	}
	// Llama 3 uses bos_token: the tokenizer_config default fills it.
	tmpl, err := LoadTokenizerConfig("testdata/tokenizer_config_llama3.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, nil, RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "<|begin_of_text|><|start_header_id|>user") {
		t.Errorf("BOS default not applied: %q", got)
	}
}

func TestNamedTemplates(t *testing.T) {
	cfg := `{"chat_template": [
		{"name": "default", "template": "D{% for m in messages %}{{ m.content }}{% endfor %}"},
		{"name": "tool_use", "template": "T{{ tools|length }}"}],
		"bos_token": {"content": "<s>", "lstrip": false}}`
	tmpl, err := FromTokenizerConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.BOS != "<s>" {
		t.Errorf("BOS from AddedToken form = %q", tmpl.BOS)
	}
	msgs := []Message{{Role: "user", Content: "x"}}
	if got, _ := tmpl.Render(msgs, nil, RenderOptions{}); got != "Dx" {
		t.Errorf("default template: %q", got)
	}
	if got, _ := tmpl.Render(msgs, []Tool{{Name: "a"}}, RenderOptions{}); got != "T1" {
		t.Errorf("tool_use template: %q", got)
	}
	bad := []struct{ cfg, want string }{
		{`{"chat_template": [{"name": "x", "template": ""}]}`, `none named "default"`},
		{`{"chat_template": 3}`, "expected a string or a list"},
		{`{"chat_template": "{% if %}"}`, "chat template: jinja: line 1"},
		{`not json`, "not valid JSON"},
	}
	for _, b := range bad {
		if _, err := FromTokenizerConfig([]byte(b.cfg)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want it to mention %q", b.cfg, err, b.want)
		}
	}
	if tmpl, err := FromTokenizerConfig([]byte(`{"eos_token": "</s>"}`)); err != nil || !tmpl.Fallback {
		t.Errorf("no chat_template should give the ChatML fallback, got %v %v", tmpl, err)
	}
}

type fakeMeta map[string]string

func (m fakeMeta) String(k string) (string, bool) { v, ok := m[k]; return v, ok }

func TestFromGGUF(t *testing.T) {
	tmpl, err := FromGGUF(fakeMeta{})
	if err != nil || !tmpl.Fallback {
		t.Fatalf("missing template: want ChatML fallback, got %v, %v", tmpl, err)
	}
	got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, nil, RenderOptions{AddGenerationPrompt: true})
	if err != nil || got != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("ChatML fallback render %q, %v", got, err)
	}
	if _, err := FromGGUF(fakeMeta{KeyChatTemplate: "{% for %}"}); err == nil || !strings.Contains(err.Error(), KeyChatTemplate) {
		t.Fatalf("bad template error should name the key, got %v", err)
	}
	tmpl, err = FromGGUF(fakeMeta{KeyChatTemplate: "A", KeyChatTemplateToolUse: "B"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(nil, []Tool{{Name: "x"}}, RenderOptions{}); got != "B" {
		t.Fatalf("tool_use template not chosen with tools: %q", got)
	}
}

// TestRealGGUFTemplate loads the default model's template through the gguf
// reader and checks it is the one the fixtures were made from.
func TestRealGGUFTemplate(t *testing.T) {
	path := testmodel.Require(t)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tmpl, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("testdata/templates/smollm2.jinja")
	if tmpl.Source != string(want) || tmpl.Fallback {
		t.Fatal("GGUF chat template differs from testdata/templates/smollm2.jinja")
	}
}

func TestRenderConvertsValues(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m.tool_calls[0].function.arguments|tojson }}|{{ m.name is defined }}|{{ m.tool_call_id is defined }}{% endfor %}|{{ extra.k }}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: map[string]any{
		"z": 1.0, "a": 2.5, "n": []any{3.0, "x"}, "o": map[string]any{"y": true, "b": nil},
	}}}}}
	got, err := tmpl.Render(msgs, nil, RenderOptions{Extra: map[string]any{"extra": map[string]any{"k": "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	// integral floats render as ints (JSON integers decode to float64 in Go),
	// keys sorted, absent optional fields undefined
	want := `{"a": 2.5, "n": [3, "x"], "o": {"b": null, "y": true}, "z": 1}|False|False|v`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestRenderErrorIsClear(t *testing.T) {
	tmpl, err := New("{% if messages[0].role != 'user' %}{{ raise_exception('First message must be from the user') }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "assistant"}}, nil, RenderOptions{})
	if err == nil || !strings.Contains(err.Error(), "First message must be from the user") || !strings.HasPrefix(err.Error(), "chat template: ") {
		t.Fatalf("got %v", err)
	}
}

func TestToolFormatFor(t *testing.T) {
	read := func(n string) string {
		b, _ := os.ReadFile("testdata/templates/" + n + ".jinja")
		return string(b)
	}
	cases := []struct {
		arch, tmpl string
		want       ToolFormat
	}{
		{"qwen3", read("qwen3"), ToolHermes},
		{"qwen35moe", read("qwen35"), ToolQwenXML},
		{"llama", read("llama3"), ToolNone}, // Llama 3 (not 3.1) offers no tools
		{"llama", read("smollm2"), ToolNone},
		{"llama", "<|start_header_id|>ipython<|end_header_id|> {{ tools }} <|python_tag|>", ToolLlama3JSON},
		{"llama", "<|start_header_id|>{% if tools %}{{ tools|tojson }}{% endif %}", ToolLlama3JSON},
		{"qwen2", "", ToolHermes}, // ChatML fallback
	}
	for _, c := range cases {
		if got := ToolFormatFor(c.arch, c.tmpl); got != c.want {
			t.Errorf("ToolFormatFor(%s, %.30q) = %v, want %v", c.arch, c.tmpl, got, c.want)
		}
	}
}

func TestPromptOpensThinking(t *testing.T) {
	cases := map[string]bool{
		"<|im_start|>assistant\n":                        false,
		"<|im_start|>assistant\n<think>\n":               true,
		"<|im_start|>assistant\n<think>":                 true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n": false,
		"<think>x</think> <|im_start|>assistant\n":       false,
	}
	for p, want := range cases {
		if got := PromptOpensThinking(p); got != want {
			t.Errorf("PromptOpensThinking(%q) = %v", p, got)
		}
	}
}

// TestRenderRandomMatchesTransformers: 40 seeded random conversations per
// template (unicode, whitespace, tag-like text, tool calls with random
// nested arguments, random options), rendered by transformers.
func TestRenderRandomMatchesTransformers(t *testing.T) {
	for _, name := range []string{"qwen3", "smollm2", "llama3", "chatml"} {
		var cases []struct {
			Conversation        conversation `json:"conversation"`
			AddGenerationPrompt bool         `json:"add_generation_prompt"`
			EnableThinking      *bool        `json:"enable_thinking"`
			BOS                 string       `json:"bos"`
			EOS                 string       `json:"eos"`
			Out                 *string      `json:"out"`
			Error               *string      `json:"error"`
		}
		readJSON(t, filepath.Join("testdata", "random_"+name+".json"), &cases)
		tmpl := loadTemplate(t, name)
		for i, c := range cases {
			got, err := tmpl.Render(c.Conversation.Messages, c.Conversation.Tools, RenderOptions{
				AddGenerationPrompt: c.AddGenerationPrompt, BOS: c.BOS, EOS: c.EOS, EnableThinking: c.EnableThinking,
			})
			switch {
			case c.Out == nil && err == nil:
				t.Errorf("%s case %d: transformers failed (%s), we rendered", name, i, *c.Error)
			case c.Out != nil && err != nil:
				t.Errorf("%s case %d: %v", name, i, err)
			case c.Out != nil && got != *c.Out:
				t.Errorf("%s case %d differs from transformers\n%s", name, i, firstDiff(got, *c.Out))
			}
		}
	}
}

// TestAssistantContentRoundTrip: what the parser splits off, AssistantContent
// puts back in the form the Qwen3 fixture (rendered by transformers) uses.
func TestAssistantContentRoundTrip(t *testing.T) {
	var convs map[string]conversation
	readJSON(t, "testdata/conversations.json", &convs)
	stored := convs["thinking_history"].Messages[1].Content
	segs := normalize(parseChunks(ToolHermes, false, []string{stored}))
	if len(segs) != 2 || segs[0].Kind != SegThinking || segs[1].Kind != SegText {
		t.Fatalf("parsed %v", segs)
	}
	if got := AssistantContent(segs[0].Text, segs[1].Text); got != stored {
		t.Fatalf("AssistantContent = %q, fixture has %q", got, stored)
	}
	if AssistantContent("", "x") != "x" {
		t.Fatal("no thinking must leave text unchanged")
	}
}
