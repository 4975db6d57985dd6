package hfmodel_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/internal/testmodel"
)

var nvfp4Fixtures = []string{"llama_nvfp4", "qwen3moe_nvfp4", "qwen3moe_nvfp4_ct", "qwen35moe_nvfp4", "qwen35moe_nvfp4_mixed"}

// TestNVFP4TensorsMatchConverter: every NVFP4 weight of the checkpoint is
// served as ggml NVFP4 blocks (not dequantized) whose bytes, and whose
// <name>.scale second-level scales, equal those llama.cpp's converter wrote
// into the GGUF made from the same directory (its .input_scale tensors,
// W4A4 activation scales, are not read). A wrong nibble order, scale byte
// or row permutation changes bytes.
func TestNVFP4TensorsMatchConverter(t *testing.T) {
	for _, name := range nvfp4Fixtures {
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
			var fp4, scales, fp4Bytes, weights uint64
			for _, gt := range gf.Tensors {
				if strings.HasSuffix(gt.Name, ".input_scale") {
					continue
				}
				if gt.Type != gguf.NVFP4 && !strings.HasSuffix(gt.Name, ".scale") {
					continue
				}
				ht, ok := hf.Tensor(gt.Name)
				if !ok {
					t.Errorf("%s: the converter wrote %s (%s), the checkpoint source has no such tensor", name, gt.Name, gt.Type)
					continue
				}
				if ht.Type != gt.Type || !slices.Equal(ht.Dims, gt.Dims) {
					t.Errorf("%s: %s is %s %v, the converter's %s %v", name, gt.Name, ht.Type, ht.Dims, gt.Type, gt.Dims)
					continue
				}
				a, err := hf.TensorData(ht)
				if err != nil {
					t.Fatal(err)
				}
				b, err := gf.TensorData(gt)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s: %s bytes differ from the converter's", name, gt.Name)
				}
				if gt.Type == gguf.NVFP4 {
					fp4++
					fp4Bytes += uint64(len(a))
					weights += gt.Elements()
				} else {
					scales++
				}
			}
			for _, ht := range hf.Tensors {
				if strings.HasSuffix(ht.Name, ".scale") {
					// FP8 weights kept as FP8_E4M3 carry their scale too;
					// the converter dequantized them (TestFP8TensorsStayFP8).
					if w, ok := hf.Tensor(strings.TrimSuffix(ht.Name, ".scale") + ".weight"); ok && w.Type == gguf.FP8_E4M3 {
						continue
					}
					if _, ok := gf.Tensor(ht.Name); !ok {
						t.Errorf("%s: the checkpoint gives %s, which the converter did not write", name, ht.Name)
					}
				}
			}
			t.Logf("%s: %d NVFP4 tensors (%d weights in %d bytes, %.4f B/weight) and %d second-level scales equal the converter's",
				name, fp4, weights, fp4Bytes, float64(fp4Bytes)/float64(weights), scales)
			if fp4 == 0 || scales == 0 {
				t.Fatalf("%s: no NVFP4 tensors (%d) or scales (%d) compared", name, fp4, scales)
			}
		})
	}
}

// TestNVFP4NaNBlockScale: a block scale holding the E4M3 NaN code is
// refused when the tensor is built, naming the scale tensor and the
// block, instead of decoding as zero.
func TestNVFP4NaNBlockScale(t *testing.T) {
	d := copyDir(t, "llama_nvfp4")
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
	const qs = "model.layers.1.self_attn.k_proj.weight_scale"
	b[8+n+h[qs].Offsets[0]+4*3+2] = 0xFF // row 3, columns 32..47
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor("blk.1.attn_k.weight")
	_, err = f.TensorData(ti)
	want := qs + ": block scale of row 3, columns 32..47 is NaN"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestCompressedTensorsMixedPrecision: a compressed-tensors config of
// format "mixed-precision" whose groups are all nvfp4-pack-quantized reads
// as NVFP4 (the tensors equal the plain format's); one with another group
// format is refused.
func TestCompressedTensorsMixedPrecision(t *testing.T) {
	d := copyDir(t, "qwen3moe_nvfp4_ct")
	editConfig(t, d, func(c map[string]any) { c["quantization_config"].(map[string]any)["format"] = "mixed-precision" })
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := hfmodel.Open(filepath.Join("testdata", "qwen3moe_nvfp4_ct"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if len(f.Tensors) != len(g.Tensors) {
		t.Fatalf("%d tensors, plain format %d", len(f.Tensors), len(g.Tensors))
	}
	for _, ti := range g.Tensors {
		a, _ := f.TensorData(ti)
		b, _ := g.TensorData(ti)
		if !bytes.Equal(a, b) {
			t.Fatalf("tensor %s differs", ti.Name)
		}
	}
	editConfig(t, d, func(c map[string]any) {
		c["quantization_config"].(map[string]any)["config_groups"].(map[string]any)["group_0"].(map[string]any)["format"] = "float-quantized"
	})
	if f, err := hfmodel.Open(d); err == nil {
		f.Close()
		t.Fatal("a mixed-precision config with a float-quantized group opened as NVFP4")
	} else if !strings.Contains(err.Error(), `format mixed-precision`) {
		t.Fatalf("error %q does not name the format", err)
	}
}
