package hfsynth_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/hfmodel/hfsynth"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// TestWriteTinyLoads writes the qwen35moe-tiny preset as an NVFP4 MIXED
// checkpoint, as 128x128-block FP8 and as BF16, opens each as the engine
// does and runs a prefill on the CPU: NVFP4 MIXED's experts load as NVFP4
// with their scales, its attention and GDN projections as FP8_E4M3 with
// theirs (in_proj_a/b stay BF16); every projection and expert of the block
// FP8 one loads as FP8_E4M3_B32 (scales inside its blocks, no .scale);
// the weight bytes are what Size promised plus nothing dequantized, the
// logits are finite, and the tokenizer and its stop tokens load.
func TestWriteTinyLoads(t *testing.T) {
	spec, err := synth.Preset("qwen35moe-tiny", gguf.BF16)
	if err != nil {
		t.Fatal(err)
	}
	for _, quant := range hfsynth.Quants() {
		t.Run(quant, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			var last int64
			if err := hfsynth.Write(dir, spec, quant, 7, func(done, total int64) { last = done }); err != nil {
				t.Fatal(err)
			}
			size, err := hfsynth.Size(spec, quant)
			if err != nil {
				t.Fatal(err)
			}
			if last != size {
				t.Errorf("progress ended at %d of %d bytes", last, size)
			}
			f, err := hfmodel.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			types := map[gguf.Type]int{}
			for _, ti := range f.Tensors {
				types[ti.Type]++
				proj := strings.HasSuffix(ti.Name, ".weight") && !strings.HasSuffix(ti.Name, "norm.weight") && !strings.Contains(ti.Name, "gate_inp") &&
					ti.Name != "token_embd.weight" && ti.Name != "output.weight" && !strings.Contains(ti.Name, "conv1d")
				switch {
				case quant == hfsynth.FP8Block:
					if proj && ti.Type != gguf.FP8_E4M3_B32 {
						t.Errorf("%s is %s, want FP8_E4M3_B32", ti.Name, ti.Type)
					}
					if !proj && ti.Type == gguf.FP8_E4M3_B32 {
						t.Errorf("%s is FP8_E4M3_B32; only projections are FP8", ti.Name)
					}
					if _, ok := f.Tensor(gguf.ScaleTensorName(ti.Name)); ok {
						t.Errorf("%s has a .scale; FP8_E4M3_B32 carries its scales", ti.Name)
					}
				case quant == hfsynth.BF16 || !strings.HasSuffix(ti.Name, ".weight"):
				case strings.Contains(ti.Name, "_exps.") || strings.Contains(ti.Name, "_shexp.weight") && !strings.Contains(ti.Name, "gate_inp"):
					if ti.Type != gguf.NVFP4 {
						t.Errorf("%s is %s, want NVFP4", ti.Name, ti.Type)
					}
				case strings.HasSuffix(ti.Name, "attn_qkv.weight") || strings.HasSuffix(ti.Name, "attn_gate.weight") || strings.HasSuffix(ti.Name, "ssm_out.weight") ||
					strings.HasSuffix(ti.Name, "attn_q.weight") || strings.HasSuffix(ti.Name, "attn_output.weight"):
					if ti.Type != gguf.FP8_E4M3 {
						t.Errorf("%s is %s, want FP8_E4M3", ti.Name, ti.Type)
					}
					if _, ok := f.Tensor(gguf.ScaleTensorName(ti.Name)); !ok {
						t.Errorf("%s has no .scale", ti.Name)
					}
				case strings.HasSuffix(ti.Name, "ssm_alpha.weight"):
					if ti.Type != gguf.BF16 {
						t.Errorf("%s is %s, want BF16", ti.Name, ti.Type)
					}
				}
			}
			t.Logf("%s: tensor types %v, %d bytes of checkpoint tensors", quant, types, size)
			if quant == hfsynth.NVFP4Mixed && (types[gguf.NVFP4] == 0 || types[gguf.FP8_E4M3] == 0) {
				t.Fatalf("types %v: want NVFP4 and FP8_E4M3 tensors", types)
			}
			if quant == hfsynth.FP8Block && types[gguf.FP8_E4M3_B32] == 0 {
				t.Fatalf("types %v: want FP8_E4M3_B32 tensors", types)
			}
			be := cpu.New(cpu.Options{Threads: 2})
			defer be.Close()
			m, err := model.Load(f, be)
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.Layers != spec.Layers || m.Config.Vocab != spec.Vocab {
				t.Fatalf("config %+v, want %d layers, vocab %d", m.Config, spec.Layers, spec.Vocab)
			}
			toks := []int32{1, 5, 9, 300, 42, 7}
			if err := be.AllocKV(m.Config.KVLayout(16, 1, kvcache.F16)); err != nil {
				t.Fatal(err)
			}
			sb := model.Backend(be).(model.StateBackend)
			if err := sb.AllocState(m.Config.StateLayout(1)); err != nil {
				t.Fatal(err)
			}
			sb.ClearState(0)
			b := &model.Batch{Tokens: toks, Seqs: []model.SeqSpan{{NewTokens: len(toks), Pages: []int32{0}}}}
			for i := range toks {
				b.Pos = append(b.Pos, int32(i))
			}
			lg, err := m.Forward(b, []int{len(toks) - 1})
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range lg {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("logit %d is %v", i, v)
				}
			}
			tok, err := tokenizer.FromJSONFile(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := tok.AddEOG(hfmodel.EOSIDs(f)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriteRefuses: presets that are not Qwen3.5/3.6 MoE hybrids, unknown
// quantizations and non-empty directories get one clear error.
func TestWriteRefuses(t *testing.T) {
	tiny, _ := synth.Preset("qwen35moe-tiny", gguf.BF16)
	dense, _ := synth.Preset("qwen3-tiny", gguf.BF16)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec       synth.Spec
		quant, dir string
		want       string
	}{
		{dense, hfsynth.NVFP4Mixed, filepath.Join(t.TempDir(), "a"), "only qwen35moe"},
		{tiny, "int3", filepath.Join(t.TempDir(), "b"), "unknown quantization"},
		{tiny, hfsynth.BF16, full, "not empty"},
	} {
		if err := hfsynth.Write(tc.dir, tc.spec, tc.quant, 1, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s/%s: error %v, want %q", tc.spec.Name, tc.quant, err, tc.want)
		}
	}
}
