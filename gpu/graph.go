package gpu

import (
	"fmt"
	"os"
	"slices"
)

// Decode steps as CUDA graphs.
//
// A decode step of a small model is hundreds of tiny kernels, and issuing
// each one costs the host several microseconds (measured ~7 µs per
// cuLaunchKernel on the H200 machine), far more than the kernel runs. While
// a step is recorded (Backend.BeginStep .. EndStep), the stream operations
// the ops would issue (launches, pinned-host-to-device copies, device
// copies, memsets) are appended to a list instead. At the next point that
// needs them done (a synchronous copy, a sync, a free, the end of the step)
// the list is flushed: if an instantiated graph of exactly the same
// operations (kernels, grids, every argument, every address) is cached, it
// is replayed with one cuGraphLaunch; otherwise the list is captured into a
// new graph, which is cached and launched. Replaying is exact because the
// recording is the ground truth: a step whose arguments differ (another
// split count, a grown metadata buffer) simply records a different list.
// Per-step inputs (token ids, positions) reach the kernels through the
// staging ring, which restarts at the same offset every step, so their
// pinned host and device addresses repeat; the graph's copy nodes read the
// host memory when they run, after the step wrote it.

// recMaxParams bounds the arguments of a recorded launch (the kernels take
// at most ~25); a launch with more is issued directly after a flush.
const recMaxParams = 32

// chunkOps: a recording is flushed every chunkOps operations, so that the
// GPU runs the first part of a step while the host still records the rest
// (the flush points fall at the same operations every step, so each chunk
// is replayed like a whole step would be).
const chunkOps = 64

// graphCacheSize is how many instantiated graphs are kept: the chunks of a
// decode step for a few split counts.
const graphCacheSize = 48

// minGraphOps: shorter lists are issued directly (a graph launch costs
// about as much as a few kernel launches).
const minGraphOps = 4

type recKind uint8

const (
	recLaunch recKind = iota
	recH2D
	recD2D
	recMemset32
	recMemset8
)

// recOp is one recorded stream operation; comparable, so that a recording
// can be matched against a cached graph's field by field.
type recOp struct {
	kind        recKind
	f           *Function
	grid, block Dim3
	shmem       int
	nparams     int
	params      [recMaxParams]uint64
	dst, src    uintptr
	size        int64
	val         uint32
}

type cachedGraph struct {
	ops  []recOp
	exec GraphExec
	used uint64
}

// GraphStats counts what the step recorder did (for benchmarks and tests).
type GraphStats struct {
	Captures, Replays, Direct int // flushes by kind
	Disabled                  bool
}

type recorder struct {
	ops    []recOp
	graphs []*cachedGraph
	tick   uint64
	off    bool // capture failed once: issue directly from then on
	stats  GraphStats
	active bool
	// step: the graphs the current (or last) recorded step launched, in
	// order; stepDirect: its operations issued outside graphs.
	step       []GraphExec
	stepDirect int
}

// graphsEnabled reports whether decode steps may become CUDA graphs:
// FTCHAT_CUDA_GRAPHS=0 turns them off (to compare, or to rule them out).
func graphsEnabled() bool { return os.Getenv("FTCHAT_CUDA_GRAPHS") != "0" }

// beginRecording starts recording stream operations on the work stream.
func (c *Ctx) beginRecording() error {
	if err := c.flushRec(); err != nil {
		return err
	}
	c.rec.active = true
	c.rec.step, c.rec.stepDirect = c.rec.step[:0], 0
	if c.prof != nil {
		c.prof.steps++
	}
	return nil
}

// endRecording flushes what the step recorded and stops recording.
func (c *Ctx) endRecording() error {
	err := c.flushRec()
	c.rec.active = false
	return err
}

func (c *Ctx) recording() bool { return c.rec.active }

// record appends op to the current recording.
func (c *Ctx) record(op recOp) error {
	c.rec.ops = append(c.rec.ops, op)
	if len(c.rec.ops) >= chunkOps {
		return c.flushRec()
	}
	return nil
}

