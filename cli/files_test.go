package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

func TestAttachFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.go"), filepath.Join(dir, "b.txt")
	os.WriteFile(a, []byte("package a\n"), 0o644)
	os.WriteFile(b, []byte("two\nlines\n"), 0o644)
	tests := []struct {
		name, piped string
		files       []string
		text, from  string
	}{
		{"none", "piped", nil, "piped", ""},
		{"one file", "", []string{a}, "package a\n", "a.go"},
		{"two files", "", []string{a, b}, "==> " + a + " <==\npackage a\n\n==> " + b + " <==\ntwo\nlines", "a.go, b.txt"},
		{"stdin and a file", "from the pipe\n", []string{b}, "==> stdin <==\nfrom the pipe\n\n==> " + b + " <==\ntwo\nlines", "stdin, b.txt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, from, err := attachFiles(tc.piped, tc.files)
			if err != nil {
				t.Fatal(err)
			}
			if text != tc.text || from != tc.from {
				t.Errorf("attachFiles = %q from %q\nwant %q from %q", text, from, tc.text, tc.from)
			}
		})
	}
	if _, _, err := attachFiles("", []string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing --file was accepted")
	}
}

func TestFileFlagRefusesFIFOAndDevices(t *testing.T) {
	safefiletest.RefusesNonRegular(t, func(p string) error { _, _, err := attachFiles("", []string{p}); return err })
}
