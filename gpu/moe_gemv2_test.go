package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// withMoEGemv sets the decode-GEMV variant (moeGemv2) for the rest of a
// test and restores it after.
func withMoEGemv(tb testing.TB, v2 bool) {
	old := moeGemv2.Load()
	moeGemv2.Store(v2)
	tb.Cleanup(func() { moeGemv2.Store(old) })
}

// TestMoEGemvVariants runs the decode GEMVs (moeForce 1) of both variants
// against the CPU backend for every weight type, outputs poisoned with NaN,
// tolerance tolMoEGemv: row counts past the last full CTA (ff 224, dim
// 1120), rows of fewer and of more units than a warp has lanes, top-1 and
// top-8 with renormalisation, 1 and 2 tokens, and a down projection whose
// staged h exceeds the shared-memory bound (ff 1536, top-8: variant 2
// falls back to the first down kernel beside its own gate+up).
func TestMoEGemvVariants(t *testing.T) {
	p := newPair(t)
	defer moeForce.Store(0)
	r := rand.New(rand.NewPCG(81, 82))
	shapes := []struct{ E, dim, ff int }{{16, 512, 256}, {8, 1120, 224}, {8, 2304, 256}, {8, 256, 1536}}
	for _, typ := range SupportedTypes() {
		for _, sh := range shapes {
			if be := typ.BlockElems(); sh.dim%be != 0 || sh.ff%be != 0 {
				continue
			}
			gm, cm := p.moeWeights(r, moeCase{typ, typ}, sh.E, sh.dim, sh.ff)
			for _, K := range []int{1, 8} {
				gm.TopK, gm.NormTopK = K, K > 1
				cm.TopK, cm.NormTopK = K, K > 1
				for _, n := range []int{1, 2} {
					p.compareMoEGemvVariants(r, fmt.Sprintf("%s E=%d dim=%d ff=%d top-%d n=%d", typ, sh.E, sh.dim, sh.ff, K, n), &gm, &cm, n, sh.dim)
				}
			}
		}
	}
}

// TestMoEGemvVariantsScaled: NVFP4 experts with per-expert second-level
// scales (random in [0.5, 2], one gate and one down scale 0) through both
// decode-GEMV variants against the CPU backend.
func TestMoEGemvVariantsScaled(t *testing.T) {
	p := newPair(t)
	defer moeForce.Store(0)
	r := rand.New(rand.NewPCG(83, 84))
	const E, dim, ff = 16, 512, 256
	scales := func(zero int) []float32 {
		s := make([]float32, E)
		for e := range s {
			s[e] = float32(0.5 + 1.5*r.Float64())
		}
		if zero >= 0 {
			s[zero] = 0
		}
		return s
	}
	load := func(name string, rows, cols int, scale []float32) (model.Weight, model.Weight) {
		info := gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows), E}, Type: gguf.NVFP4}
		raw := randWeight(r, gguf.NVFP4, E*rows, cols)
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
	gr, cr := p.weight(gguf.TensorInfo{Name: "router", Dims: []uint64{dim, E}, Type: gguf.F32}, f32Bytes(randVec(r, E*dim, 0.05)))
	gg, cg := load("blk.0.ffn_gate_exps.weight", ff, dim, scales(3))
	gu, cu := load("blk.0.ffn_up_exps.weight", ff, dim, scales(-1))
	gd, cd := load("blk.0.ffn_down_exps.weight", dim, ff, scales(5))
	gm := model.MoE{Router: gr, Gate: gg, Up: gu, Down: gd, Experts: E, TopK: 8, NormTopK: true}
	cm := model.MoE{Router: cr, Gate: cg, Up: cu, Down: cd, Experts: E, TopK: 8, NormTopK: true}
	for _, n := range []int{1, 2} {
		p.compareMoEGemvVariants(r, fmt.Sprintf("NVFP4 scaled n=%d", n), &gm, &cm, n, dim)
	}
}

