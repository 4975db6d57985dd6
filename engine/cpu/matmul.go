package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// MatMul: dst[r] = W · x[r] for every row r of x.
func (b *Backend) MatMul(dst, x model.Tensor, w model.Weight) {
	d, s, cw := ten(dst), ten(x), wt(w)
	if s.cols != cw.cols || d.cols != cw.rows || d.rows != s.rows {
		panic(fmt.Sprintf("cpu: MatMul shapes: x %dx%d, %s %dx%d, dst %dx%d", s.rows, s.cols, cw.info.Name, cw.rows, cw.cols, d.rows, d.cols))
	}
	b.matmul(d.Data, d.cols, s.Data, s.rows, cw, 0, cw.rows)
}

// rowTile is how many activation rows share one pass over a weight row:
// the weight row is read from memory once per tile and then hits L1.
const rowTile = 8

// matmul computes dst[r*ds+o] = W[o0+o] · x[r] for o < nOut, r < n; x rows
// are contiguous with stride w.cols.
func (b *Backend) matmul(dst []float32, ds int, x []float32, n int, w *Weight, o0, nOut int) {
	cols, rb := w.cols, w.rowBytes
	var xs []float32
	nbx := cols / 32
	if cols%32 == 0 {
		xs = make([]float32, n*nbx)
		for r := 0; r < n; r++ {
			blockSums(xs[r*nbx:(r+1)*nbx], x[r*cols:(r+1)*cols])
		}
	}
	kern := w.kern
	kern4 := w.kern4
	if xs == nil {
		kern4 = nil
	}
	if w.f32 != nil && len(w.f32) == w.rows*w.cols {
		kern = nil // decoded already: plain float dot below
	} else if b.intDot && xs != nil {
		if ip, ok := intKernelFor(w.info.Type); ok {
			b.matmulInt(dst, ds, x, xs, n, w, o0, nOut, ip)
			return
		}
	}
	b.pool.parallel(nOut, 4, func(lo, hi int) {
		if kern == nil {
			b.matmulGeneric(dst, ds, x, n, w, o0, lo, hi)
			return
		}
		var out [4]float32
		for r0 := 0; r0 < n; r0 += rowTile {
			r1 := min(r0+rowTile, n)
			for o := lo; o < hi; o++ {
				wr := w.raw[(o0+o)*rb : (o0+o+1)*rb]
				r := r0
				if kern4 != nil {
					for ; r+4 <= r1; r += 4 {
						kern4(wr, x[r*cols:(r+4)*cols], cols, xs[r*nbx:(r+4)*nbx], nbx, &out)
						dst[r*ds+o], dst[(r+1)*ds+o], dst[(r+2)*ds+o], dst[(r+3)*ds+o] = out[0], out[1], out[2], out[3]
					}
				}
				for ; r < r1; r++ {
					var xsr []float32
					if xs != nil {
						xsr = xs[r*nbx : (r+1)*nbx]
					}
					dst[r*ds+o] = kern(wr, x[r*cols:(r+1)*cols], xsr)
				}
			}
		}
	})
	w.applyScale(dst, ds, n, o0, nOut)
}

// applyScale multiplies the outputs by the weight's second-level scale.
func (w *Weight) applyScale(dst []float32, ds, n, o0, nOut int) {
	if w.scale != nil {
		for r := 0; r < n; r++ {
			row := dst[r*ds : r*ds+nOut]
			for o := range row {
				row[o] *= w.scale[(o0+o)/w.scaleRows]
			}
		}
	}
}

