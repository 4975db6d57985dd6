package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/gpu"
	"github.com/ftchat/ftchat/internal/timing"
)

// probeHardware looks for a usable CUDA device unless the user asked for
// the CPU (then libcuda is never loaded).
func probeHardware(device string) Hardware {
	d, err := ParseDevice(device)
	if err != nil || d.Kind == "cpu" {
		return Hardware{CUDAReason: "not probed (--device cpu)"}
	}
	info, err := gpu.Probe(d.Ordinal)
	if err != nil {
		return Hardware{CUDAReason: err.Error()}
	}
	return Hardware{CUDA: true, ComputeCap: info.Arch(), DeviceName: info.Name, DeviceCount: d.Ordinal + 1}
}

// computeDTypeIgnored is the load note for --compute-dtype bf16|fp16 on
// the CPU, which computes in float32 whatever it says.
func computeDTypeIgnored(o Options, onGPU bool) string {
	cd, err := gpu.ParseComputeDType(o.ComputeDType)
	if onGPU || err != nil || cd == gpu.ComputeAuto {
		return ""
	}
	return fmt.Sprintf("ftchat: warning: --compute-dtype %s is ignored on the CPU (it computes in float32)", cd)
}

// openGPU opens the device with the memory budget and returns the backend.
func openGPU(ordinal int, opts Options) (model.Backend, int64, error) {
	cd, err := gpu.ParseComputeDType(opts.ComputeDType)
	if err != nil {
		return nil, 0, err
	}
	dev, err := gpu.Open(ordinal, gpu.Options{MemoryBudget: opts.GPUMemory, Compute: cd})
	if err != nil {
		return nil, 0, err
	}
	timing.Mark("cuda context")
	// FTCHAT_GEMV=chunked selects the older decode GEMV (a knob for
	// benchmarks; see gpu.BackendOptions).
	// FTCHAT_GEMM_MIN_TOKENS=N moves the GEMV/GEMM crossover (rows from
	// which MatMul takes the tensor-core GEMM), to compare batched decode
	// steps of 9..N-1 rows on the GEMV (issue 14).
	// FTCHAT_GEMM_SPLITK=0 stops splitting the k dimension of the
	// small-batch GEMM (gpu.BackendOptions.NoGEMMSplitK; its 16 MiB
	// workspace comes out of the GPUHeadroom reserve). FTCHAT_GEMM_SKINNY=1
	// gives 9..32 rows to the skinny GEMM instead (it shares that workspace).
	// FTCHAT_GEMM_SPLIT_CTAS=N sets the split-K grid in CTAs per SM (a
	// tuning knob; default 4).
	// FTCHAT_GEMMQ=0 turns off the Q4_K/Q6_K GEMM from registers for 1..32 rows,
	// FTCHAT_GEMMQ_MIN=N gives it only N rows and more (2: one row on the
	// whole-x GEMV), FTCHAT_GEMMQ_CTAS=N
	// sets its grid in CTAs per SM, FTCHAT_GEMMQ_GROUP=0 queues q, k, v and
	// gate, up one matmul at a time instead of one launch each,
	// FTCHAT_GEMVQ=0 keeps the single Q4_K row on gemmq instead of the
	// int16-activation GEMV, FTCHAT_GEMVQ_ROWS=N gives each of its warps N
	// rows, FTCHAT_GEMVQ_Q6K=0 keeps the single Q6_K row on gemmq.
	// MatMuls of 128 rows and more go to cuBLAS when the library is found
	// (bf16 GemmEx where it can run: prefill at 4K on the H200's 8B shape
	// 13,900 tok/s against 4,300 on ftchat's own GEMM); FTCHAT_CUBLAS=0
	// keeps them on ftchat's GEMM, FTCHAT_CUBLAS=tf32 takes cuBLAS's
	// float32 Sgemm in TF32 (gpu.BackendOptions).
	gemmMin, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMM_MIN_TOKENS"))
	splitCTAs, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMM_SPLIT_CTAS"))
	gemmqMin, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMMQ_MIN"))
	gemmqCTAs, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMMQ_CTAS"))
	gemvqRows, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMVQ_ROWS"))
	cublas := os.Getenv("FTCHAT_CUBLAS")
	be, err := gpu.NewBackend(dev, gpu.BackendOptions{ChunkedGEMV: os.Getenv("FTCHAT_GEMV") == "chunked", GEMMMinTokens: max(gemmMin, 0),
		NoGEMMSplitK: os.Getenv("FTCHAT_GEMM_SPLITK") == "0", SkinnyGEMM: os.Getenv("FTCHAT_GEMM_SKINNY") == "1",
		SplitKCTAsPerSM: max(splitCTAs, 0), NoGEMMQ: os.Getenv("FTCHAT_GEMMQ") == "0", GEMMQMinTokens: max(gemmqMin, 0),
		GEMMQCTAsPerSM: max(gemmqCTAs, 0), NoGEMMQGroup: os.Getenv("FTCHAT_GEMMQ_GROUP") == "0",
		NoGEMVQ: os.Getenv("FTCHAT_GEMVQ") == "0", GEMVQRowsPerWarp: gemvqRows,
		NoGEMVQQ6K: os.Getenv("FTCHAT_GEMVQ_Q6K") == "0",
		CUBLAS:     cublas != "0", CUBLASTF32: cublas == "tf32"})
	if err != nil {
		dev.Close()
		return nil, 0, err
	}
	return be, dev.MemStats().Budget, nil
}

