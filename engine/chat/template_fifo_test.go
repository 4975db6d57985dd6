package chat

import (
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// A chat template file on a named pipe used to block forever (issue 10 item 8).
func TestLoadTokenizerConfigRefusesFIFOAndDevices(t *testing.T) {
	safefiletest.RefusesNonRegular(t, func(path string) error {
		_, err := LoadTokenizerConfig(path)
		return err
	})
}
