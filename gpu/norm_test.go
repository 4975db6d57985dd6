package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/model"
)

// withNormV2 sets normV2 for the rest of a test and restores it after.
func withNormV2(tb testing.TB, on bool) {
	old := normV2.Load()
	normV2.Store(on)
	tb.Cleanup(func() { normV2.Store(old) })
}

// normShapes cover the register path of rmsnorm2 / add_rmsnorm (cols % 4
// == 0 up to 8192, rows of fewer float4s than threads and of several per
// thread) and its fallback loop (8196 > 8192 floats, 130 not a multiple of 4).
var normShapes = []struct{ rows, cols int }{{1, 576}, {9, 4096}, {5, 2048}, {1, 8192}, {3, 8196}, {2, 130}, {4, 36}}

// TestRMSNormVariants: both RMSNorm kernels against the CPU backend,
// outputs poisoned with NaN, out of place and in place, tolerance tolF32.
func TestRMSNormVariants(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(91, 92))
	for _, sh := range normShapes {
		x := randVec(r, sh.rows*sh.cols, 2)
		gw, cw := p.weight(vecInfo("norm", sh.cols), f32Bytes(randVec(r, sh.cols, 1)))
		_, cd := p.tensor(sh.rows, sh.cols, nil)
		cx := p.c.NewTensor(sh.rows, sh.cols)
		p.c.FromHost(cx, x)
		p.c.RMSNorm(cd, cx, cw, 1e-6)
		for _, v2 := range []bool{false, true} {
			withNormV2(t, v2)
			tag := fmt.Sprintf("RMSNorm %dx%d v2=%v", sh.rows, sh.cols, v2)
			gx, _ := p.tensor(sh.rows, sh.cols, x)
			gd, _ := p.tensor(sh.rows, sh.cols, nil)
			p.g.RMSNorm(gd, gx, gw, 1e-6)
			p.compare(tag, gd, cd, tolF32)
			p.g.RMSNorm(gx, gx, gw, 1e-6)
			p.compare(tag+" in place", gx, cd, tolF32)
		}
		p.c.FreeTensor(cx)
	}
}

// TestAddRMSNorm: the fused residual add and norm (AddRMSNorm, both
// settings of normV2) against the CPU backend's Add then RMSNorm (x within
// tolExact, the norm within tolF32), outputs poisoned with NaN; with normV2
// the result must also be bit-identical, x and the norm, to the GPU's own
// Add followed by RMSNorm.
func TestAddRMSNorm(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(93, 94))
	for _, sh := range normShapes {
		n := sh.rows * sh.cols
		x, delta := randVec(r, n, 2), randVec(r, n, 1)
		gw, cw := p.weight(vecInfo("norm", sh.cols), f32Bytes(randVec(r, sh.cols, 1)))
		_, cx := p.tensor(sh.rows, sh.cols, x)
		_, ca := p.tensor(sh.rows, sh.cols, delta)
		_, ch := p.tensor(sh.rows, sh.cols, nil)
		p.c.Add(cx, ca)
		p.c.RMSNorm(ch, cx, cw, 1e-6)
		for _, v2 := range []bool{false, true} {
			withNormV2(t, v2)
			tag := fmt.Sprintf("AddRMSNorm %dx%d v2=%v", sh.rows, sh.cols, v2)
			gx, _ := p.tensor(sh.rows, sh.cols, x)
			ga, _ := p.tensor(sh.rows, sh.cols, delta)
			gh, _ := p.tensor(sh.rows, sh.cols, nil)
			p.g.AddRMSNorm(gh, gx, ga, gw, 1e-6)
			p.compare(tag+" x", gx, cx, tolExact)
			p.compare(tag+" norm", gh, ch, tolF32)
			if !v2 {
				continue
			}
			ux, _ := p.tensor(sh.rows, sh.cols, x)
			uh, _ := p.tensor(sh.rows, sh.cols, nil)
			p.g.Add(ux, ga)
			p.g.RMSNorm(uh, ux, gw, 1e-6)
			p.sameBits(tag+" x vs Add", gx, ux)
			p.sameBits(tag+" norm vs Add+RMSNorm", gh, uh)
		}
	}
}

// sameBits fails unless GPU tensors a and b hold the same float32 bits.
func (p *pair) sameBits(name string, a, b model.Tensor) {
	p.t.Helper()
	n := a.Rows() * a.Cols()
	va, vb := make([]float32, n), make([]float32, n)
	p.g.ToHost(a, va)
	p.g.ToHost(b, vb)
	if err := p.g.Err(); err != nil {
		p.t.Fatalf("%s: %v", name, err)
	}
	for i := range va {
		if math.Float32bits(va[i]) != math.Float32bits(vb[i]) {
			p.t.Errorf("%s: element %d is %v, want %v (bits %08x, %08x)", name, i, va[i], vb[i], math.Float32bits(va[i]), math.Float32bits(vb[i]))
			return
		}
	}
}

// BenchmarkAddRMSNorm times the residual add and norm of a decode step (1
// row) and of a prefill chunk (256 rows) at model widths, as replayed CUDA
// graphs of 8 ops each (a decode step's launches): v1 is Add then the first
// rmsnorm, v2 Add then rmsnorm2, fused one add_rmsnorm.
func BenchmarkAddRMSNorm(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(95, 96))
	for _, cols := range []int{2048, 4096, 8192} {
		w, err := g.LoadWeight(vecInfo("norm", cols), f32Bytes(randVec(r, cols, 1)))
		if err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{1, 256} {
			x, d, h := g.NewTensor(rows, cols), g.NewTensor(rows, cols), g.NewTensor(rows, cols)
			g.FromHost(x, randVec(r, rows*cols, 1))
			g.FromHost(d, randVec(r, rows*cols, 1e-3))
			for _, v := range []string{"v1", "v2", "fused"} {
				b.Run(fmt.Sprintf("cols=%d/rows=%d/%s", cols, rows, v), func(b *testing.B) {
					withNormV2(b, v != "v1")
					op := func() { g.Add(x, d); g.RMSNorm(h, x, w, 1e-6) }
					if v == "fused" {
						op = func() { g.AddRMSNorm(h, x, d, w, 1e-6) }
					}
					step := func() {
						g.BeginStep()
						for range 8 {
							op()
						}
						g.EndStep()
					}
					ms := timeOps(b, g, max(b.N, 200), step)
					b.ReportMetric(ms*1e3/8, "us/op")
				})
			}
			for _, t := range []model.Tensor{x, d, h} {
				g.FreeTensor(t)
			}
		}
		g.FreeWeight(w)
	}
}
