package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/sample"
)

// sampleMix is a set of requests that cover both sampling paths of a
// batched step: greedy (with and without the repetition penalty) and
// top-k draws are answered by the step's one sampling call, while a
// temperature without top-k (the whole row), logprobs and a JSON
// constraint are sampled row by row.
func sampleMix() []BatchRequest {
	u := func(max int, content string, s Sampling) Request {
		return Request{Messages: []Message{{Role: "user", Content: content}}, MaxTokens: max, Sampling: s}
	}
	return []BatchRequest{
		{Request: u(24, "What is the capital of France?", Sampling{})},
		{Request: u(24, "Write a haiku about the sea.", Sampling{})},
		{Request: u(24, "List three colors.", Sampling{RepeatPenalty: 1.3})},
		{Request: u(24, "Tell me a story.", Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 11})},
		{Request: u(24, "Explain what a CPU does.", Sampling{Temperature: 0.8, TopK: 256, RepeatPenalty: 1.1, MinP: 0.02, Seed: 12})},
		{Request: u(24, "Name a large animal.", Sampling{Temperature: 0.7, Seed: 5})},           // whole row
		{Request: u(24, "Describe a forest.", Sampling{}), Logprobs: true, TopLogprobs: 2},      // whole row
		{Request: u(24, "Give me a person as JSON.", Sampling{}), JSON: sample.AnyJSONObject()}, // masked row
	}
}

// together reports, per request of sampleMix, whether its rows may be
// drawn by the step's one sampling call.
var together = []bool{true, true, true, true, true, false, false, false}

func runMix(t *testing.T, b *Batcher, reqs []BatchRequest, concurrent bool) []batchResult {
	t.Helper()
	out := make([]batchResult, len(reqs))
	if !concurrent {
		for i, r := range reqs {
			ch, err := b.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = drain(t, ch)
		}
		return out
	}
	// Queued while the loop cannot step (it takes the engine's lock), so
	// the first step admits them all and every run sees the same batches.
	chans := make([]<-chan BatchEvent, len(reqs))
	b.e.mu.Lock()
	for i, r := range reqs {
		ch, err := b.Submit(context.Background(), r)
		if err != nil {
			b.e.mu.Unlock()
			t.Fatal(err)
		}
		chans[i] = ch
	}
	b.e.mu.Unlock()
	var wg sync.WaitGroup
	for i := range chans {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = drain(t, chans[i]) }()
	}
	wg.Wait()
	return out
}

// TestBatcherSamplesTogether runs sampleMix one request at a time and
// then all together, with device sampling (on the CPU backend the rows
// are host rows, answered through the same Logits.AnswerRows call the GPU
// serves in one round trip) and with FTCHAT_DEVICE_SAMPLING=0 (every row
// copied and sampled on its own): the answers (text, usage, logprobs) are
// the same in all three runs, the shared steps drew their greedy and
// top-k rows in one call, and no token of a row-by-row request was
// counted as drawn together.
func TestBatcherSamplesTogether(t *testing.T) {
	e := load(t, Options{})
	reqs := sampleMix()
	b := e.NewBatcher(BatcherOptions{PrefixCache: -1, MaxRunning: len(reqs)})
	defer b.Close()
	alone := runMix(t, b, reqs, false)
	if st := b.Stats(); st.SampledTogether != 0 {
		t.Errorf("requests alone: %d tokens drawn together", st.SampledTogether)
	}
	before := b.Stats()
	got := runMix(t, b, reqs, true)
	after := b.Stats()

	t.Setenv("FTCHAT_DEVICE_SAMPLING", "0")
	hostB := e.NewBatcher(BatcherOptions{PrefixCache: -1, MaxRunning: len(reqs)})
	defer hostB.Close()
	host := runMix(t, hostB, reqs, true)
	if st := hostB.Stats(); st.SampledTogether != 0 {
		t.Errorf("FTCHAT_DEVICE_SAMPLING=0: %d tokens drawn together", st.SampledTogether)
	}

	eligible := 0
	for i := range reqs {
		if alone[i].text == "" {
			t.Errorf("request %d: empty answer", i)
		}
		for _, c := range []struct {
			name string
			r    batchResult
		}{{"together", got[i]}, {"row by row", host[i]}} {
			if c.r.text != alone[i].text || c.r.done.Usage != alone[i].done.Usage {
				t.Errorf("request %d %s: %q (%+v), alone %q (%+v)", i, c.name, c.r.text, c.r.done.Usage, alone[i].text, alone[i].done.Usage)
			}
		}
		if together[i] {
			// +1: an end-of-generation token is drawn but not counted.
			eligible += got[i].done.Usage.CompletionTokens + 1
		}
	}
	n := after.SampledTogether - before.SampledTogether
	steps := after.DecodeSteps - before.DecodeSteps
	tokens := after.DecodeTokens - before.DecodeTokens
	t.Logf("%d requests together: %d tokens in %d sampling steps (%.1f per step), %d drawn by one call per step, at most %d could be",
		len(reqs), tokens, steps, float64(tokens)/float64(max(steps, 1)), n, eligible)
	if n == 0 || n > int64(eligible) {
		t.Errorf("%d tokens drawn together; want some, at most the %d of the greedy and top-k requests", n, eligible)
	}
	if after.MaxSeqsInStep < len(reqs) {
		t.Errorf("at most %d sequences shared a step; want %d", after.MaxSeqsInStep, len(reqs))
	}
	var hist int64
	for _, c := range after.SampledRows {
		hist += c
	}
	if hist != after.DecodeSteps {
		t.Errorf("sampled-rows histogram counts %d steps, DecodeSteps %d", hist, after.DecodeSteps)
	}
}

