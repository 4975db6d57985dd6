package kvcache

import (
	"fmt"
	"math"
)

// BytesPerToken is the exact pool size of one token across all attention
// layers, K and V, data plus per-token scales:
//
//	16-bit:            2 * layers * kvHeads * 2*headDim
//	FP8, dynamic:      2 * layers * kvHeads * (headDim + 4)   (one float32 scale per row)
//	FP8, static:       2 * layers * kvHeads * headDim         (scales are per layer, not per token)
func BytesPerToken(layers, kvHeads, headDim int, d DType, m ScaleMode) int {
	return BytesPerTokenKV(layers, kvHeads, headDim, d, d, m)
}

// BytesPerTokenKV is BytesPerToken with K stored in k and V in v, each
// half counted in its own dtype: layers * kvHeads * (row(k) + row(v)).
func BytesPerTokenKV(layers, kvHeads, headDim int, k, v DType, m ScaleMode) int {
	return layers * kvHeads * (rowBytes(headDim, k, m) + rowBytes(headDim, v, m))
}

// rowBytes is one (token, kv head) row of one half: codes plus, for
// dynamic FP8, its float32 scale.
func rowBytes(headDim int, d DType, m ScaleMode) int {
	row := headDim * d.ElemBytes()
	if d.IsFP8() && m == DynamicScales {
		row += 4
	}
	return row
}

// PoolBytes is the size of the whole pool for l: pages * page size * bytes
// per token, plus the static scale tables (layers * kvHeads float32 for
// each half stored in FP8).
func PoolBytes(l Layout) int64 {
	return int64(l.Pages)*l.BytesPerPage() + staticTableBytes(l)
}

func staticTableBytes(l Layout) int64 {
	if l.Scales != StaticScales {
		return 0
	}
	var halves int64
	for _, d := range [2]DType{l.DType, l.VType()} {
		if d.IsFP8() {
			halves++
		}
	}
	return halves * int64(l.Layers*l.KVHeads*4)
}

// PlanPool sizes the pool for a memory budget: the pages (of l.PageSize
// tokens, geometry and dtype from l; l.Pages is ignored) that fit in
// budget after the weights and the workspace (activations of the largest
// prefill chunk, recurrent state of hybrid models, ...), rounded down to
// whole pages. It fails with a message for the user when not even one
// page fits.
func PlanPool(budget, weights, workspace int64, l Layout) (pages int, err error) {
	l.Pages = 1
	if err := l.Validate(); err != nil {
		return 0, err
	}
	left := budget - weights - workspace - PoolBytes(l) + l.BytesPerPage() // static scale tables, if any
	pages64 := left / l.BytesPerPage()
	if left <= 0 || pages64 < 1 {
		return 0, fmt.Errorf("memory budget %s: weights %s + workspace %s leave %s, less than one KV page (%d tokens of %s = %s); raise --gpu-memory, use a smaller model, or a smaller prefill chunk",
			FormatBytes(budget), FormatBytes(weights), FormatBytes(workspace), FormatBytes(max(0, left)),
			l.PageSize, l.DTypeName(), FormatBytes(l.BytesPerPage()))
	}
	if pages64 > math.MaxInt32 {
		pages64 = math.MaxInt32
	}
	return int(pages64), nil
}

// PagesForTokens is the number of pages that hold tokens tokens (CPU pools
// are sized in tokens: --kv-tokens).
func PagesForTokens(tokens, pageSize int) int { return ceilDiv(tokens, pageSize) }

// CapacityTokens is how many tokens a pool of poolBytes holds for the
// geometry of l with K and V both in dtype d (scale mode m), in whole
// pages. `ftchat bench capacity` and the pool-full message use it.
func CapacityTokens(poolBytes int64, l Layout, d DType, m ScaleMode) int {
	return CapacityTokensKV(poolBytes, l.WithDTypes(d, d), m)
}

// CapacityTokensKV is CapacityTokens for l's own K and V dtypes.
func CapacityTokensKV(poolBytes int64, l Layout, m ScaleMode) int {
	l.Scales = m
	page := l.BytesPerPage()
	if page <= 0 || poolBytes <= 0 {
		return 0
	}
	return int(poolBytes/page) * l.PageSize
}

// FormatBytes prints n with a binary unit (GiB, MiB, KiB) and two decimals.
func FormatBytes(n int64) string {
	switch a := math.Abs(float64(n)); {
	case a >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
