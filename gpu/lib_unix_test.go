//go:build darwin || freebsd || linux || netbsd

package gpu

import (
	"strings"
	"testing"
)

// TestMissingDriverIsOneShortLine: without an NVIDIA driver the error says
// "not found" once instead of every loader message (it was ~450 characters).
func TestMissingDriverIsOneShortLine(t *testing.T) {
	_, _, err := openLib([]string{"libftchat-missing.so.1", "libftchat-missing.so"}, []string{t.TempDir(), ""})
	if err == nil {
		t.Fatal("loaded a library that does not exist")
	}
	msg := err.Error()
	if !strings.Contains(msg, "libftchat-missing.so.1 or libftchat-missing.so not found") || strings.Contains(msg, "cannot open shared object") || len(msg) > 200 {
		t.Fatalf("error %q (%d characters), want one short 'not found' line", msg, len(msg))
	}
}
