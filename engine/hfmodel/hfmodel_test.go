package hfmodel_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// fixture is what scripts/hf_fixtures.py writes beside each directory.
type fixture struct {
	Arch        string    `json:"arch"`
	DType       string    `json:"dtype"`
	Text        string    `json:"text"`
	Tokens      []int32   `json:"tokens"`
	LogprobNext []float64 `json:"logprob_next"`
	PPL         float64   `json:"ppl"`
}

var archs = []string{"llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "llama_fp8_tensor", "qwen3moe_fp8_block", "qwen3next",
	"llama_nvfp4", "qwen3moe_nvfp4", "qwen3moe_nvfp4_ct", "qwen35moe_nvfp4", "qwen35moe_nvfp4_mixed"}

func readFixture(t *testing.T, arch string) *fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", arch+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	return &fx
}

// logits runs the whole sequence as one prefill on the CPU with an f32 KV
// pool and returns every row's logits.
func logits(t *testing.T, f *gguf.File, toks []int32) ([]float32, model.Config) {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2, F32KV: true})
	t.Cleanup(be.Close)
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	const page = 16
	pages := (len(toks) + page - 1) / page
	if err := be.AllocKV(m.Config.KVLayout(page, pages, kvcache.F16)); err != nil {
		t.Fatal(err)
	}
	span := model.SeqSpan{NewTokens: len(toks)}
	for i := range pages {
		span.Pages = append(span.Pages, int32(i))
	}
	if m.NeedsState() {
		sb := model.Backend(be).(model.StateBackend)
		if err := sb.AllocState(m.Config.StateLayout(1)); err != nil {
			t.Fatal(err)
		}
		sb.ClearState(0)
	}
	b := &model.Batch{Tokens: toks, Seqs: []model.SeqSpan{span}}
	rows := make([]int, len(toks))
	for i := range toks {
		b.Pos = append(b.Pos, int32(i))
		rows[i] = i
	}
	lg, err := m.Forward(b, rows)
	if err != nil {
		t.Fatal(err)
	}
	return lg, m.Config
}

// TestCheckpointMatchesConvertedGGUF loads each tiny checkpoint directory
// and the GGUF llama.cpp's converter made from it (f32) and requires the
// same logits (max |Δ| / max |logit| ≤ 1e-5 over every position), and a
// perplexity within 1% of transformers' float32 run.
func TestCheckpointMatchesConvertedGGUF(t *testing.T) {
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			fx := readFixture(t, arch)
			hf, err := hfmodel.Open(filepath.Join("testdata", arch))
			if err != nil {
				t.Fatal(err)
			}
			defer hf.Close()
			gf, err := gguf.OpenBytes(arch+".gguf", testmodel.Gunzip(t, filepath.Join("testdata", arch+".gguf.gz")))
			if err != nil {
				t.Fatal(err)
			}
			defer gf.Close()
			a, ca := logits(t, hf, fx.Tokens)
			g, cg := logits(t, gf, fx.Tokens)
			if ca.Arch != cg.Arch || ca.Layers != cg.Layers || ca.Vocab != cg.Vocab || ca.Rope.Dim != cg.Rope.Dim || ca.TiedEmbeddings != cg.TiedEmbeddings {
				t.Errorf("config differs: checkpoint %+v\nGGUF %+v", ca, cg)
			}
			var maxAbs, maxDiff float64
			for i := range g {
				maxAbs = math.Max(maxAbs, math.Abs(float64(g[i])))
				maxDiff = math.Max(maxDiff, math.Abs(float64(a[i]-g[i])))
			}
			rel := maxDiff / maxAbs
			V := ca.Vocab
			var nll float64
			for p := 0; p+1 < len(fx.Tokens); p++ {
				nll -= testmodel.LogSoftmaxAt(a[p*V:(p+1)*V], fx.Tokens[p+1])
			}
			ppl := math.Exp(nll / float64(len(fx.Tokens)-1))
			pr := math.Abs(ppl/fx.PPL - 1)
			t.Logf("%s (%s): logits vs converted GGUF max |Δ| %.3g of max |logit| %.3g (rel %.3g); perplexity %.4f vs transformers %.4f (%.3g%%)",
				arch, fx.DType, maxDiff, maxAbs, rel, ppl, fx.PPL, 100*pr)
			if rel > 1e-5 || math.IsNaN(rel) {
				t.Errorf("logits differ from the converted GGUF's: relative %.3g > 1e-5", rel)
			}
			if pr > 0.01 || math.IsNaN(ppl) {
				t.Errorf("perplexity %.4f vs transformers %.4f: off by %.3g%% > 1%%", ppl, fx.PPL, 100*pr)
			}
		})
	}
}
