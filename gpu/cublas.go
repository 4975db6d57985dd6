package gpu

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// cuBLAS is optional: when the library is found at run time, large-batch
// MatMuls can dequantize W (in row chunks) to float32 and call
// cublasSgemm_v2 in TF32 tensor-core mode. Everything works without it.
//
// Why Sgemm and not GemmEx/cublasLt with bf16 operands: purego calls C
// functions with at most 15 arguments; cublasGemmEx takes 19 and
// cublasLtMatmul 16, while cublasSgemm_v2 takes 14.
type cublasLib struct {
	path                                           string
	create, destroy, setStream, setMathMode, sgemm uintptr
}

var (
	cublasOnce sync.Once
	cublas     *cublasLib
	cublasErr  error
)

// cublasCandidates lists library names and directories to search.
func cublasCandidates() (names, dirs []string) {
	if runtime.GOOS == "windows" {
		return []string{"cublas64_13.dll", "cublas64_12.dll", "cublas64_11.dll"}, libDirs()
	}
	names = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	dirs = libDirs()
	for _, pat := range []string{"/usr/local/cuda*/targets/x86_64-linux/lib", "/usr/local/cuda*/lib64",
		"/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib", "/usr/local/lib/python3*/site-packages/nvidia/cublas/lib",
		"/opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib"} {
		m, _ := filepath.Glob(pat)
		sort.Sort(sort.Reverse(sort.StringSlice(m))) // newest CUDA first
		dirs = append(dirs, m...)
	}
	return names, dirs
}

// LoadCUBLAS finds and loads cuBLAS once; the error says where it looked.
func LoadCUBLAS() (string, error) {
	cublasOnce.Do(func() {
		if !callSupported {
			cublasErr = fmt.Errorf("gpu: cuBLAS is not supported on this operating system")
			return
		}
		names, dirs := cublasCandidates()
		h, path, err := openLib(names, dirs)
		if err != nil {
			cublasErr = fmt.Errorf("gpu: cuBLAS not found (optional): %v", err)
			return
		}
		l := &cublasLib{path: path}
		for _, s := range []struct {
			p    *uintptr
			name string
		}{{&l.create, "cublasCreate_v2"}, {&l.destroy, "cublasDestroy_v2"}, {&l.setStream, "cublasSetStream_v2"},
			{&l.setMathMode, "cublasSetMathMode"}, {&l.sgemm, "cublasSgemm_v2"}} {
			p, err := libSym(h, s.name)
			if err != nil || p == 0 {
				cublasErr = fmt.Errorf("gpu: %s has no %s", path, s.name)
				return
			}
			*s.p = p
		}
		cublas = l
	})
	if cublasErr != nil {
		return "", cublasErr
	}
	return cublas.path, nil
}

// cublasHandle is a cuBLAS handle bound to the device's work stream;
// create and use it only on the device thread.
type cublasHandle struct {
	h uintptr
}

func cublasCheck(call string, r uintptr) error {
	if r != 0 {
		return fmt.Errorf("gpu: %s failed with cuBLAS status %d", call, int32(r))
	}
	return nil
}

func newCublasHandle(c *Ctx) (*cublasHandle, error) {
	if _, err := LoadCUBLAS(); err != nil {
		return nil, err
	}
	h := &cublasHandle{}
	if err := cublasCheck("cublasCreate_v2", ccall(cublas.create, uintptr(unsafe.Pointer(&h.h)))); err != nil {
		return nil, err
	}
	if err := cublasCheck("cublasSetStream_v2", ccall(cublas.setStream, h.h, c.Stream().h)); err != nil {
		ccall(cublas.destroy, h.h)
		return nil, err
	}
	const tf32TensorOpMath = 3 // CUBLAS_TF32_TENSOR_OP_MATH
	if err := cublasCheck("cublasSetMathMode", ccall(cublas.setMathMode, h.h, tf32TensorOpMath)); err != nil {
		ccall(cublas.destroy, h.h)
		return nil, err
	}
	return h, nil
}

func (h *cublasHandle) close() { ccall(cublas.destroy, h.h) }

// sgemmRowMajor computes Y[n][ldy] (columns y0..y0+m) = X[n][k] · A[m][k]ᵀ
// for row-major float32 matrices, i.e. in cuBLAS's column-major terms
// C(m×n, ldc=ldy) = Aᵀ(m×k) · B(k×n).
func (h *cublasHandle) sgemmRowMajor(a DevicePtr, m, k int, x DevicePtr, n int, y DevicePtr, ldy int) error {
	alpha, beta := float32(1), float32(0)
	const opN, opT = 0, 1
	r := ccall(cublas.sgemm, h.h, opT, opN, uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&alpha)), uintptr(a), uintptr(k), uintptr(x), uintptr(k),
		uintptr(unsafe.Pointer(&beta)), uintptr(y), uintptr(ldy))
	return cublasCheck("cublasSgemm_v2", r)
}
