package gpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Tolerances of the MoE paths against the CPU backend, as ‖gpu − cpu‖ / ‖cpu‖:
const (
	tolMoEGemv    = 1e-4 // decode GEMVs: float32 throughout, other summation order
	tolMoEGrouped = 2e-2 // grouped GEMMs: bf16 operands in two chained GEMMs (x, W, then h, W), float32 accumulation
)

// TestMoEKernelModules checks, without a GPU, that every MoE kernel the
// backend launches is an entry of the module moeKernelModule names.
func TestMoEKernelModules(t *testing.T) {
	names := slices.Clone(moeKernels)
	for _, typ := range SupportedTypes() {
		for _, k := range moeTyped {
			names = append(names, k.prefix+kernelSuffix[typ])
		}
	}
	for _, arch := range []int{80, 89, 90} {
		for _, n := range names {
			mod := kernelModule(n)
			ptx, err := KernelPTX(mod, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ptx, []byte(".visible .entry "+n+"(")) {
				t.Errorf("kernel %s is not in module %s (sm_%d)", n, mod, arch)
			}
		}
	}
	if m := kernelModule("moe_gemv_q4_k"); m != "mm_q4_k" {
		t.Errorf("the per-pair expert GEMV moe_gemv_q4_k maps to %s, want mm_q4_k", m)
	}
}

// TestMoETileBound checks the grid bound of the grouped GEMMs against the
// real tile count of adversarial expert histograms.
func TestMoETileBound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		E := 1 + r.IntN(200)
		pairs := 1 + r.IntN(5000)
		cnt := make([]int, E)
		switch r.IntN(3) {
		case 0: // uniform
			for range pairs {
				cnt[r.IntN(E)]++
			}
		case 1: // one pair short of a tile everywhere
			for i := 0; i < pairs; i++ {
				cnt[i%E]++
			}
		default: // all on one expert
			cnt[r.IntN(E)] = pairs
		}
		tiles := 0
		for _, c := range cnt {
			tiles += (c + moeBM - 1) / moeBM
		}
		if b := moeTiles(pairs, E); tiles > b {
			t.Fatalf("E=%d pairs=%d: %d tiles > bound %d", E, pairs, tiles, b)
		}
	}
}

type moeCase struct {
	gu, down gguf.Type
}

// TestMoEPaths compares the decode-GEMV path, the grouped-GEMM path and the
// automatic choice with the CPU backend on random inputs: real quant types
// (gate/up and down may differ, as in Q4_K_M files), 1 to 513 tokens, top-1
// and top-8 of 16 experts (with 1, 2 or 7 tokens and top-1 most experts are
// chosen by no token), renormalised or not, outputs poisoned with NaN first.
func TestMoEPaths(t *testing.T) {
	p := newPair(t)
	defer moeForce.Store(0)
	r := rand.New(rand.NewPCG(21, 22))
	const E, dim, ff = 16, 512, 256
	cases := []moeCase{{gguf.Q4_K, gguf.Q6_K}, {gguf.Q8_0, gguf.Q8_0}, {gguf.F16, gguf.F16}, {gguf.Q4_K, gguf.Q4_K}, {gguf.Q5_K, gguf.Q4_0}}
	if testing.Short() {
		cases = cases[:3]
	}
	for _, tc := range cases {
		gw, cw := p.moeWeights(r, tc, E, dim, ff)
		for _, n := range []int{1, 2, 7, 64, 513} {
			for _, K := range []int{1, 8} {
				norm := K == 8 && n%2 == 1
				gm, cm := gw, cw
				gm.TopK, gm.NormTopK = K, norm
				cm.TopK, cm.NormTopK = K, norm
				p.compareMoEPaths(r, fmt.Sprintf("MoE %s/%s n=%d top-%d norm=%v", tc.gu, tc.down, n, K, norm), &gm, &cm, n, dim)
			}
		}
	}
}

