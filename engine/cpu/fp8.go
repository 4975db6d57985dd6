package cpu

import "github.com/ftchat/ftchat/engine/gguf"

// FP8_E4M3 weights (Hugging Face per-tensor FP8, kept as codes: W8A16)
// decode each code through gguf's 256-entry table, so every product equals
// gguf.Dequantize's value times x; the per-tensor scale is the weight's
// second-level scale (LoadScaledWeight), applied to the outputs.

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

func init() { kernels[gguf.FP8_E4M3] = dotFP8E4M3 }
