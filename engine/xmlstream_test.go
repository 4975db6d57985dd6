package engine

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/chat"
)

var xmlTestTools = []Tool{
	{Name: "write_file", Parameters: map[string]any{"type": "object", "properties": map[string]any{
		"path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"},
		"mode": map[string]any{"type": "integer"}, "force": map[string]any{"type": "boolean"},
		"opts": map[string]any{"type": "object"}}}},
	{Name: "ls", Parameters: map[string]any{"type": "object"}},
}

// streamedCall is what a client of the stream sees of one call.
type streamedCall struct {
	name, args string
	deltas     int
}

// runXMLStream feeds an answer to the output parser and the call streamer
// in the chunks cut gives, as the batcher does (deltas before the
// parser's events, the completing delta before each call), and returns the
// streamed calls by index and the parsed calls.
func runXMLStream(text string, thinking bool, cut func(rest string) int) (map[int]*streamedCall, []*ToolCall) {
	p := chat.NewStreamParser(chat.ToolQwenXML, thinking)
	p.SetTools(xmlTestTools)
	op := &outputParser{p: p}
	cs := &callStreamer{thinking: thinking, xml: true, props: toolProps(xmlTestTools), xmlAt: -1}
	streams := map[int]*streamedCall{}
	var calls []*ToolCall
	take := func(d *ToolCallDelta) {
		if d == nil {
			return
		}
		sc := streams[d.Index]
		if sc == nil {
			sc = &streamedCall{}
			streams[d.Index] = sc
		}
		if d.Name != "" {
			sc.name = d.Name
		}
		sc.args += d.Args
		if d.Args != "" {
			sc.deltas++
		}
	}
	events := func(evs []Event) {
		for _, ev := range evs {
			if ev.Kind == EventToolCall {
				take(cs.complete(ev.ToolCall))
				calls = append(calls, ev.ToolCall)
			}
		}
	}
	for rest := text; rest != ""; {
		n := cut(rest)
		take(cs.feed(rest[:n], op.calls))
		events(op.feed(rest[:n]))
		rest = rest[n:]
	}
	events(op.flush())
	return streams, calls
}

