package gpu

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/ftchat/ftchat/engine/model"
)

// Streaming host-resident experts through device staging slots
// (offload.go has the overview).

// stager holds the two staging slots and the stream their copies run on.
type stager struct {
	copy  Stream
	slots [2]stageSlot
	bytes int64 // per slot
	last  int   // slot of the latest streamed call
}

// stageSlot is one staging buffer and the layer it holds.
type stageSlot struct {
	buf            Buffer
	layer          int    // host layer index held, -1 for none
	gate, up, down Weight // device views into buf
	ready, done    Event  // copy finished (copy stream); last compute on it finished (work stream)
	t0, t1         Event  // timing of the latest copy
	timed          bool   // t0, t1 hold a copy not yet counted in StreamTime
	copied         int64  // bytes of that copy
}

const eventDisableTiming = 2 // CU_EVENT_DISABLE_TIMING

// slotLayout is where a layer's gate, up and down go inside a slot and
// the slot bytes they need.
func slotLayout(sizes [3]int64) (offs [3]int64, total int64) {
	for i, n := range sizes {
		offs[i] = total
		total += (n + stageAlign - 1) / stageAlign * stageAlign
	}
	return offs, total
}

func (l *hostLayer) sizes() [3]int64 {
	return [3]int64{l.gate.bytes(), l.up.bytes(), l.down.bytes()}
}

// ensureStage allocates the staging slots at the first streamed call,
// sized for the largest host layer. A failure is kept: streaming stays
// off and those calls run on the CPU (OffloadStats.StreamError).
func (h *hostExperts) ensureStage(c *Ctx) error {
	if h.stage != nil || h.stageErr != nil {
		return h.stageErr
	}
	var need int64
	h.mu.Lock()
	for _, l := range h.layers {
		if l.gate != nil && l.up != nil && l.down != nil && l.streamable() {
			_, n := slotLayout(l.sizes())
			need = max(need, n)
		}
	}
	h.mu.Unlock()
	st := &stager{bytes: need}
	err := st.init(c)
	if err != nil {
		st.free(c)
		h.stageErr = fmt.Errorf("gpu: staging for streamed experts (2 x %d bytes): %w", need, err)
		h.mu.Lock()
		h.stats.StreamError = h.stageErr.Error()
		h.mu.Unlock()
		return h.stageErr
	}
	h.stage = st
	return nil
}

func (st *stager) init(c *Ctx) error {
	if st.bytes <= 0 {
		return fmt.Errorf("no streamable host layer")
	}
	var err error
	if st.copy, err = c.NewStream(); err != nil {
		return err
	}
	for i := range st.slots {
		s := &st.slots[i]
		s.layer = -1
		if s.buf, err = c.Alloc(st.bytes, "streamed-experts staging slot"); err != nil {
			return err
		}
		for _, e := range []*Event{&s.ready, &s.done} {
			if err := c.drv.check("cuEventCreate", ccall(c.drv.cuEventCreate, uintptr(unsafe.Pointer(&e.h)), eventDisableTiming)); err != nil {
				return err
			}
		}
		if s.t0, err = c.NewEvent(); err != nil {
			return err
		}
		if s.t1, err = c.NewEvent(); err != nil {
			return err
		}
	}
	return nil
}

func (st *stager) free(c *Ctx) {
	if st.copy.h != 0 {
		c.SyncStream(st.copy)
	}
	for i := range st.slots {
		s := &st.slots[i]
		c.Free(s.buf)
		for _, e := range []Event{s.ready, s.done, s.t0, s.t1} {
			if e.h != 0 {
				c.DestroyEvent(e)
			}
		}
		*s = stageSlot{layer: -1}
	}
	if st.copy.h != 0 {
		c.DestroyStream(st.copy)
		st.copy = Stream{}
	}
}

// harvestDone adds the times of the copies that have finished to the
// stats, without waiting for the others.
func (st *stager) harvestDone(c *Ctx, h *hostExperts) {
	for i := range st.slots {
		s := &st.slots[i]
		if s.timed && ccall(c.drv.cuEventQuery, s.t1.h) == 0 {
			s.harvest(c, h)
		}
	}
}

// harvest adds the slot's latest copy time to the stats, waiting for it.
func (s *stageSlot) harvest(c *Ctx, h *hostExperts) {
	if !s.timed {
		return
	}
	s.timed = false
	ms, err := c.Elapsed(s.t0, s.t1)
	if err != nil {
		return
	}
	h.mu.Lock()
	h.stats.StreamTime += time.Duration(float64(ms) * float64(time.Millisecond))
	h.mu.Unlock()
}

