package gpu

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unsafe"
)

// Per-kernel profile (FTCHAT_PROFILE=1).
//
// Nsight Systems does not run on the lent H200 machines, so the backend
// can time its own launches: with FTCHAT_PROFILE=1 every kernel launch on
// the work stream is issued directly (a decode step's kernels leave its
// CUDA graph) between two CUDA events, and so is every device-to-host copy.
// The events are read in batches, so the host does not wait per launch.
// When the device closes, a table of time per kernel (name and grid) is
// written to stderr, and to the file $FTCHAT_PROFILE_OUT when set: calls
// and microseconds per decode step (the launches between BeginStep and
// EndStep) and, separately, the launches outside steps (prefill, uploads).
// MatMul notes the weight bytes and FLOPs of its launch, so GEMV rows
// carry GB/s and GEMM rows TFLOP/s.
//
// What it measures is each kernel's own run time: the host's launch cost
// and the gaps between kernels are left out by construction, and direct
// launches make the profiled step slower than a graph replay. The sum of a
// step's kernel times against the step time of an unprofiled run is the
// share that launches, gaps and host work take.

// profileEnabled reports whether FTCHAT_PROFILE asks for the profile.
func profileEnabled() bool { return os.Getenv("FTCHAT_PROFILE") == "1" }

// profDrainAt: pending event pairs are read once this many are queued.
const profDrainAt = 2048

type profPhase uint8

const (
	profOutside profPhase = iota // prefill and everything not in a decode step
	profStep                     // between BeginStep and EndStep
)

type profKey struct {
	phase profPhase
	name  string
	grid  Dim3
}

type profStat struct {
	calls        int
	ms           float64
	bytes, flops float64 // summed over calls (0 where not noted)
}

type profPending struct {
	key          profKey
	start, end   Event
	bytes, flops float64
}

type profiler struct {
	free    []Event
	pending []profPending
	stats   map[profKey]*profStat
	steps   int
	err     error // first driver error; profiling stops after it

	// What MatMul noted for the next launch.
	noteBytes, noteFlops float64
}

func newProfiler() *profiler { return &profiler{stats: map[profKey]*profStat{}} }

// profNote records the weight bytes read and FLOPs of the next launch
// (no-op unless profiling).
func (c *Ctx) profNote(bytes, flops float64) {
	if c.prof != nil {
		c.prof.noteBytes, c.prof.noteFlops = bytes, flops
	}
}

func (p *profiler) event(c *Ctx) (Event, error) {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e, nil
	}
	return c.NewEvent()
}

func (p *profiler) phase(c *Ctx) profPhase {
	if c.rec.active {
		return profStep
	}
	return profOutside
}

// timed issues op between two events and queues the pair under key.
func (p *profiler) timed(c *Ctx, key profKey, bytes, flops float64, op func() error) error {
	if p.err != nil {
		return op()
	}
	if err := c.flushPending(); err != nil { // recorded copies and memsets go first
		return err
	}
	e0, err := p.event(c)
	if err != nil {
		p.err = err
		return op()
	}
	e1, err := p.event(c)
	if err != nil {
		p.err = err
		return op()
	}
	if err := c.drv.check("cuEventRecord", ccall(c.drv.cuEventRecord, e0.h, c.stream.h)); err != nil {
		p.err = err
	}
	if err := op(); err != nil {
		return err
	}
	if err := c.drv.check("cuEventRecord", ccall(c.drv.cuEventRecord, e1.h, c.stream.h)); err != nil {
		p.err = err
	}
	p.pending = append(p.pending, profPending{key: key, start: e0, end: e1, bytes: bytes, flops: flops})
	if len(p.pending) >= profDrainAt {
		p.drain(c)
	}
	return nil
}

// launch times one kernel launch on the work stream.
func (p *profiler) launch(c *Ctx, f *Function, grid, block Dim3, shmem int, vals []uint64) error {
	bytes, flops := p.noteBytes, p.noteFlops
	p.noteBytes, p.noteFlops = 0, 0
	key := profKey{phase: p.phase(c), name: f.Name, grid: grid}
	return p.timed(c, key, bytes, flops, func() error { return c.launchRaw(f, grid, block, shmem, c.stream, vals) })
}

// copyToHost times one device-to-host copy (without its synchronisation).
func (p *profiler) copyToHost(c *Ctx, dst unsafe.Pointer, src DevicePtr, n int64) error {
	key := profKey{phase: p.phase(c), name: "memcpy DtoH"}
	return p.timed(c, key, float64(n), 0, func() error {
		return c.drv.check("cuMemcpyDtoHAsync_v2", ccall(c.drv.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream.h))
	})
}

