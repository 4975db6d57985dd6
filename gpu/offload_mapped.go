package gpu

import (
	"fmt"
	"unsafe"

	"github.com/ftchat/ftchat/engine/model"
)

// Host-resident experts read in place by the device kernels over PCIe
// (zero-copy mapped host memory; offload.go has the overview).

// mapLayer resolves, once per registration generation, the device
// addresses of the layer's expert tensors in mapped host memory and
// builds device weight views over them; false when the device cannot
// address them (the reason goes to OffloadStats.MapError).
func (h *hostExperts) mapLayer(c *Ctx, l *hostLayer) bool {
	if l.mapAt == h.regGen+1 {
		return l.mapOK
	}
	was := l.mapOK
	l.mapAt, l.mapOK = h.regGen+1, false
	err := h.resolveMapped(c, l)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil:
		if h.stats.MapError == "" {
			h.stats.MapError = err.Error()
		}
		if was {
			h.stats.MappedLayers--
		}
	case !was:
		h.stats.MappedLayers++
	}
	l.mapOK = err == nil
	return l.mapOK
}

func (h *hostExperts) resolveMapped(c *Ctx, l *hostLayer) error {
	if !l.streamable() {
		return fmt.Errorf("gpu: mapped experts: block %d's types (%s, %s, %s) have no device MoE kernels", l.index, l.gate.info.Type, l.up.info.Type, l.down.info.Type)
	}
	for j, w := range [3]*hostWeight{l.gate, l.up, l.down} {
		if w.pinLo != 0 || w.pinHi != w.bytes() {
			return fmt.Errorf("gpu: mapped experts: %s is not page-locked (see PinError)", w.info.Name)
		}
		var dp uint64
		host := uintptr(unsafe.Pointer(&w.raw[0]))
		if err := c.drv.check("cuMemHostGetDevicePointer_v2", ccall(c.drv.cuMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dp)), host, 0)); err != nil {
			return fmt.Errorf("gpu: mapped experts: %s: %w", w.info.Name, err)
		}
		sc, err := w.deviceScales(c)
		if err != nil {
			return err
		}
		// As a staging slot's views (offload_stream.go), over the mapping.
		l.mapped[j] = Weight{info: w.info, rows: w.rows, cols: w.cols, rowBytes: w.rowBytes,
			raw: Buffer{Ptr: DevicePtr(dp), Size: w.bytes()}, f32: sc}
	}
	return nil
}

// moeMapped is the mapped path (device thread): the device MoE over views
// of the experts in mapped host memory, in the work stream like any
// device MoE (recordable into the decode step's graph). ran is false
// when the layer cannot be mapped (the caller runs the CPU path).
func (b *Backend) moeMapped(c *Ctx, d, s *Tensor, hl *hostLayer, router *Weight, m *model.MoE) (ran bool, err error) {
	h := b.host
	if !h.mapLayer(c, hl) {
		return false, nil
	}
	g, u, dn := &hl.mapped[0], &hl.mapped[1], &hl.mapped[2]
	l := moeLayer{router: router, gate: g, up: u, down: dn, E: m.Experts, K: m.TopK, dim: s.cols,
		ff: g.rows / m.Experts, norm: m.NormTopK,
		gateScale: g.expertScales(), upScale: u.expertScales(), downScale: dn.expertScales()}
	if err := b.moeDevice(c, d.buf.Ptr, s.buf.Ptr, s.rows, l, moeForce.Load()); err != nil {
		return true, err
	}
	h.mu.Lock()
	h.stats.MappedCalls++
	h.stats.MappedTokens += int64(s.rows)
	h.mu.Unlock()
	return true, nil
}