// fill queues the copy of layer l's experts into slot i on the copy
// stream, after the last compute that read the slot.
func (st *stager) fill(c *Ctx, h *hostExperts, i int, l *hostLayer) error {
	s := &st.slots[i]
	s.harvest(c, h)
	if err := c.flushPending(); err != nil {
		return err
	}
	if err := c.drv.check("cuStreamWaitEvent", ccall(c.drv.cuStreamWaitEvent, st.copy.h, s.done.h, 0)); err != nil {
		return err
	}
	if err := c.drv.check("cuEventRecord", ccall(c.drv.cuEventRecord, s.t0.h, st.copy.h)); err != nil {
		return err
	}
	s.layer = -1
	offs, _ := slotLayout(l.sizes())
	var total int64
	views := [3]*Weight{&s.gate, &s.up, &s.down}
	for j, w := range [3]*hostWeight{l.gate, l.up, l.down} {
		dst := s.buf.Ptr.Add(offs[j])
		if err := copyHostWeight(c, st.copy, dst, w); err != nil {
			return err
		}
		sc, err := w.deviceScales(c)
		if err != nil {
			return err
		}
		// f32 holds stacked experts' per-expert scales (Weight.expertScales).
		*views[j] = Weight{info: w.info, rows: w.rows, cols: w.cols, rowBytes: w.rowBytes,
			raw: Buffer{Ptr: dst, Size: w.bytes()}, f32: sc}
		total += w.bytes()
	}
	for _, e := range []Event{s.t1, s.ready} {
		if err := c.drv.check("cuEventRecord", ccall(c.drv.cuEventRecord, e.h, st.copy.h)); err != nil {
			return err
		}
	}
	s.layer, s.timed, s.copied = l.index, true, total
	h.mu.Lock()
	h.stats.StreamedBytes += total
	h.mu.Unlock()
	return nil
}

// copyHostWeight queues w's bytes to dst on stream s: the registered
// interior as one DMA, the unregistered page ends (or everything, when
// registration failed) through the driver's pageable path.
func copyHostWeight(c *Ctx, s Stream, dst DevicePtr, w *hostWeight) error {
	n := w.bytes()
	lo, hi := w.pinLo, w.pinHi
	if hi <= lo {
		lo, hi = 0, 0
	}
	for _, part := range [][2]int64{{0, lo}, {lo, hi}, {hi, n}} {
		if part[1] <= part[0] {
			continue
		}
		src := uintptr(unsafe.Pointer(&w.raw[part[0]]))
		if err := c.drv.check("cuMemcpyHtoDAsync_v2", ccall(c.drv.cuMemcpyHtoDAsync, uintptr(dst.Add(part[0])), src, uintptr(part[1]-part[0]), s.h)); err != nil {
			return err
		}
	}
	return nil
}

// acquire returns a slot holding layer l, queuing its copy when no slot
// has it, and makes the work stream wait for the copy.
func (st *stager) acquire(c *Ctx, h *hostExperts, l *hostLayer) (int, error) {
	i := -1
	for j := range st.slots {
		if st.slots[j].layer == l.index {
			i = j
		}
	}
	h.mu.Lock()
	if i >= 0 {
		h.stats.CacheHits++
	} else {
		h.stats.CacheMisses++
	}
	h.mu.Unlock()
	if i < 0 {
		i = 1 - st.last // the slot the latest call did not use
		if err := st.fill(c, h, i, l); err != nil {
			return 0, err
		}
	}
	if err := c.flushPending(); err != nil {
		return 0, err
	}
	return i, c.drv.check("cuStreamWaitEvent", ccall(c.drv.cuStreamWaitEvent, c.stream.h, st.slots[i].ready.h, 0))
}

// moeStreamed is the streaming path (device thread): the layer's experts
// in a staging slot, the device MoE over views of it, then the next host
// layer prefetched into the other slot. ran is false when staging is
// unavailable (the caller runs the CPU path).
func (b *Backend) moeStreamed(c *Ctx, d, s *Tensor, hl *hostLayer, router *Weight, m *model.MoE) (ran bool, err error) {
	h := b.host
	if h.ensureStage(c) != nil {
		return false, nil
	}
	st := h.stage
	i, err := st.acquire(c, h, hl)
	if err != nil {
		return true, err
	}
	slot := &st.slots[i]
	n, dim := s.rows, s.cols
	l := moeLayer{router: router, gate: &slot.gate, up: &slot.up, down: &slot.down, E: m.Experts, K: m.TopK, dim: dim,
		ff: slot.gate.rows / m.Experts, norm: m.NormTopK,
		gateScale: slot.gate.expertScales(), upScale: slot.up.expertScales(), downScale: slot.down.expertScales()}
	if err := b.moeDevice(c, d.buf.Ptr, s.buf.Ptr, n, l, moeForce.Load()); err != nil {
		return true, err
	}
	if err := c.Record(slot.done, c.stream); err != nil {
		return true, err
	}
	st.last = i
	h.mu.Lock()
	h.stats.StreamCalls++
	h.stats.StreamTokens += int64(n)
	h.mu.Unlock()
	st.harvestDone(c, h)
	next := h.nextLayer(hl.index)
	if next == nil || !next.streamable() || st.slots[1-i].layer == next.index {
		return true, nil
	}
	if err := st.fill(c, h, 1-i, next); err != nil {
		return true, err
	}
	h.mu.Lock()
	h.stats.Prefetches++
	h.mu.Unlock()
	return true, nil
}

// deviceScales uploads, once, the weight's second-level scale for each
// expert (as LoadScaledWeight keeps a device weight's); a zero Buffer
// when it has none.
func (w *hostWeight) deviceScales(c *Ctx) (Buffer, error) {
	if w.scale == nil || w.devScale.Ptr != 0 {
		return w.devScale, nil
	}
	E := int(w.info.Dims[2])
	vec := make([]float32, E)
	for i := range vec {
		vec[i] = w.scale[min(i, len(w.scale)-1)]
	}
	buf, err := c.Alloc(int64(E)*4, "per-expert scales of host-resident "+w.info.Name)
	if err != nil {
		return Buffer{}, err
	}
	if err := Upload(c, buf.Ptr, vec); err != nil {
		c.Free(buf)
		return Buffer{}, err
	}
	w.devScale = buf
	return buf, nil
}
