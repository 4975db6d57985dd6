package chat

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// xmlTools are the schemas the XML tests type values with.
var xmlTools = []Tool{
	{Name: "get_weather", Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"},
		"metric": map[string]any{"type": "boolean"}, "ratio": map[string]any{"type": "number"},
	}}},
	{Name: "edit_file", Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"path": map[string]any{"type": "string"}, "edits": map[string]any{"type": "array"},
		"options": map[string]any{"type": "object"}, "limit": map[string]any{"type": []any{"integer", "null"}},
		"either": map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "boolean"}}},
	}}},
}

func parseXMLChunks(thinking bool, chunks []string) []Segment {
	p := NewStreamParser(ToolQwenXML, thinking)
	p.SetTools(xmlTools)
	var all []Segment
	for _, c := range chunks {
		all = append(all, p.Feed(c)...)
	}
	return append(all, p.Flush()...)
}

// xmlCall writes a call the way the Qwen3.5 template renders one.
func xmlCall(name string, params ...string) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + name + ">\n")
	for i := 0; i+1 < len(params); i += 2 {
		b.WriteString("<parameter=" + params[i] + ">\n" + params[i+1] + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

func TestXMLToolCalls(t *testing.T) {
	weather := xmlCall("get_weather", "city", "Paris", "days", "3", "metric", "True")
	paris := map[string]any{"city": "Paris", "days": 3.0, "metric": true}
	cases := []struct {
		name     string
		thinking bool
		in       string
		want     []seg
	}{
		{"one call", false, weather, []seg{call("get_weather", paris)}},
		{"thinking, text, call", true, "The user wants weather.\n</think>\n\nLet me check.\n\n" + weather,
			[]seg{thinking("The user wants weather."), text("Let me check."), call("get_weather", paris)}},
		{"two calls and text after", false, weather + "\n" + xmlCall("edit_file", "path", "a.go", "edits", `[{"old": "a", "new": "b"}]`, "options", `{"dry": false}`) + "\nDone.",
			[]seg{call("get_weather", paris), call("edit_file", map[string]any{"path": "a.go",
				"edits": []any{map[string]any{"old": "a", "new": "b"}}, "options": map[string]any{"dry": false}}), text("Done.")}},
		{"multi-line string value kept whole", false, xmlCall("edit_file", "path", "line 1\n\n  line 3  \n"),
			[]seg{call("edit_file", map[string]any{"path": "line 1\n\n  line 3  \n"})}},
		{"a string that looks like a number stays a string", false, xmlCall("get_weather", "city", "42"),
			[]seg{call("get_weather", map[string]any{"city": "42"})}},
		{"value holding the closing tags", false, xmlCall("edit_file", "path", "a </parameter> b </tool_call> c </function> d"),
			[]seg{call("edit_file", map[string]any{"path": "a </parameter> b </tool_call> c </function> d"})}},
		{"value holding </tool_call> at its end", false, xmlCall("edit_file", "path", "</tool_call>"),
			[]seg{call("edit_file", map[string]any{"path": "</tool_call>"})}},
		{"no newlines around values, no </function>", false, "<tool_call><function=get_weather><parameter=city>Oslo</parameter><parameter=ratio>0.5</parameter></tool_call>",
			[]seg{call("get_weather", map[string]any{"city": "Oslo", "ratio": 0.5})}},
		{"no parameters", false, "<tool_call>\n<function=now>\n</function>\n</tool_call>", []seg{call("now", map[string]any{})}},
		{"unknown tool: values are text", false, xmlCall("other", "n", "3"), []seg{call("other", map[string]any{"n": "3"})}},
		{"typed by schema", false, xmlCall("edit_file", "limit", "None", "either", "false"),
			[]seg{call("edit_file", map[string]any{"limit": nil, "either": false})}},
		{"wrong type stays text", false, xmlCall("get_weather", "days", "three", "metric", "yes"),
			[]seg{call("get_weather", map[string]any{"days": "three", "metric": "yes"})}},
		{"unterminated complete call", false, strings.TrimSuffix(weather, "</tool_call>"), []seg{call("get_weather", paris)}},
		{"unterminated open value", false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
			[]seg{bad("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar")}},
		{"no function tag", false, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>\nsorry",
			[]seg{bad("<tool_call>\n{\"name\": \"f\"}\n</tool_call>"), text("sorry")}},
		{"junk between parameters", false, "<tool_call>\n<function=f>\njunk\n</function>\n</tool_call>ok",
			[]seg{bad("<tool_call>\n<function=f>\njunk\n</function>\n</tool_call>"), text("ok")}},
		{"parameter twice", false, xmlCall("f", "a", "1", "a", "2"), []seg{bad(xmlCall("f", "a", "1", "a", "2"))}},
		{"empty function name", false, "<tool_call><function=>\n</function></tool_call>", []seg{bad("<tool_call><function=>\n</function></tool_call>")}},
		{"empty call at end", false, "x <tool_call>\n", []seg{text("x"), bad("<tool_call>\n")}},
		{"a tag mid-line in thinking is thinking", true, "maybe " + weather + "\n</think>\nno", []seg{thinking("maybe " + weather), text("no")}},
		{"a call ends thinking without </think>", true, weather, []seg{call("get_weather", paris)}},
		{"a call on its own line ends thinking", true, "Need the weather.\n  " + weather + "\nThen more.",
			[]seg{thinking("Need the weather."), call("get_weather", paris), text("Then more.")}},
		{"a call after </think> in thinking opened by the output", false, "<think>\nhmm\n" + weather,
			[]seg{thinking("hmm"), call("get_weather", paris)}},
		{"partial tag at end is text", false, "see <tool_", []seg{text("see <tool_")}},
		{"unicode", false, xmlCall("get_weather", "city", "東京 🚀"), []seg{call("get_weather", map[string]any{"city": "東京 🚀"})}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for how, chunks := range splittings(c.in, 8) {
				got := normalize(parseXMLChunks(c.thinking, chunks))
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("fed %s (%d chunks):\n got %v\nwant %v", how, len(chunks), got, c.want)
				}
			}
			// split at every byte boundary into two deltas
			for i := 1; i < len(c.in); i++ {
				got := normalize(parseXMLChunks(c.thinking, []string{c.in[:i], c.in[i:]}))
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("split at byte %d:\n got %v\nwant %v", i, got, c.want)
				}
			}
		})
	}
}

