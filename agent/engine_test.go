package agent

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
	"github.com/ftchat/ftchat/prompts"
)

func testModel(t *testing.T) string { return testmodel.Require(t) }

// recorder passes requests to a real session and keeps them and what came
// back; the first `forced` generations are scripted instead, to put a tool
// call and its result into the real conversation.
type recorder struct {
	sess   Generator
	forced [][]engine.Event
	mu     sync.Mutex
	reqs   []engine.Request
	outs   []string // raw text of each real generation
}

func (r *recorder) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	r.mu.Lock()
	req.Messages = append([]engine.Message(nil), req.Messages...)
	r.reqs = append(r.reqs, req)
	n := len(r.reqs)
	r.mu.Unlock()
	if n <= len(r.forced) {
		ch := make(chan engine.Event, len(r.forced[n-1]))
		for _, ev := range r.forced[n-1] {
			ch <- ev
		}
		close(ch)
		return ch
	}
	in := r.sess.Generate(ctx, req)
	out := make(chan engine.Event)
	go func() {
		defer close(out)
		var raw strings.Builder
		for ev := range in {
			if ev.Kind == engine.EventText || ev.Kind == engine.EventToolError {
				raw.WriteString(ev.Text)
			}
			out <- ev
		}
		r.mu.Lock()
		r.outs = append(r.outs, raw.String())
		r.mu.Unlock()
	}()
	return out
}

// TestRealEngine drives the loop with SmolLM2-135M-Instruct through the
// engine and the model's own chat template, which has no tool format. What
// the model writes is not fixed (a 135M model rarely writes a correct
// call): the test checks that the prompt the engine renders holds the tool
// list (and, after a call, the call and its result as text), exactly as
// inlinedLikeTheEngine writes it, and that the loop ends cleanly on
// whatever comes out.
func TestRealEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	path := testModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	eng, err := engine.Load(ctx, engine.Options{Model: path, Device: "cpu", KVTokens: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()

	// checkRendered returns the prompt the engine feeds the model for req
	// and checks that the tools took their place in it.
	checkRendered := func(t *testing.T, req engine.Request) string {
		t.Helper()
		text, err := eng.RenderPrompt(req)
		if err != nil {
			t.Fatal(err)
		}
		bare := req
		bare.Tools = nil
		without, err := eng.RenderPrompt(bare)
		if err != nil {
			t.Fatal(err)
		}
		if n := eng.CountTokens(text) - eng.CountTokens(without); n < 400 {
			t.Errorf("the tools add %d tokens to the engine's prompt: the tool list is missing", n)
		}
		return text
	}

	for _, forced := range []bool{false, true} {
		name := "model-first"
		if forced {
			name = "after-a-scripted-call"
		}
		t.Run(name, func(t *testing.T) {
			ws, dir := newTestWorkspace(t)
			tools, err := NewTools(ws, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			sys, err := prompts.Agent(prompts.Gather(ctx, dir, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			sess := eng.NewSession()
			defer sess.Close()
			rec := &recorder{sess: sess}
			if forced {
				// What the engine sends when the model writes a correct call.
				rec.forced = [][]engine.Event{{call("read_file", map[string]any{"path": "hello.txt"}), done(engine.StopToolCall)}}
			}
			var out bytes.Buffer
			a, err := New(Config{Gen: rec, Fit: eng, Tools: tools, Sink: &TextSink{W: &out}, System: sys,
				MaxSteps: 3, MaxTokens: 48, Sampling: engine.Sampling{Temperature: 0}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Run(ctx, "What is in hello.txt? Read it with read_file.")
			if err != nil {
				t.Fatalf("the loop must handle whatever the model writes: %v\n%s", err, out.String())
			}
			t.Logf("stop %s after %d step(s); transcript:\n%s", res.Stop, res.Steps, out.String())
			for i, o := range rec.outs {
				t.Logf("raw output of real generation %d: %q", i+1, o)
			}
			switch res.Stop {
			case StopAnswer, StopLength, StopStepLimit:
			default:
				t.Fatalf("stop %q", res.Stop)
			}
			if len(rec.reqs[0].Tools) != 7 {
				t.Fatalf("the request carries %d tools, want 7", len(rec.reqs[0].Tools))
			}
			first := checkRendered(t, rec.reqs[0])
			for _, want := range []string{"<|im_start|>system\nYou are ftchat", `"name":"read_file"`, `"description":"Read a text file.`, `"required":["path","old_text","new_text"]`, "<tool_call>", "<|im_start|>user\nWhat is in hello.txt?"} {
				if !strings.Contains(first, want) {
					t.Errorf("the rendered prompt lacks %q", want)
				}
			}
			if err := eng.FitCheck(rec.reqs[0]); err != nil {
				t.Errorf("FitCheck: %v", err)
			}
			if forced {
				second := checkRendered(t, rec.reqs[1])
				for _, want := range []string{
					"<|im_start|>assistant\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\":\"hello.txt\"}}\n</tool_call><|im_end|>",
					"<|im_start|>user\n<tool_response>\nhello.txt (lines 1-2 of 2)\nhi there\nsecond line\n\n</tool_response><|im_end|>\n",
				} {
					if !strings.Contains(second, want) {
						t.Errorf("the rendered second prompt lacks %q:\n%s", want, second[len(second)-min(len(second), 600):])
					}
				}
				if len(rec.outs) == 0 {
					t.Fatal("the model never ran after the scripted call")
				}
			}
		})
	}
}
