package hfmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/safetensors"
)

// st is one tensor of a test shard.
type st struct {
	dt    safetensors.DType
	shape []uint64
	data  []byte
}

func writeShard(t *testing.T, dir string, ts map[string]st) {
	t.Helper()
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	hdr := map[string]any{}
	var data []byte
	for _, n := range names {
		x := ts[n]
		hdr[n] = map[string]any{"dtype": x.dt, "shape": x.shape, "data_offsets": []int{len(data), len(data) + len(x.data)}}
		data = append(data, x.data...)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), append(append(out, js...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fp8Source adds an F8_E4M3 weight of shape and its weight_scale_inv of
// scaleShape (F32, or BF16 when bf16) to ts: random codes without the NaN
// codes, scales spread over 2^-30 .. 2^6.
func fp8Source(r *rand.Rand, ts map[string]st, name string, shape, scaleShape []uint64, bf16 bool) {
	n, ns := 1, 1
	for _, d := range shape {
		n *= int(d)
	}
	for _, d := range scaleShape {
		ns *= int(d)
	}
	codes := make([]byte, n)
	for i := range codes {
		if codes[i] = byte(r.Uint32()); gguf.E4M3IsNaN(codes[i]) {
			codes[i] ^= 1
		}
	}
	ts[name] = st{safetensors.F8E4M3, shape, codes}
	var sb []byte
	for range ns {
		v := float32(math.Ldexp(1+r.Float64(), r.IntN(37)-30))
		if bf16 {
			sb = binary.LittleEndian.AppendUint16(sb, gguf.F32ToBF16(v))
		} else {
			sb = binary.LittleEndian.AppendUint32(sb, math.Float32bits(v))
		}
	}
	dt := safetensors.F32
	if bf16 {
		dt = safetensors.BF16
	}
	ts[name+"_scale_inv"] = st{dt, scaleShape, sb}
}

// blockMapper writes ts into a checkpoint directory and returns a mapper
// over it with config c (FP8 declared).
func blockMapper(t *testing.T, ts map[string]st, c *hfConfig) *mapper {
	t.Helper()
	dir := t.TempDir()
	writeShard(t, dir, ts)
	ck, err := openCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.close() })
	c.fp8 = true
	return &mapper{ck: ck, c: c, specs: map[string]spec{}}
}

// serve checks spec s and returns its tensor info and bytes.
func serve(t *testing.T, m *mapper, s spec) (gguf.TensorInfo, []byte) {
	t.Helper()
	ti, err := m.check(s)
	if err != nil {
		t.Fatal(err)
	}
	m.specs[s.name] = s
	b, err := m.data(ti)
	if err != nil {
		t.Fatal(err)
	}
	return ti, b
}

// TestBlockFP8Transforms: for every transform a block- or row-scaled FP8
// weight can go through (as is, llama's Q/K row permutation, Qwen3.5's
// value-head row and column reorders, experts stacked with per-tensor,
// per-row and block scales mixed, qwen3next's qkvz split, the fused
// gate/up halves, a BF16 scale), the FP8_E4M3_B32 tensor decodes bit for
// bit to the F32 tensor the dequantizing path builds, with the same dims:
// every row and block carries its own scale wherever the transform moves
// it. Block scales of a column size that is not a multiple of 32 keep the
// F32 path.
func TestBlockFP8Transforms(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	gdn := func() *hfConfig {
		return &hfConfig{LinearNumKeyHeads: 2, LinearNumValueHeads: 4, LinearKeyHeadDim: 32, LinearValueHeadDim: 32}
	}
	for _, tc := range []struct {
		name   string
		block  [2]int
		c      *hfConfig
		s      spec
		scales [][]uint64 // per source
		bf16   bool
		want   gguf.Type
	}{
		{name: "asIs blocks", block: [2]int{16, 32}, s: spec{shape: u(70, 96), x: asIs}, scales: [][]uint64{u(5, 3)}, want: gguf.FP8_E4M3_B32},
		{name: "asIs rows", s: spec{shape: u(40, 64), x: asIs}, scales: [][]uint64{u(40)}, want: gguf.FP8_E4M3_B32},
		{name: "asIs rows [out,1] bf16", s: spec{shape: u(40, 64), x: asIs}, scales: [][]uint64{u(40, 1)}, bf16: true, want: gguf.FP8_E4M3_B32},
		{name: "permQK", block: [2]int{16, 32}, s: spec{shape: u(64, 64), x: permQK, heads: 2}, scales: [][]uint64{u(4, 2)}, want: gguf.FP8_E4M3_B32},
		{name: "vRows qkv", block: [2]int{128, 128}, c: gdn(), s: spec{shape: u(256, 64), x: vRows}, scales: [][]uint64{u(2, 1)}, want: gguf.FP8_E4M3_B32},
		{name: "vRows beta", block: [2]int{2, 32}, c: gdn(), s: spec{shape: u(4, 64), x: vRows}, scales: [][]uint64{u(2, 2)}, want: gguf.FP8_E4M3_B32},
		{name: "vCols", block: [2]int{16, 32}, c: gdn(), s: spec{shape: u(48, 128), x: vCols}, scales: [][]uint64{u(3, 4)}, want: gguf.FP8_E4M3_B32},
		{name: "stackExp mixed", block: [2]int{16, 32}, s: spec{shape: u(32, 64), x: stackExp}, scales: [][]uint64{u(1), u(32), u(2, 2)}, want: gguf.FP8_E4M3_B32},
		{name: "splitQKV", block: [2]int{128, 128}, c: gdn(), s: spec{shape: u(384, 64), x: splitQKV}, scales: [][]uint64{u(3, 1)}, want: gguf.FP8_E4M3_B32},
		{name: "splitZ", block: [2]int{128, 128}, c: gdn(), s: spec{shape: u(384, 64), x: splitZ}, scales: [][]uint64{u(3, 1)}, want: gguf.FP8_E4M3_B32},
		{name: "splitGate", s: spec{shape: u(2, 64, 64), x: splitGate}, scales: [][]uint64{u(2, 64, 1)}, want: gguf.FP8_E4M3_B32},
		{name: "splitUp", s: spec{shape: u(2, 64, 64), x: splitUp}, scales: [][]uint64{u(2, 64, 1)}, want: gguf.FP8_E4M3_B32},
		{name: "16-column blocks stay F32", block: [2]int{16, 16}, s: spec{shape: u(32, 64), x: asIs}, scales: [][]uint64{u(2, 4)}, want: gguf.F32},
		{name: "rows not whole runs stay F32", s: spec{shape: u(8, 48), x: asIs}, scales: [][]uint64{u(8)}, want: gguf.F32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c == nil {
				c = &hfConfig{}
			}
			c.fp8Block = tc.block
			ts := map[string]st{}
			s := tc.s
			s.name = "blk.0.w.weight"
			for i, ss := range tc.scales {
				n := fmt.Sprintf("model.layers.0.w%d.weight", i)
				fp8Source(r, ts, n, s.shape, ss, tc.bf16)
				s.from = append(s.from, n)
			}
			m := blockMapper(t, ts, c)
			ti, got := serve(t, m, s)
			if ti.Type != tc.want {
				t.Fatalf("type %s, want %s", ti.Type, tc.want)
			}
			keepBlockFP8 = false
			defer func() { keepBlockFP8 = true }()
			fi, ref := serve(t, m, s)
			if fi.Type != gguf.F32 || !slices.Equal(fi.Dims, ti.Dims) {
				t.Fatalf("dequantized path: %s %v, want F32 %v", fi.Type, fi.Dims, ti.Dims)
			}
			if tc.want == gguf.F32 {
				return
			}
			if uint64(len(got)) != ti.Bytes() {
				t.Fatalf("%d bytes, want %d", len(got), ti.Bytes())
			}
			dq := make([]float32, ti.Elements())
			if err := gguf.Dequantize(gguf.FP8_E4M3_B32, got, dq); err != nil {
				t.Fatal(err)
			}
			for i, v := range dq {
				w := math.Float32frombits(binary.LittleEndian.Uint32(ref[4*i:]))
				if math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("element %d (row %d col %d): %v, dequantized path %v", i, i/int(ti.Dims[0]), i%int(ti.Dims[0]), v, w)
				}
			}
		})
	}
}