// TestGPUBatcherSamplesTogether is TestBatcherSamplesTogether on the GPU
// (SmolLM2-135M-Instruct): the greedy and top-k rows of a shared step are
// answered by one SampleRows call (one device round trip), and the
// answers equal those of the same batches with FTCHAT_DEVICE_SAMPLING=0
// (every row copied to the host and sampled there). Against the requests
// alone the answers are only logged: a step of one row runs other GEMV
// kernels than a step of eight, so their logits need not be bit-identical.
func TestGPUBatcherSamplesTogether(t *testing.T) {
	needGPU(t)
	path := testModel(t)
	reqs := sampleMix()
	run := func(env string, concurrent bool) ([]batchResult, BatcherStats) {
		t.Setenv("FTCHAT_DEVICE_SAMPLING", env)
		e := loadOn(t, path, "cuda", "bf16", Options{GPUMemory: 2 << 30})
		b := e.NewBatcher(BatcherOptions{PrefixCache: -1, MaxRunning: len(reqs)})
		defer b.Close()
		return runMix(t, b, reqs, concurrent), b.Stats()
	}
	alone, _ := run("1", false)
	got, st := run("1", true)
	host, hst := run("0", true)
	eligible := 0
	for i := range reqs {
		if got[i].text != host[i].text || got[i].done.Usage != host[i].done.Usage {
			t.Errorf("request %d: sampled together %q (%+v), row by row on the host %q (%+v)", i, got[i].text, got[i].done.Usage, host[i].text, host[i].done.Usage)
		}
		if got[i].text != alone[i].text {
			t.Logf("request %d: together %q, alone %q (not compared: other kernels)", i, got[i].text, alone[i].text)
		}
		if together[i] {
			// +1: an end-of-generation token is drawn but not counted.
			eligible += got[i].done.Usage.CompletionTokens + 1
		}
	}
	t.Logf("together: %d tokens in %d sampling steps, %d drawn by one call per step (of %d)", st.DecodeTokens, st.DecodeSteps, st.SampledTogether, eligible)
	if st.SampledTogether == 0 || st.SampledTogether > int64(eligible) || hst.SampledTogether != 0 {
		t.Errorf("drawn together: %d (want 1..%d), with FTCHAT_DEVICE_SAMPLING=0 %d (want 0)", st.SampledTogether, eligible, hst.SampledTogether)
	}
}

// TestStepProfile: FTCHAT_BATCH_PROFILE's report averages the steps since
// the last line and starts over.
func TestStepProfile(t *testing.T) {
	var out strings.Builder
	p := &stepProfile{every: time.Hour, out: &out}
	p.add(16, 16, StepTimes{Forward: 300 * time.Microsecond, Wait: 5 * time.Millisecond, Sample: 100 * time.Microsecond, Other: 50 * time.Microsecond})
	p.add(0, 0, StepTimes{Forward: 100 * time.Microsecond, Wait: 1 * time.Millisecond, Other: 150 * time.Microsecond})
	if out.Len() != 0 {
		t.Fatalf("reported before its interval: %q", out.String())
	}
	p.every = 0
	p.add(14, 10, StepTimes{Forward: 200 * time.Microsecond, Wait: 3 * time.Millisecond, Sample: 200 * time.Microsecond, Other: 100 * time.Microsecond})
	want := "ftchat: batch profile: 3 steps (2 sampling), 15.0 rows sampled per sampling step (26 of 30 in one call per step); per step µs: forward 200, device wait 3000, sample 100, other 100\n"
	if out.String() != want {
		t.Errorf("got  %q\nwant %q", out.String(), want)
	}
	if p.steps != 0 || p.rows != 0 || p.every != 0 || p.out == nil {
		t.Errorf("not reset: %+v", p)
	}
}
