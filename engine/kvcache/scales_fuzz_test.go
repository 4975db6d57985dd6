package kvcache

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoadScales reads mutated --kv-scales files. A file is either refused
// with an error naming it, or it is a table that expands to exactly one
// scale per (layer, KV head) and survives Save and LoadScales unchanged.
func FuzzLoadScales(f *testing.F) {
	valid := `{"format":"ftchat-kv-scales/1","model":"m","dtype":"fp8_e4m3","layers":2,"kv_heads":2,` +
		`"k_scale":[[0.5,0.25],[1,2]],"v_scale":[[0.5,0.25],[1,2]]}`
	for _, s := range []string{
		valid,
		strings.Replace(valid, `[[0.5,0.25],[1,2]],"v_scale"`, `[0.5,1],"v_scale"`, 1),
		strings.Replace(valid, `"layers":2`, `"layers":1073741824`, 1),
		strings.Replace(valid, `0.25`, `-1`, 1),
		strings.Replace(valid, `fp8_e4m3`, `bf16`, 1),
		`{"format":"ftchat-kv-scales/1","dtype":"fp8_e5m2","layers":1,"kv_heads":1,"k_scale":[1e38],"v_scale":[[1e-38]]}`,
		`[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "scales.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := LoadScales(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		k, v, err := sf.Expand(FP8E4M3)
		if err != nil {
			t.Fatalf("a loaded file does not expand: %v", err)
		}
		if want := sf.Layers * sf.KVHeads; len(k) != want || len(v) != want {
			t.Fatalf("expanded %d/%d scales, want %d", len(k), len(v), want)
		}
		again := filepath.Join(dir, "again.json")
		if err := sf.Save(again); err != nil {
			t.Fatalf("a loaded file does not save: %v", err)
		}
		back, err := LoadScales(again)
		if err != nil {
			t.Fatalf("a saved file does not load: %v", err)
		}
		if !reflect.DeepEqual(sf.K, back.K) || !reflect.DeepEqual(sf.V, back.V) || sf.Layers != back.Layers || sf.KVHeads != back.KVHeads {
			t.Fatalf("save/load changed the table")
		}
	})
}
