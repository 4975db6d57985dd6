package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `ftchat models` lists the GGUF files in the cache (what /model offers in
// the chat) with their sizes, then the names fetched on first use.
func TestModelsListsTheCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FTCHAT_CACHE_DIR", dir)
	run := func() string {
		var out bytes.Buffer
		cmd := modelsCmd()
		cmd.SetOut(&out)
		cmd.SetArgs(nil)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got := run(); !strings.Contains(got, "cache: "+dir+"\n  (empty)\n") || !strings.Contains(got, "known names") {
		t.Errorf("empty cache:\n%s", got)
	}
	for name, size := range map[string]int{"b-model.gguf": 3 << 20, "a-model.GGUF": 1024, "notes.txt": 10} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := run()
	a, b := strings.Index(got, "a-model.GGUF"), strings.Index(got, "b-model.gguf")
	if a < 0 || b < a || strings.Contains(got, "notes.txt") || !strings.Contains(got, "3.00 MiB") || !strings.Contains(got, "1.00 KiB") {
		t.Errorf("listing:\n%s", got)
	}
}
