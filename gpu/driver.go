package gpu

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// driver holds the CUDA driver API entry points, resolved once per process.
// Every entry is called through ccall with integer/pointer arguments only.
type driver struct {
	path string

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                     uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute             uintptr
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease            uintptr
	cuCtxSetCurrent, cuCtxSynchronize, cuMemGetInfo                                  uintptr
	cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost                             uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                          uintptr
	cuMemsetD8Async, cuMemsetD32Async                                                uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize                             uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventSynchronize, cuEventElapsed uintptr
	cuModuleLoadDataEx, cuModuleGetFunction, cuModuleUnload                          uintptr
	cuLaunchKernel, cuFuncSetAttribute                                               uintptr
	cuOccupancyMaxActiveBlocksPerMultiprocessor                                      uintptr
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate                     uintptr
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy                                uintptr
	cuMemHostRegister, cuMemHostUnregister, cuStreamWaitEvent, cuEventQuery          uintptr // host-resident experts (offload.go)
	cuMemHostGetDevicePointer                                                        uintptr // mapped host experts (offload_mapped.go)
}

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// ErrNoDriver means libcuda (nvcuda.dll) could not be loaded or initialised.
var ErrNoDriver = errors.New("no usable CUDA driver")

// loadDriver dlopens libcuda and resolves the entry points (the _v2 ABI
// where one exists), then calls cuInit(0).
func loadDriver() (*driver, error) {
	drvOnce.Do(func() {
		if !callSupported {
			drvErr = fmt.Errorf("%w: CUDA is not supported on this operating system", ErrNoDriver)
			return
		}
		h, path, err := openLib(cudaLibNames, libDirs())
		if err != nil {
			drvErr = fmt.Errorf("%w: %v (install the NVIDIA driver, or run with --device cpu)", ErrNoDriver, err)
			return
		}
		d := &driver{path: path}
		syms := []struct {
			p    *uintptr
			name string
		}{
			{&d.cuInit, "cuInit"}, {&d.cuDriverGetVersion, "cuDriverGetVersion"},
			{&d.cuGetErrorName, "cuGetErrorName"}, {&d.cuGetErrorString, "cuGetErrorString"},
			{&d.cuDeviceGetCount, "cuDeviceGetCount"}, {&d.cuDeviceGet, "cuDeviceGet"},
			{&d.cuDeviceGetName, "cuDeviceGetName"}, {&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
			{&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
			{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
			{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
			{&d.cuCtxSetCurrent, "cuCtxSetCurrent"}, {&d.cuCtxSynchronize, "cuCtxSynchronize"},
			{&d.cuMemGetInfo, "cuMemGetInfo_v2"},
			{&d.cuMemAlloc, "cuMemAlloc_v2"}, {&d.cuMemFree, "cuMemFree_v2"},
			{&d.cuMemHostAlloc, "cuMemHostAlloc"}, {&d.cuMemFreeHost, "cuMemFreeHost"},
			{&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"}, {&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
			{&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
			{&d.cuMemsetD8Async, "cuMemsetD8Async"}, {&d.cuMemsetD32Async, "cuMemsetD32Async"},
			{&d.cuStreamCreate, "cuStreamCreate"}, {&d.cuStreamDestroy, "cuStreamDestroy_v2"},
			{&d.cuStreamSynchronize, "cuStreamSynchronize"},
			{&d.cuEventCreate, "cuEventCreate"}, {&d.cuEventDestroy, "cuEventDestroy_v2"},
			{&d.cuEventRecord, "cuEventRecord"}, {&d.cuEventSynchronize, "cuEventSynchronize"},
			{&d.cuEventElapsed, "cuEventElapsedTime"},
			{&d.cuModuleLoadDataEx, "cuModuleLoadDataEx"}, {&d.cuModuleGetFunction, "cuModuleGetFunction"},
			{&d.cuModuleUnload, "cuModuleUnload"},
			{&d.cuLaunchKernel, "cuLaunchKernel"}, {&d.cuFuncSetAttribute, "cuFuncSetAttribute"},
			{&d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"},
			{&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"}, {&d.cuStreamEndCapture, "cuStreamEndCapture"},
			{&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags"},
			{&d.cuGraphLaunch, "cuGraphLaunch"}, {&d.cuGraphExecDestroy, "cuGraphExecDestroy"},
			{&d.cuGraphDestroy, "cuGraphDestroy"},
			{&d.cuMemHostRegister, "cuMemHostRegister_v2"}, {&d.cuMemHostUnregister, "cuMemHostUnregister"},
			{&d.cuStreamWaitEvent, "cuStreamWaitEvent"}, {&d.cuEventQuery, "cuEventQuery"},
			{&d.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
		}
		for _, s := range syms {
			p, err := libSym(h, s.name)
			if err != nil || p == 0 {
				drvErr = fmt.Errorf("%w: %s has no %s: the driver is too old (need R520 or newer)", ErrNoDriver, path, s.name)
				return
			}
			*s.p = p
		}
		if err := d.check("cuInit", ccall(d.cuInit, 0)); err != nil {
			var ce *Error
			if errors.As(err, &ce) && ce.Code == cudaErrorNoDevice {
				drvErr = fmt.Errorf("%w: the driver (%s) sees no GPU: %v", ErrNoDevice, path, err)
				return
			}
			drvErr = fmt.Errorf("%w: %v", ErrNoDriver, err)
			return
		}
		drv = d
	})
	return drv, drvErr
}

// Error is a CUDA driver error: the call that failed and the driver's
// own name and description of the result code.
type Error struct {
	Call string
	Code int
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
	Msg  string // the driver's description
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
}

// CUDA result codes this package reacts to.
const (
	cudaErrorOutOfMemory = 2
	cudaErrorNoDevice    = 100
	cudaErrorInvalidPTX  = 218
	cudaErrorUnsupPTX    = 222
)

func (d *driver) check(call string, r uintptr) error {
	if r == 0 {
		return nil
	}
	code := int(int32(r))
	e := &Error{Call: call, Code: code, Name: fmt.Sprintf("CUDA_ERROR_%d", code), Msg: "unknown error"}
	var p uintptr
	if ccall(d.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
		e.Name = goString(p)
	}
	p = 0
	if ccall(d.cuGetErrorString, uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
		e.Msg = goString(p)
	}
	return e
}

// goString copies a NUL-terminated C string owned by the driver.
func goString(p uintptr) string {
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(cptr(p + i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cptr turns an address of C-owned (non-Go) memory into a pointer.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// DriverVersion returns the CUDA version the driver supports, e.g. 12080 for 12.8.
func DriverVersion() (int, error) {
	d, err := loadDriver()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", ccall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, err
	}
	return int(v), nil
}
