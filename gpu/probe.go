package gpu

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// minFreeBytes is the least free memory with which a device is worth
// using at all (context, modules, the smallest model and one KV page).
const minFreeBytes = 256 << 20

// Probe reports whether device ordinal can run ftchat's kernels, and if
// not, why, as one message wrapping ErrNoDriver, ErrNoDevice,
// ErrUnsupported or ErrOutOfMemory. It leaves no context behind.
func Probe(ordinal int) (Info, error) {
	info := Info{Ordinal: ordinal}
	d, err := loadDriver()
	if err != nil {
		return info, err
	}
	info.LibPath = d.path
	var v, n, dev int32
	if err := d.check("cuDriverGetVersion", ccall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return info, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	info.Driver = int(v)
	if err := d.check("cuDeviceGetCount", ccall(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return info, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if n == 0 {
		return info, fmt.Errorf("%w: the driver (%s) sees no GPU", ErrNoDevice, d.path)
	}
	if ordinal < 0 || ordinal >= int(n) {
		return info, fmt.Errorf("%w: cuda:%d requested but the driver sees %d GPU(s) (cuda:0..cuda:%d)", ErrNoDevice, ordinal, n, n-1)
	}
	if err := d.check("cuDeviceGet", ccall(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))); err != nil {
		return info, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", ccall(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), 256, uintptr(dev))); err != nil {
		return info, err
	}
	info.Name = goString(uintptr(unsafe.Pointer(&name[0])))
	attr := func(a int) int {
		var x int32
		ccall(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&x)), uintptr(a), uintptr(dev))
		return int(x)
	}
	info.Major, info.Minor = attr(75), attr(76)
	info.SMs, info.SharedMemOptin, info.L2Bytes = attr(16), attr(97), attr(38)
	var total uint64
	if err := d.check("cuDeviceTotalMem_v2", ccall(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev))); err != nil {
		return info, err
	}
	info.TotalMem = int64(total)
	if info.Arch() < MinComputeCapability {
		return info, fmt.Errorf("%w: cuda:%d %s has compute capability %d.%d; ftchat's CUDA kernels need 7.5 (Turing) or newer: use --device cpu",
			ErrUnsupported, ordinal, info.Name, info.Major, info.Minor)
	}
	free, err := probeFree(d, dev)
	if err != nil {
		return info, fmt.Errorf("%w: cuda:%d %s: %v", ErrNoDevice, ordinal, info.Name, err)
	}
	info.FreeMem = free
	if free < minFreeBytes {
		return info, fmt.Errorf("%w: cuda:%d %s has only %s free of %s (other programs hold the rest)",
			ErrOutOfMemory, ordinal, info.Name, kvcache.FormatBytes(free), kvcache.FormatBytes(info.TotalMem))
	}
	return info, nil
}

// probeFree reads free memory through the primary context on a locked
// thread, then releases the context again.
func probeFree(d *driver, dev int32) (int64, error) {
	type res struct {
		free int64
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var ctx uintptr
		if err := d.check("cuDevicePrimaryCtxRetain", ccall(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(dev))); err != nil {
			ch <- res{err: err}
			return
		}
		defer ccall(d.cuDevicePrimaryCtxRelease, uintptr(dev))
		if err := d.check("cuCtxSetCurrent", ccall(d.cuCtxSetCurrent, ctx)); err != nil {
			ch <- res{err: err}
			return
		}
		defer ccall(d.cuCtxSetCurrent, 0)
		var free, total uint64
		err := d.check("cuMemGetInfo_v2", ccall(d.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
		ch <- res{int64(free), err}
	}()
	r := <-ch
	return r.free, r.err
}
