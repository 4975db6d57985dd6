package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// BackendOptions tune the GPU backend.
type BackendOptions struct {
	// GEMMMinTokens is the batch size from which MatMul uses the tensor-core
	// GEMM (bf16 operands, float32 accumulation) instead of the float32 GEMV.
	// 0 means 9 (the GEMV handles up to 8 tokens per weight pass).
	GEMMMinTokens int
	// NoGraphs issues every op of a decode step directly instead of
	// replaying the step as a CUDA graph (also FTCHAT_CUDA_GRAPHS=0).
	NoGraphs bool
	// ChunkedGEMV selects the decode GEMV that reads x in chunks instead of
	// the default one that stages all of x in shared memory once per CTA
	// (gemvx_*, for rows up to the shared-memory limit). Measured on the
	// H200 (docs/benchmarks.md): whole-x decodes the Llama-3.1-8B Q4_K
	// shape at 149 tok/s against 121, SmolLM2 at 541 against 483.
	ChunkedGEMV bool
	// CUBLAS uses cuBLAS, when it can be loaded, for batches of at least
	// 128 rows (cublas.go): W is dequantized in row chunks (64 MiB of
	// scratch, allocated with the handle, plus cuBLAS's own workspace) to
	// bf16 for cublasGemmEx on sm_80 and newer with bf16 compute, else to
	// float32 for cublasSgemm_v2 in TF32 tensor-core mode. If cuBLAS is
	// missing the backend silently keeps its own GEMM; see Backend.CUBLAS.
	CUBLAS bool
	// CUBLASTF32 keeps the float32/TF32 Sgemm path where GemmEx on bf16
	// could run (a knob to compare the two).
	CUBLASTF32 bool
	// NoGEMMSplitK turns off the split-K 64x64-tile GEMM. By default the
	// GEMM of GEMMMinTokens..127 rows splits k over blockIdx.z when its
	// tiles alone would leave SMs idle (issue 14: 16 rows of Llama-3.1-8B
	// gave 16..224 CTAs on 132 SMs). The slices' float32 partials go to a
	// workspace of at most gemmSplitMax bytes, allocated at first use, and
	// a reduce kernel sums them in a fixed order (deterministic). On the
	// H200 (docs/benchmarks.md, 2026-12-03) it took a Llama-8B-shape decode
	// step's matmuls at 16 rows in 14.3 ms, against 17.1-17.2 for the
	// skinny GEMM and 28.7 for the unsplit tile GEMM
	// (FTCHAT_GEMM_SPLITK=0 in the engine).
	NoGEMMSplitK bool
	// SkinnyGEMM makes MatMul take the skinny tensor-core GEMM (gemmt.go)
	// for GEMMMinTokens..32 rows instead of the split-K tile GEMM, which
	// measured 1.2x faster (also FTCHAT_GEMM_SKINNY=1 in the engine).
	SkinnyGEMM bool
	// SplitKCTAsPerSM is the grid the split-K GEMM aims for, in CTAs per
	// SM (0: gemmSplitCTAsPerSM); a tuning knob (FTCHAT_GEMM_SPLIT_CTAS in
	// the engine) for device runs that sweep it.
	SplitKCTAsPerSM int
	// NoGEMMQ turns off the Q4_K/Q6_K GEMM from registers (gemmq.go) that
	// MatMul takes for GEMMQMinTokens..32 rows of those weights
	// (FTCHAT_GEMMQ=0 in the engine); those rows then take the GEMV and
	// the split-K tile GEMM as before.
	NoGEMMQ bool
	// GEMMQMinTokens is the fewest rows gemmq takes (0: 1, the
	// single-token decode too; 2 keeps one row on the whole-x GEMV);
	// fewer go to the GEMV (FTCHAT_GEMMQ_MIN in the engine).
	GEMMQMinTokens int
	// GEMMQCTAsPerSM overrides the grid gemmq's k split aims for, in CTAs
	// per SM (0: gemmqSplitCTAsPerSM), a tuning knob (FTCHAT_GEMMQ_CTAS in
	// the engine).
	GEMMQCTAsPerSM int
	// NoGEMMQGroup makes MatMulShared queue its matmuls one by one instead
	// of as one gemmqg launch (FTCHAT_GEMMQ_GROUP=0 in the engine).
	NoGEMMQGroup bool
	// NoGEMVQ keeps a single row of Q4_K weights on gemmq instead of the
	// GEMV on int16 activations (gemvq.go; FTCHAT_GEMVQ=0 in the engine).
	NoGEMVQ bool
	// GEMVQRowsPerWarp sets the rows each gemvq warp computes (1, 2 or 4;
	// 0: gemvqDefaultRows), a tuning knob (FTCHAT_GEMVQ_ROWS in the
	// engine); results do not depend on it.
	GEMVQRowsPerWarp int
	// NoGEMVQQ6K keeps the single row of Q6_K weights off gemvq (on
	// gemmq), FTCHAT_GEMVQ_Q6K=0 in the engine. On the H200 gemvq's Q6_K
	// body took the Llama-3.1-8B head row from 232 to 162 µs
	// (docs/benchmarks.md, 2026-12-03, tenth session).
	NoGEMVQQ6K bool
}

// Backend implements model.Backend on one CUDA device. Ops are queued to
// the device thread and run asynchronously on its work stream, in issue
// order; ToHost waits. The interface has no error results for ops, so the
// first failure is kept: call Err after a step (the engine must).
type Backend struct {
	dev  *Device
	opts BackendOptions

	mu  sync.Mutex
	err error

	// Device-thread state: touched only inside posted functions.
	fns     map[string]*Function
	smemSet map[*Function]int  // dynamic shared memory limits raised so far
	free    map[int64][]Buffer // cached activation buffers by size
	ring    stageRing
	ropes   map[string]Buffer // float64 inverse frequencies per rope config
	bad     Buffer            // int32 flag set by embed for out-of-range ids

	kv *KVCache     // paged KV pool (attention.go), nil before AllocKV
	hs *hybridState // recurrent state (hybrid.go), nil before AllocState

	splitWS    Buffer      // split-K GEMM partials (gemmSplitMax bytes), allocated at first use
	splitWSErr error       // why the workspace could not be allocated: split-K stays off
	routerDone Buffer      // moe_router_topk's CTA counter (moe.go), allocated at first use
	gemmqWS    Buffer      // gemmq's packed activations (gemmq.go), allocated at first use
	gemmqWSErr error       // why it could not be allocated: gemmq stays off
	packed     gemmqPacked // what gemmqWS holds (gemmq.go)
	packReuses int         // gemmq calls that found their x packed (tests)
	groupCalls int         // MatMulShared calls gemmqGroup took (tests)

	blas    *cublasHandle // nil unless opts.CUBLAS and the library loaded
	blasX   sharedX       // MatMulShared's x in bf16 while its set runs (device thread)
	blasErr error         // why cuBLAS is not used, when it was asked for

	gemvMode atomic.Int32 // tests: 0 per options, 1 force whole-x GEMV, 2 force chunked
	graphs   bool         // decode steps become CUDA graphs (graph.go)

	placement Placement    // where routed experts live (placement.go, offload.go)
	host      *hostExperts // host-resident experts (offload.go); nil without host blocks
}

