package gpu

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Host-resident experts (issue 12, item 3).
//
// The placement (placement.go) names the blocks whose stacked routed
// experts (blk.N.ffn_{gate,up,down}_exps.weight) stay in host RAM.
// LoadWeight keeps those tensors where the caller's bytes are (the GGUF
// mmap, which must stay mapped while the backend lives) as weights of a
// CPU backend the GPU backend owns (engine/cpu, one worker per host core),
// and page-locks them for DMA where the driver allows. The block's router
// (ffn_gate_inp) is loaded on the device as usual and also viewed by the
// CPU backend, so either side can route.
//
// An MoE call over host-resident experts runs one of four ways, chosen
// per call (Placement.Run, StreamMinRows):
//
//   - Mapped (offload_mapped.go): the host experts are registered with
//     CU_MEMHOSTREGISTER_DEVICEMAP (read-only where the driver allows), so
//     the device can address them; the device MoE kernels run on views
//     whose weight pointers are that mapped host memory. Routing and top-k
//     stay on the device and the decode GEMVs read only the selected
//     experts' rows across PCIe (a 35B-A3B decode token: 8 of 256 experts,
//     ~14 MB of a 453 MB block). No host round trip: a decode step stays
//     one CUDA graph. Results are bit-identical to the experts in device
//     memory (the same kernels over the same bytes).
//   - CPU: the call's activations are copied to pinned host memory, the CPU
//     backend's MoE runs on all host cores (offload_cpu.go: in parallel
//     phases, bit-identical to cpu.MoE, the numerical reference), and the
//     result is copied back. The device thread waits for it; the copy
//     back is queued asynchronously. In a recorded decode step (graph.go)
//     the synchronous download flushes the recording, so the step becomes
//     several graphs split at each host round trip, each replayed like a
//     whole step would be.
//   - Split (offload_split.go, HostSplit, decode calls only): the device
//     routes, the ids and x come down to pinned memory, then the device
//     runs the mapped GEMVs over some of each token's slots while the host
//     cores compute the others (the CPU path's machinery); the CPU's
//     partial sum is uploaded and added on the device.
//   - Stream: the layer's expert tensors are copied host-to-device on a
//     second stream into one of two staging slots (StreamStagingBytes),
//     and the device MoE kernels run on views of the slot. After issuing a
//     layer, the next host layer is prefetched into the other slot, so its
//     copy overlaps this layer's compute. A layer still in a slot is not
//     copied again (with at most two host layers nothing is re-streamed).
//
// Prefill batches (many rows) amortise one whole-layer copy over many
// tokens; decode touches 8 of 256 experts per token, for which reading
// them where they are is cheaper than moving the layer: HostAuto maps
// calls below StreamMinRows (the CPU where mapping is unavailable) and
// streams the others.
//
// Registration covers each tensor's whole pages: ranges sharing a page
// with an earlier registration (GGUF tensors are 32-byte aligned, so
// neighbours share pages) are merged into one, unregistering the old,
// and a device tensor whose bytes share a page with a registration is
// uploaded from a private copy (loadBounced): the driver refuses a copy
// whose source is partly registered. Tensors under minRegister (64 KiB)
// are not registered (those layers run on the CPU or stream pageable).
// The engine's GGUF mapping is PROT_READ, MAP_SHARED (internal/mmapfile);
// read-only file pages need CU_MEMHOSTREGISTER_READ_ONLY. Where the
// driver refuses to register them and mapping is wanted (HostAuto,
// HostMapped), the tensor is copied once at load into pinned, mapped
// host memory (cuMemHostAlloc DEVICEMAP) and both the CPU and the device
// read the copy: that costs its bytes of locked RAM on top of the page
// cache (which the kernel may then evict, the mmap no longer being read);
// OffloadStats.CopiedBytes says how much.

