//go:build windows

package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func libDirs() []string {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	if cp := os.Getenv("CUDA_PATH"); cp != "" {
		dirs = append(dirs, filepath.Join(cp, "bin"))
	}
	return dirs
}

func openLib(names []string, dirs []string) (uintptr, string, error) {
	var tried []string
	for _, n := range names {
		h, err := syscall.LoadLibrary(n)
		if err == nil {
			return uintptr(h), n, nil
		}
		tried = append(tried, n+": "+err.Error())
	}
	for _, d := range dirs {
		for _, n := range names {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			h, err := syscall.LoadLibrary(p)
			if err == nil {
				return uintptr(h), p, nil
			}
			tried = append(tried, p+": "+err.Error())
		}
	}
	return 0, "", fmt.Errorf("could not load %s: %s", strings.Join(names, " or "), strings.Join(tried, "; "))
}

func libSym(h uintptr, name string) (uintptr, error) {
	p, err := syscall.GetProcAddress(syscall.Handle(h), name)
	return p, err
}

var cudaLibNames = []string{"nvcuda.dll"}
