package gpu

import (
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/ftchat/ftchat/engine/model"
)

// The split path (HostSplit; offload.go has the overview): a decode MoE
// call over host-resident experts whose selected experts are read by the
// device (mapped, over PCIe) and by the host cores at once.
//
// On the device thread: the device routes (router and top-k, as every
// path), x, the ids and the weights come down to pinned memory (one
// synchronous wait, which flushes a recorded step: graph.go), the host
// splits each token's K slots into the first K-c (the device's, packed
// into pinned memory and queued up) and the last c (the CPU's). The
// device's GEMVs over its slots are issued (the recording flushed) before
// the host computes its slots with the CPU path's machinery (expertSum),
// so the two run concurrently; then the CPU's partial sum is queued up
// and added to dst on the device. In a recorded step the partial's copy
// is a graph node that reads the pinned buffer when it runs, which is
// after the host wrote it (the recording is flushed later); the next call
// writes that buffer only after its own synchronous wait, so after the
// copy ran.
//
// A 1-row call (decode of one sequence) skips the packing: the device's
// slots are then the first kg of the routing's own ids, so its GEMVs are
// queued right behind the downloads, and the host waits for an event
// recorded after the downloads instead of for the stream: the device
// starts its slots without waiting for the host's round trip
// (FTCHAT_SPLIT_EARLY=0 packs 1-row calls too, to compare).
//
// The result is the same sum as the device MoE's, in another order (the
// device adds its K-c slots, then the CPU's c slots, each computed by the
// CPU backend's kernels): not bit-identical to either reference.

// Measured rates a split's default is derived from (H200 machine: PCIe
// Gen5 x16, 16 Xeon cores; BenchmarkHostExperts, docs/benchmarks.md): the
// device reads mapped experts at ~37 GB/s (387 µs for a 1-row call's 14.2
// MB), the CPU path computes ~11 GB/s on the float kernels (1,263 µs).
// The integer-dot rate is an estimate until measured there: the float
// rate times 2.5, a little under the 2.9× single-core gain of the Q4_K
// integer kernels (the phases' barriers do not speed up).
const (
	splitMappedGBs = 37.0
	splitCPUGBs    = 11.0
	splitCPUIntGBs = 27.5
)

// splitEarly: 1-row split calls queue the device's GEMVs before the host
// wait (see above).
var splitEarly = os.Getenv("FTCHAT_SPLIT_EARLY") != "0"

// splitCPUSlots is how many of each token's k slots the CPU takes when
// the device reads at gpuGBs and the CPU computes at cpuGBs: the largest
// c whose CPU time c/cpuGBs stays within the device's (k-c)/gpuGBs (both
// sides then finish together or the device last; the host's round trip
// comes on top of the CPU's side), at least 1 for k > 1.
func splitCPUSlots(k int, gpuGBs, cpuGBs float64) int {
	c := int(float64(k) * cpuGBs / (cpuGBs + gpuGBs))
	return max(min(c, k-1), min(1, k-1), 0)
}

// splitCPU is the CPU's slots of a split call with top-k k: Placement.SplitCPU,
// else FTCHAT_SPLIT_CPU, else the default for the CPU path's kernels; at
// most k (then the CPU computes every slot, with the device's routing).
func (p Placement) splitCPU(k int) (int, error) {
	c := p.SplitCPU
	if c == 0 {
		if v := os.Getenv("FTCHAT_SPLIT_CPU"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("gpu: FTCHAT_SPLIT_CPU=%q: want a number of slots (0 to the model's top-k)", v)
			}
			if n == 0 {
				return 0, nil
			}
			c = n
		}
	}
	if c == 0 {
		rate := splitCPUGBs
		if p.intDot() {
			rate = splitCPUIntGBs
		}
		c = splitCPUSlots(k, splitMappedGBs, rate)
	}
	return min(c, k), nil
}

