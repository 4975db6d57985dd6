package gpu

import (
	"time"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Host-resident experts (issue 12, item 3). CONTRACT STUB: the offload
// engineer replaces the bodies; the signatures are used by the planner,
// the engine and the status pane.

// OffloadStats counts how host-resident experts ran since the backend
// was opened.
type OffloadStats struct {
	HostLayers    int   // blocks whose experts stay in host RAM
	HostBytes     int64 // routed-expert bytes kept in host RAM
	Pinned        bool  // those bytes are page-locked (registered) for DMA
	CPUCalls      int64 // MoE calls computed on the host CPU
	CPUTokens     int64
	CPUTime       time.Duration
	StreamCalls   int64 // MoE calls whose experts were streamed to the device
	StreamTokens  int64
	StreamedBytes int64 // host-to-device bytes of streamed experts
	StreamTime    time.Duration
	CacheHits     int64 // expert-cache lookups served from device memory (0 without a cache)
	CacheMisses   int64
}

// StreamStagingBytes is the device memory streaming needs when the
// largest host-resident layer's experts take layerBytes (the planner
// reserves it before placing experts).
func StreamStagingBytes(layerBytes int64) int64 { return 2 * layerBytes }

// SetPlacement must be called before the model's weights are loaded.
func (b *Backend) SetPlacement(p Placement) error {
	b.placement = p
	return nil
}

// OffloadStats reports how host-resident experts ran so far.
func (b *Backend) OffloadStats() OffloadStats {
	return OffloadStats{HostLayers: b.placement.HostLayers()}
}

// loadHostWeight keeps a host-resident expert tensor in host RAM; ok is
// false for tensors that go to the device.
func (b *Backend) loadHostWeight(info gguf.TensorInfo, raw []byte) (w model.Weight, ok bool, err error) {
	return nil, false, nil
}

// moeHost runs an MoE call whose experts are host-resident and reports
// whether it did (false: the device path runs).
func (b *Backend) moeHost(dst, x model.Tensor, m *model.MoE) bool { return false }