var (
	_ model.Backend      = (*Backend)(nil)
	_ model.RowGatherer  = (*Backend)(nil)
	_ model.StepRecorder = (*Backend)(nil)
)

// NewBackend prepares the backend on dev: loads the ops module (the
// driver JIT-compiles PTX on first use and caches the result) and the
// staging buffers. Each weight type's module (mm_<type>) loads with the
// first weight of that type.
func NewBackend(dev *Device, opts BackendOptions) (*Backend, error) {
	if opts.GEMMMinTokens <= 0 {
		opts.GEMMMinTokens = gemvMaxTok + 1
	}
	b := &Backend{dev: dev, opts: opts, fns: map[string]*Function{}, smemSet: map[*Function]int{}, free: map[int64][]Buffer{}, ropes: map[string]Buffer{},
		graphs: !opts.NoGraphs && graphsEnabled()}
	err := dev.Do(func(c *Ctx) error {
		if _, err := c.Module("ops"); err != nil {
			return err
		}
		if err := b.ring.init(c, 4<<20); err != nil {
			return err
		}
		var err error
		if b.bad, err = c.Alloc(4, "embed flag"); err != nil {
			return err
		}
		if opts.CUBLAS {
			if b.blas, b.blasErr = newCublasHandle(c); b.blas != nil {
				// The way is fixed for the backend's life.
				b.blas.bf16 = !opts.CUBLASTF32 && c.Device().Compute() == ComputeBF16 && b.blas.canBF16()
			}
		}
		return c.Memset32(b.bad.Ptr, 0, 1)
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: backend on %s: %w", dev.Info().Name, err)
	}
	return b, nil
}

// BeginStep starts recording a decode step (model.StepRecorder): its
// stream operations are replayed as a CUDA graph when the same step (same
// kernels, arguments and addresses) was seen before. The staging ring
// restarts so the step's inputs land at the same addresses every time.
func (b *Backend) BeginStep() {
	if !b.graphs {
		return
	}
	b.post(func(c *Ctx) error {
		if b.ring.off != 0 {
			if err := c.Sync(); err != nil {
				return err
			}
			b.ring.off = 0
		}
		return c.beginRecording()
	})
}

// EndStep issues what the step recorded and stops recording.
func (b *Backend) EndStep() {
	if !b.graphs {
		return
	}
	b.post(func(c *Ctx) error { return c.endRecording() })
}

// ReplayLastStep is Ctx.ReplayLastStep on the device thread: the last
// recorded step's graphs replayed n times, the GPU's milliseconds a step.
func (b *Backend) ReplayLastStep(n int) (ms float64, graphs, direct int, err error) {
	err = b.dev.Do(func(c *Ctx) error {
		var err error
		ms, graphs, direct, err = c.ReplayLastStep(n)
		return err
	})
	return ms, graphs, direct, err
}

// GraphStats reports how the recorded steps were issued so far.
func (b *Backend) GraphStats() (GraphStats, error) {
	var st GraphStats
	err := b.dev.Do(func(c *Ctx) error { st = c.GraphStats(); return nil })
	return st, err
}

// Device returns the device the backend runs on.
func (b *Backend) Device() *Device { return b.dev }

// Name reports the device.
func (b *Backend) Name() string {
	i := b.dev.Info()
	return fmt.Sprintf("cuda:%d %s", i.Ordinal, i.Name)
}

// Err returns the first error of any op since the last call (and clears it).
func (b *Backend) Err() error {
	b.mu.Lock()
	err := b.err
	b.err = nil
	b.mu.Unlock()
	if derr := b.dev.Err(); err == nil {
		err = derr
	}
	return err
}

func (b *Backend) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
}

func (b *Backend) post(f func(c *Ctx) error) { b.dev.Post(f) }

// Close frees the backend's device memory (tensors still held by the caller included).
func (b *Backend) Close() error {
	return b.dev.Do(func(c *Ctx) error {
		b.closeHost(c)
		if b.kv != nil {
			b.kv.Free(c)
			b.kv = nil
		}
		b.freeState(c)
		b.trim(c)
		if b.blas != nil {
			b.blas.close(c)
			b.blas = nil
		}
		for _, r := range b.ropes {
			c.Free(r)
		}
		b.ropes = map[string]Buffer{}
		b.ring.free(c)
		if err := c.Free(b.splitWS); err != nil {
			return err
		}
		b.splitWS = Buffer{}
		if err := c.Free(b.gemmqWS); err != nil {
			return err
		}
		b.gemmqWS, b.packed = Buffer{}, gemmqPacked{}
		if err := c.Free(b.routerDone); err != nil {
			return err
		}
		b.routerDone = Buffer{}
		return c.Free(b.bad)
	})
}

// Trim releases cached activation buffers back to the device.
func (b *Backend) Trim() {
	b.post(func(c *Ctx) error { b.trim(c); return nil })
}

func (b *Backend) trim(c *Ctx) {
	for n, l := range b.free {
		for _, buf := range l {
			c.Free(buf)
		}
		delete(b.free, n)
	}
}

// typedKernels are the kernel families built once per weight type (mm.cuh),
// named <prefix><type suffix> and living in module mm_<type suffix>.
var typedKernels = []string{"gemv_", "gemvx_", "gemvr_", "gemvf_", "gemm_", "gemms_", "gemm_reduce_", "gemml_", "gemmt16_", "gemmt32_", "moe_gemv_", "dequant_rows_", "dequant_rows_bf16_", "embed_", "embedf_"}

// gemmqKernels are built for Q4_K and Q6_K only (mm_q4_k, mm_q6_k, gemmq.cuh).
var gemmqKernels = []string{"gemmq8_", "gemmq16_", "gemmq32_", "gemmq_pack_", "gemmqg8_", "gemmqg16_", "gemmqg32_", "gemmq_reduce3_"}

// gemvqKernels are built for Q4_K and Q6_K only (mm_q4_k, mm_q6_k, gemvq.cuh).
var gemvqKernels = []string{"gemvq_", "gemvq2_", "gemvq4_", "gemvq_pack_"}

// kernelModule returns the module holding kernel name: mm_<type> for the
// typed families, sample for the sampling kernels, ops for the rest.
func kernelModule(name string) string {
	if m, ok := moeKernelModule(name); ok {
		return m
	}
	if name == fp4ScaleKernel {
		return "mm_nvfp4"
	}
	if strings.HasPrefix(name, "sample_") {
		return sampleModule
	}
	for _, p := range slices.Concat(typedKernels, gemmqKernels, gemvqKernels) {
		if rest, ok := strings.CutPrefix(name, p); ok {
			for _, suf := range kernelSuffix {
				if rest == suf {
					return "mm_" + suf
				}
			}
		}
	}
	return "ops"
}