// OffloadStats counts how host-resident experts ran since the backend
// was opened.
type OffloadStats struct {
	HostLayers    int    // blocks whose experts stay in host RAM
	HostBytes     int64  // routed-expert bytes kept in host RAM
	Pinned        bool   // those bytes are page-locked (registered) for DMA
	PinnedBytes   int64  // how many of them are (registered or copied to pinned memory)
	PinError      string // why a registration failed, if one did
	CPUCalls      int64  // MoE calls computed on the host CPU
	CPUTokens     int64
	CPUTime       time.Duration // wall time of those calls, copies included
	StreamCalls   int64         // MoE calls whose experts were streamed to the device
	StreamTokens  int64
	StreamedBytes int64         // host-to-device bytes of streamed experts
	StreamTime    time.Duration // time the copy stream spent on those bytes (CUDA events; copies seen finished)
	Prefetches    int64         // layer copies issued ahead of their call
	// StreamError says why streaming is off (staging not allocated); the
	// calls it would have streamed ran on the CPU.
	StreamError string
	// CacheHits and CacheMisses count streamed calls whose layer was
	// already in a staging slot (prefetched or still resident) and those
	// that waited for an on-demand copy.
	CacheHits   int64
	CacheMisses int64
	// MappedCalls and MappedTokens count MoE calls the device kernels ran
	// over the experts in mapped host memory; MappedLayers is how many
	// host layers the device could address (resolved at their first
	// mapped call), MapError why one could not (those calls ran on the CPU).
	MappedCalls  int64
	MappedTokens int64
	MappedLayers int
	MapError     string
	// CopiedBytes is host-expert bytes copied at load into pinned, mapped
	// host memory because registering them in place failed (PinError).
	CopiedBytes int64
	// SplitCalls and SplitTokens count MoE calls split between the device
	// (mapped) and the host CPU (HostSplit); SplitCPUSlots is the slots per
	// token the CPU took in the latest one; SplitTime is those calls' wall
	// time on the device thread (from routing to the partial sum queued),
	// SplitCPUTime the host CPU's share of it (the device runs its slots
	// meanwhile).
	SplitCalls    int64
	SplitTokens   int64
	SplitCPUSlots int
	SplitTime     time.Duration
	SplitCPUTime  time.Duration
}

// defaultStreamMinRows is StreamMinRows when the placement leaves it 0:
// under HostAuto, calls of at least this many rows stream their layer,
// smaller ones are mapped (the CPU where mapping is unavailable).
// Measured on the H200 machine (BenchmarkHostExperts, Qwen3.6-35B-A3B
// expert shape in Q4_K, 453 MB a block, PCIe Gen5 x16, 16 host cores,
// 2026-12-02, µs a call): mapped 387 at 1 row, 764 at 2, 2,257 at 4,
// 4,587 at 8 and 13,410 at 32 (22-37 GB/s over the selected experts);
// streamed 7,400 at any rows; the CPU path 1,263 at 1 row and 5,575 at 8.
// Mapped and streamed cross near 15 rows, the CPU and streamed near 11;
// 12 keeps decode batches mapped (or on the CPU) and prefill streamed.
// Both mapped and streamed reads are PCIe-bound, so a slower link moves
// their crossover little; it moves the CPU's up.
const defaultStreamMinRows = 12

// stageAlign aligns each tensor inside a staging slot.
const stageAlign = 256

// StreamStagingBytes is the device memory streaming needs when the
// largest host-resident layer's experts take layerBytes (the planner
// reserves it before placing experts): two slots (double buffering), each
// with room for the alignment of its tensors.
func StreamStagingBytes(layerBytes int64) int64 {
	if layerBytes <= 0 {
		return 0
	}
	return 2 * (layerBytes + 4*stageAlign)
}

// hostPath is how one MoE call over host-resident experts runs.
type hostPath int

const (
	pathCPU    hostPath = iota // the host CPU (offload_cpu.go)
	pathStream                 // the layer copied to a staging slot (offload_stream.go)
	pathMapped                 // device kernels over mapped host memory (offload_mapped.go); the CPU where unavailable
	pathSplit                  // mapped device kernels and the CPU, each over some slots (offload_split.go); the CPU where unmappable
)