// cublasNote is what the device line says about cuBLAS: the library and
// the way MatMul uses it, or, when FTCHAT_CUBLAS asked for it explicitly,
// why there is none (a missing library is the quiet default otherwise).
func cublasNote(be model.Backend) string {
	g, ok := be.(*gpu.Backend)
	if !ok {
		return ""
	}
	path, err := g.CUBLAS()
	switch {
	case path != "":
		return fmt.Sprintf(", cuBLAS %s (%s)", filepath.Base(path), g.CUBLASMode())
	case err != nil && os.Getenv("FTCHAT_CUBLAS") != "":
		return fmt.Sprintf(", cuBLAS not used: %v", err)
	}
	return ""
}

// gpuReserve is kept free for the driver, modules and small buffers.
const gpuReserve = 256 << 20

// GPUHeadroom is the reserve the KV plan keeps beyond the workspace: at
// least gpuReserve, and 1/64 of the budget on a large card (2.2 GiB of an
// H200's 139 GiB). Memory the allocator does not count grows after the
// plan: modules load on first use, the driver's kernel local memory grows
// with the largest stack a launched kernel needs times every resident
// thread of the device, and each instantiated CUDA graph holds device
// memory. The fixed 256 MiB alone let a 139 GiB card's pool leave the
// driver short of a 32 MiB MoE buffer at the first prefill (2026-12-02).
func GPUHeadroom(budget int64) int64 { return max(gpuReserve, budget/64) }

// gpuKVBudget is what the budget leaves for the KV pool once the weights
// are loaded: budget - weights - workspace for the largest prefill chunk -
// reserve (DESIGN §3) - the recurrent state of a hybrid model - staging,
// the device buffers for streaming host-resident experts that the backend
// allocates after the plan (0 when every expert is on the device). The budget
// is first cut to what the driver has free now (plus what the allocator
// holds): memory taken outside the allocator since the device was opened
// cannot go to the pool.
func gpuKVBudget(be model.Backend, budget int64, c model.Config, chunk int, st kvcache.RecurrentState, staging int64) (int64, error) {
	g, ok := be.(*gpu.Backend)
	if !ok {
		return 0, fmt.Errorf("internal: GPU budget without a GPU backend")
	}
	used := g.Device().MemStats().Used
	free, err := g.Device().FreeNow()
	if err != nil {
		return 0, err
	}
	return planKVStaging(budget, used, free, c, chunk, st, staging)
}

// planKV is gpuKVBudget's arithmetic for a model whose experts are all on
// the device: budget and used as the allocator counts them, free as the
// driver reports it.
func planKV(budget, used, free int64, c model.Config, chunk int, st kvcache.RecurrentState) (int64, error) {
	return planKVStaging(budget, used, free, c, chunk, st, 0)
}

// planKVStaging is planKV with staging bytes kept free for streamed
// experts (they are allocated later, so used does not count them yet).
func planKVStaging(budget, used, free int64, c model.Config, chunk int, st kvcache.RecurrentState, staging int64) (int64, error) {
	budget = min(budget, used+free)
	workspace := WorkspaceBytes(c, chunk) + staging
	if err := checkStateBudget(budget, used, workspace, st); err != nil {
		return 0, err
	}
	plan, err := gpu.PlanMemory(budget, used, workspace+st.Bytes(), GPUHeadroom(budget), 1)
	if err != nil {
		return 0, err
	}
	return plan.Pool, nil
}

// checkStateBudget refuses a --gpu-memory budget that cannot hold a hybrid
// model's recurrent state beside the weights (used), the workspace and the
// reserve, before anything is allocated for it.
func checkStateBudget(budget, used, workspace int64, st kvcache.RecurrentState) error {
	left := budget - used - workspace - gpuReserve
	if st.Bytes() == 0 || left >= st.Bytes() {
		return nil
	}
	return fmt.Errorf("--gpu-memory %s: weights %s + workspace %s + reserve %s leave %s, less than the recurrent state of the hybrid model (%s, float32 whatever the KV dtype), before any KV page; raise --gpu-memory by at least %s, or lower --state-slots",
		kvcache.FormatBytes(budget), kvcache.FormatBytes(used), kvcache.FormatBytes(workspace), kvcache.FormatBytes(gpuReserve),
		kvcache.FormatBytes(max(left, 0)), st, kvcache.FormatBytes(st.Bytes()-max(left, 0)))
}