// TestMoERouterLogits checks moe_router_sk (+ moe_router_sum) against
// float64 dot products on the host, for tile-ragged token and expert
// counts, k ranges that are not whole 16-wide steps, and k splits from 1
// (logits written directly) through routerSlices' choice to more slices
// than k steps (empty slices). Logits and partials start as NaN, so an
// output left unwritten fails.
func TestMoERouterLogits(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(31, 32))
	cases := []struct{ E, cols, n int }{{16, 512, 17}, {128, 2048, 512}, {200, 516, 100}, {256, 2048, 333}, {8, 64, 70}}
	for _, tc := range cases {
		xv, rv := randVec(r, tc.n*tc.cols, 1), randVec(r, tc.E*tc.cols, 0.1)
		gx, _ := p.tensor(tc.n, tc.cols, xv)
		gw, _ := p.weight(gguf.TensorInfo{Name: "router", Dims: []uint64{uint64(tc.cols), uint64(tc.E)}, Type: gguf.F32}, f32Bytes(rv))
		auto := routerSlices(tc.n, tc.E, tc.cols, p.g.dev.info.SMs, 1<<30)
		for _, slices := range []int{1, 2, auto, tc.cols/16 + 3} {
			gl, _ := p.tensor(tc.n, tc.E, nil)
			part, _ := p.tensor(slices*tc.n, tc.E, nil)
			p.g.post(func(c *Ctx) error {
				return p.g.routerLogits(c, gw.(*Weight), tc.E, gx.(*Tensor).buf.Ptr, tc.n, gl.(*Tensor).buf.Ptr, part.(*Tensor).buf.Ptr, slices)
			})
			got := make([]float32, tc.n*tc.E)
			p.g.ToHost(gl, got)
			if err := p.g.Err(); err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i := 0; i < tc.n; i++ {
				for e := 0; e < tc.E; e++ {
					var dot, mag float64
					for k := 0; k < tc.cols; k++ {
						v := float64(xv[i*tc.cols+k]) * float64(rv[e*tc.cols+k])
						dot += v
						mag += math.Abs(v)
					}
					g := float64(got[i*tc.E+e])
					err := math.Abs(g-dot) / (mag + 1e-30)
					if math.IsNaN(g) || err > 1e-5 {
						t.Fatalf("E=%d cols=%d n=%d slices=%d: logit[%d][%d] = %v, want %v (error %.2e of sum |x r|, bound 1e-5)",
							tc.E, tc.cols, tc.n, slices, i, e, g, dot, err)
					}
					worst = max(worst, err)
				}
			}
			t.Logf("E=%d cols=%d n=%d slices=%d: max error %.2e of sum |x r|", tc.E, tc.cols, tc.n, slices, worst)
		}
	}
}

// moeWeights makes random router (F32), gate/up (tc.gu) and down (tc.down)
// weights of E experts on both backends; TopK and NormTopK are left to the
// caller's copy.
func (p *pair) moeWeights(r *rand.Rand, tc moeCase, E, dim, ff int) (gm, cm model.MoE) {
	w := func(name string, rows, cols int, tp gguf.Type) (model.Weight, model.Weight) {
		return p.weight(gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows)}, Type: tp}, randWeight(r, tp, rows, cols))
	}
	gr, cr := w("router", E, dim, gguf.F32)
	gg, cg := w("gate", E*ff, dim, tc.gu)
	gu, cu := w("up", E*ff, dim, tc.gu)
	gd, cd := w("down", E*dim, ff, tc.down)
	gm = model.MoE{Router: gr, Gate: gg, Up: gu, Down: gd, Experts: E}
	cm = model.MoE{Router: cr, Gate: cg, Up: cu, Down: cd, Experts: E}
	return gm, cm
}

// compareMoEPaths runs a random n-token input through cm on the CPU and
// through gm on the GPU with each path forced in turn (decode GEMV, grouped
// GEMM, the automatic choice), comparing each with the CPU's output.
func (p *pair) compareMoEPaths(r *rand.Rand, name string, gm, cm *model.MoE, n, dim int) {
	gx, cx := p.tensor(n, dim, randVec(r, n*dim, 1))
	_, cy := p.tensor(n, dim, nil)
	p.c.MoE(cy, cx, cm)
	for _, mode := range []int32{1, 2, 0} {
		tol := tolMoEGemv
		if mode == 2 || (mode == 0 && n > moeGemvMaxTok) {
			tol = tolMoEGrouped
		}
		gy, _ := p.tensor(n, dim, nil)
		moeForce.Store(mode)
		p.g.MoE(gy, gx, gm)
		moeForce.Store(0)
		p.compare(fmt.Sprintf("%s mode=%d", name, mode), gy, cy, tol)
	}
}