// path chooses how an MoE call of rows rows runs.
func (p Placement) path(rows int) hostPath {
	switch p.Run {
	case HostCPU:
		return pathCPU
	case HostStream:
		return pathStream
	case HostMapped:
		return pathMapped
	}
	least := p.StreamMinRows
	if least <= 0 {
		least = defaultStreamMinRows
	}
	if rows >= least {
		return pathStream
	}
	switch p.Run {
	case HostSplit:
		return pathSplit
	case HostCPUDecode:
		return pathCPU
	}
	return pathMapped
}

// mapWanted reports whether some call may read the experts mapped.
func (p Placement) mapWanted() bool {
	return p.Run == HostAuto || p.Run == HostMapped || p.Run == HostSplit
}

// intDot reports whether the host CPU's expert matmuls take the integer
// path (Placement.CPUIntDot, or FTCHAT_CPU_INTDOT=1 as for cpu.New).
func (p Placement) intDot() bool { return p.CPUIntDot || os.Getenv("FTCHAT_CPU_INTDOT") == "1" }

// expertPart is which tensor of a block's MoE a name is.
type expertPart int

const (
	partRouter expertPart = iota + 1
	partGate
	partUp
	partDown
)

// parseHostTensor splits blk.N.<tensor> for the tensors host placement
// concerns: the router and the stacked routed experts (not the shared
// expert, which stays on the device).
func parseHostTensor(name string) (layer int, part expertPart, ok bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, 0, false
	}
	num, tensor, ok := strings.Cut(rest, ".")
	if !ok || num == "" || len(num) > 6 || strings.Trim(num, "0123456789") != "" {
		return 0, 0, false
	}
	layer, err := strconv.Atoi(num)
	if err != nil {
		return 0, 0, false
	}
	switch tensor {
	case "ffn_gate_inp.weight":
		part = partRouter
	case "ffn_gate_exps.weight":
		part = partGate
	case "ffn_up_exps.weight":
		part = partUp
	case "ffn_down_exps.weight":
		part = partDown
	default:
		return 0, 0, false
	}
	return layer, part, true
}

// pageInterior is the page-aligned part [lo, hi) (offsets from addr) of n
// bytes at addr: the part that can be registered without sharing a page
// with a neighbouring tensor's registration.
func pageInterior(addr uintptr, n int64, page int64) (lo, hi int64) {
	start := (int64(addr) + page - 1) / page * page
	end := (int64(addr) + n) / page * page
	if end <= start {
		return 0, 0
	}
	return start - int64(addr), end - int64(addr)
}

// hostExperts is a backend's host-resident expert state.
type hostExperts struct {
	place Placement

	mu     sync.Mutex // guards stats, layers and order
	stats  OffloadStats
	layers map[int]*hostLayer
	order  []int // host layer indices, sorted (built at the first call)
	cpu    *cpu.Backend
	pool   *hostPool    // the CPU path's workers (offload_cpu.go), started at its first call
	regs   []hostReg    // registered host ranges, disjoint (cuMemHostUnregister at close)
	regGen int          // bumped when registrations are merged (mapped views are resolved again)
	copies []HostBuffer // pinned copies of tensors whose registration failed (closed at close)
	pinAll bool         // every host tensor registered so far
	canMap int          // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: 0 unknown, 1 yes, -1 no

	// Device-thread state.
	pinX, pinY HostBuffer             // the CPU path's activations and results
	pinS       HostBuffer             // the split path's ids and weights (offload_split.go)
	splitEv    Event                  // what 1-row split calls wait on (offload_split.go)
	cpuTen     map[int][2]*cpu.Tensor // views of pinX, pinY by row count
	stage      *stager
	stageErr   error
}

// hostLayer is one block's host-resident experts.
type hostLayer struct {
	index          int
	router         model.Weight // the CPU backend's view of ffn_gate_inp
	gate, up, down *hostWeight
	cpuState       *hostMoEState // the CPU path's views and scratch (device thread)
	mapped         [3]Weight     // device views of gate, up, down in mapped host memory
	mapOK          bool          // mapped holds the views
	mapAt          int           // regGen+1 when mapped was resolved, 0: not yet
}

