package hfmodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/safetensors"
)

// FP8 E4M3 weights with per-row scales (compressed-tensors strategy
// "channel") or block scales (quant_method fp8 weight_block_size, DeepSeek
// and Qwen FP8: weight_scale_inv [ceil(out/b0), ceil(in/b1)]) stay 8-bit in
// memory as gguf.FP8_E4M3_B32 (W8A16, 1.125 B/weight instead of 4 as F32):
// each 32-element run of a row becomes one 36-byte block holding the
// float32 scale of its row or block and its 32 codes, unchanged. The scale
// is looked up per row, so row permutations (llama Q/K, Qwen3.5 value
// heads, qwen3next's qkvz split, the fused gate/up halves) move each row
// with its own scale even when they cross the b0-row blocks; the column
// reorder of ssm_out moves whole 32-element blocks. The value of every
// weight is code × scale in float32, as the dequantizing path computes it.
// A block scale applies to whole 32-element runs only when b1 is a multiple
// of 32; other block sizes, rows that are not whole runs, E5M2 and the
// tensors ftchat keeps in F32 are still dequantized (dequantFP8).

// keepBlockFP8 is false only in tests that compare with the dequantized path.
var keepBlockFP8 = true

const fp8bBlockBytes = 36 // gguf.FP8_E4M3_B32: float32 scale, 32 codes

// keepsBlockFP8 reports whether spec s can be served as FP8_E4M3_B32: a
// matrix of E4M3 sources with rows of whole 32-element runs, a transform
// that moves whole rows (or whole 32-column blocks), and scales that are
// constant over each run.
func (m *mapper) keepsBlockFP8(s spec) bool {
	if !keepBlockFP8 || s.f32 || len(s.shape) < 2 || s.shape[len(s.shape)-1]%32 != 0 {
		return false
	}
	switch s.x {
	case asIs, permQK, vRows, stackExp, splitQKV, splitZ, splitGate, splitUp:
	case vCols:
		if m.c.LinearValueHeadDim%32 != 0 {
			return false
		}
	default:
		return false
	}
	for _, n := range s.from {
		t := m.ck.tensors[n]
		if t.t.DType != safetensors.F8E4M3 {
			return false
		}
		sc, err := m.scaleOf(n, t.t)
		if err != nil || m.scaleKind(t.t.Shape, sc.t.Shape) == 2 && m.block()[1]%32 != 0 {
			return false
		}
	}
	return true
}

// buildFP8B32 returns the FP8_E4M3_B32 blocks of spec s, built straight
// from the mapped codes: rows are picked (and blocks within a row
// reordered) as the transform says, no intermediate copy.
func (m *mapper) buildFP8B32(s spec) ([]byte, error) {
	sh := s.shape
	cols := int(sh[len(sh)-1])
	rows := 1
	for _, d := range sh[:len(sh)-1] {
		rows *= int(d)
	}
	var pick, blocks []int // nil: all rows, blocks in order
	switch s.x {
	case asIs, stackExp:
	case permQK:
		pick = qkPerm(rows, s.heads)
	case vRows:
		pick = m.vRowPerm(rows)
	case splitQKV, splitZ:
		pick = m.qkvzRows(s.x == splitZ)
	case splitGate, splitUp:
		E, ff2 := int(sh[0]), int(sh[1])
		for e := 0; e < E; e++ {
			lo := e * ff2
			if s.x == splitUp {
				lo += ff2 / 2
			}
			for r := lo; r < lo+ff2/2; r++ {
				pick = append(pick, r)
			}
		}
	case vCols:
		// The column permutation moves groups of linear_value_head_dim
		// (a multiple of 32) columns: block i takes the block its first
		// column comes from.
		cp := m.rowPerm(cols, 0, m.c.LinearValueHeadDim)
		blocks = make([]int, cols/32)
		for i := range blocks {
			blocks[i] = cp[32*i] / 32
		}
	default:
		return nil, fmt.Errorf("transform %d is not implemented for FP8_E4M3_B32", s.x)
	}
	n := rows
	if pick != nil {
		n = len(pick)
	}
	out := make([]byte, 0, len(s.from)*n*cols/32*fp8bBlockBytes)
	for _, name := range s.from {
		var err error
		if out, err = m.appendFP8B32(out, name, pick, blocks); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendFP8B32 appends to dst the FP8_E4M3_B32 rows of checkpoint tensor
// name: its rows pick (all when nil), and in each row the source blocks
// blocks (all in order when nil). A NaN code or a non-finite scale is
// refused, naming the tensor.
func (m *mapper) appendFP8B32(dst []byte, name string, pick, blocks []int) ([]byte, error) {
	t := m.ck.tensors[name]
	sc, scale, err := m.scaleValues(name, t.t)
	if err != nil {
		return nil, err
	}
	codes, err := t.f.Data(t.t)
	if err != nil {
		return nil, err
	}
	for i, v := range scale {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%s: FP8 scale of %s holds %v at element %d; want finite numbers", sc.f.Path, name, v, i)
		}
	}
	sh := t.t.Shape
	cols := int(sh[len(sh)-1])
	rows := len(codes) / cols
	nb := cols / 32
	kind := m.scaleKind(sh, sc.t.Shape)
	b := m.block()
	sCols := 0
	if kind == 2 {
		sCols = int(sc.t.Shape[1])
	}
	scaleAt := func(r, blk int) float32 {
		switch kind {
		case 0:
			return scale[0]
		case 1:
			return scale[r]
		}
		return scale[(r/b[0])*sCols+blk*32/b[1]]
	}
	n := rows
	if pick != nil {
		n = len(pick)
	}
	at := len(dst)
	dst = slices.Grow(dst, n*nb*fp8bBlockBytes)[:at+n*nb*fp8bBlockBytes]
	for i := 0; i < n; i++ {
		r := i
		if pick != nil {
			r = pick[i]
		}
		for j := 0; j < nb; j++ {
			sj := j
			if blocks != nil {
				sj = blocks[j]
			}
			src := codes[r*cols+32*sj : r*cols+32*sj+32]
			for k, c := range src {
				if gguf.E4M3IsNaN(c) {
					return nil, fmt.Errorf("%s: FP8 tensor %s holds a NaN code at byte %d", t.f.Path, name, r*cols+32*sj+k)
				}
			}
			o := dst[at+(i*nb+j)*fp8bBlockBytes:]
			binary.LittleEndian.PutUint32(o, math.Float32bits(scaleAt(r, sj)))
			copy(o[4:fp8bBlockBytes], src)
		}
	}
	return dst, nil
}