// moeExperts counts the distinct experts that x's rows pick (float64
// router logits on the host), for the bytes a pass reads.
func moeExperts(x, router []float32, n, dim, E, K int) int {
	used := make([]bool, E)
	lg := make([]float64, E)
	idx := make([]int, E)
	for t := 0; t < n; t++ {
		for e := 0; e < E; e++ {
			var s float64
			for i := 0; i < dim; i++ {
				s += float64(x[t*dim+i]) * float64(router[e*dim+i])
			}
			lg[e], idx[e] = s, e
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case lg[a] > lg[b]:
				return -1
			case lg[a] < lg[b]:
				return 1
			}
			return 0
		})
		for _, e := range idx[:K] {
			used[e] = true
		}
	}
	c := 0
	for _, u := range used {
		if u {
			c++
		}
	}
	return c
}

// BenchmarkMoE times one MoE layer of the Qwen3-30B-A3B shape (dim 2048,
// 128 experts, top-8, expert ff 768; gate/up Q4_K, down Q4_K or Q6_K as in
// Q4_K_M files): decode 1 and 16 rows, prefill 256 (the engine's chunk)
// and 512 rows, per path. Reports TFLOP/s of the expert matmuls and GB/s of
// the expert weights the batch touches, beside the device's read bandwidth
// measured in the same run (stream_read over 4 GiB). Decode rows are also
// timed as replayed CUDA graphs (g1), as the engine issues them.
func BenchmarkMoE(b *testing.B) {
	g := newTestBackendB(b)
	defer moeForce.Store(0)
	var bw float64
	if err := g.dev.Do(func(c *Ctx) error { var err error; bw, err = readBandwidth(c); return err }); err != nil {
		b.Fatal(err)
	}
	b.Logf("device read bandwidth (stream_read, 4 GiB): %.0f GB/s; bf16 mma peak: see docs/benchmarks.md", bw)
	r := rand.New(rand.NewPCG(7, 7))
	const E, K, dim, ff = 128, 8, 2048, 768
	load := func(name string, tp gguf.Type, rows, cols int, raw []byte) *Weight {
		w, err := g.LoadWeight(gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows)}, Type: tp}, raw)
		if err != nil {
			b.Fatal(err)
		}
		return w.(*Weight)
	}
	rv := randVec(r, E*dim, 0.02)
	router := load("router", gguf.F32, E, dim, f32Bytes(rv))
	gate := load("gate", gguf.Q4_K, E*ff, dim, randWeight(r, gguf.Q4_K, E*ff, dim))
	up := load("up", gguf.Q4_K, E*ff, dim, randWeight(r, gguf.Q4_K, E*ff, dim))
	defer g.FreeWeight(router)
	defer g.FreeWeight(gate)
	defer g.FreeWeight(up)
	for _, dt := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		down := load("down", dt, E*dim, ff, randWeight(r, dt, E*dim, ff))
		m := &model.MoE{Router: router, Gate: gate, Up: up, Down: down, Experts: E, TopK: K, NormTopK: true}
		expertBytes := float64(gate.rowBytes*int64(ff)*2 + down.rowBytes*int64(dim))
		for _, n := range []int{1, 16, 256, 512} {
			xv := randVec(r, n*dim, 1)
			used := moeExperts(xv, rv, n, dim, E, K)
			x, y := g.NewTensor(n, dim), g.NewTensor(n, dim)
			g.FromHost(x, xv)
			modes := []int32{2}
			if n <= moeGemvMaxTok {
				modes = []int32{1, 2}
			}
			if n == 1 || n == 512 {
				modes = append(modes, 3)
			}
			for _, mode := range modes {
				graphs := []bool{false}
				if n <= moeGemvMaxTok && mode != 3 {
					graphs = append(graphs, true)
				}
				for _, gr := range graphs {
					name := fmt.Sprintf("down=%s/n=%d/mode=%d", dt, n, mode)
					if gr {
						name += "/g1"
					}
					b.Run(name, func(b *testing.B) {
						moeForce.Store(mode)
						defer moeForce.Store(0)
						op := func() { g.MoE(y, x, m) }
						if gr {
							op = func() { g.BeginStep(); g.MoE(y, x, m); g.EndStep() }
						}
						reps := max(b.N, 100)
						if mode == 3 && n > 16 {
							reps = b.N
						}
						ms := timeOps(b, g, reps, op)
						flops := 2 * float64(n*K) * 3 * dim * ff
						b.ReportMetric(ms*1e3, "us/op")
						b.ReportMetric(flops/(ms*1e-3)/1e12, "TFLOP/s")
						b.ReportMetric(float64(used)*expertBytes/(ms*1e-3)/1e9, "expertGB/s")
						b.ReportMetric(bw, "peakGB/s")
						b.ReportMetric(float64(used), "experts")
					})
				}
			}
			g.FreeTensor(x)
			g.FreeTensor(y)
		}
		g.FreeWeight(down)
	}
}