func (b *Backend) fn(c *Ctx, name string) (*Function, error) {
	if f, ok := b.fns[name]; ok {
		return f, nil
	}
	f, err := c.Function(kernelModule(name), name)
	if err != nil {
		return nil, err
	}
	b.fns[name] = f
	return f, nil
}

// launch runs kernel name of the ops module on the work stream.
func (b *Backend) launch(c *Ctx, name string, grid, block Dim3, args ...any) error {
	f, err := b.fn(c, name)
	if err != nil {
		return err
	}
	return c.Launch(f, grid, block, 0, c.Stream(), args...)
}

// activationName names an activation tensor's allocation, formatted only
// when the allocator needs the name (most NewTensor calls of a step reuse
// a cached buffer).
type activationName struct{ rows, cols int }

func (a activationName) String() string {
	return fmt.Sprintf("activation tensor %dx%d", a.rows, a.cols)
}

// scratch takes a device buffer of n bytes from the cache or the allocator.
func (b *Backend) scratch(c *Ctx, n int64, what fmt.Stringer) (Buffer, error) {
	n = (n + 255) &^ 255
	if l := b.free[n]; len(l) > 0 {
		buf := l[len(l)-1]
		b.free[n] = l[:len(l)-1]
		return buf, nil
	}
	buf, err := c.Alloc(n, what.String())
	if errors.Is(err, ErrBudget) || errors.Is(err, ErrOutOfMemory) {
		b.trim(c) // give cached buffers back and try once more
		buf, err = c.Alloc(n, what.String())
	}
	return buf, err
}

// allocName is a fixed allocation name.
type allocName string

func (a allocName) String() string { return string(a) }

// release returns a scratch buffer to the cache. Later ops that reuse it are
// queued on the same stream, so they run after every earlier user.
func (b *Backend) release(buf Buffer) {
	if buf.Ptr != 0 {
		b.free[buf.Size] = append(b.free[buf.Size], buf)
	}
}

// Tensor is a float32 [Rows][Cols] activation matrix in device memory.
type Tensor struct {
	rows, cols int
	buf        Buffer // assigned on the device thread
}

func (t *Tensor) Rows() int { return t.rows }
func (t *Tensor) Cols() int { return t.cols }

// Ptr is the tensor's device address; valid only on the device thread
// (inside Do/Post), after the NewTensor that created it.
func (t *Tensor) Ptr() DevicePtr { return t.buf.Ptr }

// NewTensor queues the allocation of a rows×cols float32 tensor. Its
// contents are undefined until written.
func (b *Backend) NewTensor(rows, cols int) model.Tensor {
	t := &Tensor{rows: rows, cols: cols}
	if rows < 0 || cols < 0 {
		b.fail(fmt.Errorf("gpu: NewTensor(%d, %d): negative shape", rows, cols))
		return t
	}
	if n := int64(rows) * int64(cols) * 4; n > 0 {
		b.post(func(c *Ctx) error {
			var err error
			t.buf, err = b.scratch(c, n, activationName{rows, cols})
			return err
		})
	}
	return t
}

// FreeTensor returns the tensor's memory to the backend's cache.
func (b *Backend) FreeTensor(t model.Tensor) {
	gt, ok := t.(*Tensor)
	if !ok {
		return
	}
	b.post(func(c *Ctx) error {
		b.release(gt.buf)
		gt.buf = Buffer{}
		return nil
	})
}

// ToHost waits for all queued work and copies src into dst.
func (b *Backend) ToHost(src model.Tensor, dst []float32) {
	t, ok := b.ten(src, "ToHost")
	if !ok {
		return
	}
	n := min(len(dst), t.rows*t.cols)
	if err := b.dev.Do(func(c *Ctx) error { return Download(c, dst[:n], t.buf.Ptr) }); err != nil {
		b.fail(err)
	}
}

// FromHost copies src into dst (queued after earlier ops).
func (b *Backend) FromHost(dst model.Tensor, src []float32) {
	t, ok := b.ten(dst, "FromHost")
	if !ok {
		return
	}
	n := min(len(src), t.rows*t.cols)
	data := append([]float32(nil), src[:n]...)
	b.post(func(c *Ctx) error { return Upload(c, t.buf.Ptr, data) })
}

func (b *Backend) ten(t model.Tensor, op string) (*Tensor, bool) {
	gt, ok := t.(*Tensor)
	if !ok {
		b.fail(fmt.Errorf("gpu: %s: tensor of type %T does not belong to the GPU backend", op, t))
	}
	return gt, ok
}

// Weight is a model tensor in device memory, in its GGUF block format.
// Rows are the output features, Cols the input features (ne0).
type Weight struct {
	info       gguf.TensorInfo
	rows, cols int
	rowBytes   int64
	raw        Buffer
	f32        Buffer  // float32 copy of vector weights (norms, biases)
	scale      float32 // NVFP4 / FP8_E4M3 second-level scale (LoadScaledWeight); 0: none
}

func (w *Weight) Info() gguf.TensorInfo { return w.info }

// Ptr is the device address of the raw GGUF data.
func (w *Weight) Ptr() DevicePtr { return w.raw.Ptr }

// kernelSuffix names each supported type in kernel names (gemv_q4_k, ...).
var kernelSuffix = map[gguf.Type]string{
	gguf.F32: "f32", gguf.F16: "f16", gguf.BF16: "bf16",
	gguf.Q4_0: "q4_0", gguf.Q4_1: "q4_1", gguf.Q5_0: "q5_0", gguf.Q5_1: "q5_1",
	gguf.Q8_0: "q8_0", gguf.Q8_1: "q8_1", gguf.Q2_K: "q2_k", gguf.Q3_K: "q3_k",
	gguf.Q4_K: "q4_k", gguf.Q5_K: "q5_k", gguf.Q6_K: "q6_k",
	gguf.MXFP4: "mxfp4", gguf.NVFP4: "nvfp4", gguf.FP8_E4M3: "fp8", gguf.FP8_E4M3_B32: "fp8b",
}

func isFloatType(t gguf.Type) bool { return t == gguf.F32 || t == gguf.F16 || t == gguf.BF16 }

// SupportedTypes lists the GGUF tensor types the GPU backend reads.
func SupportedTypes() []gguf.Type {
	return []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1,
		gguf.Q8_0, gguf.Q8_1, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.MXFP4, gguf.NVFP4, gguf.FP8_E4M3, gguf.FP8_E4M3_B32}
}