// matmulGeneric handles weights without a fused kernel: each weight row is
// decoded once into scratch (one row, not the matrix) and dotted with all
// activation rows.
func (b *Backend) matmulGeneric(dst []float32, ds int, x []float32, n int, w *Weight, o0, lo, hi int) {
	cols := w.cols
	var row []float32
	if w.f32 == nil {
		row = make([]float32, cols)
	}
	for o := lo; o < hi; o++ {
		if w.f32 != nil {
			row = w.f32[(o0+o)*cols : (o0+o+1)*cols]
		} else if err := gguf.Dequantize(w.info.Type, w.raw[(o0+o)*w.rowBytes:(o0+o+1)*w.rowBytes], row); err != nil {
			panic(err)
		}
		for r := 0; r < n; r++ {
			dst[r*ds+o] = dotF32(row, x[r*cols:(r+1)*cols])
		}
	}
}

// MoE: for each row, softmax over the router logits, keep the top-k experts
// (renormalised when NormTopK), and sum their SwiGLU outputs weighted by
// those probabilities. Rows are grouped by expert so each expert's weights
// are read once per batch.
func (b *Backend) MoE(dst, x model.Tensor, m *model.MoE) {
	d, s := ten(dst), ten(x)
	n, dim := s.rows, s.cols
	router, gate, up, down := wt(m.Router), wt(m.Gate), wt(m.Up), wt(m.Down)
	E, K := m.Experts, m.TopK
	ff := gate.rows / E
	logits := make([]float32, n*E)
	b.matmul(logits, E, s.Data, n, router, 0, E)

	rowsOf := make([][]int32, E)
	wOf := make([][]float32, E)
	probs := make([]float64, E)
	idx := make([]int, E)
	ids, wts := make([]int32, K), make([]float32, K)
	for r := 0; r < n; r++ {
		RouteTopK(logits[r*E:(r+1)*E], K, m.NormTopK, probs, idx, ids, wts)
		for j, e := range ids {
			rowsOf[e] = append(rowsOf[e], int32(r))
			wOf[e] = append(wOf[e], wts[j])
		}
	}

	clear(d.Data)
	for e := 0; e < E; e++ {
		rows := rowsOf[e]
		if len(rows) == 0 {
			continue
		}
		k := len(rows)
		xe := make([]float32, k*dim)
		for i, r := range rows {
			copy(xe[i*dim:(i+1)*dim], s.row(int(r)))
		}
		g := make([]float32, k*ff)
		u := make([]float32, k*ff)
		b.matmul(g, ff, xe, k, gate, e*ff, ff)
		b.matmul(u, ff, xe, k, up, e*ff, ff)
		swiglu(g, g, u)
		y := make([]float32, k*dim)
		b.matmul(y, dim, g, k, down, e*dim, dim)
		for i, r := range rows {
			out, yr, p := d.row(int(r)), y[i*dim:(i+1)*dim], wOf[e][i]
			for j := range out {
				out[j] += p * yr[j]
			}
		}
	}
}

// RouteTopK is the MoE router for one row: the softmax of its E = len(lg)
// logits (float64), the k most probable experts into ids and their
// probabilities into wts (renormalised to sum to 1 when norm). probs and
// idx are scratch of at least E entries. Ties go to the lower expert id,
// as torch.topk does in practice (a stable sort). Every host-side MoE
// (this backend's, the GPU backend's host experts) routes through it.
func RouteTopK(lg []float32, k int, norm bool, probs []float64, idx []int, ids []int32, wts []float32) {
	E := len(lg)
	probs, idx = probs[:E], idx[:E]
	mx := float64(slices.Max(lg))
	var sum float64
	for e, v := range lg {
		probs[e] = math.Exp(float64(v) - mx)
		sum += probs[e]
	}
	for e := range idx {
		idx[e] = e
		probs[e] /= sum
	}
	slices.SortStableFunc(idx, func(a, c int) int {
		switch {
		case probs[a] > probs[c]:
			return -1
		case probs[a] < probs[c]:
			return 1
		}
		return 0
	})
	var tot float64
	for _, e := range idx[:k] {
		tot += probs[e]
	}
	for j, e := range idx[:k] {
		p := probs[e]
		if norm {
			p /= tot
		}
		ids[j], wts[j] = int32(e), float32(p)
	}
}
