package hub

import (
	"context"
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// --model naming a named pipe used to resolve to it, and the open that
// followed blocked forever (issue 10 item 8).
func TestResolveRefusesFIFOAndDevices(t *testing.T) {
	safefiletest.RefusesNonRegular(t, func(path string) error {
		_, err := Resolve(context.Background(), path, nil)
		return err
	})
}
