package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// TestGemmqSplits checks gemmq's k-slice plan without a GPU: slices are
// non-empty and cover every super-block, partials fit gemmSplitMax, a grid
// that fills the device is not split, and slices keep gemmqMinSliceSB
// super-blocks where the width allows.
func TestGemmqSplits(t *testing.T) {
	for _, tc := range []struct {
		rows, cols, sms, perSM int
		tiles                  int // row tiles (0: one weight's)
		want                   int // splits
	}{
		{rows: 6144, cols: 4096, sms: 132, perSM: 2, tiles: 48, want: 6},    // q, k, v: 6 asked of 16 super-blocks: 6 slices of 3 (the last of 1)
		{rows: 28672, cols: 4096, sms: 132, perSM: 2, tiles: 224, want: 2},  // gate and up
		{rows: 57344, cols: 14336, sms: 132, perSM: 3, tiles: 448, want: 1}, // a group that fills the device
		{rows: 4096, cols: 4096, sms: 132, perSM: 3, want: 8},               // 32 CTAs, 16 super-blocks: 2 a slice
		{rows: 4096, cols: 14336, sms: 132, perSM: 3, want: 12},             // 13 asked of 56 super-blocks: 12 slices of 5
		{rows: 14336, cols: 4096, sms: 132, perSM: 3, want: 4},              // 112 CTAs: 4 asked
		{rows: 128256, cols: 4096, sms: 132, perSM: 3, want: 1},             // the head fills the device
		{rows: 197, cols: 256, sms: 132, perSM: 3, want: 1},                 // one super-block
		{rows: 1024, cols: 4096, sms: 132, perSM: 4, want: 8},               // 8 CTAs: capped by the slice length
		{rows: 4096, cols: 4096, sms: 0, perSM: 3, want: 1},                 // unknown SM count: 32 CTAs, no split
		{rows: 40000, cols: 4096, sms: 132, perSM: 8, want: 3},              // 4 asked; 32 rows' partials fit 3
		{rows: 60000, cols: 65536, sms: 132, perSM: 16, want: 2},            // 5 asked, but 2 slices fill 16 MiB
	} {
		tiles := tc.tiles
		if tiles == 0 {
			tiles = cdiv(tc.rows, gemmqRowsPerCTA)
		}
		splits, kSB := gemmqSplits(tiles, tc.rows, tc.cols, tc.sms, tc.perSM)
		nsb := tc.cols / 256
		if splits != tc.want {
			t.Errorf("%+v: %d splits, want %d", tc, splits, tc.want)
		}
		if splits < 1 || (splits-1)*kSB >= nsb || splits*kSB < nsb {
			t.Errorf("%+v: %d slices of %d super-blocks do not tile %d", tc, splits, kSB, nsb)
		}
		if splits > 1 && int64(splits)*gemmqMaxTokens*int64(tc.rows)*4 > gemmSplitMax {
			t.Errorf("%+v: %d splits overflow the workspace", tc, splits)
		}
		if splits > 1 && kSB < gemmqMinSliceSB && nsb >= 2*gemmqMinSliceSB {
			t.Errorf("%+v: slices of %d super-blocks, want at least %d", tc, kSB, gemmqMinSliceSB)
		}
	}
}

