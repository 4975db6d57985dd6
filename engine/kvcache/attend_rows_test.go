package kvcache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// AttendRows equals per-row Attend bit for bit, across dtypes, GQA
// ratios, tilings and prefixes already in the cache.
func TestAttendRowsMatchesAttend(t *testing.T) {
	defer func(b int) { attendRowsBudget = b }(attendRowsBudget)
	for _, sc := range append(storeCases, storeCase{dtype: BF16, vdtype: FP8E4M3}, storeCase{dtype: FP8E4M3, vdtype: BF16}, storeCase{dtype: F16, scales: StaticScales, vdtype: FP8E5M2}) {
		for gi, g := range geoms {
			for _, budget := range []int{1 << 20, 300} {
				name := fmt.Sprintf("%v/%d_budget%d", sc, gi, budget)
				t.Run(name, func(t *testing.T) {
					attendRowsBudget = budget
					r := rand.New(rand.NewPCG(uint64(gi), uint64(budget)))
					heads, width := g.kvHeads*g.group, g.kvHeads*g.headDim
					total := min(g.n, 160)
					npages := (total + g.pageSize - 1) / g.pageSize
					l := sc.layout(Layout{Layers: 1, KVHeads: g.kvHeads, HeadDim: g.headDim, PageSize: g.pageSize, Pages: npages + 2})
					if sc.scales == StaticScales && l.AnyFP8() {
						for range g.kvHeads {
							l.KScale = append(l.KScale, 0.02)
							l.VScale = append(l.VScale, 0.01)
						}
					}
					s, err := NewHostStore(l)
					if err != nil {
						t.Fatal(err)
					}
					pages := make([]int32, npages)
					for i, p := range r.Perm(l.Pages)[:npages] {
						pages[i] = int32(p)
					}
					rows := randRows(r, total, width, true)
					for tok, row := range rows {
						s.WriteRow(0, int(pages[tok/g.pageSize]), tok%g.pageSize, row, rows[total-1-tok])
					}
					first := total / 3
					nq := total - first
					q := make([]float32, 0, nq*heads*g.headDim)
					for _, row := range randRows(r, nq, heads*g.headDim, false) {
						q = append(q, row...)
					}
					got := make([]float32, len(q))
					for i := range got {
						got[i] = float32(math.NaN())
					}
					s.AttendRows(got, q, nq, 0, pages, first, heads, 0.1)
					w := heads * g.headDim
					want := make([]float32, w)
					for i := range nq {
						s.Attend(want, q[i*w:(i+1)*w], 0, pages, first+i+1, heads, 0.1)
						for j := range want {
							if math.Float32bits(got[i*w+j]) != math.Float32bits(want[j]) {
								t.Fatalf("row %d [%d]: AttendRows %g, Attend %g", i, j, got[i*w+j], want[j])
							}
						}
					}
				})
			}
		}
	}
}

// Prefill attention of 512 new rows over a 512-token prefix, SmolLM2 head
// shapes (9 q / 3 kv heads, head_dim 64): per-row Attend vs AttendRows.
func BenchmarkPrefillAttention(b *testing.B) {
	const first, rows, heads = 512, 512, 9
	l := Layout{Layers: 1, KVHeads: 3, HeadDim: 64, PageSize: 64, Pages: 16, DType: FP8E4M3}
	s, _ := NewHostStore(l)
	r := rand.New(rand.NewPCG(4, 4))
	pages := make([]int32, 16)
	for i := range pages {
		pages[i] = int32(15 - i)
	}
	for tok, row := range randRows(r, first+rows, 192, true) {
		s.WriteRow(0, int(pages[tok/64]), tok%64, row, row)
	}
	var q []float32
	for _, row := range randRows(r, rows, heads*64, false) {
		q = append(q, row...)
	}
	out := make([]float32, len(q))
	w := heads * 64
	b.Run("Attend", func(b *testing.B) {
		for b.Loop() {
			for i := range rows {
				s.Attend(out[i*w:(i+1)*w], q[i*w:(i+1)*w], 0, pages, first+i+1, heads, 0.125)
			}
		}
	})
	b.Run("AttendRows", func(b *testing.B) {
		for b.Loop() {
			s.AttendRows(out, q, rows, 0, pages, first, heads, 0.125)
		}
	})
}
