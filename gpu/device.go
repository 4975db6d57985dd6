package gpu

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// Sentinel errors wrapped by Probe and Open, for callers that pick a device.
var (
	ErrNoDevice    = errors.New("no CUDA device")
	ErrUnsupported = errors.New("unsupported GPU")
	ErrOutOfMemory = errors.New("GPU out of memory")
)

// MinComputeCapability is the oldest GPU generation the kernels target:
// Turing (sm_75) runs the fp16-compute PTX flavour (compute.go), Ampere
// and newer the bf16 ones as well.
const MinComputeCapability = 75

// Info describes one CUDA device.
type Info struct {
	Ordinal        int
	Name           string
	Major, Minor   int   // compute capability
	SMs            int   // multiprocessors
	SharedMemOptin int   // max dynamic shared memory per block after opt-in, bytes
	L2Bytes        int   // L2 cache size
	TotalMem       int64 // bytes
	FreeMem        int64 // bytes free when probed/opened
	Driver         int   // CUDA version the driver supports, e.g. 12080
	LibPath        string
}

// Arch is the compute capability as one number, e.g. 90 for sm_90.
func (i Info) Arch() int { return i.Major*10 + i.Minor }

func (i Info) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d, %d SMs, %s total, %s free, driver CUDA %d.%d)",
		i.Ordinal, i.Name, i.Arch(), i.SMs, kvcache.FormatBytes(i.TotalMem), kvcache.FormatBytes(i.FreeMem),
		i.Driver/1000, i.Driver%1000/10)
}

// Options configure Open.
type Options struct {
	// MemoryBudget caps the bytes all allocations may use (--gpu-memory).
	// 0 means the device's free memory at open; a budget above that is
	// clamped to it, since the driver could not honour it anyway.
	MemoryBudget int64
	// Compute is the tensor-core operand type (--compute-dtype): it picks
	// the PTX flavour every module of the device loads (ptxTargets).
	Compute ComputeDType
}

// Device is one opened CUDA device. A goroutine locked to its OS thread
// opens and closes the context. Do and Post run work one call at a time:
// by default on the caller's goroutine, its thread held and the context
// made current there (inline); with FTCHAT_DEVICE_INLINE=0 handed to that
// goroutine, which then runs every driver call.
type Device struct {
	info   Info
	budget budget
	work   chan func()
	done   chan struct{}
	c      *Ctx

	// inline: Do and Post run their function on the caller's goroutine,
	// locked to its OS thread with the context made current there, one at
	// a time under opMu, instead of handing it to the device goroutine
	// (which then only opens and closes the context). A decode step is
	// hundreds of tiny ops; each handoff to a parked, thread-locked
	// goroutine costs a futex wake and an OS thread switch.
	inline bool
	opMu   sync.Mutex

	mu     sync.Mutex
	err    error // first error of a Post, sticky until Err
	closed bool
}

// inlineOps picks the inline way for devices opened from now on: the
// default since the H200 run of 2026-12-06 (8B decode 295 -> 313 tok/s,
// docs/benchmarks.md); FTCHAT_DEVICE_INLINE=0 keeps the device goroutine.
var inlineOps = os.Getenv("FTCHAT_DEVICE_INLINE") != "0"

// Ctx is the device thread's handle: its methods call the driver and are
// valid only inside a function run by Do or Post.
type Ctx struct {
	d      *Device
	drv    *driver
	dev    int32
	ctx    uintptr
	stream Stream
	params unsafe.Pointer // pinned host arena for cuLaunchKernel's void** params
	allocs map[DevicePtr]int64
	mods   map[string]uintptr
	// targets are the PTX flavours the modules load (ptxTargets of the
	// device's arch and Options.Compute), fixed at open.
	targets []string
	funcs   map[string]*Function
	rec     recorder  // decode steps as CUDA graphs (graph.go)
	prof    *profiler // FTCHAT_PROFILE=1: per-launch event timing (profile.go)
	d2h     pinnedD2H // staging of device-to-host copies (copy_pinned.go)
	// writes counts the operations queued that may write device memory
	// (launches, host-to-device and device copies, memsets), recorded or
	// issued, so a caller can tell that nothing ran between two of its own
	// (gemmq.go reuses packed activations on that).
	writes uint64
}

