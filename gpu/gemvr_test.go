package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestGemvrRowsPerCTA: one row per warp up to ~4 CTAs per SM, then pairs
// of rows per warp, every row covered, about 4 CTAs per SM at most.
func TestGemvrRowsPerCTA(t *testing.T) {
	for _, tc := range []struct{ rows, sms, want int }{
		{1, 132, 8}, {512, 132, 8}, {4224, 132, 8}, {4225, 132, 16}, {8192, 132, 16},
		{248320, 132, 480}, {100, 0, 32}, {1 << 20, 1, 262144},
	} {
		got := gemvrRowsPerCTA(tc.rows, tc.sms)
		if got != tc.want {
			t.Errorf("rows %d, %d SMs: %d rows per CTA, want %d", tc.rows, tc.sms, got, tc.want)
		}
		if got%gemvWarps != 0 || (got > gemvWarps && got%(2*gemvWarps) != 0) {
			t.Errorf("rows %d: %d rows per CTA is not whole warps (pairs above %d)", tc.rows, got, gemvWarps)
		}
	}
}

// TestMatMulGemvr checks the several-rows-per-warp single-token GEMV
// against the CPU backend for every type that has it: shapes with one row
// per warp, with row pairs and a partial last CTA (rows above 4 CTAs per
// SM of 8), an odd row count, and rows wider than 48 KiB of shared x.
// Outputs start as NaN, so an unwritten row fails.
func TestMatMulGemvr(t *testing.T) {
	p := newPair(t)
	setGemmq(t, p.g, false) // one row of Q4_K and Q6_K would take gemmq
	defer setGemmq(t, p.g, true)
	r := rand.New(rand.NewPCG(21, 22))
	sms := p.g.dev.Info().SMs
	big := 4*sms*gemvWarps + 2*gemvWarps + 3 // pairs, and an odd tail
	shapes := []struct{ rows, cols int }{{300, 1024}, {big, 256}, {33, 2048}, {70, 14336}}
	for typ := range gemvrTypes {
		for _, sh := range shapes {
			if typ.BlockElems() > 0 && sh.cols%typ.BlockElems() != 0 {
				continue
			}
			raw := randWeight(r, typ, sh.rows, sh.cols)
			gw, cw := p.weight(gguf.TensorInfo{Name: "gemvr", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: typ}, raw)
			p.g.gemvMode.Store(3)
			x := randVec(r, sh.cols, 1)
			gx, cx := p.tensor(1, sh.cols, x)
			gy, cy := p.tensor(1, sh.rows, nil)
			p.g.MatMul(gy, gx, gw)
			p.c.MatMul(cy, cx, cw)
			p.compare(fmt.Sprintf("gemvr %s %dx%d", typ, sh.rows, sh.cols), gy, cy, tolF32)
			p.g.gemvMode.Store(0)
		}
	}
}
