package hfmodel_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/hfmodel/hfsynth"
)

// TestBlockFP8CheckpointMatchesDequantized: hfsynth's qwen35moe-tiny as a
// 128x128-block FP8 checkpoint (quant_method fp8, weight_scale_inv; every
// attention, Gated DeltaNet and expert projection FP8) opened as the
// engine does keeps its projections as FP8_E4M3_B32 (1.125 B/weight, no F32
// copy), and opened with that path off (the F32 dequantization ftchat used
// before) gives F32 tensors to which the FP8_E4M3_B32 ones decode bit for
// bit. A CPU prefill of 24 tokens on each gives the same logits within
// max |Δ| / max |logit| ≤ 1e-5: the only difference is where each block's
// scale is rounded into the dot products.
func TestBlockFP8CheckpointMatchesDequantized(t *testing.T) {
	spec, err := synth.Preset("qwen35moe-tiny", gguf.BF16)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := hfsynth.Write(dir, spec, hfsynth.FP8Block, 11, nil); err != nil {
		t.Fatal(err)
	}
	f, err := hfmodel.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	restore := hfmodel.SetKeepBlockFP8(false)
	g, err := hfmodel.Open(dir)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var n int
	var b32, f32 uint64
	for _, ti := range f.Tensors {
		gi, ok := g.Tensor(ti.Name)
		if !ok || !slices.Equal(gi.Dims, ti.Dims) {
			t.Fatalf("%s: dequantized path has %+v", ti.Name, gi)
		}
		if ti.Type != gguf.FP8_E4M3_B32 {
			if gi.Type != ti.Type {
				t.Errorf("%s: %s, dequantized path %s", ti.Name, ti.Type, gi.Type)
			}
			continue
		}
		if gi.Type != gguf.F32 {
			t.Fatalf("%s: dequantized path gives %s, want F32", ti.Name, gi.Type)
		}
		n++
		b32 += ti.Bytes()
		f32 += gi.Bytes()
		raw, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := g.TensorData(gi)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(raw)) != ti.Bytes() {
			t.Fatalf("%s: %d bytes, want %d", ti.Name, len(raw), ti.Bytes())
		}
		dq := make([]float32, ti.Elements())
		if err := gguf.Dequantize(ti.Type, raw, dq); err != nil {
			t.Fatal(err)
		}
		for i, v := range dq {
			if w := binary.LittleEndian.Uint32(ref[4*i:]); math.Float32bits(v) != w {
				t.Fatalf("%s element %d: %v, dequantized path %v", ti.Name, i, v, math.Float32frombits(w))
			}
		}
	}
	if n < 30 {
		t.Fatalf("%d FP8_E4M3_B32 tensors; want every projection (attention, GDN, experts)", n)
	}
	t.Logf("%d FP8_E4M3_B32 tensors: %d bytes (%.3f B/weight), %d as F32", n, b32, float64(b32)/float64(f32/4), f32)

	toks := make([]int32, 24)
	for i := range toks {
		toks[i] = int32(7 + 13*i)
	}
	a, _ := logits(t, f, toks)
	b, _ := logits(t, g, toks)
	var d, mx float64
	for i := range b {
		if math.IsNaN(float64(a[i])) || math.IsInf(float64(a[i]), 0) {
			t.Fatalf("logit %d is %v", i, a[i])
		}
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		mx = math.Max(mx, math.Abs(float64(b[i])))
	}
	if mx == 0 || d/mx > 1e-5 {
		t.Fatalf("logits: max |Δ| %.3g of max |logit| %.3g (%.3g relative; tol 1e-5)", d, mx, d/mx)
	}
	t.Logf("logits: max |Δ| / max |logit| = %.3g (tol 1e-5)", d/mx)
}
