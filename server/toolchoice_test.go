package server

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// Two tools and a prompt that asks for neither: without a forced call
// SmolLM2-135M answers in text.
const (
	forceTools = `[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},` +
		`{"type":"function","function":{"name":"add","description":"Add two integers","parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":0},"b":{"type":"integer"}},"required":["a","b"]}}}]`
	forceAnTools = `[{"name":"get_weather","description":"Get the current weather in a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`{"name":"add","description":"Add two integers","input_schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}]`
	forcePrompt = `{"role":"user","content":"Tell me a short story about a cat."}`
	forceBody   = `{"model":"smollm2","temperature":0,"max_tokens":80,"tools":%s,"messages":[%s]%s}`
)

// checkForcedArgs checks a call's arguments against the two tools'
// schemas: get_weather's city a string and nothing else, add's a and b
// integers. add's schema uses maxLength, which the constraint does not
// enforce, so its arguments are held to a JSON object only: the check is
// that they parse.
func checkForcedArgs(t *testing.T, name, args string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		t.Fatalf("%s arguments %q do not parse: %v", name, args, err)
	}
	switch name {
	case "get_weather":
		if _, ok := m["city"].(string); !ok || len(m) != 1 {
			t.Errorf("get_weather arguments %q do not match its schema", args)
		}
	case "add":
	default:
		t.Errorf("call of %q, not an offered tool", name)
	}
}

func checkAddArgs(t *testing.T, args string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		t.Fatalf("add arguments %q do not parse: %v", args, err)
	}
	for _, k := range []string{"a", "b"} {
		f, ok := m[k].(float64)
		if !ok || f != math.Trunc(f) {
			t.Errorf("add arguments %q: %s is not an integer", args, k)
		}
	}
	if len(m) != 2 {
		t.Errorf("add arguments %q: keys beyond a and b", args)
	}
}

// TestToolChoiceForcesCall: tool_choice required or a named function
// makes even SmolLM2-135M answer with a well-formed call of the right
// tool whose arguments match the schema, streamed or not; auto leaves it
// answering in text.
func TestToolChoiceForcesCall(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	addTools := strings.Replace(forceTools, `,"minimum":0`, "", 1)
	type oaCall struct {
		Function struct{ Name, Arguments string }
	}
	var cc struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string
				ToolCalls []oaCall `json:"tool_calls"`
			}
		}
	}
	resp, body := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(forceBody, forceTools, forcePrompt, ""))
	if err := json.Unmarshal(body, &cc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if len(cc.Choices[0].Message.ToolCalls) != 0 {
		t.Logf("note: the model calls a tool unforced: %s", body)
	}
	for _, tc := range []struct {
		name, tools, choice, want string
	}{
		{"required", forceTools, `"required"`, ""},
		{"named weather", forceTools, `{"type":"function","function":{"name":"get_weather"}}`, "get_weather"},
		{"named add", addTools, `{"type":"function","function":{"name":"add"}}`, "add"},
		{"named add with minimum", forceTools, `{"type":"function","function":{"name":"add"}}`, "add"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := `,"tool_choice":` + tc.choice
			resp, body := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(forceBody, tc.tools, forcePrompt, extra))
			cc.Choices = nil
			if err := json.Unmarshal(body, &cc); err != nil || resp.StatusCode != 200 || len(cc.Choices) != 1 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			c := cc.Choices[0]
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("no single call: %s", body)
			}
			call := c.Message.ToolCalls[0].Function
			t.Logf("%s(%s)", call.Name, call.Arguments)
			if tc.want != "" && call.Name != tc.want {
				t.Fatalf("called %q, want %q", call.Name, tc.want)
			}
			checkForcedArgs(t, call.Name, call.Arguments)
			if tc.tools == addTools {
				checkAddArgs(t, call.Arguments)
			}
			// Streamed: the same call, its arguments in deltas.
			_, body = post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(forceBody, tc.tools, forcePrompt, extra+`,"stream":true`))
			calls, _ := accumulateToolCalls(t, body)
			if len(calls) != 1 || calls[0].name != call.Name || calls[0].args != call.Arguments && !sameJSON(calls[0].args, call.Arguments) ||
				!strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
				t.Errorf("streamed %+v, want %s(%s):\n%s", calls, call.Name, call.Arguments, body)
			}
		})
	}

	// Anthropic: any and tool.
	for _, tc := range []struct{ choice, want string }{
		{`{"type":"any"}`, ""},
		{`{"type":"tool","name":"add"}`, "add"},
		{`{"type":"tool","name":"get_weather"}`, "get_weather"},
	} {
		body := fmt.Sprintf(forceBody, forceAnTools, forcePrompt, `,"tool_choice":`+tc.choice)
		resp, b := post(t, ts.URL+"/v1/messages", body)
		var am struct {
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type, Name string
				Input      json.RawMessage
			}
		}
		if err := json.Unmarshal(b, &am); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.choice, resp.StatusCode, b)
		}
		if am.StopReason != "tool_use" || len(am.Content) != 1 || am.Content[0].Type != "tool_use" || tc.want != "" && am.Content[0].Name != tc.want {
			t.Fatalf("%s: %s", tc.choice, b)
		}
		checkForcedArgs(t, am.Content[0].Name, string(am.Content[0].Input))
		if am.Content[0].Name == "add" {
			checkAddArgs(t, string(am.Content[0].Input))
		}
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