// hostWeight is a stacked-experts tensor kept in host RAM.
type hostWeight struct {
	info         gguf.TensorInfo
	layer        int
	raw          []byte // rows*rowBytes bytes of the caller's mapping
	rows, cols   int
	rowBytes     int64
	cpu          model.Weight // the CPU backend's weight over raw
	scale        []float32    // second-level scales (LoadScaledWeight), nil: none
	devScale     Buffer       // those scales for each expert on the device (first streamed use)
	pinLo, pinHi int64        // registered part of raw
	host         *hostExperts
}

func (w *hostWeight) Info() gguf.TensorInfo { return w.info }

// setSecondScale takes the second-level scale LoadScaledWeight (fp4.go)
// reads from <name>.scale: the CPU backend applies it per expert.
func (w *hostWeight) setSecondScale(scale []float32) error {
	cw, err := w.host.cpu.LoadScaledWeight(w.info, w.raw, scale)
	if err != nil {
		return fmt.Errorf("gpu: host-resident %s: %w", w.info.Name, err)
	}
	w.cpu = cw
	w.scale = slices.Clone(scale)
	return nil
}

func (w *hostWeight) bytes() int64 { return int64(w.rows) * w.rowBytes }

// SetPlacement must be called before the model's weights are loaded.
func (b *Backend) SetPlacement(p Placement) error {
	switch {
	case p.Run < HostAuto || p.Run >= hostRunEnd:
		return fmt.Errorf("gpu: placement: unknown expert run mode %d", p.Run)
	case p.StreamMinRows < 0:
		return fmt.Errorf("gpu: placement: StreamMinRows %d is negative", p.StreamMinRows)
	case p.SplitCPU < 0:
		return fmt.Errorf("gpu: placement: SplitCPU %d is negative", p.SplitCPU)
	case b.host != nil && len(b.host.layers) > 0:
		return fmt.Errorf("gpu: placement set after host-resident experts were loaded; set it before model.Load")
	}
	b.placement = p
	b.host = nil
	if p.HostLayers() > 0 {
		b.host = &hostExperts{place: p, layers: map[int]*hostLayer{}, cpuTen: map[int][2]*cpu.Tensor{}, pinAll: true}
	}
	return nil
}

// OffloadStats reports how host-resident experts ran so far.
func (b *Backend) OffloadStats() OffloadStats {
	h := b.host
	if h == nil {
		return OffloadStats{}
	}
	// No device call: StreamTime has the copies the device thread has seen
	// finish (it looks after each streamed call and before reusing a slot).
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stats
	st.Pinned = h.pinAll && st.HostBytes > 0 && st.PinnedBytes > 0
	return st
}

// cpuBackend returns the CPU backend host experts run on, created with
// the first host tensor: one worker per host core.
func (h *hostExperts) cpuBackend() *cpu.Backend {
	if h.cpu == nil {
		h.cpu = cpu.New(cpu.Options{Threads: runtime.NumCPU(), IntDot: h.place.intDot()})
	}
	return h.cpu
}

func (h *hostExperts) layer(i int) *hostLayer {
	l := h.layers[i]
	if l == nil {
		l = &hostLayer{index: i}
		h.layers[i] = l
	}
	return l
}