// DevicePtr is a device address.
type DevicePtr uint64

// Add offsets p by n bytes.
func (p DevicePtr) Add(n int64) DevicePtr { return p + DevicePtr(n) }

// Buffer is a device allocation.
type Buffer struct {
	Ptr  DevicePtr
	Size int64
}

// Stream is a CUDA stream handle.
type Stream struct{ h uintptr }

// Event is a CUDA event handle.
type Event struct{ h uintptr }

// Function is a kernel entry point of a loaded module.
type Function struct {
	h    uintptr
	Name string
	occ  map[int]int // resident CTAs per SM by block size (no dynamic shared memory)
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// Open starts the device goroutine for ordinal, retains the device's
// primary context on it (shared with cuBLAS, if loaded) and creates the
// work stream.
func Open(ordinal int, opts Options) (*Device, error) {
	info, err := Probe(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{info: info, work: make(chan func(), 4096), done: make(chan struct{}), inline: inlineOps}
	ready := make(chan error, 1)
	go d.loop(opts, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) loop(opts Options, ready chan<- error) {
	runtime.LockOSThread()
	defer close(d.done)
	c, err := newCtx(d, opts)
	if err != nil {
		ready <- err
		return
	}
	d.c = c
	ready <- nil
	for f := range d.work {
		f()
	}
	c.close()
}

func newCtx(d *Device, opts Options) (*Ctx, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	targets, err := deviceTargets(d.info.Arch(), opts.Compute)
	if err != nil {
		return nil, err
	}
	c := &Ctx{d: d, drv: drv, allocs: map[DevicePtr]int64{}, mods: map[string]uintptr{}, funcs: map[string]*Function{}, targets: targets}
	if profileEnabled() {
		c.prof = newProfiler()
	}
	if err := drv.check("cuDeviceGet", ccall(drv.cuDeviceGet, uintptr(unsafe.Pointer(&c.dev)), uintptr(d.info.Ordinal))); err != nil {
		return nil, err
	}
	if err := drv.check("cuDevicePrimaryCtxRetain", ccall(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(c.dev))); err != nil {
		return nil, err
	}
	fail := func(err error) (*Ctx, error) {
		ccall(drv.cuDevicePrimaryCtxRelease, uintptr(c.dev))
		return nil, err
	}
	if err := drv.check("cuCtxSetCurrent", ccall(drv.cuCtxSetCurrent, c.ctx)); err != nil {
		return fail(err)
	}
	var free, total uint64
	if err := drv.check("cuMemGetInfo_v2", ccall(drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))); err != nil {
		return fail(err)
	}
	d.info.FreeMem = int64(free)
	d.budget.limit = int64(free)
	if opts.MemoryBudget > 0 && opts.MemoryBudget < int64(free) {
		d.budget.limit = opts.MemoryBudget
	}
	// Non-blocking: the work stream does not serialise with the legacy
	// default stream, which other libraries in the process may use.
	if err := drv.check("cuStreamCreate", ccall(drv.cuStreamCreate, uintptr(unsafe.Pointer(&c.stream.h)), 1)); err != nil {
		return fail(err)
	}
	var p uintptr
	if err := drv.check("cuMemHostAlloc", ccall(drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), paramArena, 0)); err != nil {
		return fail(err)
	}
	c.params = cptr(p)
	return c, nil
}

func (c *Ctx) close() {
	c.flushRec()
	ccall(c.drv.cuCtxSynchronize)
	c.finishProfile()
	c.freePinnedD2H()
	c.destroyGraphs()
	for p, n := range c.allocs {
		ccall(c.drv.cuMemFree, uintptr(p))
		c.d.budget.release(n)
	}
	for _, m := range c.mods {
		ccall(c.drv.cuModuleUnload, m)
	}
	ccall(c.drv.cuMemFreeHost, uintptr(c.params))
	ccall(c.drv.cuStreamDestroy, c.stream.h)
	ccall(c.drv.cuDevicePrimaryCtxRelease, uintptr(c.dev))
}

// Info describes the device as opened (FreeMem as of Open).
func (d *Device) Info() Info { return d.info }

// MemStats reports the allocator's budget, bytes in use and peak.
func (d *Device) MemStats() MemStats { return d.budget.stats() }

// FreeNow is the driver's free device memory at this moment
// (cuMemGetInfo, once the work queued before it has been issued). It is lower than the budget's
// headroom when memory the allocator does not see (the context, loaded
// modules, kernel local memory, graphs, other processes) has grown since
// Open; the memory plan sizes the KV pool against the smaller of the two.
func (d *Device) FreeNow() (int64, error) {
	var free int64
	err := d.Do(func(c *Ctx) error {
		var f, total uint64
		if err := c.drv.check("cuMemGetInfo_v2", ccall(c.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&total)))); err != nil {
			return err
		}
		free = int64(f)
		return nil
	})
	return free, err
}

