package chat

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// seg is a comparable view of a Segment.
type seg struct {
	Kind SegmentKind
	Text string         // text, thinking, raw malformed call
	Name string         // tool call
	Args map[string]any // tool call
}

func (s seg) String() string {
	if s.Kind == SegToolCall {
		return fmt.Sprintf("call(%s %v)", s.Name, s.Args)
	}
	return fmt.Sprintf("%v(%q)", s.Kind, s.Text)
}

// normalize joins adjacent text/thinking segments (chunking may split them
// differently) and flattens calls.
func normalize(segs []Segment) []seg {
	var out []seg
	for _, s := range segs {
		if n := len(out); n > 0 && (s.Kind == SegText || s.Kind == SegThinking) && out[n-1].Kind == s.Kind {
			out[n-1].Text += s.Text
			continue
		}
		v := seg{Kind: s.Kind, Text: s.Text}
		if s.Kind == SegToolCall {
			v.Name, v.Args = s.Call.Name, s.Call.Arguments
		}
		out = append(out, v)
	}
	return out
}

func parseChunks(format ToolFormat, thinking bool, chunks []string) []Segment {
	p := NewStreamParser(format, thinking)
	var all []Segment
	for _, c := range chunks {
		all = append(all, p.Feed(c)...)
	}
	return append(all, p.Flush()...)
}