// loadHostWeight keeps a host-resident expert tensor in host RAM; ok is
// false for tensors that go to the device. A host block's router goes to
// the device too (ok false), after the CPU backend took a view of it.
func (b *Backend) loadHostWeight(info gguf.TensorInfo, raw []byte) (w model.Weight, ok bool, err error) {
	h := b.host
	if h == nil {
		return nil, false, nil
	}
	layer, part, ok := parseHostTensor(info.Name)
	if !ok || !h.place.OnHost(layer) {
		return b.loadBounced(info, raw)
	}
	h.mu.Lock()
	cb := h.cpuBackend()
	h.mu.Unlock()
	cw, err := cb.LoadWeight(info, raw)
	if err != nil {
		return nil, true, fmt.Errorf("gpu: host-resident %w", err)
	}
	if part == partRouter {
		h.mu.Lock()
		h.layer(layer).router = cw
		h.mu.Unlock()
		return b.loadBounced(info, raw)
	}
	if len(info.Dims) != 3 || info.Dims[2] == 0 {
		return nil, true, fmt.Errorf("gpu: host-resident %s: dims %v, want [in, out, experts]", info.Name, info.Dims)
	}
	t := info.Type
	cols := int(info.Dims[0])
	rows := int(info.Elements() / info.Dims[0])
	hw := &hostWeight{info: info, layer: layer, rows: rows, cols: cols, rowBytes: int64(cols / t.BlockElems() * t.BlockBytes()), cpu: cw, host: h}
	hw.raw = raw[:int64(rows)*hw.rowBytes] // the CPU backend checked the length
	var perr, cerr error
	var copied int64
	if os.Getenv("FTCHAT_PIN_EXPERTS") != "0" {
		// Not under h.mu: work queued before this on the device thread may take it.
		if derr := b.dev.Do(func(c *Ctx) error {
			var pinned bool
			if forceHostCopy {
				perr = fmt.Errorf("registration skipped (test)")
			} else {
				pinned, perr = h.register(c, hw.raw)
			}
			if pinned {
				hw.pinLo, hw.pinHi = 0, hw.bytes()
			} else if perr != nil && h.place.mapWanted() {
				if cerr = h.copyPinned(c, cb, hw); cerr == nil {
					copied = hw.bytes()
				}
			}
			return nil
		}); derr != nil {
			return nil, true, derr
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if perr != nil && h.stats.PinError == "" {
		h.stats.PinError = perr.Error()
		if cerr != nil {
			h.stats.PinError += "; copying to pinned memory: " + cerr.Error()
		}
	}
	h.stats.CopiedBytes += copied
	if hw.pinHi == hw.pinLo {
		h.pinAll = false
	}
	l := h.layer(layer)
	switch part {
	case partGate:
		l.gate = hw
	case partUp:
		l.up = hw
	case partDown:
		l.down = hw
	}
	h.stats.HostLayers = 0
	for _, x := range h.layers {
		if x.gate != nil && x.up != nil && x.down != nil {
			h.stats.HostLayers++
		}
	}
	h.order = nil
	h.stats.HostBytes += hw.bytes()
	h.stats.PinnedBytes += hw.pinHi - hw.pinLo
	return hw, true, nil
}

// CUDA driver flags of cuMemHostRegister and cuMemHostAlloc, and the
// device attribute that says whether host memory can be mapped.
const (
	memHostRegisterDeviceMap = 0x02
	memHostRegisterReadOnly  = 0x08
	memHostAllocDeviceMap    = 0x02
	attrCanMapHostMemory     = 19
)

// hostReg is one registered host range, page-aligned.
type hostReg struct {
	lo, hi uintptr
	flags  uintptr
}

// forceHostCopy makes registration fail (tests of the pinned-copy path).
var forceHostCopy bool

// minRegister is the smallest tensor registered: below it the pageable
// copy costs less than pinning, and a small Go-heap tensor shares its
// pages with other objects, whose copies would then straddle the
// registration (the driver refuses those).
const minRegister = 1 << 16

// register page-locks the pages of p for DMA and maps them for the device
// where it can (read-only where the driver supports it, which file-backed
// read-only mappings need). A range sharing pages with earlier
// registrations replaces them by one registration of the union. On an
// error nothing new is registered (the earlier ranges are restored) and
// the copies go through the driver's pageable path. pinned is false for
// tensors under minRegister.
func (h *hostExperts) register(c *Ctx, p []byte) (pinned bool, err error) {
	if len(p) < minRegister {
		return false, nil
	}
	if h.canMap == 0 {
		var x int32
		ccall(c.drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&x)), attrCanMapHostMemory, uintptr(c.dev))
		h.canMap = -1
		if x != 0 {
			h.canMap = 1
		}
	}
	page := uintptr(os.Getpagesize())
	base := uintptr(unsafe.Pointer(&p[0]))
	lo, hi := base&^(page-1), (base+uintptr(len(p))+page-1)&^(page-1)
	h.mu.Lock()
	regs := h.regs
	h.mu.Unlock()
	lo, hi, keep, merged := mergeRange(regs, lo, hi)
	for _, r := range merged {
		ccall(c.drv.cuMemHostUnregister, r.lo)
	}
	tries := []uintptr{memHostRegisterReadOnly, 0}
	if h.canMap > 0 {
		tries = []uintptr{memHostRegisterDeviceMap | memHostRegisterReadOnly, memHostRegisterDeviceMap, memHostRegisterReadOnly, 0}
	}
	var r uintptr
	for _, f := range tries {
		if r = ccall(c.drv.cuMemHostRegister, lo, hi-lo, f); r == 0 {
			h.mu.Lock()
			h.regs = append(keep, hostReg{lo, hi, f})
			h.mu.Unlock()
			if len(merged) > 0 {
				h.regGen++
			}
			return true, nil
		}
	}
	for _, m := range merged { // as they were
		ccall(c.drv.cuMemHostRegister, m.lo, m.hi-m.lo, m.flags)
	}
	return false, c.drv.check("cuMemHostRegister_v2", r)
}

