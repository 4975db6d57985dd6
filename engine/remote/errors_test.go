package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// These tests put ftchat's client against servers that misbehave in ways a
// real one does only sometimes (a key refused, a model gone, a queue full,
// a stream cut or stalled), each of which must end in one clear message.

const modelList = `{"object":"list","data":[{"id":"m1","object":"model"},{"id":"m2","object":"model"}]}`

// fakeServer answers /v1/models with modelList and /v1/chat/completions
// with chat.
func fakeServer(t *testing.T, chat http.HandlerFunc) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, modelList) })
	mux.HandleFunc("/v1/chat/completions", chat)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func sseChunk(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

const okStream = `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}|{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}|{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}|[DONE]`

func streamOK(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range strings.Split(okStream, "|") {
		sseChunk(w, c)
	}
}

// collect runs one generation and returns its text and terminal event.
func collect(t *testing.T, s *Session, req engine.Request) (string, engine.Event) {
	t.Helper()
	var text strings.Builder
	var last engine.Event
	timeout := time.After(20 * time.Second)
	ch := s.Generate(context.Background(), req)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return text.String(), last
			}
			if ev.Kind == engine.EventText {
				text.WriteString(ev.Text)
			}
			if ev.Kind == engine.EventDone || ev.Kind == engine.EventError {
				last = ev
			}
		case <-timeout:
			t.Fatal("the generation did not end: a hang")
		}
	}
}

// hang stalls a handler until the client goes away (the server notices
// that only once the request body was read).
func hang(r *http.Request) {
	io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

var hello = engine.Request{Messages: []engine.Message{{Role: "user", Content: "hi"}}}

func TestDialErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	status := func(code int, body string) string {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(ts.Close)
		return ts.URL + "/v1"
	}
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"data":["`))
		w.Write([]byte(strings.Repeat("x", maxJSONBytes+10)))
	}))
	t.Cleanup(huge.Close)
	models := fakeServer(t, streamOK).URL
	for _, tc := range []struct {
		name, url, model, want string
	}{
		{"empty", "", "", "no URL given"},
		{"not http", "ftp://x/v1", "", "not an http(s) URL"},
		{"key in URL", "http://user:secret@127.0.0.1/v1", "", "put the key in --api-key"},
		{"unreachable", closed, "", "cannot reach the engine at " + closed},
		{"401", status(401, `{"error":{"message":"bad key"}}`), "", "refused the request (401 Unauthorized): bad key; set --api-key"},
		{"404 path", status(404, "nope"), "", "--engine wants the API base, usually ending in /v1"},
		{"500", status(500, `{"detail":"boom"}`), "", "answered 500 Internal Server Error: boom"},
		{"not json", status(200, "<html>hello</html>"), "", "not an OpenAI model list"},
		{"oversized", huge.URL, "", "larger than 4 MiB"},
		{"unknown model", models, "m3", `has no model "m3"; it serves: m1, m2 (--remote-model)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(context.Background(), Options{URL: tc.url, Model: tc.model, Timeout: 5 * time.Second})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	e, err := Dial(context.Background(), Options{URL: models, Model: "m2"}) // a bare host gets /v1
	if err != nil || e.Model() != "m2" || e.URL() != models+"/v1" {
		t.Fatalf("Dial: %v, model %q at %s", err, e.Model(), e.URL())
	}
	if e.Stats().RemoteKV != "" || e.Stats().RequestsRunning != -1 {
		t.Errorf("a server without /metrics got KV numbers: %+v", e.Stats())
	}
}

func TestGenerateErrors(t *testing.T) {
	var busy atomic.Int32
	for _, tc := range []struct {
		name    string
		chat    http.HandlerFunc
		timeout time.Duration
		want    string // "" means success with the text "Hello"
	}{
		{"ok", streamOK, 0, ""},
		{"401", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"Invalid API key"}}`, http.StatusUnauthorized)
		}, 0, "(401 Unauthorized): Invalid API key; set --api-key"},
		{"404 model", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"The model m1 does not exist"}}`, http.StatusNotFound)
		}, 0, "not found (404): The model m1 does not exist; it serves: m1, m2"},
		{"429 then ok", func(w http.ResponseWriter, r *http.Request) {
			if busy.Add(1) == 1 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, `{"error":{"message":"queue full"}}`, http.StatusTooManyRequests)
				return
			}
			streamOK(w, r)
		}, 0, ""},
		{"429 twice", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"queue full"}}`, http.StatusTooManyRequests)
		}, 0, "is busy (429 Too Many Requests): queue full"},
		{"429 wait too long", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3600")
			http.Error(w, `{"error":{"message":"later"}}`, http.StatusTooManyRequests)
		}, 0, "is busy (429"},
		{"malformed event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sseChunk(w, `{"choices":[{"delta":{"content":"x"`)
		}, 0, "not an OpenAI chat chunk"},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sseChunk(w, `{"error":{"message":"CUDA out of memory"}}`)
		}, 0, "failed mid-answer: CUDA out of memory"},
		{"cut stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sseChunk(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
		}, 0, "ended the stream before the answer was complete"},
		{"oversized event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: ")
			for range 5 {
				w.Write([]byte(strings.Repeat("a", 1<<20)))
			}
		}, 0, "an event larger than 4 MiB"},
		{"hung mid-stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sseChunk(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
			hang(r)
		}, 300 * time.Millisecond, "sent nothing for 300ms in the middle of an answer"},
		{"hung before headers", func(w http.ResponseWriter, r *http.Request) {
			hang(r)
		}, 300 * time.Millisecond, "did not answer in time"},
		{"non-streamed answer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy.Store(0)
			ts := fakeServer(t, tc.chat)
			e, err := Dial(context.Background(), Options{URL: ts.URL + "/v1", Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			text, last := collect(t, e.NewSession(), hello)
			if tc.want == "" {
				if last.Kind != engine.EventDone || text != "Hello" {
					t.Fatalf("got %q, %+v", text, last)
				}
				return
			}
			if last.Kind != engine.EventError || !strings.Contains(last.Err.Error(), tc.want) {
				t.Fatalf("got %+v, want an error containing %q", last, tc.want)
			}
		})
	}
}

