//go:build linux && amd64

package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// wideTestC has a function of 19 arguments like cublasGemmEx, with int
// (32-bit) and pointer parameters mixed, that reports what it received and
// whether the stack was 16-byte aligned at its entry.
const wideTestC = `
#include <stdint.h>
int64_t wide19(int64_t a0, int a1, int a2, int a3, int a4, int a5, const int64_t* a6, int64_t a7, int a8, int a9,
               int64_t a10, int a11, int a12, const int64_t* a13, int64_t a14, int a15, int a16, int a17, int a18,
               int64_t* out) {
	out[0] = ((uintptr_t)__builtin_frame_address(0) & 15) == 0;
	int64_t v[19] = {a0, a1, a2, a3, a4, a5, *a6, a7, a8, a9, a10, a11, a12, *a13, a14, a15, a16, a17, a18};
	int64_t h = 0;
	for (int i = 0; i < 19; i++) { out[1 + i] = v[i]; h = h * 31 + v[i]; }
	return h;
}
`

// TestCallWide calls a C function of 20 arguments through the trampoline
// (purego stops at 15) and checks every argument, the int ones with their
// sign (cublasGemmEx's algo is -1), the stack alignment and the result.
func TestCallWide(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the test library")
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "wide.c"), filepath.Join(dir, "libwide.so")
	if err := os.WriteFile(src, []byte(wideTestC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW)
	if err != nil {
		t.Fatal(err)
	}
	defer purego.Dlclose(h)
	fn, err := libSym(h, "wide19")
	if err != nil {
		t.Fatal(err)
	}
	p6, p13 := new(int64), new(int64)
	*p6, *p13 = 606, -1313
	out := new([20]int64)
	minus1 := -1
	want := []int64{1 << 40, 1, -2, 3, 4, 5, 606, -7 << 33, 8, 9, 10, 11, -12, -1313, 14, 15, 16, 17, int64(minus1)}
	args := make([]uintptr, 0, 20)
	for i, v := range want {
		switch i {
		case 6:
			args = append(args, uintptr(unsafe.Pointer(p6)))
		case 13:
			args = append(args, uintptr(unsafe.Pointer(p13)))
		default:
			args = append(args, uintptr(v))
		}
	}
	args = append(args, uintptr(unsafe.Pointer(out)))
	for range 3 { // again: the page is mapped once
		r, err := ccallWide(fn, args...)
		if err != nil {
			t.Fatal(err)
		}
		var h int64
		for _, v := range want {
			h = h*31 + v
		}
		if int64(r) != h {
			t.Errorf("result %d, want %d", int64(r), h)
		}
		if out[0] != 1 {
			t.Errorf("the stack was not 16-byte aligned at the callee's entry")
		}
		for i, v := range want {
			if out[1+i] != v {
				t.Errorf("argument %d: %d, want %d", i, out[1+i], v)
			}
		}
	}
	runtime.KeepAlive(p6)
	runtime.KeepAlive(p13)
	runtime.KeepAlive(out)
	if _, err := ccallWide(fn, make([]uintptr, wideMaxArgs+1)...); err == nil {
		t.Errorf("%d arguments accepted", wideMaxArgs+1)
	}
}
