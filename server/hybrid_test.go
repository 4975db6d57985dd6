package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// hybridEngine is the tiny qwen35moe fixture (random weights, the real
// Qwen3.5 template and tokenizer) with 16 state slots.
func hybridEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.Load(context.Background(), engine.Options{Model: "../engine/model/testdata/tiny_qwen35moe.gguf",
		Device: "cpu", KVTokens: 4096, PageSize: 16, StateSlots: 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func metricValue(t *testing.T, url, name string) int {
	t.Helper()
	_, body := get(t, url+"/metrics")
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestHybridServe: a hybrid model served with batching: eight concurrent
// greedy requests answer what each answers alone, and a client that
// disconnects mid-stream frees its pages and state slot (metrics).
func TestHybridServe(t *testing.T) {
	e := hybridEngine(t)
	ts, b := newTestServer(t, e, engine.BatcherOptions{PrefixCache: -1}, func(c *Config) { c.ModelID = "tiny" })
	ask := func(i int) string {
		body := fmt.Sprintf(`{"model":"tiny","temperature":0,"max_tokens":10,"messages":[{"role":"user","content":"Question %d: what is %d + %d?"}]}`, i, i, i)
		resp, b := post(t, ts.URL+"/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
			return ""
		}
		var cc struct {
			Choices []struct{ Message json.RawMessage }
		}
		json.Unmarshal(b, &cc)
		return string(cc.Choices[0].Message)
	}
	const n = 8
	alone := make([]string, n)
	for i := range n {
		alone[i] = ask(i)
	}
	together := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); together[i] = ask(i) }()
	}
	wg.Wait()
	for i := range n {
		if together[i] != alone[i] || alone[i] == "" {
			t.Errorf("request %d: concurrent %s, alone %s", i, together[i], alone[i])
		}
	}
	if st := b.Stats(); st.MaxSeqsInStep < 2 {
		t.Errorf("at most %d sequences in a step: the requests did not batch", st.MaxSeqsInStep)
	}
	if got := metricValue(t, ts.URL, "ftchat_state_slots_total"); got != 16 {
		t.Errorf("ftchat_state_slots_total %d, want 16", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","stream":true,"temperature":0,"messages":[{"role":"user","content":"Story 3 please."}]}`)) // greedy: past 80 tokens
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
	if live, pages := metricValue(t, ts.URL, "ftchat_state_slots_live"), metricValue(t, ts.URL, "ftchat_kv_pages_used"); live != 1 || pages == 0 {
		t.Fatalf("while streaming: %d live state slots, %d pages", live, pages)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, ts.URL, "ftchat_state_slots_live") != 0 || metricValue(t, ts.URL, "ftchat_kv_pages_used") != 0 ||
		metricValue(t, ts.URL, "ftchat_state_snapshots") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("after the disconnect the slot or the pages are still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
