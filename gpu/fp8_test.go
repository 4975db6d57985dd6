package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// FP8_E4M3 weights (Hugging Face per-tensor FP8, W8A16) on the GPU against
// the CPU backend. Decoded values are exact on both (gguf.E4M3), so the
// tolerances are those of the summation: tolF32 for the GEMVs, tolBF16 for
// the tensor-core GEMM (E4M3 values are exact in bf16; only x is rounded),
// tolMoEGemv / tolMoEGrouped for the MoE paths. Outputs start as NaN.

// randFP8Codes returns n random E4M3 codes without the NaN codes 0x7F and
// 0xFF, which the HF loader refuses.
func randFP8Codes(r *rand.Rand, n int) []byte {
	raw := make([]byte, n)
	for i := range raw {
		c := byte(r.Uint32())
		if gguf.E4M3IsNaN(c) {
			c ^= 1
		}
		raw[i] = c
	}
	return raw
}

// TestFP8DecodeAllCodes: every one of the 256 codes (NaN included)
// through the GPU embedding lookup, bit for bit against the CPU backend.
func TestFP8DecodeAllCodes(t *testing.T) {
	p := newPair(t)
	const rows, cols = 4, 256
	raw := make([]byte, rows*cols)
	for i := range raw {
		raw[i] = byte(i*37 + i/cols) // each row a permutation of all codes
	}
	gw, cw := p.weight(gguf.TensorInfo{Name: "token_embd.weight", Dims: []uint64{cols, rows}, Type: gguf.FP8_E4M3}, raw)
	toks := []int32{0, 1, 2, 3, 2}
	got, want := p.embedBoth(gw, cw, toks, cols)
	for i := range got {
		g, w := got[i], want[i]
		if !sameBitsOrNaN(g, w) {
			t.Fatalf("element %d (code %#02x): GPU %v (%#08x), CPU %v (%#08x)", i, raw[int(toks[i/cols])*cols+i%cols], g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// embedBoth looks up toks in gw on the GPU and cw on the CPU and returns
// both results on the host (the GPU's first).
func (p *pair) embedBoth(gw, cw model.Weight, toks []int32, cols int) (got, want []float32) {
	p.t.Helper()
	gd, cd := p.tensor(len(toks), cols, nil)
	p.g.Embed(gd, gw, toks)
	p.c.Embed(cd, cw, toks)
	got, want = make([]float32, len(toks)*cols), make([]float32, len(toks)*cols)
	p.g.ToHost(gd, got)
	p.c.ToHost(cd, want)
	if err := p.g.Err(); err != nil {
		p.t.Fatal(err)
	}
	return got, want
}

// sameBitsOrNaN: g and w are both NaN (any payload) or the same bits.
func sameBitsOrNaN(g, w float32) bool {
	if math.IsNaN(float64(w)) || math.IsNaN(float64(g)) {
		return math.IsNaN(float64(w)) && math.IsNaN(float64(g))
	}
	return math.Float32bits(g) == math.Float32bits(w)
}

// compareMatMulEmbed runs MatMul on both backends from one row to a
// prefill batch, each decode GEMV variant (gemvMode 1-3) at up to 8 rows,
// and the embedding lookup of three rows, and compares the results.
func (p *pair) compareMatMulEmbed(r *rand.Rand, name string, rows, cols int, gw, cw model.Weight) {
	p.t.Helper()
	for _, n := range []int{1, 2, 8, 64, 300} {
		for _, mode := range []int32{1, 2, 3} {
			if n > 8 && mode != 1 {
				continue
			}
			p.g.gemvMode.Store(mode)
			gx, cx := p.tensor(n, cols, randVec(r, n*cols, 1))
			gy, cy := p.tensor(n, rows, nil)
			p.g.MatMul(gy, gx, gw)
			p.c.MatMul(cy, cx, cw)
			tol := tolF32
			if n >= p.g.opts.GEMMMinTokens {
				tol = tolBF16
			}
			p.compare(fmt.Sprintf("%s n=%d mode=%d", name, n, mode), gy, cy, tol)
		}
	}
	p.g.gemvMode.Store(0)
	toks := []int32{0, int32(rows - 1), 7}
	gd, cd := p.tensor(len(toks), cols, nil)
	p.g.Embed(gd, gw, toks)
	p.c.Embed(cd, cw, toks)
	p.compare(name+" embed", gd, cd, tolExact)
}

// TestFP8MatMul runs the FP8_E4M3 GEMVs (the three decode variants: gemvx,
// the chunked GEMV, gemvr) and the prefill GEMM, with and without a
// per-tensor scale, at an attention projection shape of Qwen3.6-35B-A3B
// (4096 x 2048, q_proj with its gate), its transpose and a small odd one.
func TestFP8MatMul(t *testing.T) {
	p := newPair(t)
	defer p.g.gemvMode.Store(0)
	r := rand.New(rand.NewPCG(80, 81))
	for _, sh := range []struct{ rows, cols int }{{4096, 2048}, {2048, 4096}, {40, 96}} {
		raw := randFP8Codes(r, sh.rows*sh.cols)
		info := gguf.TensorInfo{Name: "blk.3.attn_q.weight", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: gguf.FP8_E4M3}
		for _, scale := range []float32{0, 0.0021} {
			var gw, cw model.Weight
			if scale == 0 {
				gw, cw = p.weight(info, raw)
			} else {
				var err error
				if gw, err = p.g.LoadScaledWeight(info, raw, []float32{scale}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.g.FreeWeight(gw) })
				if cw, err = p.c.LoadScaledWeight(info, raw, []float32{scale}); err != nil {
					t.Fatal(err)
				}
			}
			p.compareMatMulEmbed(r, fmt.Sprintf("FP8 %dx%d scale=%v", sh.rows, sh.cols, scale), sh.rows, sh.cols, gw, cw)
		}
	}
}

// TestMoEFP8: FP8_E4M3 experts with per-expert scales (stacked
// [in, out, n_expert] tensors, as the HF loader builds them from
// per-expert weight_scale) through the decode GEMVs (both variants), the
// grouped GEMMs and the automatic choice, against the CPU backend.
func TestMoEFP8(t *testing.T) {
	p := newPair(t)
	defer moeForce.Store(0)
	r := rand.New(rand.NewPCG(82, 83))
	const E, dim, ff = 16, 512, 256
	load := func(name string, rows, cols int) (model.Weight, model.Weight) {
		info := gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows), E}, Type: gguf.FP8_E4M3}
		raw := randFP8Codes(r, E*rows*cols)
		scale := make([]float32, E)
		for e := range scale {
			scale[e] = float32(0.001 + 0.004*r.Float64())
		}
		gw, err := p.g.LoadScaledWeight(info, raw, scale)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.g.FreeWeight(gw) })
		cw, err := p.c.LoadScaledWeight(info, raw, scale)
		if err != nil {
			t.Fatal(err)
		}
		return gw, cw
	}
	gr, cr := p.weight(gguf.TensorInfo{Name: "router", Dims: []uint64{dim, E}, Type: gguf.F32}, f32Bytes(randVec(r, E*dim, 0.5)))
	gg, cg := load("blk.0.ffn_gate_exps.weight", ff, dim)
	gu, cu := load("blk.0.ffn_up_exps.weight", ff, dim)
	gd, cd := load("blk.0.ffn_down_exps.weight", dim, ff)
	for _, K := range []int{1, 8} {
		gm := model.MoE{Router: gr, Gate: gg, Up: gu, Down: gd, Experts: E, TopK: K, NormTopK: K > 1}
		cm := model.MoE{Router: cr, Gate: cg, Up: cu, Down: cd, Experts: E, TopK: K, NormTopK: K > 1}
		for _, n := range []int{1, 2, 7, 64, 513} {
			name := fmt.Sprintf("MoE FP8 top-%d n=%d", K, n)
			p.compareMoEPaths(r, name, &gm, &cm, n, dim)
			if n <= 2 {
				p.compareMoEGemvVariants(r, name, &gm, &cm, n, dim)
			}
		}
	}
}