// Do runs f with the device's context and waits for it. A panic in f is
// returned as an error, leaving the device usable.
func (d *Device) Do(f func(c *Ctx) error) error {
	if d.inline {
		return d.runInline(f)
	}
	ch := make(chan error, 1)
	if err := d.send(func() { ch <- d.run(f) }); err != nil {
		return err
	}
	return <-ch
}

// Post runs f with the device's context: inline, before it returns; on
// the device goroutine, queued without waiting. Either way work posted
// earlier runs first. The first error of a posted function is kept and
// returned by Err.
func (d *Device) Post(f func(c *Ctx) error) {
	if d.inline {
		if err := d.runInline(f); err != nil {
			d.setErr(err)
		}
		return
	}
	if err := d.send(func() {
		if err := d.run(f); err != nil {
			d.setErr(err)
		}
	}); err != nil {
		d.setErr(err)
	}
}

// Err returns and clears the first error of a posted function.
func (d *Device) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.err
	d.err = nil
	return err
}

func (d *Device) setErr(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
}

func (d *Device) send(f func()) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("gpu: device is closed")
	}
	d.work <- f
	return nil
}

// runInline runs f on the calling goroutine: its OS thread is held for the
// call and the device's context made current on it (a context may be
// current on several threads; a goroutine may move between threads from
// one call to the next).
func (d *Device) runInline(f func(c *Ctx) error) error {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("gpu: device is closed")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.c.drv.check("cuCtxSetCurrent", ccall(d.c.drv.cuCtxSetCurrent, d.c.ctx)); err != nil {
		return err
	}
	return d.run(f)
}

func (d *Device) run(f func(c *Ctx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gpu: panic on device thread: %v", r)
		}
	}()
	return f(d.c)
}

// Close waits for queued work, frees every allocation still live and
// releases the context.
func (d *Device) Close() error {
	// An inline call in progress finishes first.
	d.opMu.Lock()
	defer d.opMu.Unlock()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	close(d.work)
	<-d.done
	return nil
}

// Device returns the device this context belongs to.
func (c *Ctx) Device() *Device { return c.d }

// Stream is the device's work stream; ops are issued on it in order.
func (c *Ctx) Stream() Stream { return c.stream }

// Alloc allocates n bytes of device memory, counted against the budget;
// what names the use in the error when the budget refuses.
func (c *Ctx) Alloc(n int64, what string) (Buffer, error) {
	if n <= 0 {
		return Buffer{}, fmt.Errorf("gpu: allocation of %d bytes for %s", n, what)
	}
	if err := c.d.budget.reserve(n, what); err != nil {
		return Buffer{}, err
	}
	var p DevicePtr
	if err := c.drv.check("cuMemAlloc_v2", ccall(c.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))); err != nil {
		c.d.budget.release(n)
		var ce *Error
		if errors.As(err, &ce) && ce.Code == cudaErrorOutOfMemory {
			st := c.d.budget.stats()
			return Buffer{}, fmt.Errorf("%w: %s needs %s with %s in use: %v", ErrOutOfMemory, what, kvcache.FormatBytes(n), kvcache.FormatBytes(st.Used), err)
		}
		return Buffer{}, err
	}
	c.allocs[p] = n
	return Buffer{Ptr: p, Size: n}, nil
}

