package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// hybridFixture is what scripts/qwen35_fixtures.py writes
// (testdata/README-qwen35.md).
type hybridFixture struct {
	Vocab   int                       `json:"vocab"`
	Tokens  []int32                   `json:"tokens"`
	Prefill refPass                   `json:"prefill"`
	Decode  refPass                   `json:"decode"`
	Rows    struct{ Positions []int } `json:"logit_rows"`
	rows    []float32                 // prefill rows at Rows.Positions, then decode rows
}

type refPass struct {
	LogprobNext []float64 `json:"logprob_next"`
	Argmax      []int32   `json:"argmax"`
	Top2Gap     []float64 `json:"top2_gap"`
	PPL         float64   `json:"ppl"`
}

func readHybridFixture(t *testing.T, name string) *hybridFixture {
	t.Helper()
	var fx hybridFixture
	fx.rows = readFixtureFiles(t, name, &fx)
	if len(fx.rows) != 2*len(fx.Rows.Positions)*fx.Vocab {
		t.Fatalf("%s: %d logits, want %d rows of %d", name, len(fx.rows), 2*len(fx.Rows.Positions), fx.Vocab)
	}
	return &fx
}

// TestHybridModelsMatchTransformers checks each hybrid fixture (GGUFs from
// llama.cpp's converter, references from transformers in float32) on the
// CPU with a bf16 KV pool, the targets: perplexity over the 289
// tokens within 1% of transformers', argmax agreement at >= 99% of the
// positions where transformers' top-2 gap is at least 1e-2, and the
// recorded logit rows within 1e-2 relative L2 error (bf16 K/V). Three
// schedules: one prefill batch, prefill in uneven chunks, and token by
// token decode (compared with the reference's own decode pass). The fp8
// pool must run the prefill without error and stay within 5% perplexity.
func TestHybridModelsMatchTransformers(t *testing.T) {
	for _, c := range []struct{ gguf, ref string }{
		{"tiny_qwen35moe", "tiny_qwen35moe"},
		{"tiny_qwen35moe_mtp", "tiny_qwen35moe"},
		{"tiny_qwen35moe_old", "tiny_qwen35moe"},
		{"tiny_qwen35", "tiny_qwen35"},
		{"tiny_qwen3next", "tiny_qwen3next"},
	} {
		t.Run(c.gguf, func(t *testing.T) {
			path := filepath.Join("testdata", c.gguf+".gguf")
			fx := readHybridFixture(t, c.ref)
			m, _ := loadModel(t, path, 2, false)
			if m.Config.Vocab != fx.Vocab {
				t.Fatalf("vocab %d, fixture %d", m.Config.Vocab, fx.Vocab)
			}
			toks := fx.Tokens
			T := len(toks)
			V := fx.Vocab
			for _, sched := range []struct {
				name   string
				chunks []int // batch sizes; the last repeats
				ref    *refPass
				rows   int // offset of the schedule's reference rows in fx.rows
				dt     kvcache.DType
				pplTol float64
			}{
				{"prefill", []int{T}, &fx.Prefill, 0, kvcache.BF16, 0.01},
				{"chunked", []int{100, 37, 64}, &fx.Prefill, 0, kvcache.BF16, 0.01},
				{"decode", []int{1}, &fx.Decode, len(fx.Rows.Positions), kvcache.BF16, 0.01},
				{"prefill_fp8", []int{T}, &fx.Prefill, -1, kvcache.FP8E4M3, 0.05},
			} {
				t.Run(sched.name, func(t *testing.T) {
					pages := (T + testPage - 1) / testPage
					newHybridPool(t, m, pages, 2, sched.dt)
					s := &hybridSession{m: m, slot: 1}
					for i := range pages {
						s.pages = append(s.pages, int32(pages-1-i))
					}
					logits := make([]float32, 0, T*V)
					for off, k := 0, 0; off < T; k++ {
						n := sched.chunks[min(k, len(sched.chunks)-1)]
						n = min(n, T-off)
						logits = append(logits, runHybrid(t, m, []*hybridSession{s}, [][]int32{toks[off : off+n]})[0]...)
						off += n
					}
					var nll float64
					agree, counted := 0, 0
					var worstLP float64
					for p := 0; p < T; p++ {
						row := logits[p*V : (p+1)*V]
						if p+1 < T {
							lp := testmodel.LogSoftmaxAt(row, toks[p+1])
							nll -= lp
							worstLP = math.Max(worstLP, math.Abs(lp-sched.ref.LogprobNext[p]))
						}
						if sched.ref.Top2Gap[p] >= 1e-2 {
							counted++
							if argmax(row) == sched.ref.Argmax[p] {
								agree++
							}
						}
					}
					ppl := math.Exp(nll / float64(T-1))
					rel := math.Abs(ppl/sched.ref.PPL - 1)
					t.Logf("%s KV: perplexity %.4f vs transformers %.4f (%.3g%%), argmax %d/%d, worst |Δ log p| %.3g",
						sched.dt, ppl, sched.ref.PPL, 100*rel, agree, counted, worstLP)
					if rel > sched.pplTol || math.IsNaN(ppl) {
						t.Errorf("perplexity %.4f, transformers %.4f: off by %.3g%% > %g%%", ppl, sched.ref.PPL, 100*rel, 100*sched.pplTol)
					}
					if sched.dt == kvcache.FP8E4M3 {
						return
					}
					if agree*100 < counted*99 {
						t.Errorf("argmax agrees at %d of %d positions, want >= 99%%", agree, counted)
					}
					for i, p := range fx.Rows.Positions {
						want := fx.rows[(sched.rows+i)*V : (sched.rows+i+1)*V]
						if e := relErr(logits[p*V:(p+1)*V], want); e > 1e-2 || math.IsNaN(e) {
							t.Errorf("position %d: logits relative error %.3g > 1e-2", p, e)
						}
					}
				})
			}
			// Two sequences of the same tokens in different slots and pages,
			// sharing batches at different offsets: each must match the
			// reference as if alone (per-position |Δ log p| <= 1e-2).
			t.Run("two_sequences", func(t *testing.T) {
				pages := (T + testPage - 1) / testPage
				newHybridPool(t, m, 2*pages, 3, kvcache.BF16)
				a, b := &hybridSession{m: m, slot: 2}, &hybridSession{m: m, slot: 0}
				for i := range pages {
					a.pages, b.pages = append(a.pages, int32(2*i+1)), append(b.pages, int32(2*i))
				}
				var la, lb []float32
				la = append(la, runHybrid(t, m, []*hybridSession{a}, [][]int32{toks[:120]})[0]...)
				out := runHybrid(t, m, []*hybridSession{b, a}, [][]int32{toks[:150], toks[120:200]})
				lb, la = append(lb, out[0]...), append(la, out[1]...)
				out = runHybrid(t, m, []*hybridSession{a, b}, [][]int32{toks[200:], toks[150:]})
				la, lb = append(la, out[0]...), append(lb, out[1]...)
				for _, l := range [][]float32{la, lb} {
					for p := 0; p+1 < T; p++ {
						if d := math.Abs(testmodel.LogSoftmaxAt(l[p*V:(p+1)*V], toks[p+1]) - fx.Prefill.LogprobNext[p]); d > 1e-2 || math.IsNaN(d) {
							t.Fatalf("position %d: |Δ log p| %.3g > 1e-2", p, d)
						}
					}
				}
			})
		})
	}
}