// Malformed XML calls say what is wrong, in the XML format, so the agent
// can show the model a call in the format it was taught.
func TestXMLMalformedCallError(t *testing.T) {
	segs := parseXMLChunks(false, []string{"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>\n</tool_call>"})
	if len(segs) != 1 || segs[0].Kind != SegToolError {
		t.Fatalf("got %v", segs)
	}
	var me *MalformedCallError
	if !errors.As(segs[0].Err, &me) || me.Format != ToolQwenXML || !strings.Contains(me.Reason, "given twice") {
		t.Fatalf("error %#v", segs[0].Err)
	}
	if ex := CallExample(me.Format); !strings.Contains(ex, "<function=read_file>") {
		t.Fatalf("CallExample(%v) = %q", me.Format, ex)
	}
}

func TestXMLHugeCall(t *testing.T) {
	p := NewStreamParser(ToolQwenXML, false)
	p.Feed("<tool_call>\n<function=f>\n<parameter=x>\n")
	segs := feedRepeated(p, strings.Repeat("</tool_call>a", 5<<10), 20)
	segs = append(segs, p.Feed("tail")...)
	segs = append(segs, p.Flush()...)
	n := normalize(segs)
	if len(n) != 2 || n[0].Kind != SegToolError || !strings.Contains(segs[0].Err.Error(), `parameter "x" of "f" not closed by </parameter> within`) ||
		!strings.HasSuffix(n[1].Text, "a</tool_call>atail") {
		t.Fatalf("want a size error then the text, got %d segments (%v)", len(n), segs[0].Err)
	}
}