// TestBlockFP8Refusals: a NaN code and a non-finite block scale are refused
// when the tensor is built, naming the tensor (and the byte of the code).
func TestBlockFP8Refusals(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	for _, tc := range []struct {
		name string
		edit func(ts map[string]st)
		want []string
	}{
		{"NaN code", func(ts map[string]st) { ts["model.layers.0.w0.weight"].data[70] = 0xFF }, []string{"model.layers.0.w0.weight", "NaN code at byte 70"}},
		{"Inf scale", func(ts map[string]st) {
			binary.LittleEndian.PutUint32(ts["model.layers.0.w0.weight_scale_inv"].data[4:], math.Float32bits(float32(math.Inf(1))))
		}, []string{"model.layers.0.w0.weight", "+Inf at element 1", "finite"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := map[string]st{}
			fp8Source(r, ts, "model.layers.0.w0.weight", u(32, 64), u(1, 2), false)
			tc.edit(ts)
			m := blockMapper(t, ts, &hfConfig{fp8Block: [2]int{128, 32}})
			s := spec{name: "blk.0.w.weight", from: []string{"model.layers.0.w0.weight"}, shape: u(32, 64)}
			ti, err := m.check(s)
			if err != nil || ti.Type != gguf.FP8_E4M3_B32 {
				t.Fatalf("check: %v, %v", ti, err)
			}
			m.specs[s.name] = s
			_, err = m.data(ti)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("error %v, want one containing %q", err, w)
				}
			}
		})
	}
}
