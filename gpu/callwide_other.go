//go:build !(linux && amd64)

package gpu

import (
	"fmt"
	"runtime"
)

const wideMaxArgs = 20

var errNoWideCall = fmt.Errorf("gpu: C calls with more than 15 arguments are not supported on %s/%s", runtime.GOOS, runtime.GOARCH)

// wideTrampoline exists on linux/amd64 only (callwide_linux_amd64.go);
// elsewhere C functions of more than 15 arguments cannot be called, and
// callers fall back (cuBLAS: Sgemm instead of GemmEx).
func wideTrampoline() (uintptr, error) { return 0, errNoWideCall }

func ccallWide(fn uintptr, args ...uintptr) (uintptr, error) { return 0, errNoWideCall }