func TestTypedValue(t *testing.T) {
	cases := []struct {
		schema map[string]any
		raw    string
		want   any
	}{
		{nil, " 3 ", " 3 "},
		{map[string]any{"type": "string"}, "true", "true"},
		{map[string]any{"type": "integer"}, " 3\n", 3.0},
		{map[string]any{"type": "integer"}, "3.5", "3.5"},
		{map[string]any{"type": "number"}, "-2.5e3", -2500.0},
		{map[string]any{"type": "boolean"}, "False", false},
		{map[string]any{"type": "boolean"}, "TRUE", true},
		{map[string]any{"type": "object"}, `{"a": [1, null]}`, map[string]any{"a": []any{1.0, nil}}},
		{map[string]any{"type": "object"}, `[1]`, `[1]`},
		{map[string]any{"type": "array"}, `["x"]`, []any{"x"}},
		{map[string]any{"type": "array"}, `null`, `null`},
		{map[string]any{"type": []any{"string", "null"}}, "None", "None"},
		{map[string]any{"type": []any{"integer", "null"}}, "null", nil},
		{map[string]any{"oneOf": []any{map[string]any{"type": "boolean"}, map[string]any{"type": "array"}}}, "[true]", []any{true}},
	}
	for _, c := range cases {
		if got := TypedValue(c.schema, c.raw); !reflect.DeepEqual(got, c.want) {
			t.Errorf("TypedValue(%v, %q) = %#v, want %#v", c.schema, c.raw, got, c.want)
		}
	}
}

// The calls the Qwen3.5 template renders into history parse back to the
// same calls: what the model is shown is what it writes, and what the
// parser reads.
func TestXMLCallsRoundTripThroughTemplate(t *testing.T) {
	tmpl := loadTemplate(t, "qwen35")
	args := map[string]any{"city": "Paris\nFrance", "days": 3.0, "metric": false, "ratio": 0.25}
	edit := map[string]any{"path": "a </parameter> b", "edits": []any{map[string]any{"new": "y", "old": "x"}}, "options": map[string]any{"n": 1.5}, "limit": nil}
	msgs := []Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", Content: "Checking.", Reasoning: "think", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: args}, {Name: "edit_file", Arguments: edit}}},
	}
	out, err := tmpl.Render(msgs, xmlTools, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gen := out[strings.Index(out, "<|im_start|>assistant\n<think>\n")+len("<|im_start|>assistant\n<think>\n") : strings.LastIndex(out, "<|im_end|>")]
	got := normalize(parseXMLChunks(true, []string{gen}))
	want := []seg{thinking("think"), text("Checking."), call("get_weather", args), call("edit_file", edit)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered %q\nparsed %v\nwant   %v", gen, got, want)
	}
}

// FuzzXMLToolCalls: the XML parser never panics, gives the same segments
// however the text is split, and never drops text: every non-space byte of
// answer text that is not inside a call reaches a segment.
func FuzzXMLToolCalls(f *testing.F) {
	for i, s := range []string{
		xmlCall("get_weather", "city", "Paris", "days", "3"), "a <tool_call><function=f><parameter=x>1</parameter></tool_call> b",
		"<tool_call>\n<function=f>\n<parameter=x>\n</tool_call>\n</parameter>\n</function>\n</tool_call>",
		"<think>x</think><tool_call>", "<tool_call><function=", "x</parameter><parameter=", "<tool_call>\n\n</tool_call>t",
	} {
		f.Add(s, int64(i))
	}
	f.Fuzz(func(t *testing.T, s string, seed int64) {
		if !utf8.ValidString(s) {
			return
		}
		for _, thinking := range []bool{false, true} {
			whole := normalize(parseXMLChunks(thinking, []string{s}))
			chunks := randomChunks(s, seed)
			if got := normalize(parseXMLChunks(thinking, chunks)); !reflect.DeepEqual(got, whole) {
				t.Fatalf("thinking %v: chunked %q\n got %v\nwhole %v", thinking, chunks, got, whole)
			}
			if !thinking && !strings.Contains(s, "<") {
				var b strings.Builder
				for _, sg := range whole {
					b.WriteString(sg.Text)
				}
				if strings.Join(strings.Fields(b.String()), "") != strings.Join(strings.Fields(s), "") {
					t.Fatalf("text lost: %q gave %v", s, whole)
				}
			}
		}
	})
}
