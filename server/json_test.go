package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// chatContent posts a greedy chat request and returns the answer's text
// and finish reason.
func chatContent(t *testing.T, url, extra, prompt string, maxTokens int) (string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"smollm2","temperature":0,"max_tokens":%d,"messages":[{"role":"user","content":%q}]%s}`, maxTokens, prompt, extra)
	resp, b := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var cc struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct{ Content string }
		}
	}
	if err := json.Unmarshal(b, &cc); err != nil || len(cc.Choices) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	return cc.Choices[0].Message.Content, cc.Choices[0].FinishReason
}

// TestResponseFormatJSONObject: with json_object the greedy answer is a
// JSON object (the same prompt without it is not JSON at all).
func TestResponseFormatJSONObject(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	const prompt = "Give me the name and age of a person as JSON."
	free, _ := chatContent(t, ts.URL, "", prompt, 48)
	text, finish := chatContent(t, ts.URL, `,"response_format":{"type":"json_object"}`, prompt, 120)
	t.Logf("without: %q\nwith json_object: %q (%s)", free, text, finish)
	var obj map[string]any
	if err := json.Unmarshal([]byte(text), &obj); err != nil || finish != "stop" {
		t.Fatalf("json_object answer %q (finish %s) is not a JSON object: %v", text, finish, err)
	}
	if json.Valid([]byte(free)) {
		t.Logf("note: the unconstrained answer is JSON too")
	}
}

// TestResponseFormatJSONSchema: the answer is an object of the schema,
// required properties present with their types, nothing else.
func TestResponseFormatJSONSchema(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	schema := `{"type":"object","properties":{"city":{"type":"string"},"population":{"type":"integer"},
		"capital":{"type":"boolean"},"country":{"enum":["France","Spain","Italy"]},"sights":{"type":"array","items":{"type":"string"}}},
		"required":["city","population","country","capital"],"additionalProperties":false}`
	extra := fmt.Sprintf(`,"response_format":{"type":"json_schema","json_schema":{"name":"city","strict":true,"schema":%s}}`, schema)
	text, finish := chatContent(t, ts.URL, extra, "Describe Paris as JSON with its city name, population, country, whether it is a capital, and sights.", 160)
	t.Logf("json_schema answer: %q (%s)", text, finish)
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil || finish != "stop" {
		t.Fatalf("answer %q (finish %s): %v", text, finish, err)
	}
	if _, ok := got["city"].(string); !ok {
		t.Errorf("city %v is not a string", got["city"])
	}
	if n, ok := got["population"].(json.Number); !ok || strings.ContainsAny(string(n), ".eE") {
		t.Errorf("population %v is not an integer", got["population"])
	}
	if _, ok := got["capital"].(bool); !ok {
		t.Errorf("capital %v is not a boolean", got["capital"])
	}
	if c, _ := got["country"].(string); c != "France" && c != "Spain" && c != "Italy" {
		t.Errorf("country %v is not one of the enum", got["country"])
	}
	if s, ok := got["sights"]; ok {
		list, ok := s.([]any)
		for _, v := range list {
			if _, isStr := v.(string); !isStr {
				ok = false
			}
		}
		if !ok {
			t.Errorf("sights %v is not an array of strings", s)
		}
	}
	for k := range got {
		if !strings.Contains(schema, `"`+k+`"`) {
			t.Errorf("property %q is not in the schema", k)
		}
	}
}

// TestResponseFormatErrors: unsupported schemas are refused by keyword.
func TestResponseFormatErrors(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	cases := []struct{ format, want string }{
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}`, "unsupported keyword pattern at the root"},
		{`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"oneOf":[]}}}}}`, "unsupported keyword oneOf at /properties/a"},
		{`{"type":"json_schema","json_schema":{"name":"x"}}`, "needs json_schema.schema"},
		{`{"type":"yaml"}`, `supported are text, json_object and json_schema`},
	}
	for _, tc := range cases {
		resp, b := post(t, ts.URL+"/v1/chat/completions", `{"model":"smollm2","messages":[{"role":"user","content":"hi"}],"response_format":`+tc.format+`}`)
		if resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want 400 %q", tc.format, resp.StatusCode, b, tc.want)
		}
	}
}
