// Package kvcache holds the paged key/value cache: page pool, page tables,
// prefix reuse, storage dtypes with their FP8 codecs, and byte accounting.
//
// The storage layout defined here is the contract shared by the CPU
// reference, the CUDA write kernel and both CUDA attention kernels
// (docs/kv-cache.md):
//
//	codes  per attention layer, K and V each: [page][kv_head][slot][head_dim]
//	scales per attention layer, K and V each: [page][kv_head][slot] float32
//	       (dynamic FP8 only; static scales are [layer][kv_head] float32)
//
// K is stored after RoPE.
package kvcache

// DType is the storage type of KV pages.
type DType int

const (
	Auto    DType = iota // resolved to the model's 16-bit compute dtype
	BF16                 // bfloat16, round-to-nearest-even from float32
	F16                  // IEEE half, round-to-nearest-even from float32
	FP8E4M3              // OCP E4M3 (max 448, no infinities), plus scale
	FP8E5M2              // OCP E5M2 (max 57344), plus scale
)

// ScaleMode says where FP8 scales come from.
type ScaleMode int

const (
	// DynamicScales: one float32 per (token, kv head), amax/FP8_MAX, computed at write time.
	DynamicScales ScaleMode = iota
	// StaticScales: fixed per (layer, kv head) k_scale/v_scale from the
	// checkpoint or a calibration file; no per-token scale storage.
	StaticScales
)

// Layout fixes the geometry of a KV pool. Every backend stores exactly this.
type Layout struct {
	Layers   int // attention layers that hold KV (hybrid models: fewer than blocks)
	KVHeads  int
	HeadDim  int
	PageSize int // tokens per page, a power of two
	Pages    int // pages per layer (same page ids in every layer)
	// DType is the dtype of K, and of V unless VDType says otherwise.
	DType DType
	// VDType is V's dtype when it differs from K's (--cache-type-v);
	// Auto (the zero value) means the same as DType. Use VType to read it.
	VDType DType
	Scales ScaleMode
	// KScale/VScale are the static scales, [Layers*KVHeads], used when
	// Scales == StaticScales (each only by a half stored in FP8).
	KScale, VScale []float32
}

// KType is the storage dtype of the K half.
func (l Layout) KType() DType { return l.DType }

// VType is the storage dtype of the V half.
func (l Layout) VType() DType {
	if l.VDType == Auto {
		return l.DType
	}
	return l.VDType
}

// Mixed reports whether K and V are stored in different dtypes.
func (l Layout) Mixed() bool { return l.VType() != l.DType }

// WithDTypes returns l storing K in k and V in v (VDType stays Auto when
// they agree, so single-dtype layouts compare equal however they were made).
func (l Layout) WithDTypes(k, v DType) Layout {
	l.DType, l.VDType = k, Auto
	if v != k {
		l.VDType = v
	}
	return l
}

// AnyFP8 reports whether K or V is stored in FP8.
func (l Layout) AnyFP8() bool { return l.DType.IsFP8() || l.VType().IsFP8() }

// DTypeName names the storage dtypes: one name when K and V agree
// ("fp8_e4m3"), else "k=bf16 v=fp8_e4m3", the form /kvdtype accepts.
func (l Layout) DTypeName() string { return PairName(l.DType, l.VType()) }

// PairName is Layout.DTypeName for a K and a V dtype.
func PairName(k, v DType) string {
	if v == Auto || v == k {
		return k.String()
	}
	return "k=" + k.String() + " v=" + v.String()
}
