package cpu

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// The FP4 kernels (NVFP4, MXFP4) decode E2M1 codes through ggml's doubled
// value table and the block scale through gguf's 256-entry tables, so the
// products match gguf.Dequantize exactly; only the summation order differs.

var kvFP4 = func() (t [16]float32) {
	for i, v := range gguf.KValuesFP4 {
		t[i] = float32(v)
	}
	return t
}()

// fp4x8 returns Σ lo(q[j])·x[j] + hi(q[j])·x[j+half] over 8 bytes.
func fp4x8(q []byte, x []float32, half int) float32 {
	q = q[:8]
	lo, hi := x[:8], x[half:half+8]
	var a0, a1, a2, a3 float32
	for j := 0; j < 8; j += 2 {
		a0 += kvFP4[q[j]&15] * lo[j]
		a1 += kvFP4[q[j]>>4] * hi[j]
		a2 += kvFP4[q[j+1]&15] * lo[j+1]
		a3 += kvFP4[q[j+1]>>4] * hi[j+1]
	}
	return (a0 + a1) + (a2 + a3)
}

func dotNVFP4(w []byte, x, _ []float32) float32 {
	tab := gguf.UE4M3Table()
	var s float32
	for i := 0; i < len(w)/36; i++ {
		b := w[i*36 : i*36+36 : i*36+36]
		xb := x[i*64 : i*64+64 : i*64+64]
		s += tab[b[0]]*fp4x8(b[4:], xb, 8) + tab[b[1]]*fp4x8(b[12:], xb[16:], 8) +
			tab[b[2]]*fp4x8(b[20:], xb[32:], 8) + tab[b[3]]*fp4x8(b[28:], xb[48:], 8)
	}
	return s
}

func dotMXFP4(w []byte, x, _ []float32) float32 {
	tab := gguf.E8M0Table()
	var s float32
	for i := 0; i < len(w)/17; i++ {
		b := w[i*17 : i*17+17 : i*17+17]
		xb := x[i*32 : i*32+32 : i*32+32]
		s += tab[b[0]] * (fp4x8(b[1:], xb, 16) + fp4x8(b[9:], xb[8:], 16))
	}
	return s
}

func init() {
	kernels[gguf.NVFP4] = dotNVFP4
	kernels[gguf.MXFP4] = dotMXFP4
}

func scaleBy(v []float32, s float32) {
	for i := range v {
		v[i] *= s
	}
}

// LoadScaledWeight is LoadWeight with a second-level scale
// (model.ScaledLoader): one value, or one per equal group of output rows
// (the experts of a stacked tensor). MatMul (and so MoE) and Embed apply it
// to their outputs.
func (b *Backend) LoadScaledWeight(info gguf.TensorInfo, raw []byte, scale []float32) (model.Weight, error) {
	mw, err := b.LoadWeight(info, raw)
	if err != nil {
		return nil, err
	}
	w := mw.(*Weight)
	if len(scale) == 0 || w.rows%len(scale) != 0 {
		return nil, fmt.Errorf("cpu: tensor %q: %d second-level scales do not divide its %d rows", info.Name, len(scale), w.rows)
	}
	w.scale = append([]float32(nil), scale...)
	w.scaleRows = w.rows / len(scale)
	return w, nil
}
