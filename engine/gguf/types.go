// Package gguf reads GGUF model files (v2, v3) over mmap and knows the
// block formats of the tensor types ftchat supports.
package gguf

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
)

// Type is a ggml tensor type as stored in GGUF tensor infos.
type Type uint32

const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
	// MXFP4 (gpt-oss): 32 E2M1 elements sharing one E8M0 scale byte.
	MXFP4 Type = 39
	// NVFP4: 64 E2M1 elements, four UE4M3 scales (one per 16). The
	// per-tensor float32 second-level scale is a separate <name>.scale
	// tensor (see ScaleTensorName).
	NVFP4 Type = 40

	// FP8_E4M3 is not a GGUF type but ftchat's in-memory form of a Hugging
	// Face per-tensor FP8 E4M3 weight (W8A16): 32 E4M3 bytes per 32-element
	// block, no block scale; the per-tensor scale is the F32 <name>.scale
	// tensor, as for NVFP4. Its id lies far above ggml's (consecutive small
	// integers), and GGUF files claiming it are refused (Internal).
	FP8_E4M3 Type = 1 << 16
	// FP8_E4M3_B32 is ftchat's in-memory form of a Hugging Face FP8 E4M3
	// weight with per-row or per-block scales (W8A16, engine/gguf/fp8.go):
	// 36-byte blocks of a float32 scale and 32 E4M3 codes, the value
	// code × scale. Internal, like FP8_E4M3.
	FP8_E4M3_B32 Type = 1<<16 + 1
)

// Internal reports whether t is one of ftchat's in-memory types, which no
// GGUF file may hold (the reader refuses them, the writer does not write them).
func (t Type) Internal() bool { return t == FP8_E4M3 || t == FP8_E4M3_B32 }

var typeInfo = map[Type]struct {
	name       string
	blockElems int
	blockBytes int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20},
	Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110},
	Q4_K: {"Q4_K", 256, 144}, Q5_K: {"Q5_K", 256, 176},
	Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
	MXFP4: {"MXFP4", 32, 17}, NVFP4: {"NVFP4", 64, 36},
	FP8_E4M3: {"FP8_E4M3", 32, 32}, FP8_E4M3_B32: {"FP8_E4M3_B32", 32, 36},
}

func (t Type) String() string {
	if ti, ok := typeInfo[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the block geometry of t is known.
func (t Type) Known() bool { _, ok := typeInfo[t]; return ok }

// BlockElems is the number of elements in one block (1 for float types).
func (t Type) BlockElems() int { return typeInfo[t].blockElems }

// BlockBytes is the size of one block in bytes.
func (t Type) BlockBytes() int { return typeInfo[t].blockBytes }

// TensorInfo describes one tensor of a GGUF file. Dims[0] (ne0) is the
// fastest-varying (row length) dimension, as in ggml.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   Type
	Offset uint64 // relative to the start of the data section
}

// Elements is the product of the dims, saturated at math.MaxUint64: a
// corrupt file's dims must not wrap around to a small count.
func (ti TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range ti.Dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return math.MaxUint64
		}
		n = lo
	}
	return n
}

// Bytes is the stored size of the tensor, saturated at math.MaxUint64 so
// that bounds checks against the file size fail instead of wrapping.
func (ti TensorInfo) Bytes() uint64 {
	n, ok := ti.byteSize()
	if !ok {
		return math.MaxUint64
	}
	return n
}

// byteSize is the stored size of the tensor; ok is false when it does not
// fit in 64 bits.
func (ti TensorInfo) byteSize() (n uint64, ok bool) {
	be := uint64(ti.Type.BlockElems())
	if be == 0 {
		return 0, true
	}
	e := ti.Elements()
	if e == math.MaxUint64 {
		return 0, false
	}
	hi, lo := bits.Mul64(e/be, uint64(ti.Type.BlockBytes()))
	return lo, hi == 0
}

// ParseType returns the GGUF Type named s (case-insensitive), e.g. "q4_k",
// "F16"; internal types are not GGUF types and are not accepted.
func ParseType(s string) (Type, error) {
	for t, ti := range typeInfo {
		if !t.Internal() && strings.EqualFold(ti.name, s) {
			return t, nil
		}
	}
	names := make([]string, 0, len(typeInfo))
	for t, ti := range typeInfo {
		if !t.Internal() {
			names = append(names, ti.name)
		}
	}
	sort.Strings(names)
	return 0, fmt.Errorf("gguf: unknown tensor type %q (known: %s)", s, strings.Join(names, ", "))
}

// RowSize is the stored size in bytes of n elements of type t; n must be a
// multiple of BlockElems.
func (t Type) RowSize(n int) int {
	be := t.BlockElems()
	if be == 0 {
		return 0
	}
	return n / be * t.BlockBytes()
}