// Free releases a buffer from Alloc; freeing a zero Buffer is a no-op.
func (c *Ctx) Free(b Buffer) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	if b.Ptr == 0 {
		return nil
	}
	n, ok := c.allocs[b.Ptr]
	if !ok {
		return fmt.Errorf("gpu: free of unknown device pointer %#x", uint64(b.Ptr))
	}
	delete(c.allocs, b.Ptr)
	c.d.budget.release(n)
	return c.drv.check("cuMemFree_v2", ccall(c.drv.cuMemFree, uintptr(b.Ptr)))
}

// CopyToDevice copies n bytes from host memory at src and waits until the
// source may be reused.
func (c *Ctx) CopyToDevice(dst DevicePtr, src unsafe.Pointer, n int64) error {
	c.writes++
	if n == 0 {
		return nil
	}
	if err := c.flushPending(); err != nil {
		return err
	}
	if err := c.drv.check("cuMemcpyHtoDAsync_v2", ccall(c.drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream.h)); err != nil {
		return err
	}
	return c.Sync()
}

// CopyToDeviceAsync queues a copy of n bytes from host memory at src,
// which must stay valid and unchanged until the stream reaches the copy
// (pinned memory from HostAlloc, for a truly asynchronous transfer).
func (c *Ctx) CopyToDeviceAsync(dst DevicePtr, src unsafe.Pointer, n int64) error {
	c.writes++
	if n == 0 {
		return nil
	}
	if c.recording() {
		return c.record(recOp{kind: recH2D, dst: uintptr(dst), src: uintptr(src), size: n})
	}
	return c.drv.check("cuMemcpyHtoDAsync_v2", ccall(c.drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream.h))
}

// CopyToHost copies n bytes to host memory at dst after all queued work.
func (c *Ctx) CopyToHost(dst unsafe.Pointer, src DevicePtr, n int64) error {
	if n == 0 {
		return nil
	}
	if err := c.flushPending(); err != nil {
		return err
	}
	if ok, err := c.copyToHostPinned(dst, src, n); ok { // copy_pinned.go
		return err
	}
	if err := c.d2hAsync(dst, src, n); err != nil {
		return err
	}
	return c.Sync()
}

// CopyDevice queues a device-to-device copy of n bytes.
func (c *Ctx) CopyDevice(dst, src DevicePtr, n int64) error {
	c.writes++
	if n == 0 {
		return nil
	}
	if c.recording() {
		return c.record(recOp{kind: recD2D, dst: uintptr(dst), src: uintptr(src), size: n})
	}
	return c.drv.check("cuMemcpyDtoDAsync_v2", ccall(c.drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream.h))
}

// Upload copies a host slice to dst.
func Upload[T any](c *Ctx, dst DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	err := c.CopyToDevice(dst, unsafe.Pointer(&src[0]), int64(len(src))*int64(unsafe.Sizeof(src[0])))
	runtime.KeepAlive(src)
	return err
}

// Download copies len(dst) elements from src to a host slice.
func Download[T any](c *Ctx, dst []T, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	err := c.CopyToHost(unsafe.Pointer(&dst[0]), src, int64(len(dst))*int64(unsafe.Sizeof(dst[0])))
	runtime.KeepAlive(dst)
	return err
}

// Memset32 queues filling n 32-bit words at p with v.
func (c *Ctx) Memset32(p DevicePtr, v uint32, n int64) error {
	c.writes++
	if c.recording() {
		return c.record(recOp{kind: recMemset32, dst: uintptr(p), val: v, size: n})
	}
	return c.drv.check("cuMemsetD32Async", ccall(c.drv.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), c.stream.h))
}

// Memset8 queues filling n bytes at p with v.
func (c *Ctx) Memset8(p DevicePtr, v byte, n int64) error {
	c.writes++
	if c.recording() {
		return c.record(recOp{kind: recMemset8, dst: uintptr(p), val: uint32(v), size: n})
	}
	return c.drv.check("cuMemsetD8Async", ccall(c.drv.cuMemsetD8Async, uintptr(p), uintptr(v), uintptr(n), c.stream.h))
}

