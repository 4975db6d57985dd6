package cli

import (
	"io"
	"testing"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// `bench --text`, `dev inspect` and `tokenize --tokenizer` on a named pipe
// used to block forever, on /dev/zero to read until out of memory (issue 10
// item 8).
func TestFileArgumentsRefuseFIFOAndDevices(t *testing.T) {
	tests := []struct {
		name string
		open func(path string) error
	}{
		{"bench --text", func(p string) error { _, err := readText(p); return err }},
		{"dev inspect", func(p string) error { return runCmd(devCmd(), "inspect", p) }},
		{"tokenize --tokenizer", func(p string) error { return runCmd(tokenizeCmd(), "--tokenizer", p) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { safefiletest.RefusesNonRegular(t, tt.open) })
	}
}

func runCmd(cmd interface {
	SetArgs([]string)
	SetOut(io.Writer)
	SetErr(io.Writer)
	Execute() error
}, args ...string) error {
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return cmd.Execute()
}