// compareMoEGemvVariants runs a random n-token input through cm on the CPU
// and through gm's decode GEMVs of each variant, comparing each with the
// CPU's output.
func (p *pair) compareMoEGemvVariants(r *rand.Rand, name string, gm, cm *model.MoE, n, dim int) {
	p.t.Helper()
	gx, cx := p.tensor(n, dim, randVec(r, n*dim, 1))
	_, cy := p.tensor(n, dim, nil)
	p.c.MoE(cy, cx, cm)
	for _, v2 := range []bool{false, true} {
		gy, _ := p.tensor(n, dim, nil)
		withMoEGemv(p.t, v2)
		moeForce.Store(1)
		p.g.MoE(gy, gx, gm)
		moeForce.Store(0)
		p.compare(fmt.Sprintf("%s v2=%v", name, v2), gy, cy, tolMoEGemv)
	}
}

// BenchmarkMoEDecode times the decode GEMVs of both variants (v=1, v=2)
// at the decode shapes of Qwen3.6-35B-A3B (dim 2048, 256 experts, expert
// ff 512) and Qwen3-30B-A3B (dim 2048, 128 experts, ff 768), top-8, Q4_K
// gate/up/down, 1 and 4 tokens, each MoE call replayed as a CUDA graph as
// a decode step issues it (router and top-k included). GB/s counts the
// expert weights the batch touches; peakGB/s is the device's stream read
// in the same run.
func BenchmarkMoEDecode(b *testing.B) {
	g := newTestBackendB(b)
	defer moeForce.Store(0)
	var bw float64
	if err := g.dev.Do(func(c *Ctx) error { var err error; bw, err = readBandwidth(c); return err }); err != nil {
		b.Fatal(err)
	}
	b.Logf("device read bandwidth (stream_read, 4 GiB): %.0f GB/s", bw)
	r := rand.New(rand.NewPCG(17, 18))
	load := func(name string, tp gguf.Type, rows, cols int, raw []byte) *Weight {
		w, err := g.LoadWeight(gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows)}, Type: tp}, raw)
		if err != nil {
			b.Fatal(err)
		}
		return w.(*Weight)
	}
	for _, sh := range []struct {
		name       string
		E, dim, ff int
	}{{"35B", 256, 2048, 512}, {"30B", 128, 2048, 768}} {
		const K = 8
		rv := randVec(r, sh.E*sh.dim, 0.02)
		router := load("router", gguf.F32, sh.E, sh.dim, f32Bytes(rv))
		gate := load("gate", gguf.Q4_K, sh.E*sh.ff, sh.dim, randWeight(r, gguf.Q4_K, sh.E*sh.ff, sh.dim))
		up := load("up", gguf.Q4_K, sh.E*sh.ff, sh.dim, randWeight(r, gguf.Q4_K, sh.E*sh.ff, sh.dim))
		down := load("down", gguf.Q4_K, sh.E*sh.dim, sh.ff, randWeight(r, gguf.Q4_K, sh.E*sh.dim, sh.ff))
		m := &model.MoE{Router: router, Gate: gate, Up: up, Down: down, Experts: sh.E, TopK: K, NormTopK: true}
		expertBytes := float64(gate.rowBytes*int64(sh.ff)*2 + down.rowBytes*int64(sh.dim))
		for _, n := range []int{1, 4} {
			xv := randVec(r, n*sh.dim, 1)
			used := moeExperts(xv, rv, n, sh.dim, sh.E, K)
			x, y := g.NewTensor(n, sh.dim), g.NewTensor(n, sh.dim)
			g.FromHost(x, xv)
			for _, v2 := range []bool{false, true} {
				v := 1
				if v2 {
					v = 2
				}
				b.Run(fmt.Sprintf("%s/n=%d/v=%d", sh.name, n, v), func(b *testing.B) {
					withMoEGemv(b, v2)
					moeForce.Store(1)
					defer moeForce.Store(0)
					ms := timeOps(b, g, max(b.N, 200), func() { g.BeginStep(); g.MoE(y, x, m); g.EndStep() })
					b.ReportMetric(ms*1e3, "us/op")
					b.ReportMetric(float64(used)*expertBytes/(ms*1e-3)/1e9, "GB/s")
					b.ReportMetric(bw, "peakGB/s")
					b.ReportMetric(float64(used), "experts")
				})
			}
			g.FreeTensor(x)
			g.FreeTensor(y)
		}
		for _, w := range []*Weight{router, gate, up, down} {
			g.FreeWeight(w)
		}
	}
}

