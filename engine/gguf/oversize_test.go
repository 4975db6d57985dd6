package gguf

import (
	"math"
	"strings"
	"testing"
)

// TestTensorSizeOverflowRefusedAtOpen guards against tensor infos whose byte
// size wraps around 2^64 to something that fits the file (Open used to
// accept them and LoadWeight then panicked), and against dims no file can
// hold hidden behind a zero dim.
func TestTensorSizeOverflowRefusedAtOpen(t *testing.T) {
	cases := []struct {
		name string
		t    rawTensor
	}{
		// 4 * (2^62 + 16) = 2^64 + 64: wraps to the 64 bytes present.
		{"f32 wraps to 64 bytes", rawTensor{"w", []uint64{1<<62 + 16}, uint32(F32), 0}},
		{"f32 2-D wraps", rawTensor{"w", []uint64{2, 1<<61 + 8}, uint32(F32), 0}},
		{"f16 wraps", rawTensor{"w", []uint64{1<<63 + 32}, uint32(F16), 0}},
		{"q8_0 wraps", rawTensor{"w", []uint64{32, 1 << 59}, uint32(Q8_0), 0}},
		{"f32 exact 2^64", rawTensor{"w", []uint64{1 << 31, 1 << 31}, uint32(F32), 0}},
		{"huge dim behind a zero", rawTensor{"w", []uint64{0, 1 << 60}, uint32(F32), 0}},
		{"huge dim, unknown type", rawTensor{"w", []uint64{1 << 50}, 99, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := craft(3, nil, []rawTensor{c.t}, 32, 64)
			_, err := OpenBytes("bad.gguf", b)
			if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), "bad.gguf") || !strings.Contains(err.Error(), `"w"`) {
				t.Errorf("error %v, want one naming bad.gguf, tensor \"w\" saying it is corrupt", err)
			}
		})
	}
}

func TestTensorBytesSaturates(t *testing.T) {
	cases := []struct {
		ti          TensorInfo
		elems, size uint64
	}{
		{TensorInfo{Dims: []uint64{1<<62 + 16}, Type: F32}, 1<<62 + 16, math.MaxUint64},
		{TensorInfo{Dims: []uint64{1 << 40, 1 << 40}, Type: F32}, math.MaxUint64, math.MaxUint64},
		{TensorInfo{Dims: []uint64{32, 2}, Type: Q8_0}, 64, 68},
		{TensorInfo{Dims: []uint64{0, 1 << 60}, Type: F32}, 0, 0},
	}
	for _, c := range cases {
		if e, n := c.ti.Elements(), c.ti.Bytes(); e != c.elems || n != c.size {
			t.Errorf("%v %s: Elements %d Bytes %d, want %d %d", c.ti.Dims, c.ti.Type, e, n, c.elems, c.size)
		}
	}
}
