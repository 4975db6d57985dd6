package synth

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestNVFP4PresetPlan: at the Qwen3.6-35B-A3B shape every NVFP4 matrix is
// followed by its F32 <name>.scale ([1], or [256] for stacked experts), the
// embeddings stay Q8_0, and the routed-expert bank is the 18.1 GB of
// NVFP4 the background notes derive.
func TestNVFP4PresetPlan(t *testing.T) {
	spec, err := Preset("qwen3.6-35b-a3b", gguf.NVFP4)
	if err != nil {
		t.Fatal(err)
	}
	ts := spec.Tensors()
	var experts uint64
	for i, ti := range ts {
		switch {
		case ti.Name == "token_embd.weight":
			if ti.Type != gguf.Q8_0 {
				t.Errorf("token_embd is %s, want Q8_0", ti.Type)
			}
		case ti.Type == gguf.NVFP4:
			if i+1 >= len(ts) || ts[i+1].Name != gguf.ScaleTensorName(ti.Name) || ts[i+1].Type != gguf.F32 {
				t.Fatalf("%s is not followed by its F32 scale tensor", ti.Name)
			}
			want := uint64(1)
			if len(ti.Dims) == 3 {
				want = ti.Dims[2]
				experts += ti.Bytes()
			}
			if s := ts[i+1]; len(s.Dims) != 1 || s.Dims[0] != want {
				t.Errorf("%s has dims %v, want [%d]", s.Name, s.Dims, want)
			}
		}
	}
	if want := uint64(256 * 3 * 2048 * 512 * 40 / 64 * 36); experts != want || math.Abs(float64(experts)/1e9-18.1) > 0.05 {
		t.Errorf("NVFP4 expert bank %d bytes, want %d (18.1 GB)", experts, want)
	}
}

// TestNVFP4TinyBlocks writes the tiny hybrid MoE preset in NVFP4: no block
// scale is the NaN code 0x7F, the scales span most of the UE4M3 range, and
// weights dequantized times their .scale have the generator's spread.
func TestNVFP4TinyBlocks(t *testing.T) {
	spec, err := Preset("qwen35moe-tiny", gguf.NVFP4)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTo(&buf, spec, 3, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.OpenBytes("tiny.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if ft, _ := f.Uint("general.file_type"); ft != 39 {
		t.Errorf("general.file_type %d, want 39 (MOSTLY_NVFP4)", ft)
	}
	ti, ok := f.Tensor("blk.0.ffn_down_exps.weight")
	if !ok || ti.Type != gguf.NVFP4 {
		t.Fatalf("blk.0.ffn_down_exps.weight: %+v", ti)
	}
	raw, _ := f.TensorData(ti)
	st, _ := f.Tensor(gguf.ScaleTensorName(ti.Name))
	sraw, _ := f.TensorData(st)
	var maxCode byte
	for b := 0; b < len(raw)/36; b++ {
		for s := 0; s < 4; s++ {
			c := raw[36*b+s]
			if c == 0x7F || c&0x80 != 0 {
				t.Fatalf("block %d scale %d is %#x", b, s, c)
			}
			maxCode = max(maxCode, c)
		}
	}
	if maxCode < 0x70 {
		t.Errorf("largest block scale %#x: the second-level scale does not stretch the blocks over UE4M3", maxCode)
	}
	v := make([]float32, ti.Elements())
	if err := gguf.Dequantize(gguf.NVFP4, raw, v); err != nil {
		t.Fatal(err)
	}
	per := len(v) / int(st.Elements())
	var ss float64
	for i, x := range v {
		s := math.Float32frombits(binary.LittleEndian.Uint32(sraw[4*(i/per):]))
		ss += float64(x*s) * float64(x*s)
	}
	if std := math.Sqrt(ss / float64(len(v))); math.Abs(std/WeightStd-1) > 0.1 {
		t.Errorf("dequantized std %.4g, want %.4g within 10%%", std, WeightStd)
	}
}
