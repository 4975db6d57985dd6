package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMoERouterTopkMatchesTwoLaunches: moe_router_topk (the router rows and
// the last CTA's top-k in one launch) writes the logits, ids and weights of
// moe_router_rows followed by moe_topk2, bit for bit, over expert counts
// below and above a CTA's warps, 1 to 16 rows, top-1 to top-8, renormalised
// or not, with the outputs poisoned first; each case launches three times
// in a row (the CTA counter must come back to 0 each time) and the counter
// must read 0 at the end.
func TestMoERouterTopkMatchesTwoLaunches(t *testing.T) {
	g := newTestBackend(t)
	r := rand.New(rand.NewPCG(91, 92))
	type tc struct{ E, cols, n, K int }
	var cases []tc
	for _, E := range []int{8, 60, 128, 256} {
		for _, n := range []int{1, 3, 16} {
			cases = append(cases, tc{E, []int{64, 2048, 516}[len(cases)%3], n, min(8, E)}, tc{E, 1024, n, 1})
		}
	}
	for _, c := range cases {
		for _, norm := range []bool{false, true} {
			name := fmt.Sprintf("E=%d/cols=%d/n=%d/K=%d/norm=%v", c.E, c.cols, c.n, c.K, norm)
			rv, xv := randVec(r, c.E*c.cols, 0.1), randVec(r, c.n*c.cols, 1)
			type out struct {
				logits, wts []float32
				ids         []int32
			}
			var res [2]out
			var counter uint32
			err := g.dev.Do(func(cx *Ctx) error {
				nl, nk := c.n*c.E, c.n*c.K
				buf, err := cx.Alloc(int64(4*(len(rv)+len(xv)+nl+2*nk)), "test router")
				if err != nil {
					return err
				}
				defer cx.Free(buf)
				rp := buf.Ptr
				xp := rp.Add(int64(4 * len(rv)))
				lp := xp.Add(int64(4 * len(xv)))
				ip := lp.Add(int64(4 * nl))
				wp := ip.Add(int64(4 * nk))
				if err := Upload(cx, rp, rv); err != nil {
					return err
				}
				if err := Upload(cx, xp, xv); err != nil {
					return err
				}
				for v := range 2 {
					if err := cx.Memset8(lp, 0xa5, int64(4*(nl+2*nk))); err != nil {
						return err
					}
					for range 3 {
						if v == 0 {
							if err := g.launch(cx, "moe_router_rows", Dim3{X: c.E}, Dim3{X: 256}, rp, c.E, c.cols, xp, c.n, lp); err != nil {
								return err
							}
							if err := g.launch(cx, "moe_topk2", Dim3{X: cdiv(c.n, 4)}, Dim3{X: 128}, lp, c.n, c.E, c.K, norm, ip, wp); err != nil {
								return err
							}
							continue
						}
						done, err := g.routerCounter(cx)
						if err != nil {
							return err
						}
						if err := g.launch(cx, "moe_router_topk", Dim3{X: c.E}, Dim3{X: 256}, rp, c.E, c.cols, xp, c.n, lp, done, c.K, norm, ip, wp); err != nil {
							return err
						}
					}
					res[v] = out{make([]float32, nl), make([]float32, nk), make([]int32, nk)}
					if err := Download(cx, res[v].logits, lp); err != nil {
						return err
					}
					if err := Download(cx, res[v].wts, wp); err != nil {
						return err
					}
					if err := Download(cx, res[v].ids, ip); err != nil {
						return err
					}
				}
				cnt := make([]uint32, 1)
				if err := Download(cx, cnt, g.routerDone.Ptr); err != nil {
					return err
				}
				counter = cnt[0]
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if counter != 0 {
				t.Errorf("%s: the CTA counter reads %d after the launches, want 0", name, counter)
			}
			if i := firstDiff(res[1].logits, res[0].logits); i >= 0 {
				t.Errorf("%s: logit %d = %v, the two launches give %v", name, i, res[1].logits[i], res[0].logits[i])
			}
			for i := range res[0].ids {
				if res[1].ids[i] != res[0].ids[i] || math.Float32bits(res[1].wts[i]) != math.Float32bits(res[0].wts[i]) {
					t.Errorf("%s: token %d slot %d: expert %d weight %v, the two launches give %d %v",
						name, i/c.K, i%c.K, res[1].ids[i], res[1].wts[i], res[0].ids[i], res[0].wts[i])
					break
				}
			}
		}
	}
}
