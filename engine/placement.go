package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/gpu"
)

// Expert placement on the GPU (issue 12 item 2): before the weights are
// uploaded, the engine plans which blocks' routed experts stay in host RAM
// (gpu.PlanPlacement) from the GGUF header alone, so `bench capacity` runs
// the same plan without a GPU.

// ExpertWeights is the weight bytes of a model file split for the
// placement planner.
type ExpertWeights struct {
	// Dense is what the GPU backend allocates for every tensor but the
	// routed experts: the tensor bytes, plus the float32 copy it keeps of
	// each vector (norms, biases).
	Dense int64
	// PerBlock[l] is block l's routed-expert bytes (0 for a block without
	// routed experts); MTP blocks beyond c.Layers are not loaded and not
	// counted.
	PerBlock []int64
}

// Total is the routed-expert bytes of all blocks.
func (w ExpertWeights) Total() int64 {
	var n int64
	for _, b := range w.PerBlock {
		n += b
	}
	return n
}

// ReadExpertWeights splits f's tensors into dense weights and routed
// experts per block.
func ReadExpertWeights(f *gguf.File, c model.Config) ExpertWeights {
	w := ExpertWeights{PerBlock: make([]int64, c.Layers)}
	for _, ti := range f.Tensors {
		if blk, ok := blockIndex(ti.Name); ok && blk >= c.Layers {
			continue // an MTP block: not loaded (model.ReadConfig's WeightBytes skips it too)
		}
		if blk, ok := gpu.ExpertTensorBlock(ti.Name); ok && blk < c.Layers {
			w.PerBlock[blk] += int64(ti.Bytes())
			continue
		}
		w.Dense += int64(ti.Bytes())
		if len(ti.Dims) == 1 || len(ti.Dims) > 1 && ti.Elements() == ti.Dims[0] {
			w.Dense += int64(ti.Elements()) * 4 // gpu.Backend.LoadWeight's float32 copy of a vector
		}
	}
	return w
}

// blockIndex is N of a "blk.N." tensor name.
func blockIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	n := 0
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9' && i < 9; i++ {
		n = n*10 + int(rest[i]-'0')
	}
	return n, i > 0 && i < len(rest) && rest[i] == '.'
}

// ParseExpertRun maps --expert-run to the backend's HostRun.
func ParseExpertRun(s string) (gpu.HostRun, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return gpu.HostAuto, nil
	case "cpu":
		return gpu.HostCPU, nil
	case "stream":
		return gpu.HostStream, nil
	case "mapped":
		return gpu.HostMapped, nil
	case "split":
		return gpu.HostSplit, nil
	case "cpu-decode":
		return gpu.HostCPUDecode, nil
	}
	return 0, fmt.Errorf("--expert-run %q: supported values are auto, cpu (host cores), cpu-decode (host cores for decode, prefill streamed to the GPU), stream (copied to the GPU per call), mapped (the GPU reads the selected experts in host RAM) and split (decode: the GPU reads some of the selected experts while the host cores compute the others)", s)
}

// validateExperts checks the placement flags (Options.Validate).
func (o Options) validateExperts() error {
	if o.NCPUMoE < 0 {
		return fmt.Errorf("--n-cpu-moe %d: must be 0 (automatic) or a number of layers", o.NCPUMoE)
	}
	if o.CPUMoE && o.NCPUMoE > 0 {
		return fmt.Errorf("--cpu-moe and --n-cpu-moe %d: give one (--cpu-moe keeps every layer's experts in host RAM, --n-cpu-moe those of the first N layers)", o.NCPUMoE)
	}
	_, err := ParseExpertRun(o.ExpertRun)
	return err
}

// expertFlagsSet reports whether the user asked for a placement or a way
// to run host experts.
func (o Options) expertFlagsSet() bool {
	r := strings.ToLower(strings.TrimSpace(o.ExpertRun))
	return o.CPUMoE || o.NCPUMoE > 0 || r != "" && r != "auto"
}

// expertFlagsIgnored is the warning for placement flags that do nothing:
// on the CPU every weight is in host RAM already, and a model without
// routed experts has none to place. "" when they apply (or are unset).
func expertFlagsIgnored(o Options, onGPU bool, c model.Config) string {
	if !o.expertFlagsSet() {
		return ""
	}
	flags := expertFlagNames(o)
	switch {
	case !onGPU:
		return fmt.Sprintf("ftchat: warning: %s ignored on the CPU (every weight is in host RAM already)", flags)
	case c.Experts == 0:
		return fmt.Sprintf("ftchat: warning: %s ignored: %s has no routed MoE experts to place", flags, c.Arch)
	}
	return ""
}

