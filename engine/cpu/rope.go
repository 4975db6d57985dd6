package cpu

import (
	"math"

	"github.com/ftchat/ftchat/engine/model"
)

// RoPE rotates every head of each row of x by the angles of pos[row].
func (b *Backend) RoPE(x model.Tensor, pos []int32, headDim int, r model.Rope) {
	s := ten(x)
	freqs := r.InvFreqs()
	b.pool.parallel(s.rows, 8, func(lo, hi int) {
		cs := make([]float32, 2*len(freqs))
		for row := lo; row < hi; row++ {
			ropeRow(s.row(row), pos[row], headDim, r, freqs, cs)
		}
	})
}

// ropeRow rotates one row in place; cs is scratch of 2*len(freqs).
func ropeRow(x []float32, pos int32, headDim int, r model.Rope, freqs []float64, cs []float32) {
	half := len(freqs)
	for i, f := range freqs {
		s, c := math.Sincos(float64(pos) * f)
		cs[2*i], cs[2*i+1] = float32(c), float32(s)
	}
	for h := 0; h+headDim <= len(x); h += headDim {
		v := x[h : h+headDim]
		if r.NeoX {
			for i := 0; i < half; i++ {
				c, s := cs[2*i], cs[2*i+1]
				a, b := v[i], v[i+half]
				v[i], v[i+half] = a*c-b*s, a*s+b*c
			}
		} else {
			for i := 0; i < half; i++ {
				c, s := cs[2*i], cs[2*i+1]
				a, b := v[2*i], v[2*i+1]
				v[2*i], v[2*i+1] = a*c-b*s, a*s+b*c
			}
		}
	}
}