// randomChunks splits s into random non-empty chunks (seeded).
func randomChunks(s string, seed int64) []string {
	rng := rand.New(rand.NewSource(seed))
	var chunks []string
	for rest := s; rest != ""; {
		n := 1 + rng.Intn(len(rest))
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	return chunks
}

// feedRepeated feeds chunk to p n times and returns the segments.
func feedRepeated(p *StreamParser, chunk string, n int) []Segment {
	var segs []Segment
	for i := 0; i < n; i++ {
		segs = append(segs, p.Feed(chunk)...)
	}
	return segs
}

// splittings returns the input whole, byte by byte, rune by rune and in
// random chunks (seeded), so every case is checked at every boundary.
func splittings(s string, seeds int) map[string][]string {
	out := map[string][]string{"whole": {s}}
	var bytesSplit, runes []string
	for i := 0; i < len(s); i++ {
		bytesSplit = append(bytesSplit, s[i:i+1])
	}
	for _, r := range s {
		runes = append(runes, string(r))
	}
	out["bytes"], out["runes"] = bytesSplit, runes
	for seed := 0; seed < seeds; seed++ {
		rng := rand.New(rand.NewSource(int64(seed)))
		var chunks []string
		for rest := s; rest != ""; {
			n := 1 + rng.Intn(min(len(rest), 12))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		out[fmt.Sprintf("random%d", seed)] = chunks
	}
	return out
}

func text(s string) seg     { return seg{Kind: SegText, Text: s} }
func thinking(s string) seg { return seg{Kind: SegThinking, Text: s} }
func call(name string, args map[string]any) seg {
	return seg{Kind: SegToolCall, Name: name, Args: args}
}
func bad(raw string) seg { return seg{Kind: SegToolError, Text: raw} }

const weatherCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"

func TestStreamParser(t *testing.T) {
	paris := map[string]any{"city": "Paris", "days": 3.0}
	cases := []struct {
		name     string
		format   ToolFormat
		thinking bool
		in       string
		want     []seg
	}{
		{"plain", ToolNone, false, "Hello, world!\n\nSecond paragraph.", []seg{text("Hello, world!\n\nSecond paragraph.")}},
		{"less-than in text", ToolHermes, false, "if a < b and c <tool x> <think", []seg{text("if a < b and c <tool x> <think")}},
		{"thinking block", ToolHermes, false, "<think>\nThe user wants X.\n</think>\n\nHere is X.", []seg{thinking("The user wants X."), text("Here is X.")}},
		{"thinking opened by prompt", ToolHermes, true, "Let me think.\n</think>\n\nAnswer.", []seg{thinking("Let me think."), text("Answer.")}},
		{"unclosed thinking", ToolHermes, true, "still thinking <", []seg{thinking("still thinking <")}},
		{"empty thinking (enable_thinking=false)", ToolHermes, false, "<think>\n\n</think>\n\nHi", []seg{text("Hi")}},
		{"one call", ToolHermes, false, weatherCall, []seg{call("get_weather", paris)}},
		{"text, call, text after", ToolHermes, false, "Let me check.\n" + weatherCall + "\nIt is sunny.", []seg{text("Let me check."), call("get_weather", paris), text("It is sunny.")}},
		{"multiple calls", ToolHermes, false, weatherCall + "\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.go\"}}\n</tool_call>",
			[]seg{call("get_weather", paris), call("read_file", map[string]any{"path": "a.go"})}},
		{"thinking then call", ToolHermes, true, "I need the weather.\n</think>\n\n" + weatherCall, []seg{thinking("I need the weather."), call("get_weather", paris)}},
		{"tags inside thinking are thinking", ToolHermes, false, "<think>maybe <tool_call> later</think>ok", []seg{thinking("maybe <tool_call> later"), text("ok")}},
		{"malformed JSON", ToolHermes, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>\nsorry",
			[]seg{bad("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>"), text("sorry")}},
		{"call without name", ToolHermes, false, "<tool_call>{\"arguments\": {}}</tool_call>", []seg{bad("<tool_call>{\"arguments\": {}}</tool_call>")}},
		{"arguments not an object", ToolHermes, false, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", []seg{bad("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>")}},
		{"arguments as JSON string", ToolHermes, false, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", []seg{call("f", map[string]any{"x": 1.0})}},
		{"no arguments", ToolHermes, false, "<tool_call>{\"name\": \"now\"}</tool_call>", []seg{call("now", map[string]any{})}},
		{"unterminated valid call", ToolHermes, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"</tool\"}}\n", []seg{call("f", map[string]any{"a": "</tool"})}},
		{"unterminated broken call", ToolHermes, false, "<tool_call>\n{\"name\": \"f\", \"argu", []seg{bad("<tool_call>\n{\"name\": \"f\", \"argu")}},
		{"partial open tag at end", ToolHermes, false, "see <tool_", []seg{text("see <tool_")}},
		{"format none leaves tags as text", ToolNone, false, weatherCall, []seg{text(weatherCall)}},
		{"unicode", ToolHermes, false, "<think>思考中…</think>答えは 🚀 です", []seg{thinking("思考中…"), text("答えは 🚀 です")}},
		{"llama json call", ToolLlama3JSON, false, `{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}`, []seg{call("get_weather", paris)}},
		{"llama python_tag call", ToolLlama3JSON, false, `<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}`, []seg{call("get_weather", paris)}},
		{"llama two calls", ToolLlama3JSON, false, `{"name": "a", "parameters": {"s": "}{"}}; {"name": "b", "parameters": {}}`,
			[]seg{call("a", map[string]any{"s": "}{"}), call("b", map[string]any{})}},
		{"llama JSON answer is text", ToolLlama3JSON, false, `{"answer": 42}`, []seg{text(`{"answer": 42}`)}},
		{"llama brace prose is text", ToolLlama3JSON, false, `{this is not json} ok`, []seg{text(`{this is not json} ok`)}},
		{"llama call mid-answer is text", ToolLlama3JSON, false, `Use {"name": "x", "parameters": {}}`, []seg{text(`Use {"name": "x", "parameters": {}}`)}},
		{"llama unterminated call", ToolLlama3JSON, false, `{"name": "f", "parameters": {"a": 1`, []seg{bad(`{"name": "f", "parameters": {"a": 1`)}},
		{"llama bad call", ToolLlama3JSON, false, `{"name": 5, "parameters": {}} trailing`, []seg{bad(`{"name": 5, "parameters": {}}`), text("trailing")}},
		{"llama python builtin", ToolLlama3JSON, false, `<|python_tag|>brave_search.call(query="x")`, []seg{bad(`<|python_tag|>brave_search.call(query="x")`)}},
		{"llama text then call text", ToolLlama3JSON, false, "  \n" + `{"name": "f", "parameters": {"x": "y"}}` + "\nDone.", []seg{call("f", map[string]any{"x": "y"}), text("Done.")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for how, chunks := range splittings(c.in, 8) {
				got := normalize(parseChunks(c.format, c.thinking, chunks))
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("fed %s (%d chunks):\n got %v\nwant %v", how, len(chunks), got, c.want)
				}
			}
		})
	}
}

func TestStreamParserNeverLeaksPartialTags(t *testing.T) {
	// While a delta ends in a prefix of a tag, that prefix must not be emitted.
	p := NewStreamParser(ToolHermes, false)
	var emitted strings.Builder
	for _, d := range []string{"Checking", " now <", "tool", "_ca", "ll>\n{\"name\": \"f\", ", "\"arguments\": {}}\n</tool_", "call>"} {
		for _, s := range p.Feed(d) {
			if s.Kind == SegText {
				emitted.WriteString(s.Text)
			}
		}
		if strings.Contains(emitted.String(), "<") {
			t.Fatalf("after %q emitted partial tag text %q", d, emitted.String())
		}
	}
	segs := p.Flush()
	if emitted.String() != "Checking now" || len(segs) != 0 {
		t.Fatalf("emitted %q, flush %v", emitted.String(), segs)
	}
}

func TestStreamParserKeepsRunesWhole(t *testing.T) {
	in := "<think>日本語の思考</think>答え 🚀 é" + weatherCall + "ñ"
	p := NewStreamParser(ToolHermes, false)
	var segs []Segment
	for i := 0; i < len(in); i++ {
		segs = append(segs, p.Feed(in[i:i+1])...)
	}
	segs = append(segs, p.Flush()...)
	for _, s := range segs {
		if !utf8.ValidString(s.Text) {
			t.Fatalf("segment %v(%q) splits a UTF-8 character", s.Kind, s.Text)
		}
	}
}

func TestMalformedCallError(t *testing.T) {
	segs := parseChunks(ToolHermes, false, []string{"<tool_call>{bad}</tool_call>"})
	if len(segs) != 1 || segs[0].Kind != SegToolError {
		t.Fatalf("got %v", segs)
	}
	var me *MalformedCallError
	if e, ok := segs[0].Err.(*MalformedCallError); !ok {
		t.Fatalf("Err is %T", segs[0].Err)
	} else {
		me = e
	}
	if me.Raw != "<tool_call>{bad}</tool_call>" || !strings.Contains(me.Error(), "invalid JSON") {
		t.Fatalf("error %q raw %q", me.Error(), me.Raw)
	}
}

func TestStreamParserHugeCall(t *testing.T) {
	p := NewStreamParser(ToolHermes, false)
	p.Feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"")
	segs := feedRepeated(p, strings.Repeat("a", 64<<10), 20)
	segs = append(segs, p.Flush()...)
	if len(segs) == 0 || segs[0].Kind != SegToolError || !strings.Contains(segs[0].Err.Error(), "within") {
		t.Fatalf("want a size error, got %d segments", len(segs))
	}
}

// FuzzStreamParser: never panics, and the segments do not depend on how
// the text is split into deltas.
func FuzzStreamParser(f *testing.F) {
	seeds := []string{
		weatherCall, "<think>a</think>b", "x <tool_call>{\"name\":\"f\"}</tool_call> y", "<tool_call>{",
		`{"name": "f", "parameters": {}}; {"name"`, "<|python_tag|>{\"name\": \"a\"}", "<<think>></think>",
		"</think><think><tool_call></tool_call>", "{\"a\": \"\\\"}\"}", "  \n ;{ }",
		"<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
	}
	for i, s := range seeds {
		f.Add(s, uint8(i%4), int64(i))
	}
	f.Fuzz(func(t *testing.T, s string, format uint8, seed int64) {
		if !utf8.ValidString(s) {
			return
		}
		ft := ToolFormat(format % 4) // none, hermes, llama3-json, qwen-xml
		for _, thinking := range []bool{false, true} {
			whole := normalize(parseChunks(ft, thinking, []string{s}))
			chunks := randomChunks(s, seed)
			got := normalize(parseChunks(ft, thinking, chunks))
			if !reflect.DeepEqual(got, whole) {
				t.Fatalf("format %v thinking %v: chunked %q\n got %v\nwhole %v", ft, thinking, chunks, got, whole)
			}
		}
	})
}
