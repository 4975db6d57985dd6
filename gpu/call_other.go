//go:build !(darwin || freebsd || linux || netbsd || windows)

package gpu

import "errors"

const callSupported = false

func ccall(fn uintptr, args ...uintptr) uintptr { panic("gpu: no C calls on this OS") }

func libDirs() []string { return nil }

func openLib(names []string, dirs []string) (uintptr, string, error) {
	return 0, "", errors.New("CUDA is not supported on this operating system")
}

func libSym(h uintptr, name string) (uintptr, error) {
	return 0, errors.New("CUDA is not supported on this operating system")
}

var cudaLibNames = []string{"libcuda.so.1"}