// drain waits for the pending events and adds their times to the stats.
func (p *profiler) drain(c *Ctx) {
	for _, q := range p.pending {
		if p.err == nil {
			ms, err := c.Elapsed(q.start, q.end)
			if err != nil {
				p.err = err
			} else {
				s := p.stats[q.key]
				if s == nil {
					s = &profStat{}
					p.stats[q.key] = s
				}
				s.calls++
				s.ms += float64(ms)
				s.bytes += q.bytes
				s.flops += q.flops
			}
		}
		p.free = append(p.free, q.start, q.end)
	}
	p.pending = p.pending[:0]
}

// destroy frees the events (context teardown).
func (p *profiler) destroy(c *Ctx) {
	for _, e := range p.free {
		c.DestroyEvent(e)
	}
	p.free = nil
}

// profRow is one line of the report.
type profRow struct {
	key       profKey
	stat      profStat
	perStepUS float64 // µs per decode step (step rows)
}

// report writes the profile as two markdown tables.
func (p *profiler) report(w io.Writer, device string) {
	var rows []profRow
	var stepUS, outUS float64
	for k, s := range p.stats {
		r := profRow{key: k, stat: *s}
		if k.phase == profStep && p.steps > 0 {
			r.perStepUS = s.ms * 1e3 / float64(p.steps)
			stepUS += r.perStepUS
		} else {
			outUS += s.ms * 1e3
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b profRow) int {
		if a.key.phase != b.key.phase {
			return cmp.Compare(b.key.phase, a.key.phase) // steps first
		}
		return cmp.Compare(b.stat.ms, a.stat.ms)
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nFTCHAT_PROFILE: %s, %d decode steps, kernel time %.1f µs per step (launch gaps and host time not included)\n", device, p.steps, stepUS)
	if p.err != nil {
		fmt.Fprintf(&sb, "profile incomplete: %v\n", p.err)
	}
	rate := func(s profStat) (gbs, tflops string) {
		sec := s.ms * 1e-3
		if s.bytes > 0 && sec > 0 {
			gbs = fmt.Sprintf("%.0f", s.bytes/sec/1e9)
		}
		if s.flops > 0 && sec > 0 {
			tflops = fmt.Sprintf("%.1f", s.flops/sec/1e12)
		}
		return
	}
	grid := func(d Dim3) string {
		if d == (Dim3{}) {
			return ""
		}
		return fmt.Sprintf("%dx%dx%d", max(d.X, 1), max(d.Y, 1), max(d.Z, 1))
	}
	if p.steps > 0 {
		fmt.Fprintf(&sb, "\n| decode step: kernel | grid | calls/step | µs/call | µs/step | share | GB/s | TFLOP/s |\n|---|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			if r.key.phase != profStep {
				continue
			}
			gbs, tf := rate(r.stat)
			fmt.Fprintf(&sb, "| %s | %s | %.2f | %.2f | %.1f | %.1f%% | %s | %s |\n", r.key.name, grid(r.key.grid),
				float64(r.stat.calls)/float64(p.steps), r.stat.ms*1e3/float64(r.stat.calls), r.perStepUS,
				100*r.perStepUS/stepUS, gbs, tf)
		}
	}
	fmt.Fprintf(&sb, "\noutside decode steps (prefill, uploads): kernel time %.1f µs in all\n", outUS)
	fmt.Fprintf(&sb, "\n| outside steps: kernel | grid | calls | µs/call | µs total | share | GB/s | TFLOP/s |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.key.phase != profOutside {
			continue
		}
		gbs, tf := rate(r.stat)
		fmt.Fprintf(&sb, "| %s | %s | %d | %.2f | %.1f | %.1f%% | %s | %s |\n", r.key.name, grid(r.key.grid), r.stat.calls,
			r.stat.ms*1e3/float64(r.stat.calls), r.stat.ms*1e3, 100*r.stat.ms*1e3/max(outUS, 1e-9), gbs, tf)
	}
	io.WriteString(w, sb.String())
}

// finishProfile reads what is pending, writes the report and frees the
// events (called from the context's teardown).
func (c *Ctx) finishProfile() {
	p := c.prof
	if p == nil {
		return
	}
	p.drain(c)
	p.destroy(c)
	name := c.d.info.Name
	p.report(os.Stderr, name)
	if path := os.Getenv("FTCHAT_PROFILE_OUT"); path != "" {
		if f, err := os.Create(path); err == nil {
			p.report(f, name)
			f.Close()
		} else {
			fmt.Fprintf(os.Stderr, "FTCHAT_PROFILE_OUT: %v\n", err)
		}
	}
	c.prof = nil
}
