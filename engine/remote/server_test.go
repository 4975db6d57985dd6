package remote

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
	"github.com/ftchat/ftchat/server"
)

// These tests run the client against ftchat's own server, in-process on
// loopback, with the real default model (SmolLM2-135M).

var (
	engOnce sync.Once
	engMain *engine.Engine
	engErr  error
)

// serve starts ftchat serve's handler over the shared engine.
func serve(t *testing.T, key string) string {
	t.Helper()
	path := testmodel.Require(t)
	engOnce.Do(func() {
		engMain, engErr = engine.Load(context.Background(), engine.Options{Model: path, Device: "cpu", KVTokens: 2048}, nil)
	})
	if engErr != nil {
		t.Fatal(engErr)
	}
	b := engMain.NewBatcher(engine.BatcherOptions{})
	ts := httptest.NewServer(server.New(server.Config{Engine: engMain, Batcher: b, ModelID: "SmolLM2-135M-Instruct", APIKey: key, Version: "test"}))
	t.Cleanup(func() {
		ts.Close()
		b.Close()
	})
	return ts.URL + "/v1"
}

type result struct {
	texts []string
	calls []*engine.ToolCall
	done  engine.Event
}

func (r result) text() string { return strings.Join(r.texts, "") }

func run(t *testing.T, s *Session, ctx context.Context, req engine.Request, onText func(n int)) result {
	t.Helper()
	var r result
	deadline := time.After(60 * time.Second)
	ch := s.Generate(ctx, req)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return r
			}
			switch ev.Kind {
			case engine.EventText:
				r.texts = append(r.texts, ev.Text)
				if onText != nil {
					onText(len(r.texts))
				}
			case engine.EventToolCall:
				r.calls = append(r.calls, ev.ToolCall)
			case engine.EventDone, engine.EventError:
				r.done = ev
			}
		case <-deadline:
			t.Fatal("the generation did not end")
		}
	}
}

func greedy(n int, msgs ...engine.Message) engine.Request {
	return engine.Request{Messages: msgs, MaxTokens: n}
}

func TestAgainstFtchatServe(t *testing.T) {
	url := serve(t, "")
	e, err := Dial(context.Background(), Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Model() != "SmolLM2-135M-Instruct" || e.ContextLen() != 8192 {
		t.Fatalf("model %q, context %d", e.Model(), e.ContextLen())
	}
	st := e.Stats()
	if st.RemoteKV != "ftchat serve" || st.TokensCapacity != 2048 || st.KVDType != "bf16" || st.RequestsRunning != 0 || st.PoolBytes == 0 {
		t.Fatalf("metrics not read at Dial: %+v", st)
	}

	t.Run("streaming", func(t *testing.T) {
		r := run(t, e.NewSession(), context.Background(), greedy(30, engine.Message{Role: "user", Content: "What is the capital of France?"}), nil)
		if r.done.Kind != engine.EventDone || r.done.Stop != engine.StopEOS {
			t.Fatalf("end %+v", r.done)
		}
		if len(r.texts) < 3 || !strings.Contains(r.text(), "Paris") {
			t.Fatalf("answer in %d pieces: %q", len(r.texts), r.text())
		}
		s := r.done.Stats
		if s.DecodeTokens < 3 || s.LastPrefillTokens == 0 || s.FirstToken <= 0 || s.DecodeTokensPerS <= 0 || s.PrefillTokensPerS <= 0 || s.RequestsRunning != 0 {
			t.Errorf("stats after the turn: %+v", s)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		var cancelled time.Time
		r := run(t, e.NewSession(), ctx, greedy(1500, engine.Message{Role: "user", Content: "Write a very long story about a dragon."}), func(n int) {
			if n == 3 {
				cancelled = time.Now()
				cancel()
			}
		})
		if r.done.Kind != engine.EventDone || r.done.Stop != engine.StopCancelled {
			t.Fatalf("end %+v after %d pieces", r.done, len(r.texts))
		}
		if d := time.Since(cancelled); cancelled.IsZero() || d > 2*time.Second {
			t.Fatalf("the stream ended %v after the cancel (started %v ago)", d, time.Since(start))
		}
		// The server sees the closed request and frees the sequence.
		deadline := time.Now().Add(10 * time.Second)
		for {
			e.refreshMetrics(context.Background())
			if e.Stats().RequestsRunning == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server still runs the cancelled request: %+v", e.Stats())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("native tools", func(t *testing.T) {
		weather := engine.Tool{Name: "get_weather", Description: "Get the current weather of a city",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}
		// Few-shot: the 135M model calls from examples, not from the list alone.
		shot := func(id, city string) []engine.Message {
			return []engine.Message{{Role: "user", Content: "What is the weather in " + city + "?"},
				{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: id, Name: "get_weather", Arguments: map[string]any{"city": city}}}}}
		}
		msgs := append(shot("call_1", "London"), shot("call_2", "Tokyo")...)
		msgs = append(msgs, engine.Message{Role: "user", Content: "What is the weather in Paris?"})
		req := engine.Request{Messages: msgs, Tools: []engine.Tool{weather}, MaxTokens: 60}
		r := run(t, e.NewSession(), context.Background(), req, nil)
		if len(r.calls) != 1 || r.calls[0].Name != "get_weather" || r.calls[0].Arguments["city"] != "Paris" || !strings.HasPrefix(r.calls[0].ID, "call_") || r.done.Stop != engine.StopToolCall {
			t.Fatalf("calls %+v, end %+v, text %q", r.calls, r.done, r.text())
		}
		// The result goes back as a tool message; the model answers from it.
		req.Messages = append(req.Messages, engine.Message{Role: "assistant", ToolCalls: []engine.ToolCall{*r.calls[0]}},
			engine.Message{Role: "tool", ToolCallID: r.calls[0].ID, Name: "get_weather", Content: "sunny, 24 degrees"})
		r = run(t, e.NewSession(), context.Background(), req, nil)
		if r.done.Kind != engine.EventDone || strings.TrimSpace(r.text()) == "" && len(r.calls) == 0 {
			t.Fatalf("no answer to the tool result: %+v %q", r.done, r.text())
		}
		if e.noTools {
			t.Error("ftchat serve takes tools, but the client fell back to inlining them")
		}
	})
}

func TestFtchatServeAPIKey(t *testing.T) {
	url := serve(t, "sekrit")
	_, err := Dial(context.Background(), Options{URL: url})
	if err == nil || !strings.Contains(err.Error(), "(401 Unauthorized)") || !strings.Contains(err.Error(), "set --api-key") {
		t.Fatalf("no key: %v", err)
	}
	_, err = Dial(context.Background(), Options{URL: url, APIKey: "wrong"})
	if err == nil || !strings.Contains(err.Error(), "check --api-key") {
		t.Fatalf("wrong key: %v", err)
	}
	e, err := Dial(context.Background(), Options{URL: url, APIKey: "sekrit"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Stats().RemoteKV != "ftchat serve" {
		t.Errorf("/metrics with the key not read: %+v", e.Stats())
	}
	r := run(t, e.NewSession(), context.Background(), greedy(8, engine.Message{Role: "user", Content: "Hi"}), nil)
	if r.done.Kind != engine.EventDone || r.text() == "" {
		t.Fatalf("with the key: %+v %q", r.done, r.text())
	}
}