// flushRec issues the recorded operations: replaying a cached graph of the
// same list, capturing a new one, or directly for short lists.
func (c *Ctx) flushRec() error {
	r := &c.rec
	if len(r.ops) == 0 {
		return nil
	}
	ops := r.ops
	r.ops = r.ops[:0:0] // cached graphs keep the old backing array
	was := r.active
	r.active = false // issue for real below
	defer func() { r.active = was }()
	if r.off || len(ops) < minGraphOps {
		r.stats.Direct++
		r.stepDirect += len(ops)
		defer func() { r.ops = ops[:0] }() // reuse the array: nothing keeps it
		return c.issue(ops)
	}
	r.tick++
	for _, g := range r.graphs {
		if sameOps(g.ops, ops) {
			g.used = r.tick
			r.stats.Replays++
			r.ops = ops[:0]
			r.step = append(r.step, g.exec)
			return c.LaunchGraph(g.exec, c.stream)
		}
	}
	exec, err := c.captureOps(ops)
	if err != nil {
		// Nothing ran during the failed capture: issue the list directly,
		// and stop using graphs on this device.
		r.off = true
		r.stats.Direct++
		return c.issue(ops)
	}
	r.graphs = append(r.graphs, &cachedGraph{ops: ops, exec: exec, used: r.tick})
	r.stats.Captures++
	r.step = append(r.step, exec)
	if err := c.LaunchGraph(exec, c.stream); err != nil {
		return err
	}
	if len(r.graphs) > graphCacheSize {
		// Evict the least recently used graph (never the new one: it holds
		// the latest tick). A graph still running is freed when it ends.
		lru := 0
		for i, g := range r.graphs {
			if g.used < r.graphs[lru].used {
				lru = i
			}
		}
		exec := r.graphs[lru].exec
		r.graphs = append(r.graphs[:lru], r.graphs[lru+1:]...)
		r.step = slices.DeleteFunc(r.step, func(g GraphExec) bool { return g == exec })
		return c.DestroyGraph(exec)
	}
	return nil
}

func sameOps(a, b []recOp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// captureOps records ops into an instantiated graph without running them.
func (c *Ctx) captureOps(ops []recOp) (GraphExec, error) {
	if err := c.BeginCapture(c.stream); err != nil {
		return GraphExec{}, err
	}
	ierr := c.issue(ops)
	exec, err := c.EndCapture(c.stream)
	if ierr != nil || err != nil {
		if exec.h != 0 {
			c.DestroyGraph(exec)
		}
		return GraphExec{}, fmt.Errorf("gpu: capturing a step of %d ops: %v %v", len(ops), ierr, err)
	}
	return exec, nil
}

// issue runs ops on the work stream in order.
func (c *Ctx) issue(ops []recOp) error {
	for i := range ops {
		op := &ops[i]
		var err error
		switch op.kind {
		case recLaunch:
			err = c.launchRaw(op.f, op.grid, op.block, op.shmem, c.stream, op.params[:op.nparams])
		case recH2D:
			err = c.drv.check("cuMemcpyHtoDAsync_v2", ccall(c.drv.cuMemcpyHtoDAsync, op.dst, op.src, uintptr(op.size), c.stream.h))
		case recD2D:
			err = c.drv.check("cuMemcpyDtoDAsync_v2", ccall(c.drv.cuMemcpyDtoDAsync, op.dst, op.src, uintptr(op.size), c.stream.h))
		case recMemset32:
			err = c.drv.check("cuMemsetD32Async", ccall(c.drv.cuMemsetD32Async, op.dst, uintptr(op.val), uintptr(op.size), c.stream.h))
		case recMemset8:
			err = c.drv.check("cuMemsetD8Async", ccall(c.drv.cuMemsetD8Async, op.dst, uintptr(op.val), uintptr(op.size), c.stream.h))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// destroyGraphs frees the cached graphs (context teardown).
func (c *Ctx) destroyGraphs() {
	for _, g := range c.rec.graphs {
		c.DestroyGraph(g.exec)
	}
	c.rec.graphs = nil
}

// ReplayLastStep launches the graphs of the last recorded step n times
// back to back, with nothing from the host between them, and returns the
// GPU's milliseconds per step: what a step takes when issuing it costs the
// host nothing, so beside the measured step time it tells host-bound from
// kernel-bound. graphs is how many graphs a step has; direct counts its
// operations issued outside graphs, which are not replayed. Replaying
// repeats the step's writes with the same inputs (the same KV slot, the
// same token), so it leaves the state as it was.
func (c *Ctx) ReplayLastStep(n int) (ms float64, graphs, direct int, err error) {
	r := &c.rec
	if r.active {
		return 0, 0, 0, fmt.Errorf("gpu: ReplayLastStep during a recording")
	}
	steps := slices.Clone(r.step)
	if len(steps) == 0 || n <= 0 {
		return 0, 0, r.stepDirect, nil
	}
	start, err := c.NewEvent()
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.DestroyEvent(start)
	end, err := c.NewEvent()
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.DestroyEvent(end)
	if err := c.Record(start, c.stream); err != nil {
		return 0, 0, 0, err
	}
	for range n {
		for _, g := range steps {
			if err := c.LaunchGraph(g, c.stream); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	if err := c.Record(end, c.stream); err != nil {
		return 0, 0, 0, err
	}
	t, err := c.Elapsed(start, end)
	return float64(t) / float64(n), len(steps), r.stepDirect, err
}

// GraphStats returns the step recorder's counters.
func (c *Ctx) GraphStats() GraphStats {
	st := c.rec.stats
	st.Disabled = c.rec.off
	return st
}

// flushPending issues a recording before an operation that must see its
// effects (a synchronous copy, a sync, a free, another stream's work).
func (c *Ctx) flushPending() error {
	if !c.rec.active || len(c.rec.ops) == 0 {
		return nil
	}
	return c.flushRec()
}
