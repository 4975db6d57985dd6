package gpu

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ftchat/ftchat/gpu/internal/ptxgz"
	"github.com/ftchat/ftchat/internal/safefile"
)

// kernelFS holds the PTX generated from gpu/kernels/*.cu (go generate
// ./gpu/...), gzip-compressed, one file per source and target:
// <name>_sm80.ptx.gz (compute_80), <name>_sm89.ptx.gz (compute_89), ...
//
//go:embed kernels/*.ptx.gz
var kernelFS embed.FS

// KernelPTX returns the embedded PTX of module name for arch with the
// default compute dtype (the flavours of ptxTargets, FTCHAT_PTX_FLAVOUR
// included), decompressed and NUL-terminated as cuModuleLoadData requires.
func KernelPTX(name string, arch int) ([]byte, error) {
	ts, err := deviceTargets(arch, ComputeAuto)
	if err != nil {
		return nil, err
	}
	return targetPTX(name, ts)
}

// targetPTX returns the PTX of the first of the flavours ts that module
// name has. When FTCHAT_PTX_DIR names a directory that holds
// <name>_<target>.ptx (or .ptx.gz), that file is used instead (kernel
// tuning runs).
func targetPTX(name string, ts []string) ([]byte, error) {
	if dir := os.Getenv("FTCHAT_PTX_DIR"); dir != "" {
		for _, t := range ts {
			for _, ext := range []string{".ptx", ptxgz.Ext} {
				path := filepath.Join(dir, name+"_"+t+ext)
				// safefile: a FIFO or device there must not block or fill memory.
				b, err := safefile.ReadFile(path, ptxgz.MaxSize, "FTCHAT_PTX_DIR")
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return nil, err
				}
				if ext == ".ptx" {
					return append(b, 0), nil
				}
				if b, err = ptxgz.Decode(b, 1); err != nil {
					return nil, fmt.Errorf("gpu: %s: %w", path, err)
				}
				return b, nil
			}
		}
	}
	for _, t := range ts {
		path := "kernels/" + name + "_" + t + ptxgz.Ext
		gz, err := fs.ReadFile(kernelFS, path)
		if err != nil {
			continue
		}
		b, err := ptxgz.Decode(gz, 1) // trailing NUL
		if err != nil {
			return nil, fmt.Errorf("gpu: embedded %s: %w", path, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("gpu: kernel module %q has no embedded PTX for %s (run go generate ./gpu/...)", name, strings.Join(ts, "/"))
}

// Module loads (once) the embedded kernel module name, e.g. "ops" for
// kernels/ops.cu, JIT-compiling its PTX for this device.
func (c *Ctx) Module(name string) (uintptr, error) {
	if m, ok := c.mods[name]; ok {
		return m, nil
	}
	ptx, err := targetPTX(name, c.targets)
	if err != nil {
		return 0, err
	}
	logBuf := make([]byte, 8192)
	opts := []int32{5, 6}                                                        // CUjit_option is a 32-bit C enum: ERROR_LOG_BUFFER, ERROR_LOG_BUFFER_SIZE_BYTES
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))} //nolint:govet
	var m uintptr
	r := ccall(c.drv.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&ptx[0])),
		2, uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	if err := c.drv.check("cuModuleLoadDataEx("+name+")", r); err != nil {
		msg := strings.TrimRight(goString(uintptr(unsafe.Pointer(&logBuf[0]))), "\n")
		var ce *Error
		if errors.As(err, &ce) && (ce.Code == cudaErrorUnsupPTX || ce.Code == cudaErrorInvalidPTX) {
			return 0, fmt.Errorf("%w: the driver (CUDA %d.%d) cannot compile ftchat's PTX (needs driver R520 / CUDA 11.8 or newer): %v %s",
				ErrUnsupported, c.d.info.Driver/1000, c.d.info.Driver%1000/10, err, msg)
		}
		return 0, fmt.Errorf("%v %s", err, msg)
	}
	c.mods[name] = m
	return m, nil
}

// Function returns kernel fn of module mod (loading the module on first use).
func (c *Ctx) Function(mod, fn string) (*Function, error) {
	key := mod + "." + fn
	if f, ok := c.funcs[key]; ok {
		return f, nil
	}
	m, err := c.Module(mod)
	if err != nil {
		return nil, err
	}
	cname := append([]byte(fn), 0)
	f := &Function{Name: fn}
	if err := c.drv.check("cuModuleGetFunction("+fn+")", ccall(c.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f.h)), m, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		return nil, err
	}
	c.funcs[key] = f
	return f, nil
}

// Occupancy is how many CTAs of block threads (no dynamic shared memory) of
// f the driver fits on one SM, given the registers and shared memory that
// the JIT gave f on this device.
func (c *Ctx) Occupancy(f *Function, block int) (int, error) {
	if n, ok := f.occ[block]; ok {
		return n, nil
	}
	var n int32
	if err := c.drv.check("cuOccupancyMaxActiveBlocksPerMultiprocessor("+f.Name+")",
		ccall(c.drv.cuOccupancyMaxActiveBlocksPerMultiprocessor, uintptr(unsafe.Pointer(&n)), f.h, uintptr(block), 0)); err != nil {
		return 0, err
	}
	if f.occ == nil {
		f.occ = map[int]int{}
	}
	f.occ[block] = max(int(n), 1)
	return f.occ[block], nil
}