// LoadWeight uploads raw (the tensor's GGUF bytes) to the device; the
// caller may unmap raw afterwards. Vectors (norm weights, biases) also get
// a float32 copy for the element-wise kernels.
func (b *Backend) LoadWeight(info gguf.TensorInfo, raw []byte) (model.Weight, error) {
	if hw, ok, err := b.loadHostWeight(info, raw); ok {
		return hw, err
	}
	t := info.Type
	if _, ok := kernelSuffix[t]; !ok {
		names := make([]string, 0, len(kernelSuffix))
		for _, s := range SupportedTypes() {
			names = append(names, s.String())
		}
		return nil, fmt.Errorf("gpu: tensor %q has type %s, which the GPU backend does not support (supported: %s)",
			info.Name, t, strings.Join(names, ", "))
	}
	if len(info.Dims) == 0 || info.Dims[0] == 0 {
		return nil, fmt.Errorf("gpu: tensor %q has no elements", info.Name)
	}
	cols := int(info.Dims[0])
	if cols%t.BlockElems() != 0 {
		return nil, fmt.Errorf("gpu: tensor %q: row length %d is not a multiple of the %s block size %d", info.Name, cols, t, t.BlockElems())
	}
	rows := int(info.Elements()) / cols
	rowBytes := int64(cols / t.BlockElems() * t.BlockBytes())
	size := int64(rows) * rowBytes
	if int64(len(raw)) < size {
		return nil, fmt.Errorf("gpu: tensor %q: %d bytes of data, want %d", info.Name, len(raw), size)
	}
	w := &Weight{info: info, rows: rows, cols: cols, rowBytes: rowBytes}
	var vec []float32
	if rows == 1 || len(info.Dims) == 1 {
		vec = make([]float32, rows*cols)
		if err := gguf.Dequantize(t, raw[:size], vec); err != nil {
			return nil, fmt.Errorf("gpu: tensor %q: %w", info.Name, err)
		}
	}
	err := b.dev.Do(func(c *Ctx) error {
		// JIT the type's kernels now, while the caller shows load progress,
		// not at the first token.
		if _, err := c.Module("mm_" + kernelSuffix[t]); err != nil {
			return err
		}
		var err error
		if w.raw, err = c.Alloc(size, "weight "+info.Name); err != nil {
			return err
		}
		if err := c.CopyToDevice(w.raw.Ptr, unsafe.Pointer(&raw[0]), size); err != nil {
			return err
		}
		if vec != nil {
			if w.f32, err = c.Alloc(int64(len(vec))*4, "weight "+info.Name+" (float32)"); err != nil {
				return err
			}
			return Upload(c, w.f32.Ptr, vec)
		}
		return nil
	})
	if err != nil {
		b.FreeWeight(w)
		return nil, fmt.Errorf("gpu: loading %s: %w", info.Name, err)
	}
	return w, nil
}

// FreeWeight releases a weight's device memory.
func (b *Backend) FreeWeight(mw model.Weight) {
	w, ok := mw.(*Weight)
	if !ok {
		return
	}
	b.dev.Do(func(c *Ctx) error {
		c.Free(w.raw)
		c.Free(w.f32)
		w.raw, w.f32 = Buffer{}, Buffer{}
		return nil
	})
}

func (b *Backend) wt(w model.Weight, op string) (*Weight, bool) {
	gw, ok := w.(*Weight)
	if !ok {
		b.fail(fmt.Errorf("gpu: %s: weight of type %T does not belong to the GPU backend", op, w))
	}
	return gw, ok
}

func (b *Backend) vec(w model.Weight, n int, op string) (*Weight, bool) {
	gw, ok := b.wt(w, op)
	if !ok {
		return nil, false
	}
	if gw.f32.Ptr == 0 || gw.rows*gw.cols < n {
		b.fail(fmt.Errorf("gpu: %s: weight %q is not a vector of at least %d elements (dims %v)", op, gw.info.Name, n, gw.info.Dims))
		return nil, false
	}
	return gw, true
}

// stageRing copies small per-op host data (token ids, positions, tables)
// to the device without a stream synchronisation per op: data goes into a
// pinned ring and is copied asynchronously to the same offset of a device
// ring. Wrapping around waits for the stream, so no copy still in flight
// is overwritten.
type stageRing struct {
	host HostBuffer
	dev  Buffer
	off  int64
}

func (r *stageRing) init(c *Ctx, n int64) error {
	var err error
	if r.host, err = c.HostAlloc(n); err != nil {
		return err
	}
	r.dev, err = c.Alloc(n, "staging ring")
	return err
}

func (r *stageRing) free(c *Ctx) {
	if r.host.p != nil {
		c.FreeHost(r.host)
	}
	c.Free(r.dev)
	*r = stageRing{}
}

// stage queues a copy of src to device memory valid for ops queued before
// the ring wraps (4 MiB later).
func stage[T any](c *Ctx, r *stageRing, src []T) (DevicePtr, error) {
	n := int64(len(src)) * int64(unsafe.Sizeof(*new(T)))
	if n == 0 {
		return r.dev.Ptr, nil
	}
	if n > r.dev.Size {
		return 0, fmt.Errorf("gpu: %d bytes of per-op data exceed the %d-byte staging ring", n, r.dev.Size)
	}
	if r.off+n > r.dev.Size {
		if err := c.Sync(); err != nil {
			return 0, err
		}
		r.off = 0
	}
	h := r.host.Bytes()[r.off : r.off+n]
	copy(h, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), n))
	dst := r.dev.Ptr.Add(r.off)
	if err := c.CopyToDeviceAsync(dst, unsafe.Pointer(&h[0]), n); err != nil {
		return 0, err
	}
	r.off = (r.off + n + 255) &^ 255
	return dst, nil
}

func cdiv(a, b int) int { return (a + b - 1) / b }

const (
	gemvMaxTok = 8 // GEMV_MAX_TOK in ops.cu
	gemvWarps  = 8 // GEMV_WARPS in ops.cu: rows (warps) per CTA
	// gemmLargeTokens is the batch from which the 128x128-tile GEMM
	// (gemml_*) replaces the 64x64 one.
	gemmLargeTokens = 128
)

// Embed writes the dequantized rows tokens[i] of table into dst.
func (b *Backend) Embed(dst model.Tensor, table model.Weight, tokens []int32) {
	d, ok1 := b.ten(dst, "Embed")
	w, ok2 := b.wt(table, "Embed")
	if !ok1 || !ok2 {
		return
	}
	if d.cols != w.cols || d.rows < len(tokens) {
		b.fail(fmt.Errorf("gpu: Embed: %d tokens of width %d into a %dx%d tensor", len(tokens), w.cols, d.rows, d.cols))
		return
	}
	if len(tokens) == 0 {
		return
	}
	ids := append([]int32(nil), tokens...)
	kind := "embed_"
	if w.cols%32 != 0 {
		kind = "embedf_"
	}
	name := kind + kernelSuffix[w.info.Type]
	b.post(func(c *Ctx) error {
		p, err := stage(c, &b.ring, ids)
		if err != nil {
			return err
		}
		if err := b.launch(c, name, Dim3{X: len(ids)}, Dim3{X: 128}, w.raw, w.rowBytes, w.rows, w.cols, p, d.buf, b.bad); err != nil || w.scale == 0 {
			return err
		}
		return b.scaleOut(c, d.buf.Ptr, int64(len(ids))*int64(w.cols), w.scale)
	})
}

