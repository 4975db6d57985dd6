//go:build !unix

package safefiletest

import "errors"

// Mkfifo: no named pipes here, so the tests that need one skip.
func Mkfifo(path string) error { return errors.New("named pipes are not supported on this system") }
