package gpu

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/hfmodel/hfsynth"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// TestHFMixedModelGPUvsCPU: a ModelOpt MIXED_PRECISION checkpoint
// (hfsynth's qwen35moe-tiny: NVFP4 experts with per-expert scales,
// FP8_E4M3 attention and Gated DeltaNet projections with per-tensor
// scales, BF16 in_proj_a/b, embeddings and lm_head) loaded through
// engine/hfmodel on the GPU and on the CPU, fed 12 tokens one at a time:
// every step takes the float32 decode paths (GEMVs, MoE decode GEMVs,
// the recurrent update), so the logits must agree to 1e-3 (relative L2;
// the bf16 KV cache rounds the same values on both). A missing or
// misapplied FP8 or NVFP4 scale moves them by orders of magnitude more.
func TestHFMixedModelGPUvsCPU(t *testing.T) {
	g, err := NewBackend(openTestDevice(t), BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	compareHF(t, g, hfsynth.NVFP4Mixed, gguf.FP8_E4M3, 1e-3)
}

// TestHFBlockFP8ModelGPUvsCPU: the same with hfsynth's 128x128-block FP8
// checkpoint (quant_method fp8, weight_scale_inv): every attention, Gated
// DeltaNet and expert projection loads as FP8_E4M3_B32 (its scales inside
// its blocks), so the GEMVs, the MoE decode GEMVs and the embedding read
// that type on the GPU; logits within 1e-3 (relative L2) of the CPU's.
func TestHFBlockFP8ModelGPUvsCPU(t *testing.T) {
	g, err := NewBackend(openTestDevice(t), BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	compareHF(t, g, hfsynth.FP8Block, gguf.FP8_E4M3_B32, 1e-3)
}

// compareHF writes qwen35moe-tiny under quant, loads it on g and on the
// CPU, requires tensors of type typ, and compares 12 decode steps' logits.
func compareHF(t *testing.T, g model.Backend, quant string, typ gguf.Type, tol float64) {
	spec, err := synth.Preset("qwen35moe-tiny", gguf.BF16)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := hfsynth.Write(dir, spec, quant, 5, nil); err != nil {
		t.Fatal(err)
	}
	f, err := hfmodel.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(c.Close)
	bes := []model.Backend{g, c}
	ms := make([]*model.Model, 2)
	for i, be := range bes {
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.AllocKV(m.Config.KVLayout(16, 1, kvcache.BF16)); err != nil {
			t.Fatal(err)
		}
		sb := be.(model.StateBackend)
		if err := sb.AllocState(m.Config.StateLayout(1)); err != nil {
			t.Fatal(err)
		}
		sb.ClearState(0)
		ms[i] = m
	}
	t.Cleanup(func() { ms[0].Free() }) // before the backend's Close (cleanups run last in, first out)
	fp8 := 0
	for _, ti := range f.Tensors {
		if ti.Type == typ {
			fp8++
		}
	}
	if fp8 == 0 {
		t.Fatalf("the checkpoint has no %s tensors", typ)
	}
	vocab := ms[0].Config.Vocab
	r := rand.New(rand.NewPCG(70, 71))
	for step := range 12 {
		b := &model.Batch{Tokens: []int32{r.Int32N(300)}, Pos: []int32{int32(step)},
			Seqs: []model.SeqSpan{{Cached: step, NewTokens: 1, Pages: []int32{0}}}}
		lg := make([][]float32, 2)
		for i, m := range ms {
			if lg[i], err = m.Forward(b, []int{0}); err != nil {
				t.Fatalf("step %d on %s: %v", step, m.Backend().Name(), err)
			}
		}
		e, err := relErr(lg[0][:vocab], lg[1][:vocab])
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		msg := fmt.Sprintf("step %d: logits relative error %.3g (tol %.0g; %d %s tensors)", step, e, tol, fp8, typ)
		if e > tol {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}
