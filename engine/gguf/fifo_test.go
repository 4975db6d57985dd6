package gguf

import (
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// Open used to block forever on a named pipe (issue 10 item 8).
func TestOpenRefusesFIFOAndDevices(t *testing.T) {
	safefiletest.RefusesNonRegular(t, func(path string) error {
		f, err := Open(path)
		if err == nil {
			f.Close()
		}
		return err
	})
}
