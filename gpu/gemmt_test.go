package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestGemmtSplits checks the skinny GEMM's k-slice plan without a GPU:
// slices are non-empty and cover every step, partials fit gemmSplitMax, a
// grid that fills the device is not split, and slices keep their minimum
// length where the row count allows.
func TestGemmtSplits(t *testing.T) {
	for _, tc := range []struct {
		n, rows, cols, sms int
		want               int // splits
	}{
		{n: 16, rows: 4096, cols: 4096, sms: 132, want: 16},  // 16 CTAs, 64 steps: 4 a slice
		{n: 16, rows: 1024, cols: 4096, sms: 132, want: 16},  // capped at gemmSplitMaxK
		{n: 16, rows: 14336, cols: 4096, sms: 132, want: 5},  // 56 CTAs
		{n: 16, rows: 4096, cols: 14336, sms: 132, want: 16}, // 224 steps, 14 a slice
		{n: 32, rows: 128256, cols: 4096, sms: 132, want: 1}, // the head fills the device
		{n: 9, rows: 197, cols: 256, sms: 132, want: 1},      // 4 steps: one slice
		{n: 9, rows: 300, cols: 96, sms: 132, want: 1},       // 2 steps (the last of one unit)
		{n: 32, rows: 300, cols: 4096, sms: 132, want: 16},   // 2 CTAs
		{n: 32, rows: 28672, cols: 8192, sms: 132, want: 3},  // 112 CTAs: 11 MiB of partials
		{n: 16, rows: 4096, cols: 4096, sms: 0, want: 1},     // unknown SM count: 16 CTAs, no split
		{n: 32, rows: 65536, cols: 2560, sms: 132, want: 2},  // 256 CTAs: 2 asked
		{n: 32, rows: 66000, cols: 4096, sms: 132, want: 1},  // 2 asked, but 2 slices overflow 16 MiB
	} {
		splits, kSteps := gemmtSplits(tc.n, tc.rows, tc.cols, tc.sms)
		steps := cdiv(cdiv(tc.cols, 32), 2)
		if tc.want > 0 && splits != tc.want {
			t.Errorf("%+v: %d splits, want %d", tc, splits, tc.want)
		}
		if splits < 1 || (splits-1)*kSteps >= steps || splits*kSteps < steps {
			t.Errorf("%+v: %d slices of %d steps do not tile %d steps", tc, splits, kSteps, steps)
		}
		if splits > 1 && int64(splits)*int64(tc.n)*int64(tc.rows)*4 > gemmSplitMax {
			t.Errorf("%+v: %d splits overflow the workspace", tc, splits)
		}
		if splits > 1 && kSteps < gemmtMinSliceSteps && steps >= 2*gemmtMinSliceSteps {
			t.Errorf("%+v: slices of %d steps, want at least %d", tc, kSteps, gemmtMinSliceSteps)
		}
	}
}

// TestMatMulSkinny checks the skinny GEMM (gemmt16_*/gemmt32_*, MatMul's
// choice for 9..32 rows) against the CPU backend (tolBF16: bf16 operands
// like the tile GEMM), against the tile GEMM it replaces (the same bf16
// operands, only the float32 sum order differs: tolF32) and for
// bit-identical results run to run and in a recorded step (CUDA graph).
// Outputs and the split workspace are NaN-poisoned first, so a row, token
// or k slice left unwritten fails. Shapes: rows off the 32-row warp tile
// and the 256-row CTA (warps past the end), fewer rows than a CTA, k of one
// Q4_K block (no split), k of an odd number of units (a last step of one
// unit), splits of uneven length, and n at both kernels' limits.
func TestMatMulSkinny(t *testing.T) {
	p := newPair(t)
	g := p.g
	setSkinny(t, g, true)
	defer setSkinny(t, g, false)
	setGemmq(t, g, false) // Q4_K would take gemmq (gemmq_test.go)
	defer setGemmq(t, g, true)
	sms := g.dev.Info().SMs
	r := rand.New(rand.NewPCG(14, 32))
	split, direct := 0, 0
	for _, sh := range []struct {
		rows, cols int
		types      []gguf.Type
	}{
		{rows: 300, cols: 4096, types: []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.F16, gguf.BF16}},
		{rows: 197, cols: 256, types: []gguf.Type{gguf.Q4_K, gguf.Q5_K, gguf.Q8_0}},
		{rows: 130, cols: 96, types: []gguf.Type{gguf.Q8_0, gguf.Q4_0, gguf.F32}},
		{rows: 777, cols: 2560, types: []gguf.Type{gguf.Q4_K, gguf.Q5_0, gguf.NVFP4, gguf.FP8_E4M3_B32}},
		{rows: 1040, cols: 1536, types: []gguf.Type{gguf.Q6_K}},
		{rows: 1040, cols: 1440, types: []gguf.Type{gguf.MXFP4}}, // 45 units: the last step has one
	} {
		for _, typ := range sh.types {
			raw := randWeight(r, typ, sh.rows, sh.cols)
			gw, cw := p.weight(gguf.TensorInfo{Name: "gemmt." + typ.String(), Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: typ}, raw)
			for _, n := range []int{9, 13, 16, 17, 32} {
				name := fmt.Sprintf("%s %dx%d n=%d", typ, sh.rows, sh.cols, n)
				if s, _ := gemmtSplits(n, sh.rows, sh.cols, sms); s > 1 {
					split++
				} else {
					direct++
				}
				x := randVec(r, n*sh.cols, 1)
				gx, cx := p.tensor(n, sh.cols, x)
				gy, cy := p.tensor(n, sh.rows, nil)
				gtile, _ := p.tensor(n, sh.rows, nil)
				gy2, _ := p.tensor(n, sh.rows, nil)
				gy3, _ := p.tensor(n, sh.rows, nil)
				setSkinny(t, g, false)
				setSplitK(t, g, false)
				g.MatMul(gtile, gx, gw)
				setSplitK(t, g, true)
				setSkinny(t, g, true)
				runRepeated(g, func() { poisonSplitWS(t, g) },
					func() { g.MatMul(gy, gx, gw) },
					func() { g.MatMul(gy2, gx, gw) },
					func() {
						for range 3 {
							g.MatMul(gy3, gx, gw)
						}
					})
				p.c.MatMul(cy, cx, cw)
				p.compare(name+" skinny vs cpu", gy, cy, tolBF16)
				got, tile, again, graphed := download(t, g, gy), download(t, g, gtile), download(t, g, gy2), download(t, g, gy3)
				if e, err := relErr(got, tile); err != nil || e > tolF32 {
					t.Errorf("%s: skinny vs tile GEMM: error %.3g (tol %.0g) %v", name, e, tolF32, err)
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
	if split == 0 || direct == 0 {
		t.Errorf("%d split and %d unsplit cases on %d SMs: the shapes must exercise both", split, direct, sms)
	}
	var used []string
	if err := g.dev.Do(func(*Ctx) error {
		for name := range g.fns {
			if len(name) > 6 && name[:6] == "gemmt1" || len(name) > 6 && name[:6] == "gemmt3" {
				used = append(used, name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Error("no gemmt kernel was loaded: MatMul did not take the skinny GEMM")
	}
}

// setSkinny switches the skinny GEMM on or off on the device thread, after
// the ops queued so far.
func setSkinny(tb testing.TB, g *Backend, on bool) {
	tb.Helper()
	setOpts(tb, g, func(o *BackendOptions) { o.SkinnyGEMM = on })
}
