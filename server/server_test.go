package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const modelID = "SmolLM2-135M-Instruct.Q4_1"

var (
	engOnce sync.Once
	engMain *engine.Engine
	engErr  error
)

// testEngine is the real SmolLM2 engine, loaded once for the package's
// tests: a 2,048-token pool, the model's 8,192-token context.
func testEngine(t testing.TB) *engine.Engine {
	t.Helper()
	path := testmodel.Require(t)
	engOnce.Do(func() {
		engMain, engErr = engine.Load(context.Background(), engine.Options{Model: path, Device: "cpu", KVTokens: 2048}, nil)
	})
	if engErr != nil {
		t.Fatal(engErr)
	}
	return engMain
}

// newTestServer serves e with a batcher of opts; both end with the test.
func newTestServer(t testing.TB, e *engine.Engine, opts engine.BatcherOptions, mod func(*Config)) (*httptest.Server, *engine.Batcher) {
	t.Helper()
	b := e.NewBatcher(opts)
	cfg := Config{Engine: e, Batcher: b, ModelID: modelID, Aliases: []string{"smollm2"}, Version: "test", Log: testLog{t}}
	if mod != nil {
		mod(&cfg)
	}
	ts := httptest.NewServer(New(cfg))
	t.Cleanup(func() {
		ts.Close()
		b.Close()
	})
	return ts, b
}

// testLog sends the server's request log to the test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func post(t testing.TB, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, req, hdr...)
}

func get(t testing.TB, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return do(t, req, hdr...)
}

// do sends req with the header pairs hdr (name, value, ...) set and
// returns the response with its whole body, closed.
func do(t testing.TB, req *http.Request, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

var (
	idRE      = regexp.MustCompile(`"(chatcmpl-|msg_|call_|toolu_)[0-9a-f]{24}"`)
	createdRE = regexp.MustCompile(`"created":\d+`)
)

// normalize replaces the random ids and timestamps of a response.
func normalize(b []byte) string {
	s := idRE.ReplaceAllString(string(b), `"${1}ID"`)
	return createdRE.ReplaceAllString(s, `"created":0`)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./server -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./server -run %s -update rewrites it):\n got: %s\nwant: %s", path, t.Name(), got, want)
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	resp, body := get(t, ts.URL+"/health")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Errorf("health: %d %s", resp.StatusCode, body)
	}
	_, body = get(t, ts.URL+"/v1/models")
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != modelID {
		t.Errorf("models: %s", body)
	}
	if resp, body := get(t, ts.URL+"/v1/models/"+modelID); resp.StatusCode != 200 || !strings.Contains(string(body), `"object":"model"`) {
		t.Errorf("model: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, ts.URL+"/metrics")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", ct)
	}
	for _, want := range []string{
		"# TYPE ftchat_kv_pages_total gauge\nftchat_kv_pages_total 32\n",
		"ftchat_kv_tokens_capacity 2048\n", "ftchat_kv_bytes_bf16_equivalent ", `ftchat_kv_info{dtype="bf16",page_size="64"`,
		"ftchat_requests_running 0\n", "ftchat_requests_queued 0\n", "# TYPE ftchat_decode_tokens_total counter\n",
		"ftchat_prefill_tokens_per_second ", "ftchat_decode_tokens_per_second ", "ftchat_kv_pages_free ", "ftchat_kv_tokens_used ",
		"# TYPE ftchat_batch_sampled_rows histogram\n", `ftchat_batch_sampled_rows_bucket{le="1"} `, `ftchat_batch_sampled_rows_bucket{le="+Inf"} `,
		"ftchat_batch_sampled_rows_count ", "ftchat_batch_decode_steps_total ", "ftchat_batch_sampled_together_total ",
		`ftchat_batch_step_seconds_total{phase="forward"} `, `ftchat_batch_step_seconds_total{phase="other"} `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	// Every sample line is NAME{labels} VALUE, after its HELP and TYPE.
	sample := regexp.MustCompile(`^[a-z0-9_]+(\{[^}]*\})? -?[0-9.e+-]+$`)
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if !strings.HasPrefix(line, "# ") && !sample.MatchString(line) {
			t.Errorf("metrics line %q is not Prometheus text", line)
		}
	}
}

