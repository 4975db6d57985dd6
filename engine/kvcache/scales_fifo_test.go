package kvcache

import (
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// --kv-scales on a named pipe used to block forever, /dev/zero to read
// until out of memory (issue 10 item 8).
func TestLoadScalesRefusesFIFOAndDevices(t *testing.T) {
	safefiletest.RefusesNonRegular(t, func(path string) error {
		_, err := LoadScales(path)
		return err
	})
}
