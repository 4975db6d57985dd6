package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestGEMMSplits checks the split-K plan without a GPU: slices are
// non-empty and cover all k steps, the partials fit gemmSplitMax, and a
// grid that already fills the device is not split.
func TestGEMMSplits(t *testing.T) {
	for _, tc := range []struct {
		n, rows, cols, sms int
		want               int // splits
	}{
		{n: 16, rows: 4096, cols: 4096, sms: 132, want: 8},   // 64 tiles: 9 asked, 8 of 8 steps
		{n: 16, rows: 14336, cols: 4096, sms: 132, want: 3},  // 224 tiles
		{n: 16, rows: 1024, cols: 4096, sms: 132, want: 16},  // 16 tiles: capped at gemmSplitMaxK
		{n: 16, rows: 4096, cols: 14336, sms: 132, want: 9},  // 224 steps: 25 per slice
		{n: 16, rows: 128256, cols: 4096, sms: 132, want: 1}, // the head fills the device
		{n: 9, rows: 197, cols: 256, sms: 132, want: 4},      // one Q4_K block: one step per slice
		{n: 9, rows: 130, cols: 96, sms: 132, want: 2},       // last step half a GK
		{n: 127, rows: 28672, cols: 4096, sms: 132, want: 1}, // 2 splits would exceed gemmSplitMax
		{n: 64, rows: 256, cols: 2560, sms: 132, want: 14},   // 40 steps, 3 per slice
		{n: 32, rows: 64, cols: 64, sms: 132, want: 1},       // one step cannot split
		{n: 16, rows: 4096, cols: 4096, sms: 0, want: 1},     // unknown SM count: 64 tiles suffice
	} {
		splits, kSteps := gemmSplits(tc.n, tc.rows, tc.cols, tc.sms, gemmSplitCTAsPerSM)
		steps := cdiv(tc.cols, 64)
		if splits != tc.want {
			t.Errorf("%+v: %d splits, want %d", tc, splits, tc.want)
		}
		if splits > 1 && ((splits-1)*kSteps >= steps || splits*kSteps < steps) {
			t.Errorf("%+v: %d slices of %d steps do not tile %d steps", tc, splits, kSteps, steps)
		}
		if splits > 1 && int64(splits)*int64(tc.n)*int64(tc.rows)*4 > gemmSplitMax {
			t.Errorf("%+v: %d splits overflow the workspace", tc, splits)
		}
	}
}