// RMSNorm: dst = x / sqrt(mean(x²) + eps) * w, row by row.
func (b *Backend) RMSNorm(dst, x model.Tensor, w model.Weight, eps float32) {
	d, ok1 := b.ten(dst, "RMSNorm")
	s, ok2 := b.ten(x, "RMSNorm")
	if !ok1 || !ok2 {
		return
	}
	g, ok := b.vec(w, s.cols, "RMSNorm")
	if !ok {
		return
	}
	if d.rows != s.rows || d.cols != s.cols {
		b.fail(fmt.Errorf("gpu: RMSNorm: dst %dx%d, x %dx%d", d.rows, d.cols, s.rows, s.cols))
		return
	}
	if s.rows == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, rmsnormKernel(), Dim3{X: s.rows}, Dim3{X: 256}, d.buf, s.buf, g.f32, s.cols, eps)
	})
}

// HeadRMSNorm normalises each headDim slice of x in place.
func (b *Backend) HeadRMSNorm(x model.Tensor, w model.Weight, headDim int, eps float32) {
	s, ok := b.ten(x, "HeadRMSNorm")
	if !ok {
		return
	}
	g, ok := b.vec(w, headDim, "HeadRMSNorm")
	if !ok {
		return
	}
	if headDim <= 0 || s.cols%headDim != 0 {
		b.fail(fmt.Errorf("gpu: HeadRMSNorm: width %d is not a multiple of head_dim %d", s.cols, headDim))
		return
	}
	n := s.rows * s.cols / headDim
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, "head_rmsnorm", Dim3{X: cdiv(n, 8)}, Dim3{X: 256}, s.buf, g.f32, n, headDim, eps)
	})
}

// MatMul: dst[r] = W · x[r]. Up to GEMMMinTokens-1 rows use the float32
// GEMV (one pass over W for up to 8 rows at a time); larger batches use the
// tensor-core GEMM. Q4_K and Q6_K weights take gemmq (gemmq.go) for 1..32 rows.
func (b *Backend) MatMul(dst, x model.Tensor, w model.Weight) {
	d, ok1 := b.ten(dst, "MatMul")
	s, ok2 := b.ten(x, "MatMul")
	gw, ok3 := b.wt(w, "MatMul")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	if s.cols != gw.cols || d.cols != gw.rows || d.rows != s.rows {
		b.fail(fmt.Errorf("gpu: MatMul shapes: x %dx%d, %s %dx%d, dst %dx%d", s.rows, s.cols, gw.info.Name, gw.rows, gw.cols, d.rows, d.cols))
		return
	}
	if s.rows == 0 {
		return
	}
	b.post(func(c *Ctx) error { return b.matmul(c, d.buf.Ptr, s.buf.Ptr, s.rows, gw) })
}