// mergeRange is the registration replacing [lo, hi) and the disjoint
// ranges regs it overlaps (merged; their union with it is [ulo, uhi)),
// and the ranges it leaves alone (keep).
func mergeRange(regs []hostReg, lo, hi uintptr) (ulo, uhi uintptr, keep, merged []hostReg) {
	ulo, uhi = lo, hi
	for _, r := range regs {
		if r.lo < hi && lo < r.hi {
			ulo, uhi = min(ulo, r.lo), max(uhi, r.hi)
			merged = append(merged, r)
		} else {
			keep = append(keep, r)
		}
	}
	return ulo, uhi, keep, merged
}

// overlapsRegistered reports whether p shares a page with a registered
// range (not being inside one: the host experts themselves are).
func (h *hostExperts) overlapsRegistered(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(&p[0]))
	hi := lo + uintptr(len(p))
	h.mu.Lock()
	defer h.mu.Unlock()
	return overlapsAny(h.regs, lo, hi)
}

func overlapsAny(regs []hostReg, lo, hi uintptr) bool {
	for _, r := range regs {
		if r.lo < hi && lo < r.hi {
			return true
		}
	}
	return false
}

// loadBounced loads a device tensor whose bytes share a page with
// registered host experts (a GGUF's neighbouring tensors do) from a
// private copy: the driver refuses a copy whose source is partly
// registered. ok is false when the tensor needs no copy (LoadWeight
// goes on with the caller's bytes).
func (b *Backend) loadBounced(info gguf.TensorInfo, raw []byte) (w model.Weight, ok bool, err error) {
	if !b.host.overlapsRegistered(raw) {
		return nil, false, nil
	}
	// At least minRegister plus a page: a large allocation, on pages of
	// its own, so the copy overlaps no registration.
	page := os.Getpagesize()
	buf := make([]byte, max(len(raw), minRegister)+page)
	off := (page - int(uintptr(unsafe.Pointer(&buf[0])))%page) % page
	own := buf[off : off+len(raw) : off+len(raw)]
	copy(own, raw)
	if b.host.overlapsRegistered(own) {
		return nil, true, fmt.Errorf("gpu: %s: its private copy shares pages with registered host experts", info.Name)
	}
	w, err = b.LoadWeight(info, own)
	return w, true, err
}

// copyPinned moves a host tensor whose registration failed into pinned,
// device-mapped host memory (cuMemHostAlloc), where the CPU backend and
// the device both read it from then on.
func (h *hostExperts) copyPinned(c *Ctx, cb *cpu.Backend, w *hostWeight) error {
	n := w.bytes()
	var p uintptr
	if err := c.drv.check("cuMemHostAlloc", ccall(c.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), memHostAllocDeviceMap)); err != nil {
		return err
	}
	buf := HostBuffer{p: cptr(p), n: n}
	dst := unsafe.Slice((*byte)(buf.p), n)
	copy(dst, w.raw)
	cw, err := cb.LoadWeight(w.info, dst)
	if err != nil {
		c.FreeHost(buf)
		return err
	}
	w.raw, w.cpu = dst, cw
	w.pinLo, w.pinHi = 0, n
	h.copies = append(h.copies, buf)
	return nil
}