// BenchmarkMoELayer30B times one Qwen3-30B-A3B decoder layer without the
// attention kernel itself (norms, Q/K/V/O projections, QK norms, RoPE, MoE,
// residuals; Q4_K weights, Q6_K down), as the model code issues it, at 1
// row (as a replayed CUDA graph, like a decode step) and at 256 and 512
// rows (prefill chunks). tok/s(48layers) is rows / (48 x layer time):
// an upper bound for the whole model, which adds attention and the head.
func BenchmarkMoELayer30B(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(9, 9))
	const dim, heads, kvHeads, hd, E, K, ff = 2048, 32, 4, 128, 128, 8, 768
	load := func(tp gguf.Type, rows, cols int) model.Weight {
		var raw []byte
		if tp == gguf.F32 {
			raw = f32Bytes(randVec(r, rows*cols, 0.02))
		} else {
			raw = randWeight(r, tp, rows, cols)
		}
		w, err := g.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{uint64(cols), uint64(rows)}, Type: tp}, raw)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	wq, wk, wv, wo := load(gguf.Q4_K, heads*hd, dim), load(gguf.Q4_K, kvHeads*hd, dim), load(gguf.Q4_K, kvHeads*hd, dim), load(gguf.Q4_K, dim, heads*hd)
	m := &model.MoE{Router: load(gguf.F32, E, dim), Gate: load(gguf.Q4_K, E*ff, dim), Up: load(gguf.Q4_K, E*ff, dim),
		Down: load(gguf.Q6_K, E*dim, ff), Experts: E, TopK: K, NormTopK: true}
	norm, _ := g.LoadWeight(vecInfo("norm", dim), f32Bytes(randVec(r, dim, 1)))
	hnorm, _ := g.LoadWeight(vecInfo("hnorm", hd), f32Bytes(randVec(r, hd, 1)))
	rope := model.Rope{Dim: hd, Base: 1e6, NeoX: true}
	for _, n := range []int{1, 256, 512} {
		x, h := g.NewTensor(n, dim), g.NewTensor(n, dim)
		q, k, v, o := g.NewTensor(n, heads*hd), g.NewTensor(n, kvHeads*hd), g.NewTensor(n, kvHeads*hd), g.NewTensor(n, dim)
		g.FromHost(x, randVec(r, n*dim, 1))
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(4096 + i)
		}
		layer := func() {
			if n == 1 {
				g.BeginStep()
			}
			g.RMSNorm(h, x, norm, 1e-6)
			g.MatMul(q, h, wq)
			g.MatMul(k, h, wk)
			g.MatMul(v, h, wv)
			g.HeadRMSNorm(q, hnorm, hd, 1e-6)
			g.HeadRMSNorm(k, hnorm, hd, 1e-6)
			g.RoPE(q, pos, hd, rope)
			g.RoPE(k, pos, hd, rope)
			g.MatMul(o, q, wo) // the attention output stands in for q here
			g.Add(x, o)
			g.RMSNorm(h, x, norm, 1e-6)
			g.MoE(o, h, m)
			g.Add(x, o)
			if n == 1 {
				g.EndStep()
			}
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ms := timeOps(b, g, max(b.N, 50), layer)
			b.ReportMetric(ms*1e3, "us/layer")
			b.ReportMetric(float64(n)*1e3/(48*ms), "tok/s(48layers)")
		})
		for _, t := range []model.Tensor{x, h, q, k, v, o} {
			g.FreeTensor(t)
		}
	}
}
