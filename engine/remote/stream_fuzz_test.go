package remote

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// FuzzStream feeds any bytes to the SSE reader as a server's answer: it
// ends in events or one error, never a panic or a hang, and every tool call
// it reports has a name and arguments.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		"data: " + `{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n",
		"data: " + `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}}]}` + "\n\n" +
			"data: " + `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n",
		": keep-alive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"<tool_call>{\\\"name\\\":\\\"f\\\"}\"}}]}\n\n",
		"data: {\"error\":{\"message\":\"x\"}}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":99999}]}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}],\"usage\":{\"prompt_tokens\":-4,\"completion_tokens\":-1,\"prompt_tokens_details\":{\"cached_tokens\":99}}}\ndata: [DONE]",
	} {
		f.Add([]byte(s), true)
	}
	ts := httptest.NewServer(http.NotFoundHandler()) // no /metrics
	defer ts.Close()
	base, _ := url.Parse(ts.URL + "/v1")
	f.Fuzz(func(t *testing.T, body []byte, tools bool) {
		e := &Engine{base: base, baseStr: base.String(), hc: ts.Client(), timeout: 5 * time.Second}
		req := hello
		if tools {
			req.Tools = []engine.Tool{{Name: "f", Parameters: map[string]any{"type": "object"}}}
		}
		var events []engine.Event
		g := &generation{e: e, req: req, send: func(ev engine.Event) { events = append(events, ev) }, start: time.Now()}
		g.parser = newParser(e.model, req.Tools, false)
		err := g.readSSE(context.Background(), io.NopCloser(bytes.NewReader(body)))
		if err == nil {
			err = g.finishTurn(context.Background())
		}
		for _, ev := range events {
			if ev.Kind == engine.EventToolCall && (ev.ToolCall == nil || ev.ToolCall.Name == "" || ev.ToolCall.Arguments == nil) {
				t.Fatalf("bad call %+v", ev.ToolCall)
			}
		}
		if err == nil && (len(events) == 0 || events[len(events)-1].Kind != engine.EventDone) {
			t.Fatalf("no EventDone: %+v", events)
		}
		st := e.Stats()
		if st.PrefillTokens < 0 || st.DecodeTokens < 0 || st.ReusedTokens < 0 {
			t.Fatalf("negative counts %+v", st)
		}
	})
}
