package kvcache

// BytesPerToken is the exact pool size of one token across all attention
// layers, K and V, data plus per-token scales:
//
//	16-bit:            2 * layers * kvHeads * 2*headDim
//	FP8, dynamic:      2 * layers * kvHeads * (headDim + 4)   (one float32 scale per row)
//	FP8, static:       2 * layers * kvHeads * headDim         (scales are per layer, not per token)
func BytesPerToken(layers, kvHeads, headDim int, d DType, m ScaleMode) int {
	row := headDim * d.ElemBytes()
	if d.IsFP8() && m == DynamicScales {
		row += 4
	}
	return 2 * layers * kvHeads * row
}

// PoolBytes is the size of the whole pool for l: pages * page size * bytes
// per token, plus the static scale tables (2 * layers * kvHeads float32).
func PoolBytes(l Layout) int64 {
	b := int64(l.Pages) * l.BytesPerPage()
	if l.DType.IsFP8() && l.Scales == StaticScales {
		b += int64(2 * l.Layers * l.KVHeads * 4)
	}
	return b
}