// TestStreamedToolCalls: arguments split over chunks (as vLLM streams
// them) are put together, two calls by index, and the stop is tool_call.
func TestStreamedToolCalls(t *testing.T) {
	ts := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Pa"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ris\"}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"get_time","arguments":"{}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":2,"id":"call_c","function":{"name":"bad","arguments":"{oops"}}]}},{"delta":{}}],"usage":null}`,
			`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`,
			`[DONE]`,
		} {
			sseChunk(w, c)
		}
	})
	e, err := Dial(context.Background(), Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := hello
	req.Tools = []engine.Tool{{Name: "get_weather", Parameters: map[string]any{"type": "object"}}}
	var calls []*engine.ToolCall
	var toolErrs []string
	var done engine.Event
	for ev := range e.NewSession().Generate(context.Background(), req) {
		switch ev.Kind {
		case engine.EventToolCall:
			calls = append(calls, ev.ToolCall)
		case engine.EventToolError:
			toolErrs = append(toolErrs, ev.Err.Error())
		case engine.EventDone, engine.EventError:
			done = ev
		}
	}
	if len(calls) != 2 || calls[0].Name != "get_weather" || calls[0].Arguments["city"] != "Paris" || calls[0].ID != "call_a" || calls[1].Name != "get_time" {
		t.Fatalf("calls %+v", calls)
	}
	if len(toolErrs) != 1 || !strings.Contains(toolErrs[0], "the arguments of bad are not a JSON object") {
		t.Errorf("malformed call: %v", toolErrs)
	}
	if done.Kind != engine.EventDone || done.Stop != engine.StopToolCall {
		t.Errorf("end %+v", done)
	}
}

