package gpu

// Expert placement under a device budget (issue 12): which blocks' routed
// experts live in host RAM. The planner (PlanPlacement, below) decides;
// the backend (offload.go) loads and runs what it decides.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ftchat/ftchat/engine/kvcache"
)

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
	// SplitCPU is, under HostSplit, how many of each token's top-k slots
	// the host CPU computes (the device the rest); 0 takes FTCHAT_SPLIT_CPU
	// or the default derived from the measured rates (splitCPUSlots).
	SplitCPU int
	// CPUIntDot runs the host CPU's expert matmuls on the CPU backend's
	// integer-dot path (cpu.Options.IntDot: activations quantized to 8
	// bits once per matmul); FTCHAT_CPU_INTDOT=1 also sets it, as for the
	// CPU backend.
	CPUIntDot bool
}

// HostRun is how host-resident experts are computed.
type HostRun int

const (
	HostAuto   HostRun = iota // per call: CPU for few rows, streaming for many
	HostCPU                   // always on the CPU (host cores, the CPU backend's kernels)
	HostStream                // always streamed over PCIe into a device staging buffer
	HostMapped                // the device's MoE kernels read the selected experts in host RAM over PCIe (zero-copy mapped)
	// HostSplit: calls below StreamMinRows (decode) route on the device,
	// then the device reads some of each token's selected experts mapped
	// while the host CPU computes the others, and the CPU's partial sum is
	// added on the device (offload_split.go); larger calls stream.
	HostSplit
	// HostCPUDecode: calls below StreamMinRows (decode) run on the host
	// CPU, larger ones (prefill) stream, as llama.cpp's --n-cpu-moe does
	// (its big batches copy the weights to the GPU): the CPU-expert
	// configuration a long prompt can still prefill in.
	HostCPUDecode

	hostRunEnd // one past the last mode (SetPlacement's range check)
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

// PlacementMode is how PlanPlacement picks the blocks whose experts stay
// in host RAM. Whatever the mode, the host blocks are the first ones
// (llama.cpp's --n-cpu-moe convention), so an automatic plan and a forced
// one compare directly.
type PlacementMode int

const (
	PlaceAuto    PlacementMode = iota // as few host blocks as the budget allows
	PlaceAllHost                      // --cpu-moe: every block's experts in host RAM
	PlaceFirstN                       // --n-cpu-moe N: the first N blocks' experts in host RAM
)

// PlacementInput is everything the planner weighs, in bytes of device
// memory unless said otherwise.
type PlacementInput struct {
	// Budget is the device memory the plan may use: the --gpu-memory
	// budget, cut to what the driver has free, less what is already
	// allocated.
	Budget int64
	// Dense is every weight that is not a routed expert: embeddings,
	// attention, recurrent blocks, norms, routers, shared experts, lm_head.
	Dense int64
	// Experts[l] is block l's routed-expert bytes (stacked gate, up, down
	// and their scales); 0 for a block without routed experts.
	Experts []int64
	// ExpertsPerBlock is the experts of one MoE block (the E of "k/E").
	ExpertsPerBlock int
	// KV is the pool for the requested context: page bytes × the pages
	// ContextTokens need, in KVDType (both only for messages).
	KV            int64
	ContextTokens int
	KVDType       string
	State         int64 // recurrent state of a hybrid model (all slots)
	Workspace     int64 // activations and scratch of the largest batch
	Reserve       int64 // kept free for the driver, modules and graphs
	Mode          PlacementMode
	HostBlocks    int // PlaceFirstN: N (more than the blocks means all)
	Run           HostRun
	StreamMinRows int
}

// PlacementPlan is a placement with its accounting.
type PlacementPlan struct {
	Placement Placement
	Input     PlacementInput
	// DeviceExperts and HostExperts are the routed-expert bytes on each
	// side; DeviceBlocks and HostBlocks count MoE blocks (blocks without
	// routed experts are in neither).
	DeviceExperts, HostExperts int64
	DeviceBlocks, HostBlocks   int
	// Staging is the device buffer streamed experts pass through
	// (StreamStagingBytes of the largest host block); 0 without host
	// blocks or with Run HostCPU (nothing streams).
	Staging int64
	// Spare is what the budget leaves after everything above: the KV pool
	// takes it too (more tokens than the requested context).
	Spare int64
}

// MoEBlocks counts the blocks with routed experts.
func (p PlacementPlan) MoEBlocks() int { return p.DeviceBlocks + p.HostBlocks }

// DeviceBytes is the device memory the plan uses, Spare excluded.
func (p PlacementPlan) DeviceBytes() int64 {
	in := p.Input
	return in.Dense + p.DeviceExperts + in.KV + in.State + in.Workspace + in.Reserve + p.Staging
}

// ExpertsOnDevice is how many of block l's experts live on the device:
// all of them or none (placement is by whole blocks).
func (p PlacementPlan) ExpertsOnDevice(l int) int {
	if l < 0 || l >= len(p.Input.Experts) || p.Input.Experts[l] == 0 || p.Placement.OnHost(l) {
		return 0
	}
	return p.Input.ExpertsPerBlock
}

// Summary is the plan in one line, the KV pool with the spare it gets:
// "GPU: dense 1.35 GiB, experts 6/40 layers (2.53 GiB), KV 1.77 GiB, state
// 251.25 MiB, workspace 178.22 MiB, staging 864.00 MiB; RAM: experts 34
// layers (14.35 GiB)".
func (p PlacementPlan) Summary() string {
	in := p.Input
	var b strings.Builder
	fmt.Fprintf(&b, "GPU: dense %s, experts %d/%d layers (%s), KV %s", kvcache.FormatBytes(in.Dense), p.DeviceBlocks, p.MoEBlocks(),
		kvcache.FormatBytes(p.DeviceExperts), kvcache.FormatBytes(in.KV+p.Spare))
	if in.State > 0 {
		fmt.Fprintf(&b, ", state %s", kvcache.FormatBytes(in.State))
	}
	fmt.Fprintf(&b, ", workspace %s", kvcache.FormatBytes(in.Workspace))
	if p.Staging > 0 {
		fmt.Fprintf(&b, ", staging %s", kvcache.FormatBytes(p.Staging))
	}
	fmt.Fprintf(&b, "; RAM: experts %d layers (%s)", p.HostBlocks, kvcache.FormatBytes(p.HostExperts))
	return b.String()
}

// ErrPlacement is wrapped by every plan that does not fit its budget.
var ErrPlacement = fmt.Errorf("%w: expert placement", ErrBudget)

// PlanPlacement decides which blocks' routed experts stay in host RAM.
// Device memory goes, in order, to the dense weights, the KV pool for the
// requested context, the recurrent state, the workspace and the reserve;
// then to the experts, whole blocks, the last blocks first (the first
// ones stay on the host); host blocks cost a staging buffer for streaming
// unless they always run on the CPU. PlaceAuto keeps as few blocks on the host as fit; the forced
// modes keep theirs and fail, with the numbers, when the device part does
// not fit. It is pure arithmetic.
func PlanPlacement(in PlacementInput) (PlacementPlan, error) {
	if err := in.check(); err != nil {
		return PlacementPlan{Input: in}, err
	}
	switch in.Mode {
	case PlaceAllHost:
		return in.planFirst(len(in.Experts), "--cpu-moe")
	case PlaceFirstN:
		return in.planFirst(min(in.HostBlocks, len(in.Experts)), fmt.Sprintf("--n-cpu-moe %d", in.HostBlocks))
	}
	for h := 0; h <= len(in.Experts); h++ {
		if p := in.plan(h); p.Spare >= 0 {
			return p, nil
		}
	}
	return in.plan(len(in.Experts)), in.fixedError()
}

// maxPlacementBytes bounds every input (64 PiB), so no sum of them
// overflows an int64.
const maxPlacementBytes = int64(1) << 56

func (in PlacementInput) check() error {
	out := func(n int64) bool { return n < 0 || n > maxPlacementBytes }
	bad := out(in.Budget) || out(in.Dense) || out(in.KV) || out(in.State) || out(in.Workspace) || out(in.Reserve) ||
		in.HostBlocks < 0 || in.ExpertsPerBlock < 0 || in.Mode < PlaceAuto || in.Mode > PlaceFirstN || len(in.Experts) > 1<<20
	for _, e := range in.Experts {
		bad = bad || out(e)
	}
	if bad {
		return fmt.Errorf("gpu: invalid placement input (budget %d, dense %d, KV %d, state %d, workspace %d, reserve %d, mode %d, host blocks %d)",
			in.Budget, in.Dense, in.KV, in.State, in.Workspace, in.Reserve, in.Mode, in.HostBlocks)
	}
	return nil
}

// fixed is what the plan needs before any expert.
func (in PlacementInput) fixed() int64 {
	return in.Dense + in.KV + in.State + in.Workspace + in.Reserve
}

// plan keeps the experts of the MoE blocks among the first h in host RAM.
func (in PlacementInput) plan(h int) PlacementPlan {
	p := PlacementPlan{Input: in, Placement: Placement{Run: in.Run, StreamMinRows: in.StreamMinRows}}
	var largest int64
	for l, e := range in.Experts {
		switch {
		case e == 0:
		case l < h:
			if p.Placement.HostExperts == nil {
				p.Placement.HostExperts = make([]bool, len(in.Experts))
			}
			p.Placement.HostExperts[l] = true
			p.HostExperts += e
			p.HostBlocks++
			largest = max(largest, e)
		default:
			p.DeviceExperts += e
			p.DeviceBlocks++
		}
	}
	if p.HostBlocks > 0 && in.Run != HostCPU && in.Run != HostMapped {
		// HostCPU and HostMapped never stream (HostSplit and
		// HostCPUDecode stream prefill like HostAuto), and the backend allocates
		// the staging at the first streamed call.
		p.Staging = StreamStagingBytes(largest)
	}
	p.Spare = in.Budget - p.DeviceBytes()
	return p
}

// planFirst is a forced plan: the first h blocks on the host, or an error
// naming what does not fit and the smallest larger count that would.
func (in PlacementInput) planFirst(h int, flag string) (PlacementPlan, error) {
	p := in.plan(h)
	if p.Spare >= 0 {
		return p, nil
	}
	advice := "no count of host layers fits: lower --ctx-size, use --kv-cache-dtype fp8_e4m3, or raise --gpu-memory"
	for m := h + 1; m <= len(in.Experts); m++ {
		if q := in.plan(m); q.Spare >= 0 && q.HostBlocks > p.HostBlocks {
			advice = fmt.Sprintf("--n-cpu-moe %d fits (%d layers' experts on the GPU), or raise --gpu-memory", q.NCPUMoE(), q.DeviceBlocks)
			break
		}
	}
	if auto := in.plan(0); auto.Spare >= 0 && h > 0 {
		advice = "without the flag every layer's experts fit on the GPU"
	}
	return p, fmt.Errorf("%w: %s keeps %d of %d MoE layers' experts (%s) on the GPU; with dense weights %s, KV %s, state %s, workspace %s, reserve %s and staging %s the device needs %s, more than the %s available; %s",
		ErrPlacement, flag, p.DeviceBlocks, p.MoEBlocks(), kvcache.FormatBytes(p.DeviceExperts), kvcache.FormatBytes(in.Dense), in.kvText(),
		kvcache.FormatBytes(in.State), kvcache.FormatBytes(in.Workspace), kvcache.FormatBytes(in.Reserve), kvcache.FormatBytes(p.Staging),
		kvcache.FormatBytes(p.DeviceBytes()), kvcache.FormatBytes(in.Budget), advice)
}

// lastHostBlock is the highest block index whose experts are on the host
// (-1: none): the --n-cpu-moe value that reproduces the plan.
func (p PlacementPlan) lastHostBlock() int {
	for l := len(p.Placement.HostExperts) - 1; l >= 0; l-- {
		if p.Placement.HostExperts[l] {
			return l
		}
	}
	return -1
}

// NCPUMoE is the --n-cpu-moe value that gives this plan's host blocks.
func (p PlacementPlan) NCPUMoE() int { return p.lastHostBlock() + 1 }

func (in PlacementInput) kvText() string {
	s := kvcache.FormatBytes(in.KV)
	if in.ContextTokens > 0 {
		s += fmt.Sprintf(" (%d tokens", in.ContextTokens)
		if in.KVDType != "" {
			s += " of " + in.KVDType
		}
		s += ")"
	}
	return s
}

// fixedError says that not even the part before the experts fits, with
// every expert on the host (or, for a model with one MoE block, fewer
// bytes with every expert on the device: both were tried).
func (in PlacementInput) fixedError() error {
	p := in.plan(len(in.Experts))
	staging := ""
	if p.Staging > 0 {
		staging = " + staging for streamed experts " + kvcache.FormatBytes(p.Staging)
	}
	return fmt.Errorf("%w: dense weights %s + KV for the context %s + state %s + workspace %s + reserve %s%s = %s exceed the %s available even with every layer's experts in host RAM; lower --ctx-size, use --kv-cache-dtype fp8_e4m3, or raise --gpu-memory",
		ErrPlacement, kvcache.FormatBytes(in.Dense), in.kvText(), kvcache.FormatBytes(in.State), kvcache.FormatBytes(in.Workspace),
		kvcache.FormatBytes(in.Reserve), staging, kvcache.FormatBytes(p.DeviceBytes()), kvcache.FormatBytes(in.Budget))
}

// ExpertTensorBlock reports whether name is a routed-expert tensor
// (blk.N.ffn_{gate,up,down,gate_up}_exps.{weight,scale}) and its block N.
// Shared experts (_shexp) are not routed experts.
func ExpertTensorBlock(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return 0, false
	}
	base, ok := strings.CutSuffix(rest, ".weight")
	if !ok {
		base, ok = strings.CutSuffix(rest, ".scale")
	}
	if !ok {
		return 0, false
	}
	switch base {
	case "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps":
		return n, true
	}
	return 0, false
}
