package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// TestBackendKVAttention checks the Backend wiring of the paged KV write and
// attention (a prefill chunk, then a decode step of two sequences) against
// the CPU backend storing the same dtypes: one for both halves, or a
// 16-bit K with an fp8 V (kvcache.GPUPairs). Tolerances: bf16 pools 2e-3
// and pools with an fp8 half 2e-2 relative (one rounding of k/v may land
// on the other side between backends, since the float32 inputs differ in
// the last bits).
func TestBackendKVAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const heads, kvHeads, headDim, page = 8, 2, 64, 16
	rope := model.Rope{Dim: headDim, Base: 10000, NeoX: true}
	for _, dt := range [][2]kvcache.DType{{kvcache.BF16, kvcache.BF16}, {kvcache.FP8E4M3, kvcache.FP8E4M3},
		{kvcache.BF16, kvcache.FP8E4M3}, {kvcache.F16, kvcache.FP8E5M2}} {
		t.Run(pairName(dt[0], dt[1]), func(t *testing.T) {
			p := newPair(t)
			l := kvcache.Layout{Layers: 2, KVHeads: kvHeads, HeadDim: headDim, PageSize: page, Pages: 16}.WithDTypes(dt[0], dt[1])
			if err := p.g.AllocKV(l); err != nil {
				t.Fatal(err)
			}
			defer p.g.FreeKV()
			if err := p.c.AllocKV(l); err != nil {
				t.Fatal(err)
			}
			tol := 2e-3
			if l.AnyFP8() {
				tol = 2e-2
			}
			// Step 1: sequence A prefills 37 tokens, B 5 tokens; step 2: one token each.
			pagesA, pagesB := []int32{3, 7, 1, 9}, []int32{12, 0}
			steps := []*model.Batch{
				{Seqs: []model.SeqSpan{{Offset: 0, Cached: 0, NewTokens: 37, Pages: pagesA}, {Offset: 37, Cached: 0, NewTokens: 5, Pages: pagesB}}},
				{Seqs: []model.SeqSpan{{Offset: 0, Cached: 37, NewTokens: 1, Pages: pagesA}, {Offset: 1, Cached: 5, NewTokens: 1, Pages: pagesB}}},
			}
			for si, bt := range steps {
				for _, s := range bt.Seqs {
					for i := 0; i < s.NewTokens; i++ {
						bt.Pos = append(bt.Pos, int32(s.Cached+i))
						bt.Tokens = append(bt.Tokens, 0)
					}
				}
				n := len(bt.Pos)
				for layer := 0; layer < l.Layers; layer++ {
					gk, ck := p.tensor(n, kvHeads*headDim, randVec(r, n*kvHeads*headDim, 1))
					gv, cv := p.tensor(n, kvHeads*headDim, randVec(r, n*kvHeads*headDim, 1))
					gq, cq := p.tensor(n, heads*headDim, randVec(r, n*heads*headDim, 1))
					p.g.KVWrite(layer, gk, gv, bt, rope)
					p.c.KVWrite(layer, ck, cv, bt, rope)
					p.g.RoPE(gq, bt.Pos, headDim, rope)
					p.c.RoPE(cq, bt.Pos, headDim, rope)
					gd, cd := p.tensor(n, heads*headDim, nil)
					p.g.Attention(gd, gq, layer, bt, heads, 0.125)
					p.c.Attention(cd, cq, layer, bt, heads, 0.125)
					p.compare(fmt.Sprintf("step %d layer %d", si, layer), gd, cd, tol)
				}
			}
		})
	}
}