// TestToolsRefusedFallback: a server that refuses the tools parameter gets
// them in the prompt instead, and the call is parsed from the text.
func TestToolsRefusedFallback(t *testing.T) {
	var bodies []string
	ts := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 1<<16)
		n, _ := r.Body.Read(b)
		bodies = append(bodies, string(b[:n]))
		if strings.Contains(string(b[:n]), `"tools"`) {
			http.Error(w, `{"error":{"message":"tools are not supported by this model"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{"I will check.\\n<tool", "_call>\\n{\\\"name\\\": \\\"get_weather\\\", ", "\\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\"}}\\n</tool_call>"} {
			sseChunk(w, `{"choices":[{"delta":{"content":"`+c+`"}}]}`)
		}
		sseChunk(w, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`)
	})
	e, err := Dial(context.Background(), Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := engine.Request{Messages: []engine.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "weather in Rome?"},
		{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "c1", Name: "get_weather", Arguments: map[string]any{"city": "Rome"}}}},
		{Role: "tool", ToolCallID: "c1", Name: "get_weather", Content: "sunny"},
		{Role: "user", Content: "and in Paris?"},
	}, Tools: []engine.Tool{{Name: "get_weather", Description: "weather of a city", Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
	for round := range 2 { // the second request goes inline at once
		var call *engine.ToolCall
		var text string
		var done engine.Event
		for ev := range e.NewSession().Generate(context.Background(), req) {
			switch ev.Kind {
			case engine.EventText:
				text += ev.Text
			case engine.EventToolCall:
				call = ev.ToolCall
			case engine.EventDone, engine.EventError:
				done = ev
			}
		}
		if call == nil || call.Name != "get_weather" || call.Arguments["city"] != "Paris" || done.Stop != engine.StopToolCall || text != "I will check." {
			t.Fatalf("round %d: call %+v, text %q, end %+v", round, call, text, done)
		}
	}
	if len(bodies) != 3 {
		t.Fatalf("%d requests, want 3 (refused, inline, inline)", len(bodies))
	}
	var inline oaRequest
	if err := json.Unmarshal([]byte(bodies[1]), &inline); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range inline.Messages {
		got = append(got, m.Role+": "+*m.Content)
	}
	if len(inline.Tools) != 0 || len(got) != 5 || !strings.Contains(got[0], "<tools>") || !strings.Contains(got[0], `"name":"get_weather"`) ||
		got[2] != "assistant: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call>" ||
		got[3] != "user: <tool_response>\nsunny\n</tool_response>" {
		t.Errorf("inlined request: %q", got)
	}
}

// TestRemoteToolsModes: --remote-tools inline never sends the field;
// native reports a refusal instead of falling back.
func TestRemoteToolsModes(t *testing.T) {
	var sawTools []bool
	ts := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		has := strings.Contains(string(b), `"tools"`)
		sawTools = append(sawTools, has)
		if has {
			http.Error(w, `{"error":{"message":"tools are not supported"}}`, http.StatusBadRequest)
			return
		}
		streamOK(w, r)
	})
	req := hello
	req.Tools = []engine.Tool{{Name: "f", Parameters: map[string]any{"type": "object"}}}
	e, err := Dial(context.Background(), Options{URL: ts.URL, Tools: "inline"})
	if err != nil {
		t.Fatal(err)
	}
	if text, last := collect(t, e.NewSession(), req); text != "Hello" || last.Kind != engine.EventDone || len(sawTools) != 1 || sawTools[0] {
		t.Fatalf("inline: %q %+v, requests with tools: %v", text, last, sawTools)
	}
	e, err = Dial(context.Background(), Options{URL: ts.URL, Tools: "native"})
	if err != nil {
		t.Fatal(err)
	}
	if _, last := collect(t, e.NewSession(), req); last.Kind != engine.EventError || !strings.Contains(last.Err.Error(), "400 Bad Request: tools are not supported") {
		t.Fatalf("native: %+v", last)
	}
	if _, err := Dial(context.Background(), Options{URL: ts.URL, Tools: "sometimes"}); err == nil || !strings.Contains(err.Error(), "want auto, native or inline") {
		t.Fatalf("bad mode: %v", err)
	}
}

// TestThinkingInContent: <think> in the content (a server without a
// reasoning parser) becomes thinking, as with the local engine; a
// reasoning_content field does too.
func TestThinkingInContent(t *testing.T) {
	ts := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{`{"choices":[{"delta":{"reasoning_content":"first. "}}]}`, `{"choices":[{"delta":{"content":"<thi"}}]}`,
			`{"choices":[{"delta":{"content":"nk>hmm</think>\n\nHel"}}]}`, `{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}`} {
			sseChunk(w, c)
		}
	})
	e, err := Dial(context.Background(), Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	var text, thinking string
	for ev := range e.NewSession().Generate(context.Background(), hello) {
		switch ev.Kind {
		case engine.EventText:
			text += ev.Text
		case engine.EventThinking:
			thinking += ev.Text
		case engine.EventError:
			t.Fatal(ev.Err)
		}
	}
	if text != "Hello" || thinking != "first. hmm" {
		t.Fatalf("text %q, thinking %q", text, thinking)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"", time.Second, true}, {"2", 2 * time.Second, true}, {"-1", 0, false}, {"soon", 0, false},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	} {
		got, ok := retryAfter(tc.h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSwitchKVRefused(t *testing.T) {
	e, err := Dial(context.Background(), Options{URL: fakeServer(t, streamOK).URL})
	if err != nil {
		t.Fatal(err)
	}
	err = e.SwitchKV(context.Background(), "fp8_e4m3", nil)
	if err == nil || !strings.Contains(err.Error(), "the remote server owns its KV cache") || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("SwitchKV: %v", err)
	}
}
