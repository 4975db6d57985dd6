package gpu

import (
	"os"
	"path/filepath"
	"testing"

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
