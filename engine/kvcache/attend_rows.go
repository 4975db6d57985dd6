package kvcache

import (
	"fmt"
	"math"
)

// attendRowsBudget bounds the scores scratch of AttendRows (float32s);
// a variable so tests can force many tiles.
var attendRowsBudget = 1 << 20

const attendRowsTile = 32

// AttendRows is Attend for rows consecutive query rows of one sequence in
// a prefill: row r (q[r*heads*HeadDim:], out likewise) sits at position
// first+r and attends tokens 0..first+r (causal). The results are
// bitwise identical to calling Attend per row with n = first+r+1; it is
// faster because each K/V row is decoded once per tile of query rows
// instead of once per query row.
func (s *HostStore) AttendRows(out, q []float32, rows, layer int, pages []int32, first, heads int, scale float32) {
	l := s.l
	d := l.HeadDim
	w := heads * d
	if rows < 0 || first < 0 || len(q) != rows*w || len(out) != rows*w {
		panic(fmt.Sprintf("kvcache: AttendRows(rows %d, first %d) got q %d, out %d values; want rows*heads*head_dim = %d",
			rows, first, len(q), len(out), rows*w))
	}
	if rows == 0 {
		return
	}
	if heads <= 0 || heads%l.KVHeads != 0 {
		panic(fmt.Sprintf("kvcache: AttendRows with %d query heads over %d kv heads; heads must be a positive multiple", heads, l.KVHeads))
	}
	if layer < 0 || layer >= l.Layers {
		panic(fmt.Sprintf("kvcache: layer %d outside 0..%d", layer, l.Layers-1))
	}
	total := first + rows
	if total > len(pages)*l.PageSize {
		panic(fmt.Sprintf("kvcache: AttendRows over %d tokens with a page table of %d pages of %d", total, len(pages), l.PageSize))
	}
	for _, p := range pages[:(total+l.PageSize-1)/l.PageSize] {
		if p < 0 || int(p) >= l.Pages {
			panic(fmt.Sprintf("kvcache: page id %d outside the pool of %d pages", p, l.Pages))
		}
	}
	group := heads / l.KVHeads
	// Tiles of up to 32 rows keep one GQA group's queries of the tile in L1/L2
	// while K/V rows stream past; the budget bounds the scores scratch.
	tile := max(1, min(rows, attendRowsTile, attendRowsBudget/(group*total)))
	bufs := attendPool.Get().(*attendBufs)
	defer attendPool.Put(bufs)
	if cap(bufs.row) < d {
		bufs.row = make([]float32, d)
	}
	row := bufs.row[:d]
	for r0 := 0; r0 < rows; r0 += tile {
		r1 := min(rows, r0+tile)
		s.attendTile(out, q, r0, r1, layer, pages, first, heads, scale, row, bufs)
	}
}

// attendTile handles query rows [r0, r1). The arithmetic per (row, head)
// is exactly Attend's: same dot, same exp, same order over tokens.
func (s *HostStore) attendTile(out, q []float32, r0, r1, layer int, pages []int32, first, heads int, scale float32, row []float32, bufs *attendBufs) {
	l := s.l
	d := l.HeadDim
	w := heads * d
	group := heads / l.KVHeads
	n := first + r1 // tokens seen by the tile's last row
	stride := (r1 - r0) * group
	if cap(bufs.scores) < stride*n {
		bufs.scores = make([]float32, stride*n)
	}
	// scores[t*stride + (r-r0)*group + g]: token-major so pass 1 writes
	// contiguously for one decoded K row.
	scores := bufs.scores[:stride*n]
	hl := &s.layers[layer]
	shift := pageShift(l.PageSize)
	mask := l.PageSize - 1
	lo := func(t int) int { return max(r0, t-first) } // first row of the tile that sees token t

	for kh := range l.KVHeads {
		q0 := kh * group
		for t := range n {
			page, slot := int(pages[t>>shift]), t&mask
			rs := s.decodeRow(row, l.KType(), hl.k, hl.ks, hl.kStatic, page, kh, slot)
			for r := lo(t); r < r1; r++ {
				for g := range group {
					h := q0 + g
					scores[t*stride+(r-r0)*group+g] = dot(q[r*w+h*d:r*w+(h+1)*d], row) * rs * scale
				}
			}
		}
		for r := r0; r < r1; r++ {
			nr := first + r + 1
			for g := range group {
				c := (r-r0)*group + g
				m := float32(math.Inf(-1))
				for t := range nr {
					if x := scores[t*stride+c]; x > m {
						m = x
					}
				}
				var sum float32
				for t := range nr {
					e := float32(math.Exp(float64(scores[t*stride+c] - m)))
					scores[t*stride+c] = e
					sum += e
				}
				inv := 1 / sum
				for t := range nr {
					scores[t*stride+c] *= inv
				}
				h := q0 + g
				clear(out[r*w+h*d : r*w+(h+1)*d])
			}
		}
		for t := range n {
			page, slot := int(pages[t>>shift]), t&mask
			rs := s.decodeRow(row, l.VType(), hl.v, hl.vs, hl.vStatic, page, kh, slot)
			for r := lo(t); r < r1; r++ {
				for g := range group {
					h := q0 + g
					axpy(out[r*w+h*d:r*w+(h+1)*d], row, scores[t*stride+(r-r0)*group+g]*rs)
				}
			}
		}
	}
}
