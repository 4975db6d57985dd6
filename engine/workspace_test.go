package engine

import (
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/gpu"
)

// activationBytes is what model.buffers (and allocHybrid) allocate for a
// batch of n rows, each tensor rounded up to 256 bytes as the GPU scratch
// allocator does, plus the logits of one row (model.go: h, out).
func activationBytes(c model.Config, n int) int64 {
	ff := c.FF
	if c.Experts > 0 {
		ff = 1
	}
	cols := []int{c.Dim, c.Dim, c.Heads * c.HeadDim, c.KVHeads * c.HeadDim, c.KVHeads * c.HeadDim, c.Heads * c.HeadDim,
		c.Dim, ff, ff, c.Dim}
	if c.Hybrid() {
		s := c.SSM
		value := s.ValueHeads * s.ValueDim
		cols = append(cols, 2*c.Heads*c.HeadDim, c.Heads*c.HeadDim, s.ConvChannels(), s.ConvChannels(), value, value, value,
			s.ValueHeads, s.ValueHeads)
		if c.SharedFF > 0 {
			cols = append(cols, c.SharedFF, c.SharedFF, 1)
		}
	}
	var t int64
	for _, k := range cols {
		t += (int64(n)*int64(k)*4 + 255) &^ 255
	}
	return t + (int64(c.Dim)*4+255)&^255 + (int64(c.Vocab)*4+255)&^255
}

func qwen3MoE30B() model.Config {
	return model.Config{Arch: "qwen3moe", Dim: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, FF: 6144, Vocab: 151936,
		Experts: 128, ExpertsUsed: 8, ExpertFF: 768}
}

func qwen36MoE35B() model.Config {
	rec := make([]bool, 40)
	for i := range rec {
		rec[i] = (i+1)%4 != 0
	}
	return model.Config{Arch: "qwen35moe", Dim: 2048, Heads: 16, KVHeads: 2, HeadDim: 256, FF: 512, Vocab: 248320,
		Experts: 256, ExpertsUsed: 8, ExpertFF: 512, SharedFF: 512, Recurrent: rec,
		SSM: model.SSM{ConvKernel: 4, KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, Tiled: true}}
}

// TestWorkspaceCoversMoEScratch guards the GPU memory plan of MoE models:
// the workspace it reserves for a prefill chunk must hold the activations
// of that chunk and, beside them, the scratch one MoE call of the chunk
// takes (gpu.MoEScratchBytes, the formula gpu/moe.go allocates by). Before
// this, the MoE scratch was not in the workspace (for Qwen3-30B-A3B at 512
// tokens the grouped path's down output alone is 32 MiB), so the KV pool
// was given memory the first prefill then asked the driver for
// (2026-12-02 H200: "MoE prefill scratch needs 32.00 MiB with 139.04 GiB
// in use: CUDA_ERROR_OUT_OF_MEMORY").
func TestWorkspaceCoversMoEScratch(t *testing.T) {
	for _, c := range []model.Config{qwen3MoE30B(), qwen36MoE35B()} {
		for _, chunk := range []int{1, 2, 3, 16, 17, 256, 512, 2048, 4096} {
			need := activationBytes(c, chunk) + gpu.MoEScratchBytes(chunk, c.Experts, c.ExpertsUsed, c.Dim, c.ExpertFF) +
				gpu.AttnSplitBytes(chunk, c.Heads, c.HeadDim)
			if got := WorkspaceBytes(c, chunk); got < need {
				t.Errorf("%s chunk %d: workspace %s < activations %s + MoE scratch %s", c.Arch, chunk,
					kvcache.FormatBytes(got), kvcache.FormatBytes(activationBytes(c, chunk)),
					kvcache.FormatBytes(gpu.MoEScratchBytes(chunk, c.Experts, c.ExpertsUsed, c.Dim, c.ExpertFF)))
			}
		}
	}
	// The report's buffer: the grouped path's down output of 512 tokens.
	if s := gpu.MoEScratchBytes(512, 128, 8, 2048, 768); s < 32<<20 {
		t.Errorf("MoE scratch of 512 tokens %d < the 32 MiB down output", s)
	}
}

// TestWorkspaceCoversDenseActivations: the same for dense and hybrid
// dense models (no MoE scratch; the attention split partials in both).
func TestWorkspaceCoversDenseActivations(t *testing.T) {
	c36 := qwen36MoE35B()
	c36.Arch, c36.Experts, c36.ExpertsUsed, c36.ExpertFF, c36.SharedFF, c36.FF = "qwen35", 0, 0, 0, 0, 17408
	for _, c := range []model.Config{
		{Arch: "llama", Dim: 2048, Heads: 32, KVHeads: 8, HeadDim: 64, FF: 8192, Vocab: 128256},
		c36,
	} {
		for _, chunk := range []int{1, 3, 256, 2048} {
			if got, need := WorkspaceBytes(c, chunk), activationBytes(c, chunk)+gpu.AttnSplitBytes(chunk, c.Heads, c.HeadDim); got < need {
				t.Errorf("%s chunk %d: workspace %d < activations %d", c.Arch, chunk, got, need)
			}
		}
	}
}

// TestPlanKVUsesDriverFree: the pool is planned against the driver's free
// memory when memory outside the allocator (context, modules, local
// memory, graphs) leaves less than the budget says, and keeps the
// headroom (1/64 of a large budget) free beside the workspace.
func TestPlanKVUsesDriverFree(t *testing.T) {
	const gib = int64(1) << 30
	c := qwen3MoE30B()
	var st kvcache.RecurrentState
	budget, used := 139*gib, 57*gib
	ws := WorkspaceBytes(c, 512)
	full, err := planKV(budget, used, budget-used, c, 512, st)
	if err != nil {
		t.Fatal(err)
	}
	if want := budget - used - ws - budget/64; full != want {
		t.Errorf("pool %d, want budget-used-workspace-budget/64 = %d", full, want)
	}
	short, err := planKV(budget, used, budget-used-3*gib, c, 512, st)
	if err != nil {
		t.Fatal(err)
	}
	if short > budget-used-3*gib-ws-gpuReserve {
		t.Errorf("pool %d ignores the driver's free memory (%d)", short, budget-used-3*gib)
	}
	// A small budget keeps the fixed reserve.
	small, err := planKV(8*gib, 2*gib, 6*gib, c, 256, st)
	if err != nil {
		t.Fatal(err)
	}
	if want := 6*gib - WorkspaceBytes(c, 256) - gpuReserve; small != want {
		t.Errorf("8 GiB budget: pool %d, want %d", small, want)
	}
}