// TestMoETopk runs moe_topk and moe_topk2 on the same logits and requires
// the same ids and weights bit for bit: expert counts below, at and above
// a warp's lanes up to the 1024 maximum, top-1 to top-32, renormalised or
// not, and rows that stress the order: many ties (logits on a coarse
// grid), ±0, -inf, NaN among the logits, and a row all NaN.
func TestMoETopk(t *testing.T) {
	g := newTestBackend(t)
	r := rand.New(rand.NewPCG(85, 86))
	for _, E := range []int{8, 37, 128, 256, 1024} {
		for _, K := range []int{1, 8, min(32, E)} {
			for _, norm := range []bool{false, true} {
				const n = 6
				lg := make([]float32, n*E)
				for i := range lg {
					lg[i] = float32(r.IntN(9)-4) * 0.5 // ties
				}
				row := func(t int) []float32 { return lg[t*E : (t+1)*E] }
				for i, v := range row(1) {
					row(1)[i] = v * float32(r.Float64())
				}
				row(2)[0], row(2)[E-1] = float32(math.Copysign(0, -1)), 0
				for i := range row(3) {
					if r.IntN(3) == 0 {
						row(3)[i] = float32(math.Inf(-1))
					}
				}
				row(4)[E/2] = float32(math.NaN())
				row(4)[0] = float32(math.NaN())
				for i := range row(5) {
					row(5)[i] = float32(math.NaN())
				}
				var out [2]struct {
					ids []int32
					wts []float32
				}
				for v, name := range []string{"moe_topk", "moe_topk2"} {
					ids, wts := make([]int32, n*K), make([]float32, n*K)
					err := g.dev.Do(func(c *Ctx) error {
						bl, err := c.Alloc(int64(4*len(lg)), "test logits")
						if err != nil {
							return err
						}
						defer c.Free(bl)
						bi, err := c.Alloc(int64(4*n*K), "test ids")
						if err != nil {
							return err
						}
						defer c.Free(bi)
						bw, err := c.Alloc(int64(4*n*K), "test weights")
						if err != nil {
							return err
						}
						defer c.Free(bw)
						if err := c.CopyToDevice(bl.Ptr, unsafe.Pointer(&lg[0]), int64(4*len(lg))); err != nil {
							return err
						}
						if err := g.launch(c, name, Dim3{X: cdiv(n, 4)}, Dim3{X: 128}, bl.Ptr, n, E, K, norm, bi.Ptr, bw.Ptr); err != nil {
							return err
						}
						if err := c.CopyToHost(unsafe.Pointer(&ids[0]), bi.Ptr, int64(4*n*K)); err != nil {
							return err
						}
						return c.CopyToHost(unsafe.Pointer(&wts[0]), bw.Ptr, int64(4*n*K))
					})
					if err != nil {
						t.Fatalf("%s E=%d K=%d: %v", name, E, K, err)
					}
					out[v].ids, out[v].wts = ids, wts
				}
				for i := range out[0].ids {
					if out[0].ids[i] != out[1].ids[i] || math.Float32bits(out[0].wts[i]) != math.Float32bits(out[1].wts[i]) {
						t.Errorf("E=%d K=%d norm=%v token %d slot %d: moe_topk2 gives expert %d weight %v, moe_topk %d %v",
							E, K, norm, i/K, i%K, out[1].ids[i], out[1].wts[i], out[0].ids[i], out[0].wts[i])
						break
					}
				}
			}
		}
	}
}
