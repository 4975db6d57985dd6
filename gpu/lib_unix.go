//go:build darwin || freebsd || linux || netbsd

package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ebitengine/purego"
)

// libDirs are searched after the default loader path: driver containers
// mount libcuda under /usr/local/nvidia, WSL under /usr/lib/wsl/lib.
func libDirs() []string {
	dirs := filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))
	return append(dirs, "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
}

// openLib dlopens the first of names that loads, first by bare name (the
// loader's own search), then in each of dirs. It reports every attempt on failure.
func openLib(names []string, dirs []string) (uintptr, string, error) {
	var tried []string
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		tried = append(tried, err.Error())
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		for _, n := range names {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return h, p, nil
			}
			tried = append(tried, err.Error())
		}
	}
	// A missing library (the usual case: no NVIDIA driver) is one short
	// line; a library that exists but fails to load keeps the loader's
	// words, which say why.
	notFound := true
	for _, t := range tried {
		notFound = notFound && strings.Contains(strings.ToLower(t), "no such file")
	}
	if notFound {
		return 0, "", fmt.Errorf("%s not found (searched the loader path and %s)",
			strings.Join(names, " or "), strings.Join(slices.DeleteFunc(slices.Clone(dirs), func(d string) bool { return d == "" }), ":"))
	}
	return 0, "", fmt.Errorf("could not load %s (searched the loader path and %s): %s",
		strings.Join(names, " or "), strings.Join(dirs, ":"), strings.Join(tried, "; "))
}

func libSym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

var cudaLibNames = []string{"libcuda.so.1", "libcuda.so"}
