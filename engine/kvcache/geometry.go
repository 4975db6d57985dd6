package kvcache

import (
	"fmt"
	"math"
)

// Page-size bounds. A page must be a power of two so kernels can split a
// position into (page, slot) with a shift and a mask; 1 is allowed for tests,
// 1024 caps the waste of a half-empty last page per sequence.
const (
	MinPageSize     = 1
	MaxPageSize     = 1024
	DefaultPageSize = 64
)

// SupportedHeadDims are the head dimensions the attention kernels are
// written for (CPU reference handles any; the CUDA kernels need one of
// these, so validation uses the same list for every device).
var SupportedHeadDims = []int{64, 80, 96, 128, 256}

// Geometry accessors shared by every backend. Element indices count codes
// (multiply by DType.ElemBytes for a byte offset); scale indices count
// float32 values.

// RowElems is HeadDim: codes per (token, kv head) row.
func (l Layout) RowElems() int { return l.HeadDim }

// PageElems is the number of codes in one page of one layer's K (or V) pool.
func (l Layout) PageElems() int { return l.KVHeads * l.PageSize * l.HeadDim }

// LayerElems is the number of codes in one layer's K (or V) pool.
func (l Layout) LayerElems() int { return l.Pages * l.PageElems() }

// CodeIndex is the element index of (page, kvHead, slot, 0) in a layer's K
// or V code pool: ((page*KVHeads + kvHead)*PageSize + slot)*HeadDim.
func (l Layout) CodeIndex(page, kvHead, slot int) int {
	return ((page*l.KVHeads+kvHead)*l.PageSize + slot) * l.HeadDim
}

// HasTokenScales reports whether pages carry per-(token, kv head) scales
// for K or V (KHasScales, VHasScales say which).
func (l Layout) HasTokenScales() bool { return l.KHasScales() || l.VHasScales() }

// KHasScales reports whether the K half carries per-(token, kv head) scales.
func (l Layout) KHasScales() bool { return l.DType.IsFP8() && l.Scales == DynamicScales }

// VHasScales reports whether the V half carries per-(token, kv head) scales.
func (l Layout) VHasScales() bool { return l.VType().IsFP8() && l.Scales == DynamicScales }

// LayerScales is the number of float32 scales in one layer's scale pool
// of a half that has them (K or V): Pages*KVHeads*PageSize with dynamic
// FP8 scales, else 0.
func (l Layout) LayerScales() int {
	if !l.HasTokenScales() {
		return 0
	}
	return l.Pages * l.KVHeads * l.PageSize
}

// ScaleIndex is the index of (page, kvHead, slot) in a layer's scale pool:
// (page*KVHeads + kvHead)*PageSize + slot.
func (l Layout) ScaleIndex(page, kvHead, slot int) int {
	return (page*l.KVHeads+kvHead)*l.PageSize + slot
}

// BytesPerToken is the pool bytes one token occupies across all layers.
func (l Layout) BytesPerToken() int {
	return BytesPerTokenKV(l.Layers, l.KVHeads, l.HeadDim, l.DType, l.VType(), l.Scales)
}

// BytesPerPage is the pool bytes of one page id across all layers, K and V.
func (l Layout) BytesPerPage() int64 { return int64(l.BytesPerToken()) * int64(l.PageSize) }

// Tokens is the pool's capacity in tokens.
func (l Layout) Tokens() int { return l.Pages * l.PageSize }

// Validate checks the geometry; errors name the field, the value and what is allowed.
func (l Layout) Validate() error {
	switch {
	case l.Layers <= 0:
		return fmt.Errorf("kv layout: %d attention layers; need at least 1", l.Layers)
	case l.KVHeads <= 0:
		return fmt.Errorf("kv layout: %d kv heads; need at least 1", l.KVHeads)
	case l.HeadDim <= 0:
		return fmt.Errorf("kv layout: head_dim %d; need at least 1", l.HeadDim)
	case l.Pages <= 0:
		return fmt.Errorf("kv layout: %d pages; need at least 1 (raise the memory budget or --kv-tokens)", l.Pages)
	}
	if err := ValidatePageSize(l.PageSize); err != nil {
		return fmt.Errorf("kv layout: page size %d: %w", l.PageSize, err)
	}
	if !l.DType.Valid() || l.DType == Auto {
		return fmt.Errorf("kv layout: dtype %v must be resolved to one of bf16, fp16, fp8_e4m3, fp8_e5m2 (DType.Resolve) before allocating", l.DType)
	}
	if !l.VDType.Valid() {
		return fmt.Errorf("kv layout: V dtype %v is not one of bf16, fp16, fp8_e4m3, fp8_e5m2", l.VDType)
	}
	if l.Scales != DynamicScales && l.Scales != StaticScales {
		return fmt.Errorf("kv layout: unknown scale mode %d", int(l.Scales))
	}
	if l.AnyFP8() && l.Scales == StaticScales {
		n := l.Layers * l.KVHeads
		if len(l.KScale) != n || len(l.VScale) != n {
			return fmt.Errorf("kv layout: static scales need %d values each (layers %d x kv heads %d), have k %d, v %d",
				n, l.Layers, l.KVHeads, len(l.KScale), len(l.VScale))
		}
		for i := range n {
			for _, s := range [2]float32{l.KScale[i], l.VScale[i]} {
				if !(s > 0) || math.IsInf(float64(s), 0) {
					return fmt.Errorf("kv layout: static scale %v at layer %d kv head %d; scales must be positive and finite",
						s, i/l.KVHeads, i%l.KVHeads)
				}
			}
		}
	}
	// Guard the int arithmetic of the offsets.
	if float64(l.Pages)*float64(l.PageElems()) > math.MaxInt32*float64(1<<20) {
		return fmt.Errorf("kv layout: %d pages of %d tokens is too large", l.Pages, l.PageSize)
	}
	return nil
}

// ValidatePageSize checks a --page-size value. The message is meant to
// follow the option name and value ("--page-size 24: must be ...").
func ValidatePageSize(p int) error {
	if p < MinPageSize || p > MaxPageSize || p&(p-1) != 0 {
		return fmt.Errorf("must be a power of two from %d to %d tokens (default %d)",
			MinPageSize, MaxPageSize, DefaultPageSize)
	}
	return nil
}
