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
// An MoE call over host-resident experts runs one of two ways, chosen per
// call (Placement.Run, StreamMinRows):
//
//   - CPU: the call's activations are copied to pinned host memory, the CPU
//     backend's MoE runs on all host cores (offload_cpu.go: in parallel
//     phases, bit-identical to cpu.MoE, the numerical reference), and the
//     result is copied back. The device thread waits for it; the copy
//     back is queued asynchronously. In a recorded decode step (graph.go)
//     the synchronous download flushes the recording, so the step becomes
//     several graphs split at each host round trip, each replayed like a
//     whole step would be.
//   - Stream: the layer's expert tensors are copied host-to-device on a
//     second stream into one of two staging slots (StreamStagingBytes),
//     and the device MoE kernels run on views of the slot. After issuing a
//     layer, the next host layer is prefetched into the other slot, so its
//     copy overlaps this layer's compute. A layer still in a slot is not
//     copied again (with at most two host layers nothing is re-streamed).
//
// Prefill batches (many rows) amortise one whole-layer copy over many
// tokens; decode touches 8 of 256 experts per token, for which reading
// them where they are, on the CPU, is cheaper than moving the layer.

// OffloadStats counts how host-resident experts ran since the backend
// was opened.
type OffloadStats struct {
	HostLayers    int    // blocks whose experts stay in host RAM
	HostBytes     int64  // routed-expert bytes kept in host RAM
	Pinned        bool   // those bytes are page-locked (registered) for DMA
	PinnedBytes   int64  // how many of them are (Pinned: all but page ends)
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
}

// defaultStreamMinRows is StreamMinRows when the placement leaves it 0:
// under HostAuto, calls of at least this many rows stream their layer.
// Measured on the H200 machine (BenchmarkHostExperts, Qwen3.6-35B-A3B
// expert shape in Q4_K, 453 MB a block, 16 host cores, 2026-12-02): a
// streamed call takes 5.0-6.2 ms whatever its rows (the copy of the next
// block dominates), the CPU 2.6 ms at 1 row, 19.7 ms at 8 and 68 ms at
// 32; the lines cross near 2 rows. 4 leaves single-sequence decode and
// small decode batches on the CPU, where a slower PCIe link (a laptop's
// Gen4 x8 moves that block in ~30 ms) would move the crossover up.
const defaultStreamMinRows = 4

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

// streams reports whether an MoE call of rows rows streams its experts.
func (p Placement) streams(rows int) bool {
	switch p.Run {
	case HostCPU:
		return false
	case HostStream:
		return true
	}
	least := p.StreamMinRows
	if least <= 0 {
		least = defaultStreamMinRows
	}
	return rows >= least
}

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
	pool   *hostPool // the CPU path's workers (offload_cpu.go), started at its first call
	regs   []uintptr // registered host ranges (cuMemHostUnregister at close)
	pinAll bool      // every host tensor registered so far

	// Device-thread state.
	pinX, pinY HostBuffer             // the CPU path's activations and results
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
	case p.Run < HostAuto || p.Run > HostStream:
		return fmt.Errorf("gpu: placement: unknown expert run mode %d", p.Run)
	case p.StreamMinRows < 0:
		return fmt.Errorf("gpu: placement: StreamMinRows %d is negative", p.StreamMinRows)
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
		h.cpu = cpu.New(cpu.Options{Threads: runtime.NumCPU()})
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
		return nil, false, nil
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
		return nil, false, nil
	}
	if len(info.Dims) != 3 || info.Dims[2] == 0 {
		return nil, true, fmt.Errorf("gpu: host-resident %s: dims %v, want [in, out, experts]", info.Name, info.Dims)
	}
	t := info.Type
	cols := int(info.Dims[0])
	rows := int(info.Elements() / info.Dims[0])
	hw := &hostWeight{info: info, layer: layer, rows: rows, cols: cols, rowBytes: int64(cols / t.BlockElems() * t.BlockBytes()), cpu: cw, host: h}
	hw.raw = raw[:int64(rows)*hw.rowBytes] // the CPU backend checked the length
	var perr error
	if os.Getenv("FTCHAT_PIN_EXPERTS") != "0" {
		// Not under h.mu: work queued before this on the device thread may take it.
		if derr := b.dev.Do(func(c *Ctx) error {
			hw.pinLo, hw.pinHi, perr = h.register(c, hw.raw)
			return nil
		}); derr != nil {
			return nil, true, derr
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if perr != nil && h.stats.PinError == "" {
		h.stats.PinError = perr.Error()
	}
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

// CUDA driver flags of cuMemHostRegister.
const memHostRegisterReadOnly = 0x08

// register page-locks the page-aligned interior of p for DMA (read-only
// where the driver supports it, which file-backed read-only mappings
// need) and returns the registered part; 0, 0 and the driver's error when
// it refuses (the copies then go through the driver's pageable path).
func (h *hostExperts) register(c *Ctx, p []byte) (lo, hi int64, err error) {
	if len(p) == 0 {
		return 0, 0, nil
	}
	base := uintptr(unsafe.Pointer(&p[0]))
	lo, hi = pageInterior(base, int64(len(p)), int64(os.Getpagesize()))
	if hi-lo < 1<<16 {
		return 0, 0, nil // small: the pageable copy costs less than pinning
	}
	ptr := base + uintptr(lo)
	r := ccall(c.drv.cuMemHostRegister, ptr, uintptr(hi-lo), memHostRegisterReadOnly)
	if r != 0 {
		r = ccall(c.drv.cuMemHostRegister, ptr, uintptr(hi-lo), 0)
	}
	if err := c.drv.check("cuMemHostRegister_v2", r); err != nil {
		return 0, 0, err
	}
	h.regs = append(h.regs, ptr)
	return lo, hi, nil
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
	for _, p := range h.regs {
		ccall(c.drv.cuMemHostUnregister, p)
	}
	h.regs = nil
	for _, l := range h.layers {
		for _, w := range []*hostWeight{l.gate, l.up, l.down} {
			if w != nil {
				c.Free(w.devScale)
				w.devScale = Buffer{}
			}
		}
	}
	for _, p := range []*HostBuffer{&h.pinX, &h.pinY} {
		if p.p != nil {
			c.FreeHost(*p)
			*p = HostBuffer{}
		}
	}
	clear(h.cpuTen)
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
	if E <= 0 || K <= 0 || K > E || E > 1024 || router.rows != E || router.cols != dim ||
		gate.rows%E != 0 || up.rows != gate.rows || gate.cols != dim || up.cols != dim ||
		down.rows != E*dim || down.cols != gate.rows/E || d.rows != n || d.cols != dim {
		b.fail(fmt.Errorf("gpu: MoE shapes (host experts): x %dx%d, %d experts top-%d, router %dx%d, gate %dx%d, up %dx%d, down %dx%d, dst %dx%d",
			n, dim, E, K, router.rows, router.cols, gate.rows, gate.cols, up.rows, up.cols, down.rows, down.cols, d.rows, d.cols))
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
	stream := h.place.streams(n) && l.streamable()
	mm := *m
	b.post(func(c *Ctx) error {
		if stream {
			ran, err := b.moeStreamed(c, d, s, l, router, &mm)
			if ran || err != nil {
				return err
			}
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