// Sync waits for the work stream.
func (c *Ctx) Sync() error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuStreamSynchronize", ccall(c.drv.cuStreamSynchronize, c.stream.h))
}

// SyncStream waits for s.
func (c *Ctx) SyncStream(s Stream) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuStreamSynchronize", ccall(c.drv.cuStreamSynchronize, s.h))
}

// NewStream creates a non-blocking stream.
func (c *Ctx) NewStream() (Stream, error) {
	var s Stream
	err := c.drv.check("cuStreamCreate", ccall(c.drv.cuStreamCreate, uintptr(unsafe.Pointer(&s.h)), 1))
	return s, err
}

// DestroyStream destroys a stream from NewStream.
func (c *Ctx) DestroyStream(s Stream) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuStreamDestroy_v2", ccall(c.drv.cuStreamDestroy, s.h))
}

// HostBuffer is page-locked host memory (fast, asynchronous copies).
type HostBuffer struct {
	p unsafe.Pointer
	n int64
}

// Bytes views the buffer; valid until FreeHost.
func (h HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.n) }

// Ptr is the buffer's host address.
func (h HostBuffer) Ptr() unsafe.Pointer { return h.p }

// HostAlloc allocates n bytes of pinned host memory.
func (c *Ctx) HostAlloc(n int64) (HostBuffer, error) {
	var p uintptr
	if err := c.drv.check("cuMemHostAlloc", ccall(c.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), 0)); err != nil {
		return HostBuffer{}, err
	}
	return HostBuffer{p: cptr(p), n: n}, nil
}

// FreeHost frees a HostAlloc buffer.
func (c *Ctx) FreeHost(h HostBuffer) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuMemFreeHost", ccall(c.drv.cuMemFreeHost, uintptr(h.p)))
}

// NewEvent creates an event that records timing.
func (c *Ctx) NewEvent() (Event, error) {
	var e Event
	err := c.drv.check("cuEventCreate", ccall(c.drv.cuEventCreate, uintptr(unsafe.Pointer(&e.h)), 0))
	return e, err
}

// DestroyEvent destroys an event.
func (c *Ctx) DestroyEvent(e Event) error {
	return c.drv.check("cuEventDestroy_v2", ccall(c.drv.cuEventDestroy, e.h))
}

// Record queues e on s.
func (c *Ctx) Record(e Event, s Stream) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuEventRecord", ccall(c.drv.cuEventRecord, e.h, s.h))
}

// Elapsed waits for end and returns the milliseconds between start and end.
func (c *Ctx) Elapsed(start, end Event) (float32, error) {
	if err := c.flushPending(); err != nil {
		return 0, err
	}
	if err := c.drv.check("cuEventSynchronize", ccall(c.drv.cuEventSynchronize, end.h)); err != nil {
		return 0, err
	}
	var ms float32
	err := c.drv.check("cuEventElapsedTime", ccall(c.drv.cuEventElapsed, uintptr(unsafe.Pointer(&ms)), start.h, end.h))
	return ms, err
}

// paramArena is the pinned scratch that holds a launch's parameter values
// and the void* array pointing at them. The driver copies parameters when
// cuLaunchKernel returns, so one arena serves every launch of the thread.
const (
	paramArena = 8192
	maxParams  = paramArena / 16
)

