package gpu

// Expert placement under a device budget (issue 12): which blocks' routed
// experts live in host RAM. The planner (PlanPlacement, below) decides;
// the backend (offload.go) loads and runs what it decides.

// Placement says where each block's routed experts live.
type Placement struct {
	// HostExperts[l] keeps block l's stacked routed experts
	// (blk.l.ffn_{gate,up,down}_exps.weight and their .scale vectors) in
	// host RAM; a nil or short slice leaves the remaining blocks on the
	// device.
	HostExperts []bool
	// Run chooses how host-resident experts are computed; HostAuto picks
	// per MoE call by its row count (StreamMinRows).
	Run HostRun
	// StreamMinRows: under HostAuto, calls of at least this many rows
	// stream the layer's experts to the device; smaller ones (decode) run
	// on the CPU. 0 means the backend's default.
	StreamMinRows int
}

// HostRun is how host-resident experts are computed.
type HostRun int

const (
	HostAuto   HostRun = iota // per call: CPU for few rows, streaming for many
	HostCPU                   // always on the CPU (host cores, the CPU backend's kernels)
	HostStream                // always streamed over PCIe into a device staging buffer
)

// OnHost reports whether block layer's experts stay in host RAM.
func (p Placement) OnHost(layer int) bool {
	return layer >= 0 && layer < len(p.HostExperts) && p.HostExperts[layer]
}

// HostLayers counts the blocks whose experts stay in host RAM.
func (p Placement) HostLayers() int {
	n := 0
	for _, h := range p.HostExperts {
		if h {
			n++
		}
	}
	return n
}
