package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/kvcache"
)

type batchResult struct {
	text  string
	calls []*ToolCall
	done  BatchEvent
}

func drain(t testing.TB, ch <-chan BatchEvent) batchResult {
	t.Helper()
	var r batchResult
	var b strings.Builder
	for ev := range ch {
		switch ev.Kind {
		case EventText:
			b.WriteString(ev.Text)
		case EventToolCall:
			r.calls = append(r.calls, ev.ToolCall)
		case EventError:
			t.Errorf("batch error: %v", ev.Err)
		case EventDone:
			r.done = ev
		}
	}
	r.text = b.String()
	return r
}

func submit(t testing.TB, b *Batcher, ctx context.Context, req Request) <-chan BatchEvent {
	t.Helper()
	ch, err := b.Submit(ctx, BatchRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

var batchPrompts = []string{
	"What is the capital of France?",
	"Write a haiku about the sea.",
	"List three colors.",
	"Explain what a CPU does in one sentence.",
}

func userReq(max int, content string) Request {
	return Request{Messages: []Message{{Role: "user", Content: content}}, MaxTokens: max}
}

// TestBatcherOutputsMatchAlone runs greedy requests one at a time and then
// all together: the answers are the same, and together they decode in
// shared steps (fewer steps than tokens).
func TestBatcherOutputsMatchAlone(t *testing.T) {
	e := load(t, Options{})
	const max = 24
	alone := make([]batchResult, len(batchPrompts))
	b := e.NewBatcher(BatcherOptions{PrefixCache: -1})
	defer b.Close()
	for i, p := range batchPrompts {
		alone[i] = drain(t, submit(t, b, context.Background(), userReq(max, p)))
		if alone[i].text == "" {
			t.Fatalf("prompt %d: empty answer", i)
		}
	}
	before := b.Stats()
	var wg sync.WaitGroup
	together := make([]batchResult, len(batchPrompts))
	chans := make([]<-chan BatchEvent, len(batchPrompts))
	for i, p := range batchPrompts {
		chans[i] = submit(t, b, context.Background(), userReq(max, p))
	}
	for i := range chans {
		wg.Add(1)
		go func() { defer wg.Done(); together[i] = drain(t, chans[i]) }()
	}
	wg.Wait()
	after := b.Stats()
	tokens := 0
	for i := range batchPrompts {
		if together[i].text != alone[i].text {
			t.Errorf("prompt %d: batched %q, alone %q", i, together[i].text, alone[i].text)
		}
		if together[i].done.Usage != alone[i].done.Usage {
			t.Errorf("prompt %d: usage batched %+v, alone %+v", i, together[i].done.Usage, alone[i].done.Usage)
		}
		tokens += together[i].done.Usage.CompletionTokens
	}
	steps := after.Steps - before.Steps
	t.Logf("%d requests: %d tokens sampled in %d steps (%d multi-sequence steps, at most %d sequences per step)",
		len(batchPrompts), tokens, steps, after.MultiSeqSteps-before.MultiSeqSteps, after.MaxSeqsInStep)
	if after.MaxSeqsInStep < len(batchPrompts) {
		t.Errorf("at most %d sequences shared a step; want %d", after.MaxSeqsInStep, len(batchPrompts))
	}
	if steps >= int64(tokens) {
		t.Errorf("%d steps for %d tokens: the requests did not decode together", steps, tokens)
	}
	if got := e.Stats().PagesUsed; got != 0 {
		t.Errorf("%d pages still used with no prefix cache", got)
	}
}

// TestBatcherMatchesSession checks the batcher against Session.Generate.
func TestBatcherMatchesSession(t *testing.T) {
	e := load(t, Options{})
	req := userReq(20, batchPrompts[0])
	s := e.NewSession()
	want, _ := collect(t, s.Generate(context.Background(), req))
	s.Close()
	b := e.NewBatcher(BatcherOptions{})
	defer b.Close()
	if got := drain(t, submit(t, b, context.Background(), req)); got.text != want {
		t.Fatalf("batcher %q, session %q", got.text, want)
	}
}

// TestBatcherPrefixSharing: a second request with the same long system
// prompt prefills only what differs, while the first is cached or running.
func TestBatcherPrefixSharing(t *testing.T) {
	e := load(t, Options{PageSize: 16})
	b := e.NewBatcher(BatcherOptions{})
	defer b.Close()
	sys := Message{Role: "system", Content: longText(300)}
	r1 := drain(t, submit(t, b, context.Background(), Request{Messages: []Message{sys, {Role: "user", Content: "Write a long story about a dragon."}}, MaxTokens: 32}))
	r2 := drain(t, submit(t, b, context.Background(), Request{Messages: []Message{sys, {Role: "user", Content: "Hello there"}}, MaxTokens: 4}))
	if r1.done.Usage.CachedTokens != 0 {
		t.Errorf("first request reused %d tokens", r1.done.Usage.CachedTokens)
	}
	if c := r2.done.Usage.CachedTokens; c < 300 || c >= r2.done.Usage.PromptTokens {
		t.Errorf("second request reused %d of %d prompt tokens; want the shared system prompt", c, r2.done.Usage.PromptTokens)
	}
	st := e.pool.Stats()
	if st.PagesShared == 0 {
		t.Errorf("no shared pages: %+v", st)
	}
	// Multi-turn: the follow-up of r2's conversation reuses r2's answer too.
	r3 := drain(t, submit(t, b, context.Background(), Request{Messages: []Message{sys, {Role: "user", Content: "Hello there"},
		{Role: "assistant", Content: r2.text}, {Role: "user", Content: "Thanks"}}, MaxTokens: 4}))
	if c := r3.done.Usage.CachedTokens; c <= r2.done.Usage.PromptTokens {
		t.Errorf("follow-up reused %d tokens; want more than the previous prompt's %d", c, r2.done.Usage.PromptTokens)
	}
	b.DropCache()
	if got := e.Stats().PagesUsed; got != 0 {
		t.Errorf("DropCache left %d pages", got)
	}
}

// TestBatcherCancelFreesPages: a request whose context is cancelled ends
// with StopCancelled and its pages are free right after.
func TestBatcherCancelFreesPages(t *testing.T) {
	e := load(t, Options{})
	b := e.NewBatcher(BatcherOptions{})
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := submit(t, b, ctx, userReq(0, "Write a very long story about a dragon."))
	n := 0
	for ev := range ch {
		if ev.Kind == EventText {
			if n++; n == 3 {
				if e.Stats().PagesUsed == 0 {
					t.Error("no pages used while decoding")
				}
				cancel()
			}
		}
		if ev.Kind == EventDone && ev.Stop != StopCancelled {
			t.Errorf("stop %s, want cancelled", ev.Stop)
		}
	}
	waitFor(t, func() bool { return e.Stats().PagesUsed == 0 && b.Stats().Running == 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBatcherQueueFull: with one running slot and one queue slot a third
// request is refused with ErrQueueFull; the queued one runs afterwards.
func TestBatcherQueueFull(t *testing.T) {
	e := load(t, Options{})
	b := e.NewBatcher(BatcherOptions{MaxRunning: 1, MaxQueue: 1})
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := submit(t, b, ctx, userReq(0, "Write a very long story about a dragon."))
	waitFor(t, func() bool { return b.Stats().Running == 1 })
	second := submit(t, b, context.Background(), userReq(4, batchPrompts[0]))
	if _, err := b.Submit(context.Background(), BatchRequest{Request: userReq(4, batchPrompts[1])}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third request: %v, want ErrQueueFull", err)
	}
	if st := b.Stats(); st.Queued != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
	cancel()
	drain(t, first)
	if r := drain(t, second); r.done.Stop != StopMaxTokens || r.text == "" {
		t.Errorf("queued request: %+v", r)
	}
}

// TestBatcherPreemption: a pool too small for two long answers at once
// still finishes both, with the same text as alone, by preempting the
// younger one and recomputing it later.
func TestBatcherPreemption(t *testing.T) {
	e := load(t, Options{KVTokens: 256, PageSize: 16})
	b := e.NewBatcher(BatcherOptions{PrefixCache: -1})
	defer b.Close()
	reqs := []Request{userReq(110, "Write a long story about a dragon."), userReq(110, "Write a long story about a robot.")}
	var alone []batchResult
	for _, r := range reqs {
		alone = append(alone, drain(t, submit(t, b, context.Background(), r)))
	}
	a, c := submit(t, b, context.Background(), reqs[0]), submit(t, b, context.Background(), reqs[1])
	var ra, rc batchResult
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ra = drain(t, a) }()
	go func() { defer wg.Done(); rc = drain(t, c) }()
	wg.Wait()
	for i, got := range []batchResult{ra, rc} {
		if got.text != alone[i].text {
			t.Errorf("request %d: %q, alone %q", i, got.text, alone[i].text)
		}
	}
	if p := b.Stats().Preempted; p == 0 {
		t.Errorf("no preemption in a pool of %d tokens (prompts %d+%d, answers %d+%d tokens)", e.Stats().TokensCapacity,
			alone[0].done.Usage.PromptTokens, alone[1].done.Usage.PromptTokens, alone[0].done.Usage.CompletionTokens, alone[1].done.Usage.CompletionTokens)
	}
}

func TestBatcherRejectsOversizedPrompts(t *testing.T) {
	e := load(t, Options{KVTokens: 128, PageSize: 16, ContextLen: 4096})
	b := e.NewBatcher(BatcherOptions{})
	defer b.Close()
	_, err := b.Submit(context.Background(), BatchRequest{Request: userReq(4, longText(400))})
	var full *kvcache.PoolFullError
	if !errors.As(err, &full) || full.Capacity != 128 {
		t.Fatalf("pool: %v", err)
	}
	e2 := load(t, Options{ContextLen: 64})
	b2 := e2.NewBatcher(BatcherOptions{})
	defer b2.Close()
	_, err = b2.Submit(context.Background(), BatchRequest{Request: userReq(4, longText(100))})
	var cf *ContextFullError
	if !errors.As(err, &cf) || cf.ContextLen != 64 {
		t.Fatalf("context: %v", err)
	}
	_, err = b2.Submit(context.Background(), BatchRequest{Request: userReq(4, "hi"), TopLogprobs: 99})
	if err == nil || !strings.Contains(err.Error(), "top_logprobs") {
		t.Fatalf("top_logprobs: %v", err)
	}
}

func TestBatcherLogprobsAndStop(t *testing.T) {
	e := load(t, Options{})
	b := e.NewBatcher(BatcherOptions{})
	defer b.Close()
	req := userReq(30, "Count from 1 to 10, separated by commas.")
	plain := drain(t, submit(t, b, context.Background(), req))
	if !strings.Contains(plain.text, "5") {
		t.Skipf("the model did not count: %q", plain.text)
	}
	req.Sampling.Stop = []string{"5"}
	ch, err := b.Submit(context.Background(), BatchRequest{Request: req, Logprobs: true, TopLogprobs: 3})
	if err != nil {
		t.Fatal(err)
	}
	var lps []TokenLogprob
	var text strings.Builder
	var done BatchEvent
	for ev := range ch {
		lps = append(lps, ev.Logprobs...)
		if ev.Kind == EventText {
			text.WriteString(ev.Text)
		}
		if ev.Kind == EventDone {
			done = ev
		}
	}
	if done.Stop != StopString || done.StopSequence != "5" {
		t.Errorf("stop %s %q", done.Stop, done.StopSequence)
	}
	if want := plain.text[:strings.Index(plain.text, "5")]; strings.TrimSpace(text.String()) != strings.TrimSpace(want) {
		t.Errorf("stopped text %q, want %q", text.String(), want)
	}
	if len(lps) != done.Usage.CompletionTokens {
		t.Errorf("%d logprobs for %d tokens", len(lps), done.Usage.CompletionTokens)
	}
	for i, lp := range lps {
		if lp.Logprob > 0 || len(lp.Top) != 3 || lp.Top[0].Logprob < lp.Logprob || lp.Top[0].Logprob < lp.Top[1].Logprob {
			t.Errorf("logprob %d: %+v", i, lp)
		}
		if lp.Top[0].Token != lp.Token { // greedy: the sampled token is the top one
			t.Errorf("logprob %d: sampled %q, top %q", i, lp.Token, lp.Top[0].Token)
		}
	}
}

// TestBatcherPrefillInterleaves: a long prompt is prefilled in bounded
// chunks that share steps with a running decoder, which keeps producing
// tokens meanwhile instead of waiting for the whole prefill.
func TestBatcherPrefillInterleaves(t *testing.T) {
	e := load(t, Options{})
	b := e.NewBatcher(BatcherOptions{PrefillChunk: 32, PrefixCache: -1})
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := submit(t, b, ctx, userReq(0, "Write a very long story about a dragon."))
	for ev := range a { // wait until a decodes
		if ev.Kind == EventText {
			break
		}
	}
	long := submit(t, b, context.Background(), userReq(1, longText(480)))
	var mu sync.Mutex
	aTokens, longStarted := 0, false
	during := -1
	go func() {
		for ev := range a {
			mu.Lock()
			if ev.Kind == EventText && !longStarted {
				aTokens++
			}
			mu.Unlock()
		}
	}()
	for ev := range long {
		if ev.Kind == EventText && during < 0 {
			mu.Lock()
			longStarted, during = true, aTokens
			mu.Unlock()
		}
	}
	cancel()
	rows := b.Stats()
	t.Logf("the decoder produced %d tokens while a 500-token prompt was prefilled (at most %d sequences per step)", during, rows.MaxSeqsInStep)
	if during < 10 {
		t.Errorf("the decoder produced only %d tokens during a 500-token prefill in 32-token chunks", during)
	}
}

// TestBatcherLonePoolFull: a sequence alone in a full pool ends with
// StopPoolFull and the pool's numbers, not silently.
func TestBatcherLonePoolFull(t *testing.T) {
	e := load(t, Options{KVTokens: 96, PageSize: 16})
	b := e.NewBatcher(BatcherOptions{PrefixCache: -1})
	defer b.Close()
	r := drain(t, submit(t, b, context.Background(), userReq(0, "Write a very long story about a dragon.")))
	var full *kvcache.PoolFullError
	if r.done.Stop != StopPoolFull || !errors.As(r.done.Err, &full) || full.Capacity != 96 {
		t.Fatalf("stop %s, err %v", r.done.Stop, r.done.Err)
	}
	if u := r.done.Usage; u.PromptTokens+u.CompletionTokens < 90 || u.PromptTokens+u.CompletionTokens > 97 {
		t.Errorf("usage %+v in a 96-token pool", u)
	}
	if e.Stats().PagesUsed != 0 {
		t.Errorf("%d pages left", e.Stats().PagesUsed)
	}
}

// TestBatcherShareWithRunning: a request that shares a long system prompt
// with a running one forks its pages (prefilling only its own turn), and
// both answer as they do alone.
func TestBatcherShareWithRunning(t *testing.T) {
	e := load(t, Options{PageSize: 16})
	b := e.NewBatcher(BatcherOptions{PrefixCache: -1})
	defer b.Close()
	sys := Message{Role: "system", Content: longText(200)}
	r1 := Request{Messages: []Message{sys, {Role: "user", Content: "Write a long story about a dragon."}}, MaxTokens: 24}
	r2 := Request{Messages: []Message{sys, {Role: "user", Content: "Name three colors."}}, MaxTokens: 12}
	alone1 := drain(t, submit(t, b, context.Background(), r1))
	alone2 := drain(t, submit(t, b, context.Background(), r2))
	c1 := submit(t, b, context.Background(), r1)
	var got1 batchResult
	var wg sync.WaitGroup
	wg.Add(1)
	first := make(chan struct{})
	go func() {
		defer wg.Done()
		var sb strings.Builder
		for ev := range c1 {
			if ev.Kind == EventText {
				if sb.Len() == 0 {
					close(first)
				}
				sb.WriteString(ev.Text)
			}
			if ev.Kind == EventDone {
				got1.done = ev
			}
		}
		got1.text = sb.String()
	}()
	<-first // r1 is decoding
	got2 := drain(t, submit(t, b, context.Background(), r2))
	wg.Wait()
	if c := got2.done.Usage.CachedTokens; c < 200 {
		t.Errorf("the second request reused %d tokens of the running one's system prompt", c)
	}
	if got1.text != alone1.text || got2.text != alone2.text {
		t.Errorf("shared: %q / %q; alone: %q / %q", got1.text, got2.text, alone1.text, alone2.text)
	}
}
