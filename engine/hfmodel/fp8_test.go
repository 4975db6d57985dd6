package hfmodel_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/internal/testmodel"
)

// TestFP8TensorsStayFP8: the per-tensor FP8 weights of the tiny
// checkpoints (llama_fp8_tensor: every linear layer; the MIXED_PRECISION
// one: attention and GDN projections) are served as FP8_E4M3 codes, one
// byte per weight, with their weight_scale as the F32 <name>.scale, and
// code times scale equals, bit for bit, the F32 tensor llama.cpp's
// converter dequantized into the GGUF made from the same directory. The
// logits of these checkpoints against that GGUF are
// TestCheckpointMatchesConvertedGGUF's (≤ 1e-5 relative, as before).
func TestFP8TensorsStayFP8(t *testing.T) {
	for _, name := range []string{"llama_fp8_tensor", "qwen35moe_nvfp4_mixed"} {
		t.Run(name, func(t *testing.T) {
			hf, err := hfmodel.Open(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			defer hf.Close()
			gf, err := gguf.OpenBytes(name+".gguf", testmodel.Gunzip(t, filepath.Join("testdata", name+".gguf.gz")))
			if err != nil {
				t.Fatal(err)
			}
			defer gf.Close()
			var n, bytes, weights int
			for _, ht := range hf.Tensors {
				if ht.Type != gguf.FP8_E4M3 {
					continue
				}
				n++
				gt, ok := gf.Tensor(ht.Name)
				if !ok || gt.Type != gguf.F32 || !slices.Equal(gt.Dims, ht.Dims) {
					t.Fatalf("%s: converter tensor %v, want F32 %v", ht.Name, gt, ht.Dims)
				}
				codes, err := hf.TensorData(ht)
				if err != nil {
					t.Fatal(err)
				}
				if uint64(len(codes)) != ht.Elements() {
					t.Fatalf("%s: %d bytes for %d weights", ht.Name, len(codes), ht.Elements())
				}
				bytes += len(codes)
				weights += int(ht.Elements())
				scale := []float32{1}
				if st, ok := hf.Tensor(gguf.ScaleTensorName(ht.Name)); ok {
					sb, err := hf.TensorData(st)
					if err != nil {
						t.Fatal(err)
					}
					scale = f32s(sb)
				}
				want, err := gf.TensorData(gt)
				if err != nil {
					t.Fatal(err)
				}
				wv := f32s(want)
				per := len(codes) / len(scale)
				for i, c := range codes {
					got := gguf.E4M3(c) * scale[i/per]
					if math.Float32bits(got) != math.Float32bits(wv[i]) {
						t.Fatalf("%s element %d: code %#02x × %v = %v, converter %v", ht.Name, i, c, scale[i/per], got, wv[i])
					}
				}
			}
			t.Logf("%s: %d FP8_E4M3 tensors, %d weights in %d bytes, equal to the converter's F32 after scaling", name, n, weights, bytes)
			if n == 0 {
				t.Fatal("no tensor kept as FP8_E4M3")
			}
			for _, gt := range gf.Tensors {
				if strings.HasSuffix(gt.Name, "_norm.weight") {
					if ht, _ := hf.Tensor(gt.Name); ht.Type == gguf.FP8_E4M3 {
						t.Errorf("%s is FP8_E4M3; norms stay F32", gt.Name)
					}
				}
			}
		})
	}
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestFP8NaNCode: a per-tensor FP8 weight holding an E4M3 NaN code is
// refused when the tensor is built, naming it, as the dequantizing path did.
func TestFP8NaNCode(t *testing.T) {
	d := copyDir(t, "qwen35moe_nvfp4_mixed")
	p := filepath.Join(d, "model.safetensors")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]struct {
		Offsets []uint64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	const w = "model.layers.1.self_attn.q_proj.weight"
	b[8+n+h[w].Offsets[0]+70] = 0x7F
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor("blk.1.attn_q.weight")
	if ti.Type != gguf.FP8_E4M3 {
		t.Fatalf("blk.1.attn_q.weight is %s, want FP8_E4M3", ti.Type)
	}
	_, err = f.TensorData(ti)
	if err == nil || !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), "NaN code at byte 70") {
		t.Fatalf("error %v, want one naming %s and the NaN code at byte 70", err, w)
	}
}
