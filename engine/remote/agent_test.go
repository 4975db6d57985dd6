package remote

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/agent"
)

// TestAgentNativeToolRoundTrip runs the real agent loop and its real tools
// on a remote engine: the server asks for read_file through tool_calls
// (arguments split over two chunks), the agent reads the file, and the
// next request carries the call and its result as OpenAI messages.
func TestAgentNativeToolRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the secret word is turnip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var requests []oaRequest
	ts := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req oaRequest
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("request: %v", err)
		}
		requests = append(requests, req)
		w.Header().Set("Content-Type", "text/event-stream")
		if len(requests) == 1 {
			sseChunk(w, `{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_x1","type":"function","function":{"name":"read_file","arguments":"{\"path\": "}}]}}]}`)
			sseChunk(w, `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"notes.txt\"}"}}]},"finish_reason":"tool_calls"}]}`)
		} else {
			sseChunk(w, `{"choices":[{"delta":{"content":"The word is turnip."},"finish_reason":"stop"}]}`)
		}
		sseChunk(w, "[DONE]")
	})
	e, err := Dial(context.Background(), Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := agent.OpenWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	tools, err := agent.NewTools(ws, agent.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	a, err := agent.New(agent.Config{Gen: e.NewSession(), Fit: e, Tools: tools, Approver: agent.DenyAll{}, Sink: &agent.TextSink{W: &out}, System: "You are a test."})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(context.Background(), "What is the secret word in notes.txt?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stop != agent.StopAnswer || res.Answer != "The word is turnip." || res.Steps != 2 {
		t.Fatalf("result %+v\n%s", res, out.String())
	}
	if len(requests) != 2 || len(requests[0].Tools) == 0 {
		t.Fatalf("%d requests; tools offered: %d", len(requests), len(requests[0].Tools))
	}
	offered := false
	for _, tl := range requests[0].Tools {
		offered = offered || tl.Type == "function" && tl.Function.Name == "read_file" && tl.Function.Parameters["type"] == "object"
	}
	if !offered {
		t.Errorf("read_file not offered: %+v", requests[0].Tools)
	}
	msgs := requests[1].Messages
	if len(msgs) != 4 {
		t.Fatalf("second request has %d messages: %+v", len(msgs), msgs)
	}
	call, result := msgs[2], msgs[3]
	if call.Role != "assistant" || len(call.ToolCalls) != 1 || call.ToolCalls[0].Function.Name != "read_file" || call.ToolCalls[0].Type != "function" {
		t.Fatalf("assistant turn %+v", call)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(call.ToolCalls[0].Function.Arguments), &args); err != nil || args["path"] != "notes.txt" {
		t.Errorf("arguments %q: %v", call.ToolCalls[0].Function.Arguments, err)
	}
	if result.Role != "tool" || result.ToolCallID != call.ToolCalls[0].ID || result.Name != "read_file" || result.Content == nil || !strings.Contains(*result.Content, "turnip") {
		t.Errorf("tool result %+v", result)
	}
}
