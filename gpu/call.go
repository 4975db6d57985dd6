//go:build darwin || freebsd || linux || netbsd || windows

package gpu

import "github.com/ebitengine/purego"

const callSupported = true

// ccall calls the C function fn with integer/pointer arguments and returns
// its int result. Pointers converted to uintptr at the call site stay alive
// and unmoved for the call (uintptrescapes).
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