// MatMulShared implements model.SharedMatMuler: dsts[i] = x·ws[i]ᵀ. Rows
// that gemmq takes (1..32 of Q4_K or Q6_K weights), for weights of one
// type and width, go to one gemmqg launch over their row tiles and one
// reduce (gemmq.go, gemmqGroups), where each weight alone would take two
// launches; the others are MatMul one weight at a time.
func (b *Backend) MatMulShared(dsts []model.Tensor, x model.Tensor, ws []model.Weight) {
	s, ok := b.ten(x, "MatMulShared")
	if !ok || len(dsts) != len(ws) {
		if ok {
			b.fail(fmt.Errorf("gpu: MatMulShared: %d outputs for %d weights", len(dsts), len(ws)))
		}
		return
	}
	gws := make([]*Weight, len(ws))
	ds := make([]*Tensor, len(ws))
	for i := range ws {
		d, ok1 := b.ten(dsts[i], "MatMulShared")
		gw, ok2 := b.wt(ws[i], "MatMulShared")
		if !ok1 || !ok2 {
			return
		}
		if s.cols != gw.cols || d.cols != gw.rows || d.rows != s.rows {
			b.fail(fmt.Errorf("gpu: MatMulShared shapes: x %dx%d, %s %dx%d, dst %dx%d", s.rows, s.cols, gw.info.Name, gw.rows, gw.cols, d.rows, d.cols))
			return
		}
		gws[i], ds[i] = gw, d
	}
	if s.rows == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		// Buffers are read here, on the device thread, where NewTensor's
		// allocations have run.
		n, xp := s.rows, s.buf.Ptr
		ys := make([]DevicePtr, len(ds))
		for i, d := range ds {
			ys[i] = d.buf.Ptr
		}
		if done, err := b.sharedBF16X(c, xp, n, s.cols); err != nil {
			return err
		} else if done != nil {
			defer done()
		}
		for _, set := range gemmqGroups(gws, func(w *Weight) bool { return b.groupable(n, w) }) {
			if len(set) > 1 {
				sw, sy := make([]*Weight, len(set)), make([]DevicePtr, len(set))
				for k, i := range set {
					sw[k], sy[k] = gws[i], ys[i]
				}
				done, err := b.gemmqGroup(c, sy, xp, n, sw)
				if err != nil {
					return err
				}
				if done {
					continue
				}
			}
			for _, i := range set {
				if err := b.matmul(c, ys[i], xp, n, gws[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// matmul queues y[n][W.rows] = x[n][W.cols] · Wᵀ, times W's second-level
// scale if it has one.
func (b *Backend) matmul(c *Ctx, y, x DevicePtr, n int, w *Weight) error {
	if err := b.matmulRaw(c, y, x, n, w); err != nil || w.scale == 0 {
		return err
	}
	return b.scaleOut(c, y, int64(n)*int64(w.rows), w.scale)
}

func (b *Backend) matmulRaw(c *Ctx, y, x DevicePtr, n int, w *Weight) error {
	suf := kernelSuffix[w.info.Type]
	c.profNote(float64(w.rows)*float64(w.rowBytes), 2*float64(n)*float64(w.rows)*float64(w.cols))
	if w.cols%32 != 0 { // only float types can get here
		for t := 0; t < n; t += gemvMaxTok {
			nt := min(gemvMaxTok, n-t)
			if err := b.launchGemv(c, "gemvf_"+suf, w, x.Add(int64(t*w.cols*4)), y.Add(int64(t*w.rows*4)), nt); err != nil {
				return err
			}
		}
		return nil
	}
	if n >= gemmLargeTokens && b.blas != nil && b.cublasFits(w) {
		return b.matmulCUBLAS(c, y, x, n, w)
	}
	if n >= gemmLargeTokens {
		return b.launch(c, "gemml_"+suf, Dim3{X: cdiv(w.rows, 128), Y: cdiv(n, 128)}, Dim3{X: 256},
			w.raw, w.rowBytes, w.rows, w.cols, x, y, n)
	}
	if b.useGemvq(n, w) { // gemvq.go
		if done, err := b.gemvq(c, []DevicePtr{y}, x, []*Weight{w}); done || err != nil {
			return err
		}
	}
	if b.useGemmq(n, w.info.Type, w.cols) { // gemmq.go
		if done, err := b.gemmq(c, y, x, n, w, suf); done || err != nil {
			return err
		}
	}
	if n >= b.opts.GEMMMinTokens {
		if b.useGemmt(n) { // gemmt.go
			if done, err := b.gemmt(c, y, x, n, w, suf); done || err != nil {
				return err
			}
		}
		if !b.opts.NoGEMMSplitK {
			if done, err := b.gemmSplitK(c, y, x, n, w, suf); done || err != nil {
				return err
			}
		}
		return b.launch(c, "gemm_"+suf, Dim3{X: cdiv(w.rows, 64), Y: cdiv(n, 64)}, Dim3{X: 128},
			w.raw, w.rowBytes, w.rows, w.cols, x, y, n)
	}
	for t := 0; t < n; t += gemvMaxTok {
		nt := min(gemvMaxTok, n-t)
		xt, yt := x.Add(int64(t*w.cols*4)), y.Add(int64(t*w.rows*4))
		if shm := w.cols * 4; nt == 1 && shm <= b.gemvxSmem(c) && b.useGemvr(w) {
			if err := b.launchGemvr(c, w, xt, yt); err != nil { // gemvr.go
				return err
			}
			continue
		}
		if shm := w.cols * 4; nt == 1 && shm <= b.gemvxSmem(c) && b.useWholeX() {
			// One token whose x fits in shared memory: one barrier per CTA.
			f, err := b.fn(c, "gemvx_"+suf)
			if err != nil {
				return err
			}
			if shm > 48<<10 && b.smemSet[f] < shm {
				if err := c.SetMaxDynamicShared(f, b.gemvxSmem(c)); err != nil {
					return err
				}
				b.smemSet[f] = b.gemvxSmem(c)
			}
			if err := c.Launch(f, Dim3{X: cdiv(w.rows, gemvWarps)}, Dim3{X: 32 * gemvWarps}, shm, c.Stream(),
				w.raw, w.rowBytes, w.rows, w.cols, xt, yt); err != nil {
				return err
			}
			continue
		}
		if err := b.launchGemv(c, "gemv_"+suf, w, xt, yt, nt); err != nil {
			return err
		}
	}
	return nil
}

const (
	// gemmSplitMax bounds the split-K partials of one GEMM (float32
	// [splits][n][rows]); a call needing more takes fewer splits. 16 MiB
	// holds 2 splits of 127 rows x 16384 outputs; the buffer is small
	// enough for the plan's reserve (engine.GPUHeadroom, >= 256 MiB).
	gemmSplitMax = 16 << 20
	// gemmSplitMaxK is the most k slices one GEMM is cut into.
	gemmSplitMaxK = 16
	// gemmSplitCTAsPerSM is the grid the splits aim for: enough resident
	// CTAs per SM (a 64x64 tile CTA is 128 threads, 18 KiB of shared
	// memory) to keep the weight loads of several in flight.
	gemmSplitCTAsPerSM = 4
)

// gemmSplits picks the split-K count of an n-row GEMM over a rows x cols
// weight on sms multiprocessors, and the k steps (GK = 64 elements) each
// slice covers; 1 when splitting would not add CTAs or the partials would
// not fit in gemmSplitMax. Every slice is non-empty.
func gemmSplits(n, rows, cols, sms, ctasPerSM int) (splits, kSteps int) {
	steps := cdiv(cols, 64)
	tiles := cdiv(rows, 64) * cdiv(n, 64)
	s := min(cdiv(max(ctasPerSM, 1)*max(sms, 1), tiles), gemmSplitMaxK, steps)
	if per := int64(n) * int64(rows) * 4; int64(s)*per > gemmSplitMax {
		s = int(gemmSplitMax / per)
	}
	if s < 2 {
		return 1, steps
	}
	kSteps = cdiv(steps, s)
	return cdiv(steps, kSteps), kSteps
}

// gemmSplitK queues the split-K GEMM (gemms_*) and the reduce of its
// partials into y. done is false when the call is better left to the
// unsplit GEMM: the tiles already fill the device, or the workspace could
// not be had (then split-K stays off for this backend).
func (b *Backend) gemmSplitK(c *Ctx, y, x DevicePtr, n int, w *Weight, suf string) (done bool, err error) {
	perSM := b.opts.SplitKCTAsPerSM
	if perSM <= 0 {
		perSM = gemmSplitCTAsPerSM
	}
	splits, kSteps := gemmSplits(n, w.rows, w.cols, c.Device().Info().SMs, perSM)
	if splits < 2 || !b.splitWorkspace(c) {
		return false, nil
	}
	if err := b.launch(c, "gemms_"+suf, Dim3{X: cdiv(w.rows, 64), Y: cdiv(n, 64), Z: splits}, Dim3{X: 128},
		w.raw, w.rowBytes, w.rows, w.cols, x, b.splitWS, n, kSteps); err != nil {
		return true, err
	}
	count := int64(n) * int64(w.rows)
	return true, b.launch(c, "gemm_reduce_"+suf, Dim3{X: int(cdiv64(count, 256))}, Dim3{X: 256}, b.splitWS, y, count, splits)
}

// splitWorkspace allocates the split-K partials' workspace at first use
// and reports whether it is there; once an allocation fails, split-K
// stays off for this backend.
func (b *Backend) splitWorkspace(c *Ctx) bool {
	if b.splitWS.Ptr != 0 {
		return true
	}
	if b.splitWSErr != nil {
		return false
	}
	// A plain allocation (no stream operation), so also fine while a step
	// is recorded; the address then stays fixed for every graph.
	var err error
	if b.splitWS, err = c.Alloc(gemmSplitMax, "split-K GEMM workspace"); err != nil {
		b.splitWS, b.splitWSErr = Buffer{}, err
		return false
	}
	return true
}

func (b *Backend) useWholeX() bool {
	switch b.gemvMode.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	return !b.opts.ChunkedGEMV
}

// gemvxSmem is the most dynamic shared memory the whole-x GEMV may use:
// the device's opt-in limit, capped so two CTAs still fit per SM (rows up
// to 28672 floats on Hopper).
func (b *Backend) gemvxSmem(c *Ctx) int {
	return min(c.Device().Info().SharedMemOptin, 112<<10)
}

// CUBLAS reports the cuBLAS library in use, or why none is (empty and nil
// when it was not asked for).
func (b *Backend) CUBLAS() (string, error) {
	if b.blas != nil {
		return cublas.path, nil
	}
	return "", b.blasErr
}

// CUBLASMode names the cuBLAS way MatMul takes: "bf16 GemmEx" or "TF32
// Sgemm" (empty without cuBLAS).
func (b *Backend) CUBLASMode() string {
	if b.blas == nil {
		return ""
	}
	if b.blas.bf16 {
		return "bf16 GemmEx"
	}
	return "TF32 Sgemm"
}

// matmulCUBLAS dequantizes W in row chunks to scratch and multiplies with
// cuBLAS: bf16 operands through cublasGemmEx when the handle and device
// allow, else float32 through cublasSgemm_v2 (TF32 tensor cores). Both
// accumulate and write float32.
func (b *Backend) matmulCUBLAS(c *Ctx, y, x DevicePtr, n int, w *Weight) error {
	if w.info.Type == gguf.F32 {
		return b.blas.sgemmRowMajor(c, w.raw.Ptr, w.rows, w.cols, x, n, y, w.rows)
	}
	if b.blas.bf16 {
		return b.matmulCUBLASBF16(c, y, x, n, w)
	}
	return b.cublasChunked(c, y, x, n, w, "dequant_rows_", 4, b.blas.sgemmRowMajor)
}

// cublasChunked dequantizes W in chunks of rows (kernel prefix+type, esz
// bytes an element) into the handle's weight chunk and multiplies each
// with gemm (sgemmRowMajor or gemmBF16RowMajor) into its columns of y.
// cublasFits has checked that 128 rows fit the chunk.
func (b *Backend) cublasChunked(c *Ctx, y, x DevicePtr, n int, w *Weight, prefix string, esz int,
	gemm func(c *Ctx, a DevicePtr, m, k int, x DevicePtr, n int, y DevicePtr, ldy int) error) error {
	chunk := min(max(128, int(b.blas.wchunk.Size)/(w.cols*esz)/128*128), w.rows)
	name := prefix + kernelSuffix[w.info.Type]
	for r0 := 0; r0 < w.rows; r0 += chunk {
		nr := min(chunk, w.rows-r0)
		units := nr * (w.cols / 32)
		if err := b.launch(c, name, Dim3{X: cdiv(units, 256)}, Dim3{X: 256}, w.raw, w.rowBytes, r0, nr, w.cols, b.blas.wchunk); err != nil {
			return err
		}
		if err := gemm(c, b.blas.wchunk.Ptr, nr, w.cols, x, n, y.Add(int64(r0)*4), w.rows); err != nil {
			return err
		}
	}
	return nil
}

// toBF16 rounds x[n][cols] to bf16 into a scratch buffer (release it).
func (b *Backend) toBF16(c *Ctx, x DevicePtr, n, cols int) (Buffer, error) {
	xb, err := b.scratch(c, int64(n)*int64(cols)*2, allocName("cuBLAS bf16 activations"))
	if err != nil {
		return Buffer{}, err
	}
	pairs := n * cols / 2
	if err := b.launch(c, "f32_to_bf16", Dim3{X: cdiv(pairs, 256)}, Dim3{X: 256}, xb, x, int64(pairs)); err != nil {
		b.release(xb)
		return Buffer{}, err
	}
	return xb, nil
}

// sharedBF16X rounds the x of a MatMulShared set to bf16 once for all of
// its weights when they go to GemmEx (q, k and v; gate and up), instead of
// once per weight. It returns the function that drops the copy, or nil
// when there is none.
func (b *Backend) sharedBF16X(c *Ctx, x DevicePtr, n, cols int) (func(), error) {
	if n < gemmLargeTokens || b.blas == nil || cols%32 != 0 || !b.blas.bf16 {
		return nil, nil
	}
	xb, err := b.toBF16(c, x, n, cols)
	if err != nil {
		return nil, err
	}
	b.blasX = sharedX{src: x, n: n, cols: cols, buf: xb}
	return func() {
		b.release(xb)
		b.blasX = sharedX{}
	}, nil
}

// sharedX is x rounded to bf16 for the weights of one MatMulShared set.
type sharedX struct {
	src     DevicePtr
	n, cols int
	buf     Buffer
}

// cublasFits reports whether 128 rows of w, dequantized for the cuBLAS
// way in use, fit the weight chunk (rows of over 131,072 float32 or
// 262,144 bf16 columns do not; they stay on ftchat's GEMM). A float32 W
// needs no chunk.
func (b *Backend) cublasFits(w *Weight) bool {
	esz := int64(4)
	switch {
	case w.info.Type == gguf.F32:
		return true
	case b.blas.bf16:
		esz = 2
	}
	return 128*int64(w.cols)*esz <= b.blas.wchunk.Size
}

// matmulCUBLASBF16 rounds x to bf16 once, then per chunk of W rows
// dequantizes to bf16 (a BF16 W is used in place) and calls GemmEx.
func (b *Backend) matmulCUBLASBF16(c *Ctx, y, x DevicePtr, n int, w *Weight) error {
	xb := b.blasX.buf
	if sx := b.blasX; sx.buf.Ptr == 0 || sx.src != x || sx.n != n || sx.cols != w.cols {
		var err error
		if xb, err = b.toBF16(c, x, n, w.cols); err != nil {
			return err
		}
		defer b.release(xb)
	}
	if w.info.Type == gguf.BF16 && w.rowBytes == int64(w.cols)*2 {
		return b.blas.gemmBF16RowMajor(c, w.raw.Ptr, w.rows, w.cols, xb.Ptr, n, y, w.rows)
	}
	return b.cublasChunked(c, y, xb.Ptr, n, w, "dequant_rows_bf16_", 2, b.blas.gemmBF16RowMajor)
}

func (b *Backend) launchGemv(c *Ctx, name string, w *Weight, x, y DevicePtr, nt int) error {
	return b.launch(c, name, Dim3{X: cdiv(w.rows, gemvWarps)}, Dim3{X: 32 * gemvWarps}, w.raw, w.rowBytes, w.rows, w.cols, x, y, nt)
}

// AddBias adds the bias vector to every row of x.
func (b *Backend) AddBias(x model.Tensor, bias model.Weight) {
	s, ok := b.ten(x, "AddBias")
	if !ok {
		return
	}
	v, ok := b.vec(bias, s.cols, "AddBias")
	if !ok || s.rows*s.cols == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, "add_bias", Dim3{X: cdiv(s.rows*s.cols, 256)}, Dim3{X: 256}, s.buf, v.f32, s.rows, s.cols)
	})
}

// RoPE rotates every head of each row of x in place by the angles of pos[row].
func (b *Backend) RoPE(x model.Tensor, pos []int32, headDim int, r model.Rope) {
	s, ok := b.ten(x, "RoPE")
	if !ok {
		return
	}
	if err := checkRope(s.cols, headDim, r); err != nil {
		b.fail(err)
		return
	}
	if len(pos) < s.rows {
		b.fail(fmt.Errorf("gpu: RoPE: %d positions for %d rows", len(pos), s.rows))
		return
	}
	if s.rows == 0 {
		return
	}
	p := append([]int32(nil), pos[:s.rows]...)
	b.post(func(c *Ctx) error {
		dp, err := stage(c, &b.ring, p)
		if err != nil {
			return err
		}
		return b.rope(c, s.buf.Ptr, dp, s.rows, s.cols, headDim, r)
	})
}

func checkRope(cols, headDim int, r model.Rope) error {
	if headDim <= 0 || cols%headDim != 0 || r.Dim <= 0 || r.Dim%2 != 0 || r.Dim > headDim {
		return fmt.Errorf("gpu: RoPE: width %d, head_dim %d, rotary dim %d: need an even rotary dim <= head_dim dividing the width", cols, headDim, r.Dim)
	}
	if r.FreqFactors != nil && len(r.FreqFactors) < r.Dim/2 {
		return fmt.Errorf("gpu: RoPE: %d frequency factors for rotary dim %d (need %d)", len(r.FreqFactors), r.Dim, r.Dim/2)
	}
	return nil
}

// rope queues the rotation of x (device thread). pos is a device int32 array.
func (b *Backend) rope(c *Ctx, x, pos DevicePtr, rows, cols, headDim int, r model.Rope) error {
	freqs, err := b.ropeFreqs(c, r)
	if err != nil {
		return err
	}
	n := rows * (cols / headDim) * (r.Dim / 2)
	return b.launch(c, "rope", Dim3{X: cdiv(n, 256)}, Dim3{X: 256}, x, pos, freqs, rows, cols, headDim, r.Dim, r.NeoX)
}

// ropeFreqs uploads (once per configuration) the frequency table of r.
func (b *Backend) ropeFreqs(c *Ctx, r model.Rope) (DevicePtr, error) {
	key := fmt.Sprint(r.Dim, r.Base, r.Scale, r.FreqFactors)
	if buf, ok := b.ropes[key]; ok {
		return buf.Ptr, nil
	}
	f := r.InvFreqs()
	buf, err := c.Alloc(int64(len(f))*8, "rope frequencies")
	if err != nil {
		return 0, err
	}
	if err := Upload(c, buf.Ptr, f); err != nil {
		c.Free(buf)
		return 0, err
	}
	b.ropes[key] = buf
	return buf.Ptr, nil
}

// RopeTable is ropeFreqs for other kernels of this package (the KV write):
// a device float64 array of r.Dim/2 frequencies, valid until Close. Call
// on the device thread.
func (b *Backend) RopeTable(c *Ctx, r model.Rope) (DevicePtr, error) { return b.ropeFreqs(c, r) }

// Stage copies small host data (e.g. page tables) to device memory without
// a stream sync; the pointer stays valid for ops queued before the next
// 4 MiB of staging. Call on the device thread.
func (b *Backend) Stage(c *Ctx, data []int32) (DevicePtr, error) { return stage(c, &b.ring, data) }

// SwiGLU: dst = silu(gate) * up.
func (b *Backend) SwiGLU(dst, gate, up model.Tensor) {
	d, ok1 := b.ten(dst, "SwiGLU")
	g, ok2 := b.ten(gate, "SwiGLU")
	u, ok3 := b.ten(up, "SwiGLU")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	n := d.rows * d.cols
	if g.rows*g.cols < n || u.rows*u.cols < n {
		b.fail(fmt.Errorf("gpu: SwiGLU: dst %dx%d, gate %dx%d, up %dx%d", d.rows, d.cols, g.rows, g.cols, u.rows, u.cols))
		return
	}
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, "swiglu", Dim3{X: cdiv(n, 256)}, Dim3{X: 256}, d.buf, g.buf, u.buf, int64(n))
	})
}