// Launch queues kernel f on s. Arguments may be DevicePtr, Buffer (its
// Ptr), uint64, int64, int (passed as a 32-bit int), int32, uint32,
// float32 or bool (as a 32-bit int); each occupies an 8-byte slot.
func (c *Ctx) Launch(f *Function, grid, block Dim3, shmem int, s Stream, args ...any) error {
	c.writes++
	if len(args) > maxParams {
		return fmt.Errorf("gpu: %s: %d kernel arguments, at most %d", f.Name, len(args), maxParams)
	}
	var small [recMaxParams]uint64
	vals := small[:0]
	if len(args) > recMaxParams {
		vals = make([]uint64, 0, len(args))
	}
	for i, a := range args {
		var v uint64
		switch x := a.(type) {
		case DevicePtr:
			v = uint64(x)
		case Buffer:
			v = uint64(x.Ptr)
		case uint64:
			v = x
		case int64:
			v = uint64(x)
		case int:
			v = uint64(uint32(int32(x)))
		case int32:
			v = uint64(uint32(x))
		case uint32:
			v = uint64(x)
		case float32:
			v = uint64(math.Float32bits(x))
		case bool:
			if x {
				v = 1
			}
		default:
			// reflect.TypeOf keeps args from escaping (fmt's %T would
			// move every boxed argument of every launch to the heap).
			return fmt.Errorf("gpu: %s: unsupported kernel argument %d of type %s", f.Name, i, reflect.TypeOf(a))
		}
		vals = append(vals, v)
	}
	if c.prof != nil && s == c.stream {
		return c.prof.launch(c, f, grid, block, shmem, vals)
	}
	if c.recording() && s == c.stream && len(vals) <= recMaxParams {
		op := recOp{kind: recLaunch, f: f, grid: grid, block: block, shmem: shmem, nparams: len(vals)}
		copy(op.params[:], vals)
		return c.record(op)
	}
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.launchRaw(f, grid, block, shmem, s, vals)
}

// launchRaw issues f with parameter values already packed in 8-byte slots.
func (c *Ctx) launchRaw(f *Function, grid, block Dim3, shmem int, s Stream, vals []uint64) error {
	ptrs := unsafe.Slice((*uintptr)(c.params), maxParams)
	arena := unsafe.Slice((*uint64)(unsafe.Add(c.params, maxParams*8)), maxParams)
	for i, v := range vals {
		arena[i] = v
		ptrs[i] = uintptr(unsafe.Pointer(&arena[i]))
	}
	one := func(n int) uintptr { return uintptr(max(n, 1)) }
	return c.drv.check("cuLaunchKernel("+f.Name+")", ccall(c.drv.cuLaunchKernel, f.h,
		one(grid.X), one(grid.Y), one(grid.Z), one(block.X), one(block.Y), one(block.Z),
		uintptr(shmem), s.h, uintptr(c.params), 0))
}

// SetMaxDynamicShared lets f use up to n bytes of dynamic shared memory
// (needed above 48 KiB).
func (c *Ctx) SetMaxDynamicShared(f *Function, n int) error {
	return c.drv.check("cuFuncSetAttribute", ccall(c.drv.cuFuncSetAttribute, f.h, 8, uintptr(n)))
}

// Graph and GraphExec wrap captured CUDA graphs.
type (
	Graph     struct{ h uintptr }
	GraphExec struct{ h uintptr }
)

// BeginCapture starts capturing the work queued on s into a graph.
func (c *Ctx) BeginCapture(s Stream) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	const threadLocal = 1
	return c.drv.check("cuStreamBeginCapture_v2", ccall(c.drv.cuStreamBeginCapture, s.h, threadLocal))
}

// EndCapture ends a capture started on s and instantiates the graph.
func (c *Ctx) EndCapture(s Stream) (GraphExec, error) {
	var g Graph
	if err := c.drv.check("cuStreamEndCapture", ccall(c.drv.cuStreamEndCapture, s.h, uintptr(unsafe.Pointer(&g.h)))); err != nil {
		return GraphExec{}, err
	}
	defer ccall(c.drv.cuGraphDestroy, g.h)
	var ge GraphExec
	err := c.drv.check("cuGraphInstantiateWithFlags", ccall(c.drv.cuGraphInstantiate, uintptr(unsafe.Pointer(&ge.h)), g.h, 0))
	return ge, err
}

// LaunchGraph queues a replay of ge on s.
func (c *Ctx) LaunchGraph(ge GraphExec, s Stream) error {
	if err := c.flushPending(); err != nil {
		return err
	}
	return c.drv.check("cuGraphLaunch", ccall(c.drv.cuGraphLaunch, ge.h, s.h))
}

// DestroyGraph frees an instantiated graph.
func (c *Ctx) DestroyGraph(ge GraphExec) error {
	return c.drv.check("cuGraphExecDestroy", ccall(c.drv.cuGraphExecDestroy, ge.h))
}
