package gpu

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"unsafe"
)

// cuBLAS is optional: when the library is found at run time, MatMuls of
// gemmLargeTokens rows and more dequantize W in row chunks to scratch and
// call cuBLAS. With bf16 tensor cores (sm_80 and newer) that is
// cublasGemmEx on bf16 W and x with float32 accumulation and output; it
// takes 19 arguments, more than purego's 15, so it goes through the wide
// call trampoline (callwide_linux_amd64.go). Elsewhere, or with
// BackendOptions.CUBLASTF32, W is dequantized to float32 and
// cublasSgemm_v2 (14 arguments) runs in TF32 tensor-core mode.
// Everything works without the library.
type cublasLib struct {
	path                                           string
	create, destroy, setStream, setMathMode, sgemm uintptr
	gemmEx, setWorkspace                           uintptr // 0 when the library lacks them
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
		l.gemmEx, _ = libSym(h, "cublasGemmEx")
		l.setWorkspace, _ = libSym(h, "cublasSetWorkspace_v2")
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
	// ws is cuBLAS's workspace, handed to it so that the budget counts it
	// (0 when the library cannot take one; it then allocates its own).
	ws Buffer
	// wchunk is the dequantized weight chunk, allocated with the handle
	// so the KV plan, made after the load, leaves room for it.
	wchunk Buffer
	// bf16: MatMul takes GemmEx on bf16 operands, not the TF32 Sgemm
	// (set by NewBackend from the options, the device and canBF16).
	bf16 bool
	// one is alpha = 1 and beta = 0 for GemmEx: the wide call passes
	// pointers into a heap object, which does not move.
	one *[2]float32
}

// cublasChunkBytes is the most dequantized weight scratch a MatMul uses
// (bf16 or float32 rows of W; a chunk is at least 128 rows).
var cublasChunkBytes int64 = 64 << 20 // a var so a test can make chunks small

// cublasWorkspaceBytes is cuBLAS's workspace: 32 MiB as NVIDIA advises
// for Hopper, 4 MiB before it.
func cublasWorkspaceBytes(arch int) int64 {
	if arch >= 90 {
		return 32 << 20
	}
	return 4 << 20
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
	h := &cublasHandle{one: &[2]float32{1, 0}}
	if err := cublasCheck("cublasCreate_v2", ccall(cublas.create, uintptr(unsafe.Pointer(&h.h)))); err != nil {
		return nil, err
	}
	fail := func(err error) (*cublasHandle, error) {
		h.close(c)
		return nil, err
	}
	if err := cublasCheck("cublasSetStream_v2", ccall(cublas.setStream, h.h, c.Stream().h)); err != nil {
		return fail(err)
	}
	const tf32TensorOpMath = 3 // CUBLAS_TF32_TENSOR_OP_MATH
	if err := cublasCheck("cublasSetMathMode", ccall(cublas.setMathMode, h.h, tf32TensorOpMath)); err != nil {
		return fail(err)
	}
	var err error
	if h.wchunk, err = c.Alloc(cublasChunkBytes, "cuBLAS dequantized weight chunk"); err != nil {
		return fail(err)
	}
	if cublas.setWorkspace != 0 {
		n := cublasWorkspaceBytes(c.Device().Info().Arch())
		if h.ws, err = c.Alloc(n, "cuBLAS workspace"); err != nil {
			return fail(err)
		}
		if err := cublasCheck("cublasSetWorkspace_v2", ccall(cublas.setWorkspace, h.h, uintptr(h.ws.Ptr), uintptr(n))); err != nil {
			return fail(err)
		}
	}
	return h, nil
}

func (h *cublasHandle) close(c *Ctx) {
	if h.h != 0 {
		ccall(cublas.destroy, h.h)
	}
	for _, b := range []Buffer{h.ws, h.wchunk} {
		if b.Ptr != 0 {
			c.Free(b)
		}
	}
}

// canBF16 reports whether GemmEx on bf16 operands can be called here.
func (h *cublasHandle) canBF16() bool {
	if cublas.gemmEx == 0 {
		return false
	}
	_, err := wideTrampoline()
	return err == nil
}

// sgemmRowMajor computes Y[n][ldy] (columns y0..y0+m) = X[n][k] · A[m][k]ᵀ
// for row-major float32 matrices, i.e. in cuBLAS's column-major terms
// C(m×n, ldc=ldy) = Aᵀ(m×k) · B(k×n).
// A step being recorded for a CUDA graph (graph.go) is issued first: cuBLAS
// queues its kernels on the stream directly.
func (h *cublasHandle) sgemmRowMajor(c *Ctx, a DevicePtr, m, k int, x DevicePtr, n int, y DevicePtr, ldy int) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	alpha, beta := float32(1), float32(0)
	const opN, opT = 0, 1
	r := ccall(cublas.sgemm, h.h, opT, opN, uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&alpha)), uintptr(a), uintptr(k), uintptr(x), uintptr(k),
		uintptr(unsafe.Pointer(&beta)), uintptr(y), uintptr(ldy))
	return cublasCheck("cublasSgemm_v2", r)
}

// gemmBF16RowMajor is sgemmRowMajor with A and X in bf16 (Y float32,
// float32 accumulation): cublasGemmEx through the wide call.
func (h *cublasHandle) gemmBF16RowMajor(c *Ctx, a DevicePtr, m, k int, x DevicePtr, n int, y DevicePtr, ldy int) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	const (
		opN, opT    = 0, 1
		cudaR16BF   = 14 // CUDA_R_16BF
		cudaR32F    = 0  // CUDA_R_32F
		compute32F  = 68 // CUBLAS_COMPUTE_32F
		algoDefault = -1 // CUBLAS_GEMM_DEFAULT
	)
	algo := algoDefault
	r, err := ccallWide(cublas.gemmEx, h.h, opT, opN, uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&h.one[0])), uintptr(a), cudaR16BF, uintptr(k), uintptr(x), cudaR16BF, uintptr(k),
		uintptr(unsafe.Pointer(&h.one[1])), uintptr(y), cudaR32F, uintptr(ldy), compute32F, uintptr(algo))
	runtime.KeepAlive(h.one)
	if err != nil {
		return err
	}
	return cublasCheck("cublasGemmEx", r)
}