// round16 rounds each x to the 16-bit operand type of g's compute
// flavour (bf16, or fp16 in the sm75 flavour), round to nearest even as
// mma.cuh's pack2 does, for activations inside fp16's range.
func round16(t *testing.T, g *Backend, x []float32) []float32 {
	t.Helper()
	typ := gguf.BF16
	if g.dev.Compute() == ComputeF16 {
		typ = gguf.F16
	}
	raw, err := gguf.Quantize(typ, x)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(x))
	if err := gguf.Dequantize(typ, raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMatMulGemmq checks the Q4_K and Q6_K GEMM from registers (gemmq,
// MatMul's choice for 1..32 rows of those types) on both
// compute flavours:
//   - against a float64 reference on the exact weights and the activations
//     rounded to the flavour's 16-bit type, to 1e-4: only the float32 sums
//     differ, so any slip in the fragment order, the nibble decode or the
//     scales (each of which moves the result by O(1)) fails;
//   - against the CPU backend within tolBF16 (tolF16 on fp16 compute);
//   - bit-identical run to run, in a recorded step (CUDA graph) and, for
//     each row, whether 1 or 32 rows share the call (batch invariance: the
//     k split does not depend on the row count, so a served request's
//     tokens do not depend on which others share its steps).
//
// Outputs, the split workspace and the packed-activation workspace are
// NaN-poisoned first, so a row, token or slice left unwritten fails.
// Shapes: rows off the 16-row tile and the 128-row CTA, one super-block
// (no split), a wide k on a single CTA, splits of uneven length; n at
// every kernel's limits.
func TestMatMulGemmq(t *testing.T) {
	for _, flavour := range []string{"default", "fp16"} {
		t.Run(flavour, func(t *testing.T) {
			p := newPair(t)
			tol16 := tolBF16
			if flavour == "fp16" {
				p, tol16 = newF16Pair(t), tolF16
			}
			testGemmq(t, p, tol16)
		})
	}
}

func testGemmq(t *testing.T, p *pair, tol16 float64) {
	g := p.g
	setGemmqMin(t, g, 0) // the default: the single row as well
	defer setGemmqMin(t, g, 0)
	setGemvq(t, g, false) // a single Q4_K row here is gemmq's, not gemvq's (gemvq_test.go)
	defer setGemvq(t, g, true)
	sms := g.dev.Info().SMs
	r := rand.New(rand.NewPCG(14, 256))
	split, direct := 0, 0
	for _, sh := range []struct{ rows, cols int }{
		{rows: 300, cols: 4096},
		{rows: 197, cols: 256},
		{rows: 70, cols: 14336},
		{rows: 1040, cols: 1536},
		{rows: 4100, cols: 2560},
		{rows: 33, cols: 512},
	} {
		for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
			raw := randWeight(r, typ, sh.rows, sh.cols)
			gw, cw := p.weight(gguf.TensorInfo{Name: "gemmq", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: typ}, raw)
			x32 := randVec(r, 32*sh.cols, 1)
			var y32 []float32 // the 32-row result, the last n below
			for _, n := range []int{32, 1, 2, 3, 8, 9, 15, 16, 17, 31} {
				name := fmt.Sprintf("%s %dx%d n=%d", typ, sh.rows, sh.cols, n)
				if !g.useGemmq(n, typ, sh.cols) {
					t.Fatalf("%s: MatMul would not take gemmq", name)
				}
				if s, _ := gemmqSplits(cdiv(sh.rows, gemmqRowsPerCTA), sh.rows, sh.cols, sms, gemmqSplitCTAsPerSM); s > 1 {
					split++
				} else {
					direct++
				}
				x := x32[:n*sh.cols] // the first n rows of the 32-row run
				gx, cx := p.tensor(n, sh.cols, x)
				gy, cy := p.tensor(n, sh.rows, nil)
				gy2, _ := p.tensor(n, sh.rows, nil)
				gy3, _ := p.tensor(n, sh.rows, nil)
				runRepeated(g, func() { poisonGemmqWS(t, g) },
					func() { g.MatMul(gy, gx, gw) },
					func() { g.MatMul(gy2, gx, gw) },
					func() {
						for range 3 {
							g.MatMul(gy3, gx, gw)
						}
					})
				p.c.MatMul(cy, cx, cw)
				p.compare(name+" gemmq vs cpu", gy, cy, tol16)
				got, again, graphed := download(t, g, gy), download(t, g, gy2), download(t, g, gy3)
				checkGemmqRef(t, name, got, typ, raw, sh.rows, sh.cols, round16(t, g, x), n)
				if n == 32 {
					y32 = got
				}
				checkBitsRepeat(t, name, got, again, graphed, y32)
			}
		}
	}
	if split == 0 || direct == 0 {
		t.Errorf("%d split and %d unsplit cases on %d SMs: the shapes must exercise both", split, direct, sms)
	}
	testGemmqPackReuse(t, p, tol16)
	testGemmqGroup(t, p, tol16) // the single row as well
	setGemmqMin(t, g, 2)        // one row on the whole-x GEMV
	testGemmqGroup(t, p, tol16)
	setGemmqMin(t, g, 0)
	var used []string
	if err := g.dev.Do(func(*Ctx) error {
		for name := range g.fns {
			if strings.HasPrefix(name, "gemmq") {
				used = append(used, name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(used) < 16 {
		t.Errorf("gemmq kernels loaded: %v, want the pack, the reduce of a group and all three sizes, alone and grouped, of both types", used)
	}
}

// checkGemmqRef compares gemmq's n rows got with a float64 reference on
// the weights raw (typ, rows x cols) and the activations rx rounded as the
// kernel rounds them, to 1e-4.
func checkGemmqRef(t *testing.T, name string, got []float32, typ gguf.Type, raw []byte, rows, cols int, rx []float32, n int) {
	t.Helper()
	if e, err := relErr(got, refMatMul(typ, raw, rows, cols, rx, n)); err != nil || e > 1e-4 {
		t.Errorf("%s: gemmq vs float64 on the rounded activations: error %.3g (tol 1e-4) %v", name, e, err)
	}
}

// checkBitsRepeat requires got to equal again and graphed (the same call
// repeated, and replayed in a recorded step) bit for bit and, when whole
// is not nil, the first len(got) values of whole, the result with 32 rows
// sharing the call (batch invariance: a row's result does not depend on
// how many rows share the call).
func checkBitsRepeat(t *testing.T, name string, got, again, graphed, whole []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(again[i]) || math.Float32bits(got[i]) != math.Float32bits(graphed[i]) {
			t.Errorf("%s: element %d differs run to run: %v, %v, %v (recorded step)", name, i, got[i], again[i], graphed[i])
			return
		}
		if whole != nil && math.Float32bits(got[i]) != math.Float32bits(whole[i]) {
			t.Errorf("%s: element %d is %v, but %v when 32 rows share the call", name, i, got[i], whole[i])
			return
		}
	}
}

// runRepeated queues one op three ways, poison() before each: first,
// again (a second output), and graphed twice in a recorded step, the
// second step replaying the first's graph. The callers compare the
// outputs bit for bit.
func runRepeated(g *Backend, poison func(), first, again, graphed func()) {
	poison()
	first()
	poison()
	again()
	for range 2 {
		poison()
		g.BeginStep()
		graphed()
		g.EndStep()
	}
}

// poisonGemmqWS fills gemmq's packed-activation workspace and the split
// partials with NaN.
func poisonGemmqWS(t *testing.T, g *Backend) {
	t.Helper()
	poisonSplitWS(t, g)
	err := g.dev.Do(func(c *Ctx) error {
		if g.gemmqWS.Ptr == 0 {
			return nil
		}
		return c.Memset32(g.gemmqWS.Ptr, 0x7fc00000, g.gemmqWS.Size/4)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setGemmq switches gemmq on or off on the device thread, after the ops
// queued so far.
func setGemmq(tb testing.TB, g *Backend, on bool) {
	tb.Helper()
	setOpts(tb, g, func(o *BackendOptions) { o.NoGEMMQ = !on })
}

// setGemmqMin sets GEMMQMinTokens on the device thread.
func setGemmqMin(tb testing.TB, g *Backend, n int) {
	tb.Helper()
	setOpts(tb, g, func(o *BackendOptions) { o.GEMMQMinTokens = n })
}

// testGemmqPackReuse: matmuls on one x back to back (q, k, v) reuse its
// packed activations, also across the Q4_K/Q6_K pack orders only when they
// agree; new data in x, another op in between or an output over x forces
// a new pack. Every result is checked against the CPU.
func testGemmqPackReuse(t *testing.T, p *pair, tol16 float64) {
	g := p.g
	r := rand.New(rand.NewPCG(7, 77))
	const n, cols = 16, 1024
	types := []gguf.Type{gguf.Q4_K, gguf.Q4_K, gguf.Q6_K, gguf.Q6_K, gguf.Q4_K}
	ws := make([][2]model.Weight, len(types))
	for i, typ := range types {
		raw := randWeight(r, typ, 300+i, cols)
		gw, cw := p.weight(gguf.TensorInfo{Name: fmt.Sprintf("reuse%d", i), Dims: []uint64{cols, uint64(300 + i)}, Type: typ}, raw)
		ws[i] = [2]model.Weight{gw, cw}
	}
	reuses := func() int {
		var k int
		if err := g.dev.Do(func(*Ctx) error { k = g.packReuses; return nil }); err != nil {
			t.Fatal(err)
		}
		return k
	}
	gx, cx := p.tensor(n, cols, randVec(r, n*cols, 1))
	// run queues the matmuls of weights idx back to back (their outputs,
	// NaN-poisoned, made first: the poison is a write) and checks them.
	run := func(name string, idx ...int) {
		gys, cys := make([]model.Tensor, len(idx)), make([]model.Tensor, len(idx))
		for j, i := range idx {
			gys[j], cys[j] = p.tensor(n, 300+i, nil)
		}
		for j, i := range idx {
			g.MatMul(gys[j], gx, ws[i][0])
			p.c.MatMul(cys[j], cx, ws[i][1])
		}
		for j, i := range idx {
			p.compare(fmt.Sprintf("%s: weight %d (%s)", name, i, types[i]), gys[j], cys[j], tol16)
		}
	}
	start := reuses()
	run("reuse", 0, 1, 2, 3, 4) // packs at 0, 2 (Q6_K order), 4 (Q4_K again): 2 reuses
	if got := reuses() - start; got != 2 {
		t.Errorf("5 matmuls on one x (Q4_K, Q4_K, Q6_K, Q6_K, Q4_K): %d pack reuses, want 2", got)
	}
	x2 := randVec(r, n*cols, 1)
	g.FromHost(gx, x2)
	p.c.FromHost(cx, x2)
	start = reuses()
	run("x rewritten", 4, 4) // same x address, new data: packs again, then reuses
	if got := reuses() - start; got != 1 {
		t.Errorf("after FromHost into x, two matmuls: %d pack reuses, want 1", got)
	}
}

// testGemmqGroup checks MatMulShared, which gives two or three gemmq
// weights of one x one launch (gemmqg) and one reduce (gemmq_reduce3):
// every output against the float64 reference on the rounded activations
// (1e-4) and the CPU, bit-identical run to run, in a recorded step, and
// per row whatever the row count. Groups of another type or width, and a
// single row, go to MatMul one weight at a time and must still match.
// Outputs and workspaces are NaN-poisoned first.
func testGemmqGroup(t *testing.T, p *pair, tol16 float64) {
	g := p.g
	r := rand.New(rand.NewPCG(3, 33))
	sms := g.dev.Info().SMs
	split, direct := 0, 0
	for _, gc := range []struct {
		name  string
		types []gguf.Type
		rows  []int
		cols  int
	}{
		{"q, k, v", []gguf.Type{gguf.Q4_K, gguf.Q4_K, gguf.Q4_K}, []int{520, 130, 130}, 1024},
		{"gate, up", []gguf.Type{gguf.Q6_K, gguf.Q6_K}, []int{700, 700}, 2560},
		{"Q6_K q, k, v", []gguf.Type{gguf.Q6_K, gguf.Q6_K, gguf.Q6_K}, []int{384, 17, 128}, 512},
		{"wide", []gguf.Type{gguf.Q4_K, gguf.Q4_K}, []int{300, 44}, 14336},
		{"one super-block", []gguf.Type{gguf.Q4_K, gguf.Q4_K, gguf.Q4_K}, []int{200, 64, 64}, 256},
		{"mixed types", []gguf.Type{gguf.Q4_K, gguf.Q6_K}, []int{300, 300}, 1024},
		{"Q4_K_M q, k, v", []gguf.Type{gguf.Q4_K, gguf.Q4_K, gguf.Q6_K}, []int{260, 64, 64}, 1024}, // q and k grouped, v alone
	} {
		k := len(gc.types)
		gws, cws := make([]model.Weight, k), make([]model.Weight, k)
		raws := make([][]byte, k)
		for i, typ := range gc.types {
			raws[i] = randWeight(r, typ, gc.rows[i], gc.cols)
			gws[i], cws[i] = p.weight(gguf.TensorInfo{Name: fmt.Sprintf("group%d", i), Dims: []uint64{uint64(gc.cols), uint64(gc.rows[i])}, Type: typ}, raws[i])
		}
		pair := false // two weights of one type: gemmqGroups gives them one launch
		for i, typ := range gc.types {
			pair = pair || slices.Contains(gc.types[i+1:], typ)
		}
		width := gc.cols
		x32 := randVec(r, 32*width, 1)
		y32 := make([][]float32, k)
		for _, n := range []int{32, 1, 2, 8, 16, 17} {
			name := fmt.Sprintf("%s n=%d", gc.name, n)
			grouped := pair && g.useGemmq(n, gc.types[0], width)
			if grouped {
				tiles, total := 0, 0
				for _, rows := range gc.rows {
					tiles, total = tiles+cdiv(rows, gemmqRowsPerCTA), total+rows
				}
				if s, _ := gemmqSplits(tiles, total, width, sms, g.gemmqCTAsPerSM()); s > 1 {
					split++
				} else {
					direct++
				}
			}
			x := x32[:n*width]
			gx, cx := p.tensor(n, width, x)
			outs := func() []model.Tensor {
				ys := make([]model.Tensor, k)
				for i := range ys {
					ys[i], _ = p.tensor(n, gc.rows[i], nil)
				}
				return ys
			}
			before := groupCalls(t, g)
			gy, gy3 := outs(), outs()
			var gy2 []model.Tensor
			runRepeated(g, func() { poisonGemmqWS(t, g) },
				func() { g.MatMulShared(gy, gx, gws) },
				func() {
					// outputs made just before the call: their buffers exist
					// only once the device thread has run the allocations
					// queued here
					gy2 = outs()
					g.MatMulShared(gy2, gx, gws)
				},
				func() { g.MatMulShared(gy3, gx, gws) })
			if took := groupCalls(t, g) - before; (took > 0) != grouped {
				t.Errorf("%s: %d grouped launches, want them: %v", name, took, grouped)
			}
			rx := round16(t, g, x)
			for i := range k {
				cy := p.c.NewTensor(n, gc.rows[i])
				p.c.MatMul(cy, cx, cws[i])
				wname := fmt.Sprintf("%s weight %d", name, i)
				p.compare(wname+" vs cpu", gy[i], cy, tol16)
				got, again, graphed := download(t, g, gy[i]), download(t, g, gy2[i]), download(t, g, gy3[i])
				if n == 32 {
					y32[i] = got
				}
				whole := y32[i]
				if g.useGemmq(n, gc.types[i], width) {
					checkGemmqRef(t, wname, got, gc.types[i], raws[i], gc.rows[i], width, rx, n)
				} else {
					whole = nil // the GEMV: float32 activations, not batch-invariant with gemmq's rows
				}
				checkBitsRepeat(t, wname, got, again, graphed, whole)
			}
		}
	}
	if split == 0 || direct == 0 {
		t.Errorf("%d split and %d unsplit grouped cases on %d SMs: the shapes must exercise both", split, direct, sms)
	}
	// Weights of different widths cannot share an x: the shapes are refused
	// with one error, nothing is queued.
	bad := func() (err error) {
		gx, _ := p.tensor(4, 1024, nil)
		a, _ := p.tensor(4, 300, nil)
		b2, _ := p.tensor(4, 300, nil)
		ws := make([]model.Weight, 2)
		for i, cols := range []int{1024, 2048} {
			ws[i], _ = p.weight(gguf.TensorInfo{Name: fmt.Sprintf("bad%d", i), Dims: []uint64{uint64(cols), 300}, Type: gguf.Q4_K}, randWeight(r, gguf.Q4_K, 300, cols))
		}
		g.MatMulShared([]model.Tensor{a, b2}, gx, ws)
		return g.Err()
	}()
	if bad == nil || !strings.Contains(bad.Error(), "MatMulShared shapes") {
		t.Errorf("MatMulShared with weights of two widths: error %v, want one naming the shapes", bad)
	}
}

// groupCalls is how many MatMulShared calls gemmqGroup has taken.
func groupCalls(t *testing.T, g *Backend) int {
	t.Helper()
	var k int
	if err := g.dev.Do(func(*Ctx) error { k = g.groupCalls; return nil }); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestGemmqGroups: MatMulShared's sets for one gemmqg launch keep the
// weights' order, join only weights of one type, width and row size that
// gemmq takes, hold at most gemmqGroupMax, and leave the rest alone.
func TestGemmqGroups(t *testing.T) {
	w := func(typ gguf.Type, cols int) *Weight {
		return &Weight{info: gguf.TensorInfo{Type: typ}, cols: cols, rowBytes: int64(cols / 256 * typ.BlockBytes())}
	}
	q4, q6, f16, q4w := w(gguf.Q4_K, 4096), w(gguf.Q6_K, 4096), w(gguf.F16, 4096), w(gguf.Q4_K, 8192)
	gemmqTakes := func(w *Weight) bool { return w.info.Type == gguf.Q4_K || w.info.Type == gguf.Q6_K }
	for _, tc := range []struct {
		name string
		ws   []*Weight
		want [][]int
	}{
		{"q, k, v", []*Weight{q4, q4, q4}, [][]int{{0, 1, 2}}},
		{"gate, up", []*Weight{q6, q6}, [][]int{{0, 1}}},
		{"Q4_K_M: v in Q6_K", []*Weight{q4, q4, q6}, [][]int{{0, 1}, {2}}},
		{"partner after another type", []*Weight{q4, q6, q4}, [][]int{{0, 2}, {1}}},
		{"no partner", []*Weight{q4, q6}, [][]int{{0}, {1}}},
		{"other widths", []*Weight{q4, q4w}, [][]int{{0}, {1}}},
		{"not gemmq's", []*Weight{f16, f16}, [][]int{{0}, {1}}},
		{"at most three", []*Weight{q4, q4, q4, q4}, [][]int{{0, 1, 2}, {3}}},
		{"empty", nil, nil},
	} {
		if got := gemmqGroups(tc.ws, gemmqTakes); !slices.EqualFunc(got, tc.want, slices.Equal[[]int]) {
			t.Errorf("%s: sets %v, want %v", tc.name, got, tc.want)
		}
	}
}
