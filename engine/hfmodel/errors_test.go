package hfmodel_test

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/hfmodel"
)

// copyDir copies testdata/<arch> into a temporary directory.
func copyDir(t *testing.T, arch string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), arch)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", arch))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editHeader rewrites a safetensors file's header JSON in place.
func editHeader(t *testing.T, path string, edit func(map[string]map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]map[string]any
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	js, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	out = append(append(out, js...), b[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusals: each broken directory gets one message naming the
// file or tensor and the problem.
func TestOpenRefusals(t *testing.T) {
	const q = "model.layers.0.self_attn.q_proj.weight"
	const qs = "model.layers.0.self_attn.q_proj.weight_scale"
	for _, c := range []struct {
		name   string
		arch   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"no config", "llama", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "config.json")) },
			[]string{"config.json is missing"}},
		{"no weights", "llama", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "model.safetensors")) },
			[]string{"no model.safetensors or model.safetensors.index.json"}},
		{"truncated shard", "llama", func(t *testing.T, d string) {
			p := filepath.Join(d, "model.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-100)
		}, []string{"model.safetensors", "truncated"}},
		{"missing shard", "qwen3", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "model-00002-of-00003.safetensors")) },
			[]string{"names shard model-00002-of-00003.safetensors, which is missing"}},
		{"dtype/size mismatch", "llama", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { h[q]["dtype"] = "F32" })
		}, []string{q, "dtype/shape mismatch"}},
		{"unsupported dtype", "llama", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
				h[q]["dtype"], h[q]["shape"] = "I32", []int{16, 16}
			})
		}, []string{q, "dtype I32", "supported: F32, F16, BF16"}},
		{"fp8 without scale", "llama", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
				h[q]["dtype"], h[q]["shape"] = "F8_E4M3", []int{64, 16}
			})
		}, []string{q, "has no " + q + "_scale_inv or " + q + "_scale"}},
		{"fp8 scale shape", "qwen3moe_fp8_block", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
				s := h[q+"_scale_inv"]
				s["shape"], s["data_offsets"] = []int{2, 1}, []any{s["data_offsets"].([]any)[0], s["data_offsets"].([]any)[0].(float64) + 8}
			})
		}, []string{q + "_scale_inv has shape [2 1]", "fits neither per-tensor, per-row nor [8 8]-block"}},
		{"fp8 without config", "llama_fp8_tensor", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { delete(c, "quantization_config") })
		}, []string{q, "is F8_E4M3 but config.json has no FP8 quantization_config"}},
		{"shape vs config", "llama", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["intermediate_size"] = 64 })
		}, []string{"model.layers.0.mlp.gate_proj.weight", "has shape [32 16] but config.json implies [64 16]"}},
		{"missing tensor", "qwen3moe", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
				delete(h, "model.layers.1.mlp.experts.3.up_proj.weight")
			})
		}, []string{"tensor model.layers.1.mlp.experts.3.up_proj.weight is missing"}},
		{"nvfp4 without block scales", "llama_nvfp4", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { delete(h, qs) })
		}, []string{"NVFP4 tensor " + q + " has no block scales " + qs}},
		{"nvfp4 block scale shape", "llama_nvfp4", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { h[qs]["shape"] = []int{32, 8} })
		}, []string{qs + " have shape [32 8]; want [64 4]"}},
		{"nvfp4 block scale dtype", "llama_nvfp4", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { h[qs]["dtype"] = "U8" })
		}, []string{qs + " have dtype U8; want F8_E4M3"}},
		{"nvfp4 code shape", "llama_nvfp4", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { h[q]["shape"] = []int{32, 64} })
		}, []string{"NVFP4 tensor " + q + " has shape [32 64] but config.json implies [64 32] codes"}},
		{"nvfp4 without second-level scale", "qwen3moe_nvfp4_ct", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
				delete(h, "model.layers.1.mlp.experts.2.down_proj.weight_global_scale")
			})
		}, []string{"model.layers.1.mlp.experts.2.down_proj.weight_packed has neither", "weight_scale_2 (ModelOpt) nor", "weight_global_scale (compressed-tensors)"}},
		{"nvfp4 second-level scale dtype", "llama_nvfp4", func(t *testing.T, d string) {
			editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) { h[q+"_scale_2"]["dtype"] = "I32" })
		}, []string{q + "_scale_2 is I32 []; want one F32, F16 or BF16 value"}},
		{"nvfp4 without config", "qwen3moe_nvfp4", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { delete(c, "quantization_config") })
			os.Remove(filepath.Join(d, "hf_quant_config.json"))
		}, []string{"is U8 (packed NVFP4?) but neither config.json's quantization_config nor hf_quant_config.json declares NVFP4"}},
		{"nvfp4 group size", "qwen3moe_nvfp4", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["quantization_config"].(map[string]any)["group_size"] = 32 })
		}, []string{"group_size 32 (NVFP4 is 16)"}},
		{"bad hf_quant_config.json", "llama_nvfp4", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "hf_quant_config.json"), []byte(`{"producer": {"name": "modelopt"}}`), 0o644)
		}, []string{"hf_quant_config.json: no \"quantization\" object"}},
		{"qwen3next qkvz shape", "qwen3next", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["linear_value_head_dim"] = 16 })
		}, []string{"model.layers.0.linear_attn.in_proj_qkvz.weight has shape [96 16] but config.json implies [160 16]", "dtype/shape mismatch"}},
		{"qwen3next dense layers", "qwen3next", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["mlp_only_layers"] = []int{1} })
		}, []string{"dense layers among the MoE ones", "not supported"}},
		{"unknown model type", "llama", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["model_type"] = "gpt_neox" })
		}, []string{`model_type "gpt_neox" is not supported`}},
		{"mistral sliding window", "llama", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["model_type"], c["sliding_window"] = "mistral", 1024 })
		}, []string{"sliding_window 1024: sliding-window attention is not supported"}},
		{"qwen2 sliding window", "qwen2", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["use_sliding_window"] = true })
		}, []string{"use_sliding_window: sliding-window attention is not supported"}},
		{"quantized", "llama", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["quantization_config"] = map[string]any{"quant_method": "gptq"} })
		}, []string{`quant_method "gptq"`, "not read yet"}},
		{"bad config value", "llama", func(t *testing.T, d string) {
			editConfig(t, d, func(c map[string]any) { c["num_attention_heads"] = 0 })
		}, []string{"num_attention_heads 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := copyDir(t, c.arch)
			c.break_(t, d)
			f, err := hfmodel.Open(d)
			if err == nil {
				f.Close()
				t.Fatal("opened")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error is more than one line: %q", err)
			}
		})
	}
}

