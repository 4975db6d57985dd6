package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/sample"
)

// deviceSamplingParams cover the device paths (greedy, with and without
// the penalty; top-k 1, 40 and the cap 256 with the host's top-p/min-p)
// and the fallbacks (no top-k, top-k above the cap).
var deviceSamplingParams = []sample.Params{
	{},
	{RepeatPenalty: 1.3},
	{RepeatPenalty: 1.5, RepeatLastN: -1},
	{Temperature: 0.8, TopK: 1},
	{Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: 3},
	{Temperature: 1.0, TopK: 256, MinP: 0.05, RepeatPenalty: 1.2, Seed: 4},
	{Temperature: 0.7, Seed: 5},
	{Temperature: 0.7, TopK: 1000, Seed: 6},
}

// TestGPUDeviceSamplingMatchesHost decodes on the GPU with the logits left
// on the device (decodeToken onDevice) and, at every step, draws the next
// token twice from the same row: Sampler.SampleFrom over the device source
// and, with a second sampler of the same seed, Sampler.Sample over the row
// copied to the host. The tokens must be identical at every step, for
// vocabularies of 512 (qwen3-tiny: top-k 256 is half of it), 49,152
// (SmolLM2 shape) and 248,320 (Qwen3.6 shape, hybrid).
func TestGPUDeviceSamplingMatchesHost(t *testing.T) {
	needGPU(t)
	models := []struct {
		name, preset string
		typ          gguf.Type
		budget       int64
	}{
		{"qwen3-tiny F32", "qwen3-tiny", gguf.F32, 1 << 30},
		{"smollm2-135m shape Q4_1", "smollm2-135m", gguf.Q4_1, 4 << 30},
		{"qwen3.6-35b-a3b shape, 4 blocks, Q4_K", "qwen3.6-35b-a3b-4l", gguf.Q4_K, 8 << 30},
	}
	const steps = 24
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			e := loadOn(t, synthModel(t, m.preset, m.typ), "cuda", "bf16", Options{GPUMemory: m.budget, KVTokens: 4096})
			vocab := e.mdl.Config.Vocab
			t.Logf("vocab %d", vocab)
			var prompt []int32
			for i := range 60 {
				prompt = append(prompt, int32(300+(i*7919)%2000)%int32(vocab))
			}
			for _, p := range deviceSamplingParams {
				dev, err := sample.New(p)
				if err != nil {
					t.Fatal(err)
				}
				host, _ := sample.New(p)
				got := decodeBoth(t, e, prompt, steps, dev, host)
				t.Logf("%+v: %d tokens identical, first %v", p, len(got), got[:min(8, len(got))])
			}
		})
	}
}

// decodeBoth prefills prompt and decodes n tokens with device-held logits,
// checking dev.SampleFrom against host.Sample on each step's row; it
// returns the tokens.
func decodeBoth(t *testing.T, e *Engine, prompt []int32, n int, dev, host *sample.Sampler) []int32 {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	seq := e.pool.NewSequence()
	defer seq.Free()
	st, release, err := e.state.scratch()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := seq.Append(prompt...); err != nil {
		t.Fatal(err)
	}
	var logits []float32
	if err := e.prefill(context.Background(), seq, st, prompt, 0, &logits, nil); err != nil {
		t.Fatal(err)
	}
	var src sample.Logits = sample.Slice(logits)
	hist := append([]int32(nil), prompt...)
	var out []int32
	for i := range n {
		id := dev.SampleFrom(src, hist)
		if err := sourceErr(src); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		row := src.All()
		if row == nil {
			t.Fatalf("step %d: the row cannot be read: %v", i, sourceErr(src))
		}
		if want := host.Sample(row, hist); id != want {
			t.Fatalf("step %d: device sampling drew %d, the host %d", i, id, want)
		}
		out = append(out, id)
		hist = append(hist, id)
		pos, err := seq.Append(id)
		if err != nil {
			t.Fatal(err)
		}
		if src, err = e.decodeToken(id, pos, seq.Pages(), st, true); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGPUSessionDeviceSampling generates with Session.Generate and with
// the batcher (several requests in shared steps) on the GPU, once with
// device sampling and once with FTCHAT_DEVICE_SAMPLING=0 (every row
// copied to the host): the answers must be identical, greedy and sampled.
func TestGPUSessionDeviceSampling(t *testing.T) {
	needGPU(t)
	path := testModel(t)
	reqs := []Request{
		greedy(40, Message{Role: "user", Content: "Write a haiku about the sea."}),
		{Messages: []Message{{Role: "user", Content: "List three colors."}}, MaxTokens: 40, Sampling: Sampling{RepeatPenalty: 1.3}},
		{Messages: []Message{{Role: "user", Content: "Tell me a story."}}, MaxTokens: 40, Sampling: Sampling{Temperature: 0.9, TopK: 40, TopP: 0.95, Seed: 11}},
		{Messages: []Message{{Role: "user", Content: "Explain what a CPU does."}}, MaxTokens: 40, Sampling: Sampling{Temperature: 0.8, TopK: 256, RepeatPenalty: 1.1, Seed: 12}},
	}
	run := func(env string) (session, batched []string) {
		t.Setenv("FTCHAT_DEVICE_SAMPLING", env)
		e := loadOn(t, path, "cuda", "bf16", Options{GPUMemory: 2 << 30})
		for _, r := range reqs {
			s := e.NewSession()
			text, _ := collect(t, s.Generate(context.Background(), r))
			s.Close()
			session = append(session, text)
		}
		b := e.NewBatcher(BatcherOptions{PrefixCache: -1})
		defer b.Close()
		batched = make([]string, len(reqs))
		var wg sync.WaitGroup
		// Every request is queued before the first step (a step holds
		// e.mu), so both runs share the same step compositions: a row's
		// logits depend on how many rows share its step (one row takes the
		// GEMV, several gemmq; attention splits by batch), and a sampled
		// request must not see that difference as a device/host one.
		e.mu.Lock()
		for i, r := range reqs {
			ch := submit(t, b, context.Background(), r)
			wg.Add(1)
			go func() { defer wg.Done(); batched[i] = drain(t, ch).text }()
		}
		e.mu.Unlock()
		wg.Wait()
		return session, batched
	}
	hostS, hostB := run("0")
	devS, devB := run("1")
	for i := range reqs {
		name := fmt.Sprintf("request %d (%+v)", i, reqs[i].Sampling)
		if devS[i] != hostS[i] {
			t.Errorf("%s: session with device sampling %q, with full copies %q", name, devS[i], hostS[i])
		}
		if devB[i] != hostB[i] {
			t.Errorf("%s: batcher with device sampling %q, with full copies %q", name, devB[i], hostB[i])
		}
		if devS[i] == "" {
			t.Errorf("%s: empty answer", name)
		}
	}
}