// Add: dst += x.
func (b *Backend) Add(dst, x model.Tensor) {
	d, ok1 := b.ten(dst, "Add")
	s, ok2 := b.ten(x, "Add")
	if !ok1 || !ok2 {
		return
	}
	n := d.rows * d.cols
	if s.rows*s.cols < n {
		b.fail(fmt.Errorf("gpu: Add: dst %dx%d, x %dx%d", d.rows, d.cols, s.rows, s.cols))
		return
	}
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, "add", Dim3{X: cdiv(n, 256)}, Dim3{X: 256}, d.buf, s.buf, int64(n))
	})
}

// GatherRows copies rows[i] of src into row i of dst on the device
// (model.RowGatherer: the rows that need logits never cross to the host).
func (b *Backend) GatherRows(dst, src model.Tensor, rows []int) {
	d, ok1 := b.ten(dst, "GatherRows")
	s, ok2 := b.ten(src, "GatherRows")
	if !ok1 || !ok2 {
		return
	}
	if d.cols != s.cols || d.rows < len(rows) {
		b.fail(fmt.Errorf("gpu: GatherRows: %d rows of width %d into a %dx%d tensor", len(rows), s.cols, d.rows, d.cols))
		return
	}
	for _, r := range rows {
		if r < 0 || r >= s.rows {
			b.fail(fmt.Errorf("gpu: GatherRows: row %d outside 0..%d", r, s.rows-1))
			return
		}
	}
	rs := append([]int(nil), rows...)
	rowBytes := int64(s.cols) * 4
	b.post(func(c *Ctx) error {
		for i, r := range rs {
			if err := c.CopyDevice(d.buf.Ptr.Add(int64(i)*rowBytes), s.buf.Ptr.Add(int64(r)*rowBytes), rowBytes); err != nil {
				return err
			}
		}
		return nil
	})
}