// closeHost releases what host experts hold: registrations, staging,
// pinned buffers and the CPU backend's workers (Backend.Close).
func (b *Backend) closeHost(c *Ctx) {
	h := b.host
	if h == nil {
		return
	}
	c.Sync()
	if h.stage != nil {
		h.stage.free(c)
		h.stage = nil
	}
	h.mu.Lock()
	regs := h.regs
	h.regs = nil
	h.mu.Unlock()
	for _, r := range regs {
		ccall(c.drv.cuMemHostUnregister, r.lo)
	}
	for _, p := range h.copies {
		c.FreeHost(p)
	}
	h.copies = nil
	for _, l := range h.layers {
		for _, w := range []*hostWeight{l.gate, l.up, l.down} {
			if w != nil {
				c.Free(w.devScale)
				w.devScale = Buffer{}
			}
		}
	}
	for _, p := range []*HostBuffer{&h.pinX, &h.pinY, &h.pinS} {
		if p.p != nil {
			c.FreeHost(*p)
			*p = HostBuffer{}
		}
	}
	clear(h.cpuTen)
	if h.splitEv.h != 0 {
		c.DestroyEvent(h.splitEv)
		h.splitEv = Event{}
	}
	if h.pool != nil {
		h.pool.close()
		h.pool = nil
	}
	if h.cpu != nil {
		h.cpu.Close()
		h.cpu = nil
	}
}

// moeHost runs an MoE call whose experts are host-resident and reports
// whether it did (false: the device path runs).
func (b *Backend) moeHost(dst, x model.Tensor, m *model.MoE) bool {
	gate, ok := m.Gate.(*hostWeight)
	if !ok {
		return false
	}
	h := b.host
	up, ok1 := m.Up.(*hostWeight)
	down, ok2 := m.Down.(*hostWeight)
	d, ok3 := b.ten(dst, "MoE")
	s, ok4 := b.ten(x, "MoE")
	router, ok5 := b.wt(m.Router, "MoE router")
	if !ok1 || !ok2 {
		b.fail(fmt.Errorf("gpu: MoE: %s is host-resident but up (%T) or down (%T) is not", gate.info.Name, m.Up, m.Down))
		return true
	}
	if !ok3 || !ok4 || !ok5 {
		return true
	}
	E, K, n, dim := m.Experts, m.TopK, s.rows, s.cols
	if err := checkMoEShapes(" (host experts)", E, K, [2]int{n, dim}, [2]int{router.rows, router.cols}, [2]int{gate.rows, gate.cols},
		[2]int{up.rows, up.cols}, [2]int{down.rows, down.cols}, [2]int{d.rows, d.cols}); err != nil {
		b.fail(err)
		return true
	}
	h.mu.Lock()
	l := h.layers[gate.layer]
	h.mu.Unlock()
	if l == nil || l.gate != gate || l.up != up || l.down != down || l.router == nil {
		b.fail(fmt.Errorf("gpu: MoE: host-resident experts %s are not one loaded block's gate, up and down with its router", gate.info.Name))
		return true
	}
	if n == 0 {
		return true
	}
	path := h.place.path(n)
	mm := *m
	b.post(func(c *Ctx) error {
		var ran bool
		var err error
		switch path {
		case pathStream:
			if l.streamable() {
				ran, err = b.moeStreamed(c, d, s, l, router, &mm)
			}
		case pathMapped:
			ran, err = b.moeMapped(c, d, s, l, router, &mm)
		case pathSplit:
			ran, err = b.moeSplit(c, d, s, l, router, &mm)
		}
		if ran || err != nil {
			return err
		}
		return b.moeOnCPU(c, d, s, l, &mm)
	})
	return true
}

// hostMoEReference runs the CPU path through the CPU backend's own MoE
// instead of hostMoE (FTCHAT_HOST_MOE=reference: the same results, one
// parallel loop per expert matmul; for comparing speed).
var hostMoEReference = os.Getenv("FTCHAT_HOST_MOE") == "reference"