// TestCompositeConfig: a config.json with text_config (and the
// model.language_model. prefix on the tensors, vision tensors beside) loads
// like the plain one.
func TestCompositeConfig(t *testing.T) {
	d := copyDir(t, "qwen35")
	editConfig(t, d, func(c map[string]any) {
		text := map[string]any{}
		for k, v := range c {
			if k != "architectures" {
				text[k] = v
			}
		}
		text["model_type"] = "qwen3_5_text"
		for k := range c {
			delete(c, k)
		}
		c["architectures"] = []string{"Qwen3_5ForConditionalGeneration"}
		c["model_type"] = "qwen3_5"
		c["text_config"] = text
		c["vision_config"] = map[string]any{"depth": 1}
	})
	editHeader(t, filepath.Join(d, "model.safetensors"), func(h map[string]map[string]any) {
		old := maps.Clone(h)
		for k, v := range old {
			if strings.HasPrefix(k, "model.") {
				delete(h, k)
				h["model.language_model."+strings.TrimPrefix(k, "model.")] = v
			}
		}
		end := 0.0
		for _, v := range h {
			if o, ok := v["data_offsets"].([]any); ok {
				end = max(end, o[1].(float64))
			}
		}
		h["model.visual.patch_embed.weight"] = map[string]any{"dtype": "F32", "shape": []int{0}, "data_offsets": []float64{end, end}}
	})
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := hfmodel.Open(filepath.Join("testdata", "qwen35"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if len(f.Tensors) != len(g.Tensors) {
		t.Fatalf("%d tensors, plain %d", len(f.Tensors), len(g.Tensors))
	}
	for _, ti := range g.Tensors {
		a, _ := f.TensorData(ti)
		b, _ := g.TensorData(ti)
		if string(a) != string(b) {
			t.Fatalf("tensor %s differs", ti.Name)
		}
	}
}

// TestMistralIsLlama: model_type mistral without a sliding window maps to
// the llama architecture with the same tensors.
func TestMistralIsLlama(t *testing.T) {
	d := copyDir(t, "llama")
	editConfig(t, d, func(c map[string]any) { c["model_type"], c["sliding_window"] = "mistral", nil })
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Fatalf("arch %q", a)
	}
	g, err := hfmodel.Open(filepath.Join("testdata", "llama"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, ti := range g.Tensors {
		a, _ := f.TensorData(ti)
		b, _ := g.TensorData(ti)
		if string(a) != string(b) {
			t.Fatalf("tensor %s differs", ti.Name)
		}
	}
}
