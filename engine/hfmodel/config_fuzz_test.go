package hfmodel

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfig feeds arbitrary config.json bytes to the parser and, when it
// accepts them, maps the tensors of the llama fixture under that config:
// neither may panic, and an accepted config's sizes stay in range.
func FuzzConfig(f *testing.F) {
	for _, a := range []string{"llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "llama_fp8_tensor", "qwen3moe_fp8_block"} {
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
		m := &mapper{ck: ck, c: c, arch: arch, built: map[string][]byte{}}
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