// TestMatMulSplitK checks the split-K GEMM (the default; BackendOptions.NoGEMMSplitK)
// against the CPU backend (tolBF16, like the GEMM), against the unsplit
// GEMM (same bf16 operands, only the float32 sum order differs: tolF32),
// and for bit-identical results run to run. Outputs and the partial
// workspace are NaN-poisoned first, so a tile or slice left unwritten
// fails. Shapes: rows off the 64-row tile, k of one Q4_K block (one k step
// per slice), k ending in half a step (32-element types), and a k whose
// steps do not divide evenly into the slices. Recorded steps check the
// CUDA-graph path (captured, then replayed).
func TestMatMulSplitK(t *testing.T) {
	p := newPair(t)
	g := p.g
	defer setSplitK(t, g, true)
	setSkinny(t, g, false) // (the default) 9..32 rows take split-K, not the skinny GEMM
	setGemmq(t, g, false)  // nor, for Q4_K, gemmq (gemmq_test.go)
	defer setGemmq(t, g, true)
	sms := g.dev.Info().SMs
	before, err := g.GraphStats()
	if err != nil {
		t.Fatal(err)
	}
	cases := 0
	r := rand.New(rand.NewPCG(14, 64))
	for _, sh := range []struct {
		rows, cols int
		types      []gguf.Type
	}{
		{rows: 300, cols: 4096, types: []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.F16}},
		{rows: 197, cols: 256, types: []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.F16}},
		{rows: 130, cols: 96, types: []gguf.Type{gguf.Q8_0, gguf.F16}},
		{rows: 256, cols: 2560, types: []gguf.Type{gguf.Q4_K, gguf.Q5_0}},
	} {
		for _, typ := range sh.types {
			raw := randWeight(r, typ, sh.rows, sh.cols)
			gw, cw := p.weight(gguf.TensorInfo{Name: "splitk." + typ.String(), Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: typ}, raw)
			for _, n := range []int{9, 16, 32, 64} {
				name := fmt.Sprintf("%s %dx%d n=%d", typ, sh.rows, sh.cols, n)
				splits, _ := gemmSplits(n, sh.rows, sh.cols, sms, gemmSplitCTAsPerSM)
				if splits < 2 {
					t.Fatalf("%s: %d splits on %d SMs: the shape does not exercise split-K", name, splits, sms)
				}
				x := randVec(r, n*sh.cols, 1)
				gx, cx := p.tensor(n, sh.cols, x)
				gy, cy := p.tensor(n, sh.rows, nil)
				gu, _ := p.tensor(n, sh.rows, nil)
				gy2, _ := p.tensor(n, sh.rows, nil)
				gy3, _ := p.tensor(n, sh.rows, nil)
				setSplitK(t, g, false)
				g.MatMul(gu, gx, gw)
				setSplitK(t, g, true)
				poisonSplitWS(t, g)
				g.MatMul(gy, gx, gw)
				poisonSplitWS(t, g)
				g.MatMul(gy2, gx, gw)
				// Two recorded steps of three matmuls (enough operations to
				// become a CUDA graph): the second replays the first's graph.
				for range 2 {
					poisonSplitWS(t, g)
					g.BeginStep()
					for range 3 {
						g.MatMul(gy3, gx, gw)
					}
					g.EndStep()
				}
				cases++
				setSplitK(t, g, false)
				p.c.MatMul(cy, cx, cw)
				p.compare(name+" split-K vs cpu", gy, cy, tolBF16)
				got, unsplit, again, graphed := download(t, g, gy), download(t, g, gu), download(t, g, gy2), download(t, g, gy3)
				if e, err := relErr(got, unsplit); err != nil || e > tolF32 {
					t.Errorf("%s: split-K vs unsplit GEMM: error %.3g (tol %.0g) %v", name, e, tolF32, err)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(again[i]) || math.Float32bits(got[i]) != math.Float32bits(graphed[i]) {
						t.Errorf("%s: element %d differs run to run: %v, %v, %v (recorded step)", name, i, got[i], again[i], graphed[i])
						break
					}
				}
			}
		}
	}
	after, err := g.GraphStats()
	if err != nil {
		t.Fatal(err)
	}
	if g.graphs && !after.Disabled && after.Replays-before.Replays < cases {
		t.Errorf("%d recorded split-K steps replayed %d graphs, want at least %d", 2*cases, after.Replays-before.Replays, cases)
	}
	var ws Buffer
	var wsErr error
	if err := g.dev.Do(func(c *Ctx) error { ws, wsErr = g.splitWS, g.splitWSErr; return nil }); err != nil {
		t.Fatal(err)
	}
	if ws.Ptr == 0 || wsErr != nil {
		t.Errorf("split-K workspace never allocated (%v): the split path did not run", wsErr)
	}
}

// poisonSplitWS fills the split-K workspace with NaN once it exists.
func poisonSplitWS(t *testing.T, g *Backend) {
	t.Helper()
	err := g.dev.Do(func(c *Ctx) error {
		if g.splitWS.Ptr == 0 {
			return nil
		}
		return c.Memset32(g.splitWS.Ptr, 0x7fc00000, g.splitWS.Size/4)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setSplitK switches the split-K option on the device thread, after the
// ops queued so far (they read the option when they run).
func setSplitK(tb testing.TB, g *Backend, on bool) {
	tb.Helper()
	setOpts(tb, g, func(o *BackendOptions) { o.NoGEMMSplitK = !on })
}

// setOpts changes g's options on the device thread, after the ops queued
// so far (they read the options when they run).
func setOpts(tb testing.TB, g *Backend, f func(*BackendOptions)) {
	tb.Helper()
	if err := g.dev.Do(func(*Ctx) error { f(&g.opts); return nil }); err != nil {
		tb.Fatal(err)
	}
}
