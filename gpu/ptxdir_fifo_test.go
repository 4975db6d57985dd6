package gpu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/gpu/internal/ptxgz"
	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// A FIFO or device named <module>_<target>.ptx in FTCHAT_PTX_DIR used to
// block or read forever; it is now an error, and a missing file still falls
// back to the embedded PTX (issue 10 item 8).
func TestKernelPTXDirRefusesFIFOAndDevices(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FTCHAT_PTX_DIR", dir)
	link := filepath.Join(dir, "attention_sm80.ptx")
	safefiletest.RefusesNonRegular(t, func(path string) error {
		os.Remove(link)
		if err := os.Symlink(path, link); err != nil {
			return err
		}
		_, err := KernelPTX("attention", 80)
		return err
	})
	os.Remove(link)
	if b, err := KernelPTX("attention", 80); err != nil || len(b) < 2 {
		t.Fatalf("empty FTCHAT_PTX_DIR: %d bytes, %v; want the embedded PTX", len(b), err)
	}
}

// FTCHAT_PTX_DIR takes plain .ptx (preferred) and .ptx.gz; a corrupt .gz is
// one error naming the file, not a fallback to the embedded PTX.
func TestKernelPTXDirGzip(t *testing.T) {
	ptx := []byte("// tuning build\n.version 7.8\n.target sm_80\n")
	gz, err := ptxgz.Encode(ptx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		want    []byte // nil: an error mentioning wantErr
		wantErr string
	}{
		{"gz", map[string][]byte{"attention_sm80.ptx.gz": gz}, ptx, ""},
		{"plain first", map[string][]byte{"attention_sm80.ptx.gz": gz, "attention_sm80.ptx": []byte("plain")}, []byte("plain"), ""},
		{"corrupt gz", map[string][]byte{"attention_sm80.ptx.gz": gz[:len(gz)/2]}, nil, "attention_sm80.ptx.gz"},
		{"not gzip", map[string][]byte{"attention_sm80.ptx.gz": ptx}, nil, "invalid header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, b := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("FTCHAT_PTX_DIR", dir)
			got, err := KernelPTX("attention", 80)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("KernelPTX = %d bytes, %v; want an error mentioning %q", len(got), err, tc.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, append(append([]byte{}, tc.want...), 0)) {
				t.Fatalf("KernelPTX = %q, %v; want %q and a NUL", got, err, tc.want)
			}
		})
	}
}
