package safefile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// within fails the test if f does not return within d: the bugs guarded here
// are hangs, and a hung test should fail rather than run forever.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
	}
}

func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := safefiletest.Mkfifo(fifo); err != nil {
		t.Skip("mkfifo:", err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"fifo", fifo, "--model " + fifo + ": is a named pipe (FIFO), not a regular file"},
		{"dev zero", "/dev/zero", "is a character device, not a regular file"},
		{"directory", dir, "is a directory, not a regular file"},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tt.path); err != nil && tt.name != "missing" {
				t.Skip(err)
			}
			within(t, 2*time.Second, func() {
				f, _, err := Open(tt.path, "--model")
				if err == nil {
					f.Close()
					t.Fatal("opened")
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q, want it to contain %q", err, tt.want)
				}
				if tt.name != "missing" && !errors.Is(err, ErrNotRegular) {
					t.Errorf("error %q does not wrap ErrNotRegular", err)
				}
				_, err = ReadFile(tt.path, 1<<20, "--model")
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("ReadFile error %v, want %q", err, tt.want)
				}
			})
		})
	}
}

func TestReadFileBoundsSize(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		max     int64
		wantErr string
	}{
		{4096, ""},
		{2048, ""},
		{1536, "is 2 KiB, larger than the 1.5 KiB limit"},
		{1000, "larger than the 1000 B limit"},
		{1024, "larger than the 1 KiB limit"},
	}
	for _, tt := range tests {
		b, err := ReadFile(p, tt.max, "--text")
		if tt.wantErr == "" {
			if err != nil || len(b) != 2048 {
				t.Errorf("max %d: %d bytes, %v", tt.max, len(b), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrTooLarge) {
			t.Errorf("max %d: error %v, want %q", tt.max, err, tt.wantErr)
		}
	}
}

func TestReadAllStopsGzipBomb(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zero := make([]byte, 1<<20)
	for range 64 { // 64 MiB of zeros, ~64 KiB compressed
		zw.Write(zero)
	}
	zw.Close()
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadAll(zr, 1<<20, "tokenizer", "bomb.json.gz")
	if err == nil || !strings.Contains(err.Error(), "more than the 1 MiB limit") {
		t.Fatalf("error %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 64 << 20: "64 MiB", 3 << 29: "1.5 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