// moeSplit is the split path (device thread). ran is false when the
// layer cannot be mapped (the caller runs the CPU path); a call the split
// does not apply to (no CPU slots, shapes without the decode GEMVs) runs
// mapped.
func (b *Backend) moeSplit(c *Ctx, d, s *Tensor, hl *hostLayer, router *Weight, m *model.MoE) (ran bool, err error) {
	h := b.host
	n, dim, E, K := s.rows, s.cols, m.Experts, m.TopK
	kc, err := h.place.splitCPU(K)
	if err != nil {
		return true, err
	}
	if !h.mapLayer(c, hl) {
		return false, nil
	}
	g, u, dn := &hl.mapped[0], &hl.mapped[1], &hl.mapped[2]
	l := moeLayer{router: router, gate: g, up: u, down: dn, E: E, K: K, dim: dim, ff: g.rows / E, norm: m.NormTopK,
		gateScale: g.expertScales(), upScale: u.expertScales(), downScale: dn.expertScales()}
	gemvs := g.info.Type == u.info.Type && dim%32 == 0 && l.ff%32 == 0 && K <= 32
	if kc == 0 || !gemvs || n*K > 65535 || moeForce.Load() == 3 {
		return b.moeMapped(c, d, s, hl, router, m)
	}
	// The split call's own operations are issued directly, never replayed
	// from a cached graph: TestHostExpertSplit crashed inside cuGraphLaunch
	// on the H200 (2026-12-02, IntDot, recorded, packed ids) when the
	// [ids, weights, gate/up, down] list was replayed. The layer already
	// waits for the host, so its graph saved little.
	if err := c.flushPending(); err != nil {
		return true, err
	}
	if was := c.rec.active; was {
		c.rec.active = false
		defer func() { c.rec.active = was }()
	}
	start := time.Now()
	kg := K - kc
	ff := l.ff
	p, done, err := b.moeScratch(c, "MoE split scratch", n*E*4, n*K*4, n*K*4, max(n*kg*ff, 1)*4, n*dim*4)
	if err != nil {
		return true, err
	}
	defer done()
	logits, ids, wts, hb, yc := p[0], p[1], p[2], p[3], p[4]
	if err := b.moeRoute(c, s.buf.Ptr, n, l, logits, ids, wts, hb, max(n*kg*ff, 1)*4); err != nil {
		return true, err
	}

	// x, ids and weights down (one wait); pinS holds the downloaded ids
	// and weights, then the device's packed ones.
	nb := int64(n) * int64(dim) * 4
	pairs := int64(n * K)
	if err := h.ensurePinned(c, nb); err != nil {
		return true, err
	}
	if err := h.ensureSplitPinned(c, 4*pairs*4); err != nil {
		return true, err
	}
	pin := unsafe.Slice((*int32)(h.pinS.p), 4*pairs)
	pinW := unsafe.Slice((*float32)(h.pinS.p), 4*pairs)
	allIds, allW := pin[:pairs], pinW[pairs:2*pairs]
	gIds, gW := pin[2*pairs:2*pairs+int64(n*kg)], pinW[3*pairs:3*pairs+int64(n*kg)]
	// gpuSlots queues the device's GEMVs over its kg slots a token (ids and
	// weights packed per token, kg each) into dst, and issues them.
	gpuSlots := func(ids, wts DevicePtr) error {
		if err := b.launch(c, "moe_gemv_gu_"+kernelSuffix[g.info.Type], Dim3{X: cdiv(ff, moeRows), Y: n * kg}, Dim3{X: 256},
			g.raw, u.raw, g.rowBytes, ff, dim, s.buf.Ptr, kg, ids, hb, l.gateScale, l.upScale); err != nil {
			return err
		}
		if err := b.launch(c, "moe_gemv_dn_"+kernelSuffix[dn.info.Type], Dim3{X: cdiv(dim, moeRows), Y: n}, Dim3{X: 256},
			dn.raw, dn.rowBytes, dim, ff, hb, kg, ids, wts, d.buf.Ptr, l.downScale); err != nil {
			return err
		}
		return c.flushPending() // the device starts its slots now
	}
	early := n == 1 && kg > 0 && splitEarly
	if err := c.flushPending(); err != nil { // the routing first
		return true, err
	}
	for _, cp := range []struct {
		dst unsafe.Pointer
		src DevicePtr
		n   int64
	}{{h.pinX.p, s.buf.Ptr, nb}, {unsafe.Pointer(&allIds[0]), ids, pairs * 4}, {unsafe.Pointer(&allW[0]), wts, pairs * 4}} {
		if err := c.d2hAsync(cp.dst, cp.src, cp.n); err != nil {
			return true, err
		}
	}
	if early {
		ev, err := h.splitEvent(c)
		if err != nil {
			return true, err
		}
		if err := c.Record(ev, c.Stream()); err != nil {
			return true, err
		}
		if err := gpuSlots(ids, wts); err != nil { // one row: its first kg slots are the routing's first kg
			return true, err
		}
		if err := c.drv.check("cuEventSynchronize", ccall(c.drv.cuEventSynchronize, ev.h)); err != nil {
			return true, err
		}
	} else if err := c.Sync(); err != nil {
		return true, err
	}

	// Each token's first kg slots to the device, the last kc to the CPU.
	st := hl.state(E, dim)
	st.splitIds, st.splitW = grow(st.splitIds, n*kc), grow(st.splitW, n*kc)
	for r := range n {
		copy(gIds[r*kg:(r+1)*kg], allIds[r*K:r*K+kg])
		copy(gW[r*kg:(r+1)*kg], allW[r*K:r*K+kg])
		copy(st.splitIds[r*kc:(r+1)*kc], allIds[r*K+kg:(r+1)*K])
		copy(st.splitW[r*kc:(r+1)*kc], allW[r*K+kg:(r+1)*K])
	}
	if kg > 0 && !early {
		if err := c.CopyToDeviceAsync(ids, unsafe.Pointer(&gIds[0]), int64(n*kg)*4); err != nil {
			return true, err
		}
		if err := c.CopyToDeviceAsync(wts, unsafe.Pointer(&gW[0]), int64(n*kg)*4); err != nil {
			return true, err
		}
		if err := gpuSlots(ids, wts); err != nil {
			return true, err
		}
	}

	// The CPU's slots into pinY while the device runs its own.
	cpuStart := time.Now()
	xt, yt := h.cpuTensors(n, dim)
	if err := h.expertSum(yt, xt, hl, E, st.splitIds, st.splitW, kc); err != nil {
		return true, err
	}
	cpuTime := time.Since(cpuStart)
	if kg == 0 {
		err = c.CopyToDeviceAsync(d.buf.Ptr, h.pinY.p, nb)
	} else if err = c.CopyToDeviceAsync(yc, h.pinY.p, nb); err == nil {
		err = b.launch(c, "add", Dim3{X: cdiv(n*dim, 256)}, Dim3{X: 256}, d.buf.Ptr, yc, int64(n*dim))
	}
	if err != nil {
		return true, err
	}
	h.mu.Lock()
	h.stats.SplitCalls++
	h.stats.SplitTokens += int64(n)
	h.stats.SplitCPUSlots = kc
	h.stats.SplitTime += time.Since(start)
	h.stats.SplitCPUTime += cpuTime
	h.mu.Unlock()
	return true, nil
}

// splitEvent is the event 1-row split calls wait on, made at the first.
func (h *hostExperts) splitEvent(c *Ctx) (Event, error) {
	if h.splitEv.h == 0 {
		if err := c.drv.check("cuEventCreate", ccall(c.drv.cuEventCreate, uintptr(unsafe.Pointer(&h.splitEv.h)), eventDisableTiming)); err != nil {
			h.splitEv = Event{}
			return Event{}, err
		}
	}
	return h.splitEv, nil
}

// ensureSplitPinned grows the split path's pinned buffer to nb bytes.
func (h *hostExperts) ensureSplitPinned(c *Ctx, nb int64) error {
	if h.pinS.n >= nb {
		return nil
	}
	if err := c.Sync(); err != nil { // copies may still read the old buffer
		return err
	}
	if h.pinS.p != nil {
		c.FreeHost(h.pinS)
		h.pinS = HostBuffer{}
	}
	var err error
	if h.pinS, err = c.HostAlloc(max(nb, 64<<10)); err != nil {
		return fmt.Errorf("gpu: pinned host buffer for split expert calls: %w", err)
	}
	return nil
}