// TestXMLCallStream: Qwen XML calls fed byte by byte and in random
// chunks stream their arguments as JSON pieces whose concatenation is the
// call's ArgsJSON exactly (golden), which decodes to its Arguments.
func TestXMLCallStream(t *testing.T) {
	cases := []struct {
		name     string
		thinking bool
		text     string
		want     []string // ArgsJSON of each call, in order
		minDelta int      // byte by byte, the first call's argument deltas at least
	}{
		{"strings and typed values", false, "Writing it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.go\n</parameter>\n<parameter=mode>\n420\n</parameter>\n<parameter=content>\npackage a\n\nfunc A() string { return \"<b>\\t\" }\n\n</parameter>\n<parameter=force>\nTrue\n</parameter>\n<parameter=opts>\n{\"x\": [1, \"y\"]}\n</parameter>\n</function>\n</tool_call>",
			[]string{`{"path":"src/a.go","mode":420,"content":"package a\n\nfunc A() string { return \"<b>\\t\" }\n","force":true,"opts":{"x":[1,"y"]}}`}, 20},
		{"tags inside a value", false, "<tool_call>\n<function=write_file>\n<parameter=content>\na</parameter>b</tool_call>c</parameter> d\n</parameter>\n</function>\n</tool_call>",
			[]string{`{"content":"a</parameter>b</tool_call>c</parameter> d"}`}, 3},
		{"no parameters, then a second call", true, "<think>hmm</think>\n\n<tool_call>\n<function=ls>\n</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n<parameter=path>x</parameter></function></tool_call>",
			[]string{`{}`, `{"path":"x"}`}, 0},
		{"unicode and a missing </function>", false, "<tool_call>\n<function=write_file>\n<parameter=content>\nhé 日本 \x00 \u2028 ok\n</parameter>\n</tool_call>",
			[]string{`{"content":"hé 日本 \u0000 \u2028 ok"}`}, 5},
		{"unknown parameter and a typed value that does not parse", false, "<tool_call>\n<function=write_file>\n<parameter=mode>\nrw\n</parameter>\n<parameter=extra>\n1\n</parameter>\n</function>\n</tool_call>",
			[]string{`{"mode":"rw","extra":"1"}`}, 2},
		{"ends without </tool_call>", false, "<tool_call>\n<function=write_file>\n<parameter=path>\nnotes.txt\n</parameter>\n",
			[]string{`{"path":"notes.txt"}`}, 2},
	}
	for _, tc := range cases {
		cuts := map[string]func(string) int{"byte by byte": func(string) int { return 1 }, "whole": func(r string) int { return len(r) }}
		for seed := range uint64(20) {
			r := rand.New(rand.NewPCG(seed, 3))
			cuts["random "+string(rune('a'+seed))] = func(rest string) int { return min(len(rest), 1+r.IntN(12)) }
		}
		for cutName, cut := range cuts {
			streams, calls := runXMLStream(tc.text, tc.thinking, cut)
			if len(calls) != len(tc.want) {
				t.Fatalf("%s (%s): %d calls, want %d", tc.name, cutName, len(calls), len(tc.want))
			}
			for i, c := range calls {
				if c.ArgsJSON != tc.want[i] {
					t.Fatalf("%s (%s): call %d ArgsJSON\n%s\nwant\n%s", tc.name, cutName, i, c.ArgsJSON, tc.want[i])
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(c.ArgsJSON), &args); err != nil || !reflect.DeepEqual(args, normalizeArgs(c.Arguments)) {
					t.Fatalf("%s: ArgsJSON %s does not decode to the arguments %v (%v)", tc.name, c.ArgsJSON, c.Arguments, err)
				}
				sc := streams[i]
				if sc == nil && cutName == "whole" && i > 0 {
					continue // one chunk held two calls: the second is not streamed, it comes whole
				}
				if sc == nil || sc.name != c.Name || sc.args != c.ArgsJSON {
					t.Fatalf("%s (%s): call %d streamed %+v, want %s %s", tc.name, cutName, i, sc, c.Name, c.ArgsJSON)
				}
			}
			if cutName == "byte by byte" && streams[0].deltas < tc.minDelta {
				t.Errorf("%s: %d argument deltas byte by byte, want at least %d", tc.name, streams[0].deltas, tc.minDelta)
			}
		}
	}
}

// normalizeArgs round-trips arguments through JSON (numbers as float64).
func normalizeArgs(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// FuzzXMLCallStream: any answer in any chunking never panics, and the
// arguments streamed for every call the parser completes add up to its
// ArgsJSON exactly (so no delta was one the call contradicts).
func FuzzXMLCallStream(f *testing.F) {
	f.Add("<tool_call>\n<function=write_file>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>", uint64(1), false)
	f.Add("<think>x</think><tool_call><function=write_file><parameter=content>\n</parameter>\u00a0<parameter=x>y</parameter></tool_call>", uint64(2), true)
	f.Add("<tool_call>\n<function=write_file>\n<parameter=mode>\n7\n</parameter> \n</tool_call><tool_call><function=ls></function>", uint64(3), false)
	f.Add("<tool_call><function=write_file><parameter=content>\xe6\x97</parameter>\xa5</parameter></function></tool_call>", uint64(4), false)
	f.Fuzz(func(t *testing.T, text string, seed uint64, thinking bool) {
		if len(text) > 4096 {
			return
		}
		r := rand.New(rand.NewPCG(seed, 9))
		streams, calls := runXMLStream(text, thinking, func(rest string) int { return min(len(rest), 1+r.IntN(9)) })
		for i, c := range calls {
			if sc := streams[i]; sc != nil && sc.args != "" && sc.args != c.ArgsJSON {
				t.Fatalf("call %d (%s): streamed %q, parsed %q", i, c.Name, sc.args, c.ArgsJSON)
			}
		}
		for i, sc := range streams {
			if i >= len(calls) && strings.TrimSpace(sc.args) != "" && !strings.HasPrefix(sc.args, "{") {
				t.Fatalf("call %d: streamed %q does not start an object", i, sc.args)
			}
		}
	})
}