// Argmax returns the index of the largest value of each row of logits
// (greedy sampling on the device: only the ids cross to the host).
func (b *Backend) Argmax(logits model.Tensor) ([]int32, error) {
	t, ok := b.ten(logits, "Argmax")
	if !ok {
		return nil, b.Err()
	}
	out := make([]int32, t.rows)
	if t.rows == 0 {
		return out, nil
	}
	err := b.dev.Do(func(c *Ctx) error {
		buf, err := b.scratch(c, int64(t.rows*4), allocName("argmax"))
		if err != nil {
			return err
		}
		defer b.release(buf)
		if err := b.launch(c, "argmax_rows", Dim3{X: t.rows}, Dim3{X: 256}, t.buf, t.cols, buf); err != nil {
			return err
		}
		return Download(c, out, buf.Ptr)
	})
	return out, err
}

// CheckTokens reports (and clears) an out-of-range token id seen by Embed
// since the last call; such rows were filled with NaN.
func (b *Backend) CheckTokens() error {
	var bad [1]int32
	err := b.dev.Do(func(c *Ctx) error {
		if err := Download(c, bad[:], b.bad.Ptr); err != nil {
			return err
		}
		return c.Memset32(b.bad.Ptr, 0, 1)
	})
	if err == nil && bad[0] != 0 {
		err = fmt.Errorf("gpu: Embed: token id %d outside the vocabulary", bad[0])
	}
	return err
}

// Synchronize waits for all queued work and returns the first error.
func (b *Backend) Synchronize() error {
	if err := b.dev.Do(func(c *Ctx) error { return c.Sync() }); err != nil {
		return err
	}
	return b.Err()
}
