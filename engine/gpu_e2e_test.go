package engine

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/gpu"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// These tests run wherever a CUDA GPU is usable and skip elsewhere (CI).
// scripts/gpu_run.sh runs them on the device machine.

func needGPU(t *testing.T) {
	t.Helper()
	if _, err := gpu.Probe(0); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
}

// synthModel writes a random-weight model of a preset shape into dir.
func synthModel(t *testing.T, preset string, typ gguf.Type) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), preset+".gguf")
	spec, err := synth.Preset(preset, typ)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Write(p, spec, 7, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadOn(t *testing.T, path, device, dtype string, extra Options) *Engine {
	t.Helper()
	o := extra
	o.Model, o.Device, o.KVDType = path, device, dtype
	e, err := Load(context.Background(), o, nil)
	if err != nil {
		t.Fatalf("load %s on %s: %v", filepath.Base(path), device, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// greedyRun prefills prompt and decodes n greedy tokens, returning the first
// logits and the continuation.
func greedyRun(t *testing.T, e *Engine, prompt []int32, n int) ([]float32, []int32) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	seq := e.pool.NewSequence()
	defer seq.Free()
	if _, err := seq.Append(prompt...); err != nil {
		t.Fatal(err)
	}
	var logits []float32
	if err := e.prefill(context.Background(), seq, prompt, 0, &logits, nil); err != nil {
		t.Fatal(err)
	}
	first := append([]float32(nil), logits...)
	var out []int32
	for i := 0; i < n; i++ {
		id := sample.Argmax(logits)
		out = append(out, id)
		pos, err := seq.Append(id)
		if err != nil {
			t.Fatal(err)
		}
		logits, err = e.mdl.Forward(batchFor([]int32{id}, pos, seq.Pages()), []int{0})
		if err == nil {
			err = backendErr(e.be)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return first, out
}

func relErr(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

func TestGPUMatchesCPUWholeModel(t *testing.T) {
	needGPU(t)
	type model struct {
		name string
		path func(t *testing.T) string
	}
	models := []model{
		{"qwen3-tiny F32", func(t *testing.T) string { return synthModel(t, "qwen3-tiny", gguf.F32) }},
		{"qwen3moe-tiny Q8_0", func(t *testing.T) string { return synthModel(t, "qwen3moe-tiny", gguf.Q8_0) }},
		{"qwen2-tiny Q4_K", func(t *testing.T) string { return synthModel(t, "qwen2-tiny", gguf.Q4_K) }},
		{"smollm2-135m (real weights)", func(t *testing.T) string { return testModel(t) }},
	}
	prompt := make([]int32, 200)
	for i := range prompt {
		prompt[i] = int32(300 + (i*7919)%2000)
	}
	for _, m := range models {
		for _, dt := range []string{"bf16", "fp8_e4m3"} {
			t.Run(m.name+"/"+dt, func(t *testing.T) {
				path := m.path(t)
				cpuE := loadOn(t, path, "cpu", dt, Options{KVTokens: 4096})
				gpuE := loadOn(t, path, "cuda", dt, Options{GPUMemory: 4 << 30})
				p := prompt
				if v := cpuE.mdl.Config.Vocab; v < 2400 {
					p = make([]int32, len(prompt))
					for i := range p {
						p[i] = prompt[i] % int32(v)
					}
				}
				cl, cc := greedyRun(t, cpuE, p, 32)
				gl, gc := greedyRun(t, gpuE, p, 32)
				// The GPU computes prefill GEMMs with bf16 operands: judge the
				// logits at bf16 tolerance.
				if e := relErr(gl, cl); e > 2e-2 || math.IsNaN(e) {
					t.Errorf("logits rel. error %.3g > 2e-2", e)
				} else {
					t.Logf("logits rel. error %.3g", e)
				}
				same := 0
				for same < len(cc) && cc[same] == gc[same] {
					same++
				}
				if same != len(cc) {
					t.Errorf("greedy continuations diverge at token %d: cpu %v gpu %v", same, cc, gc)
				}
			})
		}
	}
}

// TestGPU128KContextIn8GiB checks the capacity promise: a Llama-3.2-1B
// shape under --gpu-memory 8GiB gets at least 131,072 fp8 tokens (about
// half in bf16), and a 128K-token prompt prefills and decodes.
func TestGPU128KContextIn8GiB(t *testing.T) {
	needGPU(t)
	if os.Getenv("FTCHAT_GPU_LONG") == "" {
		t.Skip("set FTCHAT_GPU_LONG=1 (prefills 128K tokens)")
	}
	path := synthModel(t, "llama-3.2-1b", gguf.Q4_K)
	caps := map[string]int{}
	for _, dt := range []string{"bf16", "fp8_e4m3"} {
		e := loadOn(t, path, "cuda", dt, Options{GPUMemory: 8 << 30, ContextLen: 140000})
		st := e.Stats()
		caps[dt] = st.TokensCapacity
		t.Logf("%s: %d tokens in %s pool (weights %s, budget %s)", dt, st.TokensCapacity,
			kvcache.FormatBytes(st.PoolBytes), kvcache.FormatBytes(st.WeightsBytes), kvcache.FormatBytes(st.BudgetBytes))
		if dt == "fp8_e4m3" {
			if st.TokensCapacity < 131072 {
				t.Fatalf("fp8 pool holds %d tokens, want >= 131072", st.TokensCapacity)
			}
			r, err := e.BenchSpeed(context.Background(), 131072-512-16, 512, 16, 3)
			if err != nil {
				t.Fatalf("128K prompt: %v", err)
			}
			t.Logf("128K: fill %.1fs, prefill %.0f tok/s, decode %.1f tok/s", r.FillSeconds, r.PrefillPerS, r.DecodePerS)
		}
		e.Close()
	}
	if r := float64(caps["fp8_e4m3"]) / float64(caps["bf16"]); r < 1.85 {
		t.Fatalf("fp8/bf16 capacity ratio %.3f", r)
	}
}
