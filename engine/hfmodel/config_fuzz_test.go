package hfmodel

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary config.json bytes to the parser and, when it
// accepts them, maps the tensors of the llama fixture under that config:
// neither may panic, and an accepted config's sizes stay in range.
func FuzzConfig(f *testing.F) {
	for _, a := range []string{"llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "llama_fp8_tensor", "qwen3moe_fp8_block", "qwen3moe_nvfp4", "qwen3moe_nvfp4_ct", "qwen3next"} {
		if b, err := os.ReadFile(filepath.Join("testdata", a, "config.json")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model_type":"qwen3_5_moe","text_config":{"model_type":"qwen3_5_moe_text","hidden_size":16}}`))
	ck, err := openCheckpoint(filepath.Join("testdata", "qwen35moe"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, arch, err := parseConfig("config.json", b)
		if err != nil {
			return
		}
		if c.HiddenSize <= 0 || c.HiddenSize > maxShape || c.NumHiddenLayers > maxLayers {
			t.Fatalf("accepted %+v", c)
		}
		m := &mapper{ck: ck, c: c, arch: arch}
		if _, err := m.metadata(); err != nil {
			return
		}
		if err := m.tensors(); err != nil {
			return
		}
		for _, ti := range m.infos {
			if _, err := m.data(ti); err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
		}
	})
}

// FuzzCheckpointHeader mutates the safetensors header of the FP8 MoE
// fixture (dtypes, shapes, offsets, names; the data is kept) and opens the
// directory: no panic, and every tensor of an accepted checkpoint builds
// with the size its info says.
func FuzzCheckpointHeader(f *testing.F) {
	fuzzHeader(f, "qwen3moe_fp8_block", nil)
}

// FuzzNVFP4Header is FuzzCheckpointHeader over the compressed-tensors
// NVFP4 fixture; a tensor may fail to build only because a block scale it
// now points at is the E4M3 NaN code.
func FuzzNVFP4Header(f *testing.F) {
	fuzzHeader(f, "qwen3moe_nvfp4_ct", func(err error) bool { return strings.Contains(err.Error(), "is NaN") })
}

func fuzzHeader(f *testing.F, fixture string, dataErrOK func(error) bool) {
	src := filepath.Join("testdata", fixture)
	st, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(st)
	f.Add(st[8 : 8+n])
	data := st[8+n:]
	f.Fuzz(func(t *testing.T, hdr []byte) {
		dir := t.TempDir()
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		b = append(append(b, hdr...), data...)
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir)
		if err != nil {
			return
		}
		defer g.Close()
		for _, ti := range g.Tensors {
			if _, err := g.TensorData(ti); err != nil && (dataErrOK == nil || !dataErrOK(err)) {
				t.Fatalf("%s: %v", ti.Name, err)
			}
		}
	})
}

// FuzzHFQuantConfig feeds arbitrary hf_quant_config.json bytes beside the
// ModelOpt NVFP4 llama fixture (whose config.json has no
// quantization_config): no panic, and an accepted directory's tensors build.
func FuzzHFQuantConfig(f *testing.F) {
	src := filepath.Join("testdata", "llama_nvfp4")
	hq, err := os.ReadFile(filepath.Join(src, "hf_quant_config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hq)
	f.Add([]byte(`{"producer":{"name":"modelopt"},"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{}}}`))
	f.Add([]byte(`{"quantization":{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","config_groups":{"g":{"weights":{"num_bits":4,"type":"float"}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := filepath.Join(t.TempDir(), "m")
		if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hf_quant_config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir)
		if err != nil {
			return
		}
		defer g.Close()
		for _, ti := range g.Tensors {
			if _, err := g.TensorData(ti); err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
		}
	})
}
