package server

import (
	"encoding/json"
	"testing"
)

var parseSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true},"stop":["x","y"],"max_tokens":5,"temperature":0.5,"top_p":0.9,"seed":-3,"logprobs":true,"top_logprobs":2}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto"}`,
	`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}],"is_error":true},{"type":"text","text":"q"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"tool_use","id":"t","name":"f","input":{"x":[1,2]}}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"stop_sequences":["z"],"top_k":3}`,
	`{"messages":5}`, `[]`, `null`, `{"model":"m","messages":[{"role":"user","content":"hi"}]}{}`, `{"stop":7}`, `{"tool_choice":{"type":"function"}}`,
}

// FuzzParseRequests: any body gives either a request or one 4xx error with
// a message, for both APIs; never a panic.
func FuzzParseRequests(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	lim := Limits{}.withDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(what string, ok bool, err *apiError) {
			if (err == nil) == !ok {
				t.Fatalf("%s: result and error disagree (%v)", what, err)
			}
			if err != nil {
				if err.Status < 400 || err.Status >= 500 || err.Message == "" {
					t.Fatalf("%s: error %d %q", what, err.Status, err.Message)
				}
				if _, jerr := json.Marshal(err.body(openAIStyle)); jerr != nil {
					t.Fatalf("%s: error body does not encode: %v", what, jerr)
				}
			}
		}
		p, err := parseChatRequest(body, lim)
		check("chat", p != nil, err)
		if p != nil {
			if len(p.req.Messages) == 0 || len(p.req.Messages) > lim.MaxMessages || p.req.MaxTokens < 0 || len(p.req.Sampling.Stop) > lim.MaxStops {
				t.Fatalf("chat: accepted out-of-bounds request %+v", p.req)
			}
		}
		for _, countOnly := range []bool{false, true} {
			m, err := parseMessagesRequest(body, lim, countOnly)
			check("messages", m != nil, err)
			if m != nil && (len(m.req.Messages) == 0 || m.req.MaxTokens < 0 || (!countOnly && m.req.MaxTokens == 0)) {
				t.Fatalf("messages: accepted out-of-bounds request %+v", m.req)
			}
		}
	})
}