// moeOnCPU is the CPU path (device thread): x down to pinned memory, the
// CPU backend's MoE over the host weights, the result queued back.
func (b *Backend) moeOnCPU(c *Ctx, d, s *Tensor, l *hostLayer, m *model.MoE) error {
	h := b.host
	start := time.Now()
	n, dim := s.rows, s.cols
	nb := int64(n) * int64(dim) * 4
	if err := h.ensurePinned(c, nb); err != nil {
		return err
	}
	if err := c.CopyToHost(h.pinX.p, s.buf.Ptr, nb); err != nil {
		return err
	}
	xt, yt := h.cpuTensors(n, dim)
	if hostMoEReference {
		h.cpu.MoE(yt, xt, &model.MoE{Router: l.router, Gate: l.gate.cpu, Up: l.up.cpu, Down: l.down.cpu,
			Experts: m.Experts, TopK: m.TopK, NormTopK: m.NormTopK})
	} else if err := h.hostMoE(yt, xt, l, m); err != nil {
		return err
	}
	// Asynchronous: the next use of pinY follows a synchronous download,
	// which waits for this copy (also when it is part of a recorded step).
	if err := c.CopyToDeviceAsync(d.buf.Ptr, h.pinY.p, nb); err != nil {
		return err
	}
	h.mu.Lock()
	h.stats.CPUCalls++
	h.stats.CPUTokens += int64(n)
	h.stats.CPUTime += time.Since(start)
	h.mu.Unlock()
	return nil
}

// ensurePinned grows the pinned activation buffers to nb bytes each.
func (h *hostExperts) ensurePinned(c *Ctx, nb int64) error {
	if h.pinX.n >= nb && h.pinY.n >= nb {
		return nil
	}
	if err := c.Sync(); err != nil { // copies may still read the old buffers
		return err
	}
	size := max(nb, 2*h.pinX.n, 1<<20)
	for _, p := range []*HostBuffer{&h.pinX, &h.pinY} {
		if p.p != nil {
			c.FreeHost(*p)
			*p = HostBuffer{}
		}
		var err error
		if *p, err = c.HostAlloc(size); err != nil {
			return fmt.Errorf("gpu: pinned host buffer for host-resident experts: %w", err)
		}
	}
	clear(h.cpuTen)
	return nil
}

// cpuTensors returns CPU-backend tensors of n×dim over pinX and pinY,
// kept per row count so a decode step allocates nothing.
func (h *hostExperts) cpuTensors(n, dim int) (x, y *cpu.Tensor) {
	if t, ok := h.cpuTen[n]; ok && t[0].Cols() == dim {
		return t[0], t[1]
	}
	if len(h.cpuTen) >= 64 {
		clear(h.cpuTen)
	}
	x = newCPUView(h.cpu, n, dim, h.pinX)
	y = newCPUView(h.cpu, n, dim, h.pinY)
	h.cpuTen[n] = [2]*cpu.Tensor{x, y}
	return x, y
}

// newCPUView is a CPU-backend tensor of n×dim whose data is p's memory.
func newCPUView(cb *cpu.Backend, n, dim int, p HostBuffer) *cpu.Tensor {
	t := cb.NewTensor(n, dim).(*cpu.Tensor)
	t.Data = unsafe.Slice((*float32)(p.p), n*dim)
	return t
}

// streamable reports whether the layer's experts can run on the device
// kernels from a staging slot (types the device reads).
func (l *hostLayer) streamable() bool {
	for _, w := range []*hostWeight{l.gate, l.up, l.down} {
		if _, ok := kernelSuffix[w.info.Type]; !ok {
			return false
		}
	}
	return true
}

// nextLayer is the host layer after index in block order (wrapping to
// the first: the next batch starts there), nil with a single host layer.
func (h *hostExperts) nextLayer(index int) *hostLayer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.order == nil {
		for i, l := range h.layers {
			if l.gate != nil && l.up != nil && l.down != nil {
				h.order = append(h.order, i)
			}
		}
		slices.Sort(h.order)
	}
	if len(h.order) < 2 {
		return nil
	}
	i, _ := slices.BinarySearch(h.order, index+1)
	return h.layers[h.order[i%len(h.order)]]
}
