package cpu

import (
	"encoding/binary"
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
)

// FP8_E4M3 weights (Hugging Face per-tensor FP8, kept as codes: W8A16)
// decode each code through gguf's 256-entry table, so every product equals
// gguf.Dequantize's value times x; the per-tensor scale is the weight's
// second-level scale (LoadScaledWeight), applied to the outputs.
//
// FP8_E4M3_B32 weights (per-row or block-scaled FP8) decode the same way
// and multiply each block's dot by its float32 scale: Σ d·c·x is computed
// as d·Σ c·x, one rounding of the scale per block instead of per weight.

func dotFP8E4M3(w []byte, x, _ []float32) float32 {
	tab := gguf.E4M3Table()
	x = x[:len(w)]
	var a0, a1, a2, a3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		a0 += tab[w[i]] * x[i]
		a1 += tab[w[i+1]] * x[i+1]
		a2 += tab[w[i+2]] * x[i+2]
		a3 += tab[w[i+3]] * x[i+3]
	}
	for ; i < len(w); i++ {
		a0 += tab[w[i]] * x[i]
	}
	return (a0 + a1) + (a2 + a3)
}

func dotFP8E4M3B32(w []byte, x, _ []float32) float32 {
	var s float32
	for i := 0; i < len(w)/36; i++ {
		b := w[i*36 : i*36+36 : i*36+36]
		d := math.Float32frombits(binary.LittleEndian.Uint32(b))
		s += d * dotFP8E4M3(b[4:], x[i*32:i*32+32:i*32+32], nil)
	}
	return s
}

func init() {
	kernels[gguf.FP8_E4M3] = dotFP8E4M3
	kernels[gguf.FP8_E4M3_B32] = dotFP8E4M3B32
}
