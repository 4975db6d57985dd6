//go:build unix

package safefiletest

import "syscall"

// Mkfifo makes a named pipe at path (an error where there are none).
func Mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
