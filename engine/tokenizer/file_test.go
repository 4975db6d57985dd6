package tokenizer

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// --tokenizer on a named pipe used to block forever, on /dev/zero to read
// until out of memory (issue 10 item 8).
func TestTokenizerFilesRefuseFIFOAndDevices(t *testing.T) {
	tests := []struct {
		name string
		open func(path string) (*Tokenizer, error)
	}{
		{"Load", Load},
		{"FromJSONFile", FromJSONFile},
		{"FromGGUFFile", FromGGUFFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			safefiletest.RefusesNonRegular(t, func(p string) error { _, err := tt.open(p); return err })
		})
	}
}

// A tokenizer.json had no size bound: a huge file or a gzip bomb was read
// whole (issue 10 item 7). Both stop at MaxJSONFile, named in the error.
func TestFromJSONFileBoundsSize(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big", "tokenizer.json")
	os.Mkdir(filepath.Dir(big), 0o755)
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(MaxJSONFile + 1) // sparse: no disk used
	f.Close()

	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zero := make([]byte, 1<<20)
	for range MaxJSONFile>>20 + 1 {
		zw.Write(zero)
	}
	zw.Close()
	bomb := filepath.Join(dir, "bomb", "tokenizer.json.gz")
	os.Mkdir(filepath.Dir(bomb), 0o755)
	if err := os.WriteFile(bomb, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{big, bomb} {
		_, err := FromJSONFile(p)
		if err == nil || !strings.Contains(err.Error(), "64 MiB limit") {
			t.Errorf("%s: error %v, want one naming the 64 MiB limit", filepath.Base(p), err)
		}
	}
}
