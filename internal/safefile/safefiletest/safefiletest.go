// Package safefiletest checks that an entry point refuses paths that are not
// regular files (a named pipe, /dev/zero, a directory) promptly and clearly.
package safefiletest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Timeout is how long an entry point may take to refuse a path. The bugs
// guarded are hangs, so a call still blocked by then fails the test instead
// of hanging it.
const Timeout = 2 * time.Second

// RefusesNonRegular calls open on a FIFO, /dev/zero and a directory and
// fails unless each returns, within Timeout, an error that says what the
// path is. open returns the entry point's error.
func RefusesNonRegular(t *testing.T, open func(path string) error) {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := Mkfifo(fifo); err != nil {
		t.Skip("mkfifo:", err)
	}
	cases := []struct{ name, path, want string }{
		{"fifo", fifo, "is a named pipe (FIFO), not a regular file"},
		{"dev-zero", "/dev/zero", "is a character device, not a regular file"},
		{"directory", dir, "is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil {
				t.Skip(err)
			}
			done := make(chan error, 1)
			go func() { done <- open(c.path) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v, want one saying %q", err, c.want)
				}
			case <-time.After(Timeout):
				t.Fatalf("still blocked after %v on %s", Timeout, c.path)
			}
		})
	}
}