// errorCase is one bad request and the answer it must get.
type errorCase struct {
	name, method, path, body string
	hdr                      []string
}

// TestErrors: every bad input gets one clear error in its API's shape,
// with the right status (the bodies are in testdata/errors.golden).
func TestErrors(t *testing.T) {
	e := testEngine(t)
	ts, _ := newTestServer(t, e, engine.BatcherOptions{}, func(c *Config) { c.Limits.MaxBodyBytes = 64 << 10 })
	keyed, _ := newTestServer(t, e, engine.BatcherOptions{}, func(c *Config) { c.APIKey = "sekret" })
	chat, msgs := "/v1/chat/completions", "/v1/messages"
	user := func(extra string) string {
		return `{"model":"smollm2","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	anth := func(extra string) string {
		return `{"model":"smollm2","max_tokens":8,"messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	words := func(n int) string { return strings.Repeat("dog ", n) }
	cases := []errorCase{
		{"malformed json", "POST", chat, `{"model":`, nil},
		{"not an object", "POST", chat, `[1,2]`, nil},
		{"empty body", "POST", chat, ``, nil},
		{"trailing data", "POST", chat, user("") + `{}`, nil},
		{"wrong type", "POST", chat, `{"model":"smollm2","messages":"hi"}`, nil},
		{"wrong nested type", "POST", chat, `{"model":"smollm2","messages":[{"role":7}]}`, nil},
		{"no model", "POST", chat, `{"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"unknown model", "POST", chat, `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, nil},
		{"no messages", "POST", chat, `{"model":"smollm2","messages":[]}`, nil},
		{"bad role", "POST", chat, `{"model":"smollm2","messages":[{"role":"wizard","content":"hi"}]}`, nil},
		{"image part", "POST", chat, `{"model":"smollm2","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, nil},
		{"n 2", "POST", chat, user(`,"n":2`), nil},
		{"json schema", "POST", chat, user(`,"response_format":{"type":"json_schema","json_schema":{}}`), nil},
		{"tool choice required", "POST", chat, user(`,"tool_choice":"required"`), nil},
		{"tool choice unknown tool", "POST", chat, user(`,"tools":` + oaTools + `,"tool_choice":{"type":"function","function":{"name":"get_time"}}`), nil},
		{"tool choice bad shape", "POST", chat, user(`,"tools":` + oaTools + `,"tool_choice":{"type":"function"}`), nil},
		{"tool choice with json format", "POST", chat, user(`,"tools":` + oaTools + `,"tool_choice":"required","response_format":{"type":"json_object"}`), nil},
		{"bad tool name", "POST", chat, user(`,"tools":[{"type":"function","function":{"name":"no spaces"}}]`), nil},
		{"bad tool args", "POST", chat, `{"model":"smollm2","messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, nil},
		{"temperature", "POST", chat, user(`,"temperature":3`), nil},
		{"max tokens 0", "POST", chat, user(`,"max_tokens":0`), nil},
		{"top logprobs without logprobs", "POST", chat, user(`,"top_logprobs":2`), nil},
		{"too many stops", "POST", chat, user(`,"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]`), nil},
		{"presence penalty", "POST", chat, user(`,"presence_penalty":1`), nil},
		{"stream options without stream", "POST", chat, user(`,"stream_options":{"include_usage":true}`), nil},
		{"body too large", "POST", chat, `{"model":"smollm2","messages":[{"role":"user","content":"` + words(20000) + `"}]}`, nil},
		{"context overflow", "POST", chat, user(`,"max_tokens":9000`), nil},
		{"prompt beyond the pool", "POST", chat, `{"model":"smollm2","messages":[{"role":"user","content":"` + words(3000) + `"}]}`, nil},
		{"missing key", "POST", "keyed" + chat, user(""), nil},
		{"wrong key", "POST", "keyed" + chat, user(""), []string{"Authorization", "Bearer nope"}},
		{"anthropic missing key", "POST", "keyed" + msgs, anth(""), nil},
		{"unknown path", "GET", "/v2/nothing", "", nil},
		{"wrong method", "GET", chat, "", nil},
		{"anthropic malformed", "POST", msgs, `{"model":`, nil},
		{"anthropic no max tokens", "POST", msgs, `{"model":"smollm2","messages":[{"role":"user","content":"hi"}]}`, nil},
		{"anthropic system role", "POST", msgs, `{"model":"smollm2","max_tokens":8,"messages":[{"role":"system","content":"hi"}]}`, nil},
		{"anthropic unknown model", "POST", msgs, `{"model":"claude-9","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"anthropic image block", "POST", msgs, `{"model":"smollm2","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, nil},
		{"anthropic tool choice any", "POST", msgs, anth(`,"tool_choice":{"type":"any"}`), nil},
		{"anthropic tool choice unknown tool", "POST", msgs, anth(`,"tools":` + anTools + `,"tool_choice":{"type":"tool","name":"get_time"}`), nil},
		{"anthropic tool choice no name", "POST", msgs, anth(`,"tools":` + anTools + `,"tool_choice":{"type":"tool"}`), nil},
		{"anthropic temperature", "POST", msgs, anth(`,"temperature":1.5`), nil},
		{"anthropic context overflow", "POST", msgs, `{"model":"smollm2","max_tokens":9000,"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"anthropic wrong method", "GET", msgs, "", nil},
		{"count tokens malformed", "POST", msgs + "/count_tokens", `{"messages":5}`, nil},
	}
	var out strings.Builder
	for _, c := range cases {
		base := ts.URL
		path := c.path
		if p, ok := strings.CutPrefix(path, "keyed"); ok {
			base, path = keyed.URL, p
		}
		var resp *http.Response
		var body []byte
		if c.method == "GET" {
			resp, body = get(t, base+path, c.hdr...)
		} else {
			resp, body = post(t, base+path, c.body, c.hdr...)
		}
		if resp.StatusCode < 400 {
			t.Errorf("%s: status %d: %s", c.name, resp.StatusCode, body)
		}
		var shape map[string]any
		if err := json.Unmarshal(body, &shape); err != nil {
			t.Errorf("%s: body is not JSON: %s", c.name, body)
		}
		fmt.Fprintf(&out, "## %s: %s %s\n%d %s\n", c.name, c.method, c.path, resp.StatusCode, bytes.TrimSpace(body))
	}
	golden(t, "errors.golden", out.String())
	// The key lets a request through, in either header.
	for _, h := range [][]string{{"Authorization", "Bearer sekret"}, {"x-api-key", "sekret"}} {
		if resp, body := get(t, keyed.URL+"/v1/models", h...); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", h[0], resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, keyed.URL+"/health"); resp.StatusCode != 200 {
		t.Errorf("health needs no key: %d", resp.StatusCode)
	}
}

const greedyChat = `{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":20`

// TestChatCompletion: greedy answers, rendered as OpenAI does (golden).
func TestChatCompletion(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{PrefixCache: -1}, nil)
	resp, body := post(t, ts.URL+"/v1/chat/completions", greedyChat+`}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Paris") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	golden(t, "chat.golden.json", normalize(body))

	resp, body = post(t, ts.URL+"/v1/chat/completions", greedyChat+`,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("stream content type %q", ct)
	}
	golden(t, "chat_stream.golden", normalize(body))
}

// TestMessages: the Anthropic endpoint, streaming and not, and count_tokens.
func TestMessages(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{PrefixCache: -1}, nil)
	req := `{"model":"smollm2","max_tokens":20,"temperature":0,"system":"You are terse.","messages":[{"role":"user","content":[{"type":"text","text":"What is the capital of France?"}]}]`
	resp, body := post(t, ts.URL+"/v1/messages", req+`}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Paris") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	golden(t, "messages.golden.json", normalize(body))
	_, body = post(t, ts.URL+"/v1/messages", req+`,"stream":true}`)
	golden(t, "messages_stream.golden", normalize(body))

	_, body = post(t, ts.URL+"/v1/messages", req+`,"stop_sequences":["Paris"]}`)
	var m struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
		Content      []struct{ Text string }
	}
	json.Unmarshal(body, &m)
	if m.StopReason != "stop_sequence" || m.StopSequence == nil || *m.StopSequence != "Paris" || strings.Contains(m.Content[0].Text, "Paris") {
		t.Errorf("stop sequence: %s", body)
	}

	resp, body = post(t, ts.URL+"/v1/messages/count_tokens", `{"model":"smollm2","system":"You are terse.","messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	json.Unmarshal(body, &ct)
	var full struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		}
	}
	_, fb := post(t, ts.URL+"/v1/messages", req+`}`)
	json.Unmarshal(fb, &full)
	if resp.StatusCode != 200 || ct.InputTokens == 0 || ct.InputTokens != full.Usage.InputTokens {
		t.Errorf("count_tokens %d %s; messages used %d input tokens", resp.StatusCode, body, full.Usage.InputTokens)
	}
}

// Few-shot turns that get SmolLM2-135M to call the tool: earlier questions
// answered with a call (the 135M model does not call from the tool list
// alone).
const (
	oaTools  = `[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	oaShots  = `{"role":"user","content":"What is the weather in London?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"London\"}"}}]},{"role":"user","content":"What is the weather in Tokyo?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Tokyo\"}"}}]},{"role":"user","content":"What is the weather in Paris?"}`
	anTools  = `[{"name":"get_weather","description":"Get the current weather in a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	anShots  = `{"role":"user","content":"What is the weather in London?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"London"}}]},{"role":"user","content":"What is the weather in Tokyo?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city":"Tokyo"}}]},{"role":"user","content":"What is the weather in Paris?"}`
	toolBody = `{"model":"smollm2","temperature":0,"max_tokens":60,"tools":%s,"messages":[%s]%s}`
)

// TestToolCalls: tools in, tool calls out, in both APIs; the tool result
// goes back in and the model answers with it.
func TestToolCalls(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	resp, body := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(toolBody, oaTools, oaShots, ""))
	var cc struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Type     string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if err := json.Unmarshal(body, &cc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	c := cc.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" ||
		c.Message.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(c.Message.ToolCalls[0].ID, "call_") || c.Message.Content != nil {
		t.Fatalf("no get_weather call: %s", body)
	}
	call := c.Message.ToolCalls[0]
	// The result goes back; the model answers from it.
	result := fmt.Sprintf(`,{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"get_weather","arguments":%q}}]},{"role":"tool","tool_call_id":%q,"content":"sunny, 24 degrees"}`,
		call.ID, call.Function.Arguments, call.ID)
	resp, body = post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(toolBody, oaTools, oaShots+result, ""))
	if resp.StatusCode != 200 || !strings.Contains(string(body), "24") || !strings.Contains(string(body), `"finish_reason":"stop"`) {
		t.Errorf("answer from the tool result: %d %s", resp.StatusCode, body)
	}
	_, body = post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(toolBody, oaTools, oaShots, `,"stream":true`))
	for _, want := range []string{`"finish_reason":"tool_calls"`, "data: [DONE]"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("stream lacks %s:\n%s", want, body)
		}
	}
	// The arguments are streamed: several deltas that accumulate (as the
	// openai client does) into the call.
	calls, argDeltas := accumulateToolCalls(t, body)
	if len(calls) != 1 || calls[0].name != "get_weather" || !strings.HasPrefix(calls[0].id, "call_") || argDeltas < 2 {
		t.Errorf("streamed calls %+v in %d argument deltas:\n%s", calls, argDeltas, body)
	} else {
		var args map[string]any
		if json.Unmarshal([]byte(calls[0].args), &args) != nil || args["city"] != "Paris" || len(args) != 1 {
			t.Errorf("streamed arguments %q", calls[0].args)
		}
	}
	// tool_choice none: no tools offered, so no call.
	_, body = post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(toolBody, oaTools, oaShots, `,"tool_choice":"none"`))
	if strings.Contains(string(body), `"tool_calls":[{`) {
		t.Errorf("tool_choice none gave a call: %s", body)
	}

	// Anthropic: tool_use block, stop_reason tool_use.
	resp, body = post(t, ts.URL+"/v1/messages", fmt.Sprintf(toolBody, anTools, anShots, ""))
	var am struct {
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, ID, Name string
			Input          map[string]any
		}
	}
	json.Unmarshal(body, &am)
	if resp.StatusCode != 200 || am.StopReason != "tool_use" || len(am.Content) != 1 || am.Content[0].Type != "tool_use" ||
		am.Content[0].Name != "get_weather" || am.Content[0].Input["city"] != "Paris" || !strings.HasPrefix(am.Content[0].ID, "toolu_") {
		t.Errorf("anthropic tool use: %d %s", resp.StatusCode, body)
	}
	_, body = post(t, ts.URL+"/v1/messages", fmt.Sprintf(toolBody, anTools, anShots, `,"stream":true`))
	golden(t, "messages_tool_stream.golden", normalize(body))
}

// TestConcurrentRequestsBatch: four greedy requests sent at once decode
// in shared steps (fewer steps than tokens) and answer as they do alone.
func TestConcurrentRequestsBatch(t *testing.T) {
	ts, b := newTestServer(t, testEngine(t), engine.BatcherOptions{PrefixCache: -1}, nil)
	prompts := []string{"What is the capital of France?", "Write a haiku about the sea.", "List three colors.", "Name a large animal."}
	ask := func(p string) (string, int) {
		resp, body := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(`{"model":"smollm2","temperature":0,"max_tokens":16,"messages":[{"role":"user","content":%q}]}`, p))
		var r struct {
			Choices []struct{ Message struct{ Content string } }
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		return r.Choices[0].Message.Content, r.Usage.CompletionTokens
	}
	alone := make([]string, len(prompts))
	for i, p := range prompts {
		alone[i], _ = ask(p)
	}
	before := b.Stats()
	together := make([]string, len(prompts))
	tokens := make([]int, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() { defer wg.Done(); together[i], tokens[i] = ask(p) }()
	}
	wg.Wait()
	after := b.Stats()
	total := 0
	for i := range prompts {
		total += tokens[i]
		if together[i] != alone[i] {
			t.Errorf("%q: batched %q, alone %q", prompts[i], together[i], alone[i])
		}
	}
	steps := after.Steps - before.Steps
	t.Logf("%d concurrent requests: %d tokens in %d steps, %d of them multi-sequence, up to %d sequences per step", len(prompts), total, steps, after.MultiSeqSteps-before.MultiSeqSteps, after.MaxSeqsInStep)
	if after.MultiSeqSteps == before.MultiSeqSteps || steps >= int64(total) {
		t.Errorf("no batching: %d tokens in %d steps", total, steps)
	}
	// Greedy rows of shared steps are drawn by one sampling call per step.
	if after.SampledTogether == before.SampledTogether {
		t.Errorf("no token drawn by a step's one sampling call (%d steps sampled %d tokens)", after.DecodeSteps-before.DecodeSteps, after.DecodeTokens-before.DecodeTokens)
	}
}

// TestDisconnectFreesPages: a streaming client that goes away frees its
// pages within a step.
func TestDisconnectFreesPages(t *testing.T) {
	e := testEngine(t)
	ts, b := newTestServer(t, e, engine.BatcherOptions{PrefixCache: -1}, nil)
	base := e.Stats().PagesUsed
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"smollm2","stream":true,"messages":[{"role":"user","content":"Write a very long story about a dragon."}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for chunks := 0; chunks < 5; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			chunks++
		}
	}
	if used := e.Stats().PagesUsed; used <= base || b.Stats().Running != 1 {
		t.Fatalf("while streaming: %d pages used (before %d), %d running", used, base, b.Stats().Running)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().PagesUsed != base || b.Stats().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the disconnect: %d pages used (before %d), %d running", e.Stats().PagesUsed, base, b.Stats().Running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBusyGets429: when the pool is taken and the queue is full, a
// request is answered 429 with Retry-After; the queued one runs later.
func TestBusyGets429(t *testing.T) {
	e := testEngine(t)
	ts, b := newTestServer(t, e, engine.BatcherOptions{MaxRunning: 1, MaxQueue: 1, PrefixCache: -1}, func(c *Config) { c.RetryAfter = 2 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"smollm2","stream":true,"messages":[{"role":"user","content":"Write a very long story about a dragon."}]}`))
	resp, err := http.DefaultClient.Do(long)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	queued := make(chan string, 1)
	go func() {
		_, body := post(t, ts.URL+"/v1/chat/completions", `{"model":"smollm2","temperature":0,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
		queued <- string(body)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().Queued != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request was not queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r429, body := post(t, ts.URL+"/v1/messages", `{"model":"smollm2","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	if r429.StatusCode != 429 || r429.Header.Get("Retry-After") != "2" || !strings.Contains(string(body), `"rate_limit_error"`) {
		t.Errorf("busy: %d Retry-After %q %s", r429.StatusCode, r429.Header.Get("Retry-After"), body)
	}
	cancel()
	select {
	case got := <-queued:
		if !strings.Contains(got, `"chat.completion"`) {
			t.Errorf("queued request: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued request did not finish")
	}
}

// TestFullPoolQueuesThen429: a request that does not fit beside a running
// one waits (the pool is full, not the batch); the next one gets 429.
func TestFullPoolQueuesThen429(t *testing.T) {
	e := testEngine(t)
	ts, b := newTestServer(t, e, engine.BatcherOptions{MaxQueue: -1, PrefixCache: -1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big := fmt.Sprintf(`{"model":"smollm2","stream":true,"max_tokens":200,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("cat ", 1100))
	first, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(big))
	resp, err := http.DefaultClient.Do(first)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	// Another prompt: the same one would share the first one's pages.
	other := strings.ReplaceAll(big, "cat ", "dog ")
	second, _ := http.NewRequestWithContext(ctx2, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(other))
	go func() {
		if r, err := http.DefaultClient.Do(second); err == nil {
			r.Body.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Queued != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second request was not queued: %+v", b.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, body := post(t, ts.URL+"/v1/chat/completions", `{"model":"smollm2","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
		t.Errorf("full pool: %d %s", r.StatusCode, body)
	}
	cancel2()
	cancel()
}

// TestPrefixReuseAcrossTurns: the second turn of a conversation reuses the
// first turn's pages (usage.prompt_tokens_details.cached_tokens).
func TestPrefixReuseAcrossTurns(t *testing.T) {
	ts, _ := newTestServer(t, testEngine(t), engine.BatcherOptions{}, nil)
	sys := strings.Repeat("You are a helpful assistant who answers briefly and clearly. ", 12)
	type usage struct {
		Choices []struct{ Message struct{ Content string } }
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	var u1, u2 usage
	_, body := post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(`{"model":"smollm2","temperature":0,"max_tokens":12,"messages":[{"role":"system","content":%q},{"role":"user","content":"Name a fruit."}]}`, sys))
	json.Unmarshal(body, &u1)
	_, body = post(t, ts.URL+"/v1/chat/completions", fmt.Sprintf(`{"model":"smollm2","temperature":0,"max_tokens":12,"messages":[{"role":"system","content":%q},{"role":"user","content":"Name a fruit."},{"role":"assistant","content":%q},{"role":"user","content":"Another one."}]}`, sys, u1.Choices[0].Message.Content))
	json.Unmarshal(body, &u2)
	if u2.Usage.Details.Cached < u1.Usage.PromptTokens-1 {
		t.Errorf("second turn reused %d tokens; the first turn's prompt had %d: %s", u2.Usage.Details.Cached, u1.Usage.PromptTokens, body)
	}
}

type streamedCall struct{ id, name, args string }

// accumulateToolCalls reads an OpenAI stream's tool_calls deltas as the
// openai client does: by index, the id and name from the first delta,
// the arguments concatenated. It also counts the deltas with arguments.
func accumulateToolCalls(t *testing.T, body []byte) ([]streamedCall, int) {
	t.Helper()
	var calls []streamedCall
	argDeltas := 0
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range ch.Choices {
			for _, d := range c.Delta.ToolCalls {
				for len(calls) <= d.Index {
					calls = append(calls, streamedCall{})
				}
				cl := &calls[d.Index]
				if d.ID != "" {
					cl.id = d.ID
				}
				cl.name += d.Function.Name
				cl.args += d.Function.Arguments
				if d.Function.Arguments != "" {
					argDeltas++
				}
			}
		}
	}
	return calls, argDeltas
}
