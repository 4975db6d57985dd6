package engine

import (
	"math/rand/v2"
	"testing"
)

// TestCallStreamer feeds answers in random chunks: the streamed deltas
// name each Hermes call first and their arguments, concatenated, are the
// model's argument text; calls that cannot be streamed get no deltas.
func TestCallStreamer(t *testing.T) {
	type call struct{ name, args string }
	cases := []struct {
		name     string
		thinking bool
		xml      bool
		text     string
		want     []call
	}{
		{"one call", false, false, `Let me look.<tool_call>
{"name": "read_file", "arguments": {"path": "a.go", "lines": [1, 2], "q": "x}\"{"}}
</tool_call>`, []call{{"read_file", `{"path": "a.go", "lines": [1, 2], "q": "x}\"{"}`}}},
		{"two calls", false, false, `<tool_call>{"name":"a","arguments":{}}</tool_call> and <tool_call>{"name": "b\u0021", "parameters": {"n": {"m": 1}}}</tool_call>`,
			[]call{{"a", `{}`}, {"b!", `{"n": {"m": 1}}`}}},
		{"arguments first", false, false, `<tool_call>{"arguments": {"x": 1}, "name": "a"}</tool_call>`, nil},
		{"arguments a string", false, false, `<tool_call>{"name": "a", "arguments": "{\"x\": 1}"}</tool_call>`, []call{{"a", ``}}},
		{"in thinking", true, false, `<tool_call>{"name": "a", "arguments": {}}</tool_call></think>ok<tool_call>{"name": "b", "arguments": {"y": 2}}</tool_call>`,
			[]call{{"b", `{"y": 2}`}}},
		{"no call", false, false, `{"name": "a", "arguments": {}} is JSON`, nil},
		// Qwen's XML calls: the name goes ahead, then the arguments as JSON
		// up to where the call's end is certain (the rest comes with the
		// complete call: TestXMLCallStream).
		{"xml", true, true, "<think>x</think>\n\n<tool_call>\n<function=read_file>\n<parameter=path>\n</tool_call>\n</parameter>\n</function>\n</tool_call> and <tool_call>\n<function= ls >\n</function>\n</tool_call>",
			[]call{{"read_file", `{"path":"</tool_call>"`}, {"ls", `{`}}},
		{"xml malformed", false, true, "<tool_call>\n<function=a\nb>\n</function>\n</tool_call><tool_call><parameter=x>", nil},
	}
	// An earlier <tool_call> that the parser did not count as a call (its
	// index stays 0: malformed, or still open because the tag was inside a
	// value): the next one is not streamed, since it may be part of it.
	cs := &callStreamer{}
	var deltas []*ToolCallDelta
	for _, chunk := range []string{`<tool_call>{"arguments": {"text": "`, `</tool_call> <tool_call>{"name": "x", "arguments": {"a": 1}}`, `"}, "name": "w"}</tool_call>`} {
		if d := cs.feed(chunk, 0); d != nil {
			deltas = append(deltas, d)
		}
	}
	if len(deltas) != 0 {
		t.Errorf("deltas %+v inside an unparsed call", deltas[0])
	}
	for _, tc := range cases {
		for seed := range uint64(50) {
			r := rand.New(rand.NewPCG(seed, 1))
			cs := &callStreamer{thinking: tc.thinking, xml: tc.xml}
			var got []call
			for rest := tc.text; rest != ""; {
				n := min(len(rest), 1+r.IntN(6))
				if d := cs.feed(rest[:n], len(got)); d != nil {
					if d.Name != "" {
						if d.Index != len(got) {
							t.Fatalf("%s: call %q has index %d, want %d", tc.name, d.Name, d.Index, len(got))
						}
						got = append(got, call{name: d.Name})
					}
					if len(got) == 0 {
						t.Fatalf("%s: arguments %q before a name", tc.name, d.Args)
					}
					got[len(got)-1].args += d.Args
				}
				rest = rest[n:]
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%s seed %d: calls %+v, want %+v", tc.name, seed, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("%s seed %d: call %d %+v, want %+v", tc.name, seed, i, got[i], tc.want[i])
				}
			}
		}
	}
}

// FuzzCallStreamer: any answer text in any chunking never panics, every
// call's first delta names it, indexes only grow, and the arguments
// streamed for a call are one JSON object prefix (whole when closed).
func FuzzCallStreamer(f *testing.F) {
	f.Add(`<tool_call>{"name": "a", "arguments": {"x": [1, "}"]}}</tool_call>`, uint64(1), false)
	f.Add(`<tool_call>{"name": "0", "arguments": {"0"000000"000`, uint64(57), false) // the parser completes mid-arguments
	f.Add("<think>a</think><tool_call>\n<function=f>\n<parameter=p>\nv\n</parameter>\n</function>\n</tool_call>", uint64(2), true)
	f.Fuzz(func(t *testing.T, text string, seed uint64, xml bool) {
		if len(text) > 4096 {
			return
		}
		r := rand.New(rand.NewPCG(seed, 7))
		cs := &callStreamer{thinking: seed%2 == 0, xml: xml}
		index, open := 0, -1
		args := map[int]string{}
		for rest := text; rest != ""; {
			n := min(len(rest), 1+r.IntN(8))
			d := cs.feed(rest[:n], index)
			rest = rest[n:]
			if d != nil {
				if d.Name != "" {
					if d.Index <= open {
						t.Fatalf("call %d named after call %d", d.Index, open)
					}
					open = d.Index
				} else if d.Index != open {
					t.Fatalf("arguments for call %d while call %d is open", d.Index, open)
				}
				args[d.Index] += d.Args
			}
			if open == index && r.IntN(4) == 0 {
				index++ // the parser completes the call at some point
			}
		}
		for i, a := range args {
			if a == "" {
				continue
			}
			var j jsonDepth
			if n, ok := j.feed(a); !ok || n != len(a) {
				t.Fatalf("call %d: arguments %q are not one object prefix", i, a)
			}
		}
	})
}