// WorkspaceBytes is what the GPU plan reserves for the activations of one
// prefill chunk of chunk tokens (float32): residual, norms, q/k/v,
// attention out, feed-forward, the logits of one row and, for hybrid
// models, the Gated DeltaNet buffers (conv input and output, output gate,
// delta-rule output and its normed copy, decay and beta) and the
// attention's query+gate; for
// MoE models also the scratch one MoE call of the chunk holds
// (gpu.MoEScratchBytes: router logits, top-k ids and weights, the
// grouped GEMMs' permutation and tile list, the gate·up and down outputs
// per (token, slot) pair), which lives beside the activations; and the
// attention's split-K partials (gpu.AttnSplitBytes, bounded by the kernel
// launcher).
func WorkspaceBytes(c model.Config, chunk int) int64 {
	ff := max(c.FF, c.ExpertFF*c.ExpertsUsed)
	row := int64(4*c.Dim + 2*c.Heads*c.HeadDim + 2*c.KVHeads*c.HeadDim + 3*ff)
	if c.Hybrid() {
		value := int64(c.SSM.ValueHeads * c.SSM.ValueDim)
		row += 2*int64(c.SSM.ConvChannels()) + 3*value + 2*int64(c.SSM.ValueHeads) + 3*int64(c.Heads*c.HeadDim) + 2*int64(c.SharedFF) + 1
	}
	ws := int64(chunk)*4*row + int64(4*c.Vocab)
	if c.Experts > 0 {
		ws += gpu.MoEScratchBytes(chunk, c.Experts, c.ExpertsUsed, c.Dim, c.ExpertFF)
	}
	return ws + gpu.AttnSplitBytes(chunk, c.Heads, c.HeadDim)
}

// forwardToken runs one decode step: token id at position pos of the
// sequence with page table pages, returning its logits.
// st is its recurrent state (hybrid models; nil otherwise), advanced by
// the step, or unknown after a failed one.
func (e *Engine) forwardToken(id int32, pos int, pages []int32, st *seqState) ([]float32, error) {
	src, err := e.decodeToken(id, pos, pages, st, false)
	if err != nil {
		return nil, err
	}
	return src.All(), nil
}

// decodeToken is forwardToken returning the logits as a sampling source:
// with onDevice, left on a backend that samples them (model.ForwardLogits,
// valid until the next step; check sourceErr after sampling), else the
// host row.
func (e *Engine) decodeToken(id int32, pos int, pages []int32, st *seqState, onDevice bool) (sample.Logits, error) {
	b := batchFor([]int32{id}, pos, pages, st)
	var src sample.Logits
	var err error
	if onDevice {
		var l *model.Logits
		if l, err = e.mdl.ForwardLogits(b, []int{0}); err == nil {
			src = l.Row(0)
		}
	} else {
		var out []float32
		out, err = e.mdl.Forward(b, []int{0})
		src = sample.Slice(out)
	}
	if err == nil {
		err = backendErr(e.be)
	}
	if st != nil {
		st.pos = pos + 1
		if err != nil {
			st.pos = -1
		}
	}
	return src, err
}

// deviceSampling reports whether decode steps sample where the logits are
// (a token id or top-k candidates cross to the host, not the row):
// FTCHAT_DEVICE_SAMPLING=0 forces the full-row copy, to compare.
func deviceSampling() bool { return os.Getenv("FTCHAT_DEVICE_SAMPLING") != "0" }

// sourceErr is the error a device-held logits row met while being
// sampled (nil for host rows). The row is unreadable after such an
// error, so the sampler drew -1.
func sourceErr(src sample.Logits) error {
	if r, ok := src.(interface{ Err() error }); ok {
		return r.Err()
	}
	return nil
}

// backendErr surfaces the first asynchronous error of a backend that
// records them (the GPU backend's ops have no error results).
func backendErr(be model.Backend) error {
	if eb, ok := be.(interface{ Err() error }); ok {
		return eb.Err()
	}
	return nil
}

// closeBackend releases a backend and, for the GPU, its device context.
func closeBackend(be model.Backend) {
	switch b := be.(type) {
	case *gpu.Backend:
		b.Close()
		b.Device().Close()
	case interface{ Close() }:
		b.Close()
	}
}