func expertFlagNames(o Options) string {
	var f []string
	if o.CPUMoE {
		f = append(f, "--cpu-moe")
	}
	if o.NCPUMoE > 0 {
		f = append(f, fmt.Sprintf("--n-cpu-moe %d", o.NCPUMoE))
	}
	if r := strings.ToLower(strings.TrimSpace(o.ExpertRun)); r != "" && r != "auto" {
		f = append(f, "--expert-run "+r)
	}
	s := strings.Join(f, " and ")
	if len(f) > 1 {
		return s + " are"
	}
	return s + " is"
}

// PlacementRequest is what PlanExperts needs beyond the model file.
type PlacementRequest struct {
	// Budget is the device budget (--gpu-memory, cut to what the driver
	// has free); Used is what is allocated on the device already.
	Budget, Used int64
	// KV is the pool's page geometry and dtypes (resolved, not auto);
	// its Pages are ignored.
	KV kvcache.Layout
}

// PlanExperts plans where the routed experts of the model (c, w) live on
// a GPU, for the options' --ctx-size, --state-slots, --page-size,
// --prefill-chunk and placement flags. It returns nil for a model without
// routed experts: nothing to place, the GPU load is as before.
//
// The automatic plan reserves the KV pool for the whole requested context
// (--ctx-size, else the model's) before the experts. When that cannot fit
// even with every expert in host RAM but the whole model fits on the GPU
// with room for a KV page, every expert stays on the device and the pool
// takes what is left, as before placement existed: a model that loaded
// then loads the same now.
func PlanExperts(c model.Config, w ExpertWeights, o Options, req PlacementRequest) (*gpu.PlacementPlan, error) {
	if err := o.validateExperts(); err != nil {
		return nil, err
	}
	if c.Experts == 0 || w.Total() == 0 {
		return nil, nil
	}
	run, err := ParseExpertRun(o.ExpertRun)
	if err != nil {
		return nil, err
	}
	ctx := o.ContextLen
	if ctx == 0 {
		ctx = c.ContextLen
	}
	kv, page := req.KV, req.KV
	kv.Pages, page.Pages = kvcache.PagesForTokens(max(ctx, 1), kv.PageSize), 1
	var state int64
	if c.Hybrid() {
		slots := o.StateSlots
		if slots == 0 {
			slots = DefaultStateSlots
		}
		state = c.StateLayout(slots).Bytes()
	}
	chunk := o.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	in := gpu.PlacementInput{
		Budget: req.Budget - req.Used, Dense: w.Dense, Experts: w.PerBlock, ExpertsPerBlock: c.Experts,
		KV: kvcache.PoolBytes(kv), ContextTokens: ctx, KVDType: kvName(kv),
		State: state, Workspace: WorkspaceBytes(c, PlannedRows(chunk)), Reserve: GPUHeadroom(req.Budget), Run: run,
	}
	switch {
	case o.CPUMoE:
		in.Mode = gpu.PlaceAllHost
	case o.NCPUMoE > 0:
		in.Mode, in.HostBlocks = gpu.PlaceFirstN, o.NCPUMoE
	}
	p, err := gpu.PlanPlacement(in)
	if err != nil && in.Mode == gpu.PlaceAuto && errors.Is(err, gpu.ErrPlacement) {
		all := in
		all.Mode, all.HostBlocks, all.KV, all.ContextTokens = gpu.PlaceFirstN, 0, kvcache.PoolBytes(page), 1
		if q, qerr := gpu.PlanPlacement(all); qerr == nil {
			return &q, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--gpu-memory %s: %w", kvcache.FormatBytes(req.Budget), err)
	}
	return &p, nil
}

// PlacementKV is the one-page KV layout the plan sizes the requested
// context with: --page-size and the K and V dtypes of --kv-cache-dtype,
// --cache-type-k and --cache-type-v (auto: bf16). The pool is planned
// later in the same dtypes; static scales (--kv-scales) would make a page
// smaller, so the reservation errs large.
func PlacementKV(c model.Config, o Options) (kvcache.Layout, error) {
	t, err := resolveKVOptions(o)
	if err != nil {
		return kvcache.Layout{}, err
	}
	ps := o.PageSize
	if ps == 0 {
		ps = DefaultPageSize
	}
	return c.KVLayout(ps, 1, t.k).WithDTypes(t.k, t.v), nil
}

// planExperts is the engine's plan before model.Load on the GPU: it reads
// the expert tensors of the open file, plans them in what the device has,
// and hands the placement to the backend. nil: no routed experts.
func (e *Engine) planExperts(g *gpu.Backend, c model.Config) (*gpu.PlacementPlan, error) {
	kv, err := PlacementKV(c, e.opts)
	if err != nil {
		return nil, err
	}
	used := g.Device().MemStats().Used
	free, err := g.Device().FreeNow()
	if err != nil {
		return nil, err
	}
	budget := min(e.budget, used+free)
	p, err := PlanExperts(c, ReadExpertWeights(e.file, c), e.opts, PlacementRequest{Budget: budget, Used: used, KV: kv})
	if err != nil || p == nil || p.HostBlocks == 0 {
		return p, err // every expert on the device: the load is as before
	}
	if err := g.SetPlacement(p.Placement); err != nil {
		return nil, err
	}
	return p, nil
}

// stagingReserve is the device memory the KV plan leaves for streaming
// host-resident experts (the placement's staging buffers, allocated by
// the backend when it first streams).
func (e *Engine) stagingReserve() int64 {
	if e.plan == nil {
		return 0
	}
	return e.plan.Staging
}

// placementStats fills the placement fields of s.
func (e *Engine) placementStats(s *Stats) {
	p := e.plan
	if p == nil || p.HostBlocks == 0 {
		return
	}
	s.ExpertLayers, s.ExpertLayersHost, s.ExpertsPerLayer = p.MoEBlocks(), p.HostBlocks, p.Input.ExpertsPerBlock
	s.ExpertBytesDevice, s.ExpertBytesHost = p.DeviceExperts, p.HostExperts
	s.DenseBytes, s.WorkspaceBytes, s.StagingBytes = p.Input.Dense, p.Input.Workspace, p.Staging
	s.ExpertRun = hostRunName(p.Placement.Run)
	if ob, ok := e.be.(interface{ OffloadStats() gpu.OffloadStats }); ok {
		o := ob.OffloadStats()
		s.ExpertCPUCalls, s.ExpertCPUTokens, s.ExpertStreamCalls, s.ExpertStreamTokens = o.CPUCalls, o.CPUTokens, o.StreamCalls, o.StreamTokens
		s.ExpertStreamedBytes, s.ExpertCacheHits, s.ExpertCacheMisses = o.StreamedBytes, o.CacheHits, o.CacheMisses
		s.ExpertHostPinned = o.Pinned
		s.ExpertMappedCalls, s.ExpertMappedTokens, s.ExpertMapError = o.MappedCalls, o.MappedTokens, o.MapError
		s.ExpertCPUTime, s.ExpertStreamTime, s.ExpertStreamError, s.ExpertPinError = o.CPUTime, o.StreamTime, o.StreamError, o.PinError
		s.ExpertSplitCalls, s.ExpertSplitTokens, s.ExpertSplitCPUSlots = o.SplitCalls, o.SplitTokens, o.SplitCPUSlots
		s.ExpertSplitTime, s.ExpertSplitCPUTime = o.SplitTime, o.SplitCPUTime
	}
}

func hostRunName(r gpu.HostRun) string {
	switch r {
	case gpu.HostCPU:
		return "cpu"
	case gpu.HostStream:
		return "stream"
	case gpu.HostMapped:
		return "mapped"
	case gpu.HostSplit:
		return "split"
	case gpu.HostCPUDecode:
		return "cpu-decode"
	}
	return "auto"
}

// placeExperts notes placement flags that do not apply and, on the GPU,
// plans the experts and hands the placement to the backend before
// the weights are loaded. The model file stays open (mmapped) for the
// engine's life (Close closes it), which host-resident experts point into.
func (e *Engine) placeExperts(c model.Config) error {
	g, onGPU := e.be.(*gpu.Backend)
	if w := expertFlagsIgnored(e.opts, onGPU, c); w != "" {
		e.info.Notes = append(e.info.Notes, w)
	}
	if !onGPU {
		return nil
	}
	p, err := e.planExperts(g, c)
	if err != nil {
		return err
	}
	e.plan = p
	if p != nil && p.HostBlocks > 0 {
		// What does not fit, in one line (issue 12); the status pane and
		// /stats show it with the pool as allocated. A note, not a print:
		// a load from inside the TUI (/model) must not write on its screen.
		e.info.Notes = append(e.info.Notes, fmt.Sprintf("ftchat: expert placement (--n-cpu-moe %d): %s", p.NCPUMoE(), p.Summary()))
	}
	return nil
}
