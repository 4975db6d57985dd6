package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// FP8_E4M3_B32 weights (Hugging Face FP8 with per-row or 128x128-block
// scales, W8A16: 36-byte blocks of a float32 scale and 32 E4M3 codes) on
// the GPU against the CPU backend. Decoded values are exact on both (code ×
// scale, one rounding, as gguf.Dequantize), so the embedding lookup is
// compared bit for bit and the products with the summation tolerances:
// tolF32 for the GEMVs, tolBF16 for the tensor-core GEMM (code × scale is
// not exact in bf16, as for Q8_0), tolMoEGemv / tolMoEGrouped for the MoE
// paths. Outputs start as NaN.

// randFP8B32Blocks returns rows×cols FP8_E4M3_B32 weights: random codes
// without the NaN codes (a quarter with exponent 0: subnormals and ±0) and
// block scales 2^lo .. 2^hi (times 1..2), so blocks of one row can differ
// in magnitude by orders of magnitude.
func randFP8B32Blocks(r *rand.Rand, rows, cols, lo, hi int) []byte {
	raw := make([]byte, rows*cols/32*36)
	for b := 0; b < len(raw); b += 36 {
		d := float32(math.Ldexp(1+r.Float64(), lo+r.IntN(hi-lo+1)))
		binary.LittleEndian.PutUint32(raw[b:], math.Float32bits(d))
		for j := 4; j < 36; j++ {
			c := byte(r.Uint32())
			if r.IntN(4) == 0 {
				c &= 0x87
			}
			if gguf.E4M3IsNaN(c) {
				c ^= 1
			}
			raw[b+j] = c
		}
	}
	return raw
}

// TestFP8B32DecodeAllCodes: every code (NaN included) at scales from a
// subnormal product (2^-140) to 2^20, negative and zero scales, through the
// GPU embedding lookup, bit for bit against the CPU backend.
func TestFP8B32DecodeAllCodes(t *testing.T) {
	p := newPair(t)
	scales := []float32{1, 0.0175, 0x1p-140, 0x1p-120, 3.5e-7, 0x1p20, -0.5, 0}
	const cols = 256
	rows := len(scales)
	raw := make([]byte, rows*cols/32*36)
	for r, d := range scales {
		for b := 0; b < cols/32; b++ {
			blk := raw[(r*cols/32+b)*36:]
			binary.LittleEndian.PutUint32(blk, math.Float32bits(d))
			for j := 0; j < 32; j++ {
				blk[4+j] = byte((32*b + j) * 37) // each row a permutation of all codes
			}
		}
	}
	gw, cw := p.weight(gguf.TensorInfo{Name: "token_embd.weight", Dims: []uint64{cols, uint64(rows)}, Type: gguf.FP8_E4M3_B32}, raw)
	toks := []int32{0, 1, 2, 3, 4, 5, 6, 7, 2}
	got, want := p.embedBoth(gw, cw, toks, cols)
	for i := range got {
		g, w := got[i], want[i]
		if !sameBitsOrNaN(g, w) {
			t.Fatalf("element %d (scale %v): GPU %v (%#08x), CPU %v (%#08x)", i, scales[toks[i/cols]], g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// TestFP8B32MatMul runs the FP8_E4M3_B32 GEMVs (gemvx, the chunked GEMV,
// gemvr) and the prefill GEMM at an attention projection shape of
// Qwen3.6-35B-A3B (4096 x 2048), its transpose and a small odd one, with
// block scales spread over 2^-20 .. 2^4, and the embedding lookup.
func TestFP8B32MatMul(t *testing.T) {
	p := newPair(t)
	defer p.g.gemvMode.Store(0)
	r := rand.New(rand.NewPCG(84, 85))
	for _, sh := range []struct{ rows, cols int }{{4096, 2048}, {2048, 4096}, {40, 96}} {
		raw := randFP8B32Blocks(r, sh.rows, sh.cols, -20, 4)
		info := gguf.TensorInfo{Name: "blk.3.attn_q.weight", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: gguf.FP8_E4M3_B32}
		gw, cw := p.weight(info, raw)
		p.compareMatMulEmbed(r, fmt.Sprintf("FP8_E4M3_B32 %dx%d", sh.rows, sh.cols), sh.rows, sh.cols, gw, cw)
	}
}

// TestMoEFP8B32: FP8_E4M3_B32 experts (stacked [in, out, n_expert], as
// the HF loader builds them from block-scaled per-expert weights; no
// second-level scale) through the decode GEMVs (both variants), the
// grouped GEMMs and the automatic choice, against the CPU backend.
func TestMoEFP8B32(t *testing.T) {
	p := newPair(t)
	defer moeForce.Store(0)
	r := rand.New(rand.NewPCG(86, 87))
	const E, dim, ff = 16, 512, 256
	load := func(name string, rows, cols int) (model.Weight, model.Weight) {
		info := gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows), E}, Type: gguf.FP8_E4M3_B32}
		return p.weight(info, randFP8B32Blocks(r, E*rows, cols, -12, -8))
	}
	gr, cr := p.weight(gguf.TensorInfo{Name: "router", Dims: []uint64{dim, E}, Type: gguf.F32}, f32Bytes(randVec(r, E*dim, 0.5)))
	gg, cg := load("blk.0.ffn_gate_exps.weight", ff, dim)
	gu, cu := load("blk.0.ffn_up_exps.weight", ff, dim)
	gd, cd := load("blk.0.ffn_down_exps.weight", dim, ff)
	for _, K := range []int{1, 8} {
		gm := model.MoE{Router: gr, Gate: gg, Up: gu, Down: gd, Experts: E, TopK: K, NormTopK: K > 1}
		cm := model.MoE{Router: cr, Gate: cg, Up: cu, Down: cd, Experts: E, TopK: K, NormTopK: K > 1}
		for _, n := range []int{1, 2, 7, 64, 513} {
			name := fmt.Sprintf("MoE FP8_E4M3_B32 top-%d n=%d", K, n)
			p.compareMoEPaths(r, name, &gm, &cm, n, dim)
			if n <= 2 {
				p.compareMoEGemvVariants(r, name, &gm, &cm, n, dim)
			}
		}
	}
}
