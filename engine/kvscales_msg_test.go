package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestKVScalesErrorsNameTheOptionOnce: a bad --kv-scales file is reported
// as "--kv-scales FILE: problem", not with the option and file repeated.
func TestKVScalesErrorsNameTheOptionOnce(t *testing.T) {
	path := synthModel(t, "qwen3-tiny", gguf.F32)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "missing.json"), "missing.json"},
		{"not json", write("bad.json", "hello"), "not a kv scales file"},
		{"other model", write("other.json", `{"format":"ftchat-kv-scales/1","model":"m","dtype":"fp8_e4m3","layers":1,"kv_heads":1,"k_scale":[1],"v_scale":[[1]]}`), "the file was made for"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := Load(context.Background(), Options{Model: path, Device: "cpu", KVTokens: 256, KVDType: "fp8_e4m3", KVScales: c.file}, nil)
			if err == nil {
				e.Close()
				t.Fatal("loaded")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "--kv-scales") || strings.Contains(msg, ": --kv-scales") || strings.Count(msg, c.file) > 1 || !strings.Contains(msg, c.want) {
				t.Fatalf("error %q: want one \"--kv-scales\" prefix, the file named at most once, and %q", msg, c.want)
			}
		})
	}
}
