// Package cpu is the CPU implementation of model.Backend: the numerical
// reference every other backend is tested against, and a multi-threaded fast
// path. Matmuls read weights in their file format, one block at a time.
package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// Options configures the CPU backend.
type Options struct {
	Threads int // worker goroutines; 0 = GOMAXPROCS
	// F32KV stores K/V as float32, ignoring the layout's dtype: for
	// reference runs against float32 frameworks, not for serving.
	F32KV bool
	// IntDot quantizes activations to 8 bits once per matmul and uses
	// integer dots for the weight types that have them (intdot.go):
	// several times faster, less exact; FTCHAT_CPU_INTDOT=1 also sets it.
	IntDot bool
}

// Backend implements model.Backend on the host. Ops are synchronous; one
// Backend must not be used by two goroutines at once (it parallelises each
// op internally).
type Backend struct {
	threads int
	pool    *pool
	f32kv   bool
	kv      kvStore
	layout  kvcache.Layout
	state   *stateStore // recurrent state of hybrid models (state.go)
	intDot  bool        // Options.IntDot
}

var (
	_ model.Backend     = (*Backend)(nil)
	_ model.RowGatherer = (*Backend)(nil)
)

// MaxThreads bounds the worker pool: each worker is a goroutine and a
// queue slot, and more than this only adds contention.
const MaxThreads = 1024

// New returns a CPU backend with its worker pool started (at most
// MaxThreads workers).
func New(opts Options) *Backend {
	n := opts.Threads
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	n = min(n, MaxThreads)
	return &Backend{threads: n, pool: newPool(n), f32kv: opts.F32KV, intDot: opts.IntDot || intDotFromEnv()}
}

// Close stops the worker goroutines; the Backend must not be used afterwards.
func (b *Backend) Close() { b.pool.close() }

// Name reports the backend and its thread count.
func (b *Backend) Name() string {
	if b.intDot {
		return fmt.Sprintf("cpu (%d threads, int8 dots)", b.threads)
	}
	return fmt.Sprintf("cpu (%d threads)", b.threads)
}

// Threads is the size of the worker pool.
func (b *Backend) Threads() int { return b.threads }

// Tensor is a host float32 matrix; Data is row-major [Rows][Cols].
type Tensor struct {
	rows, cols int
	Data       []float32
}

func (t *Tensor) Rows() int { return t.rows }
func (t *Tensor) Cols() int { return t.cols }

func (t *Tensor) row(i int) []float32 { return t.Data[i*t.cols : (i+1)*t.cols : (i+1)*t.cols] }

// NewTensor allocates a zeroed rows×cols tensor.
func (b *Backend) NewTensor(rows, cols int) model.Tensor {
	return &Tensor{rows: rows, cols: cols, Data: make([]float32, rows*cols)}
}

// FreeTensor drops the tensor (the garbage collector reclaims it).
func (b *Backend) FreeTensor(t model.Tensor) {
	if ct, ok := t.(*Tensor); ok {
		ct.Data = nil
	}
}

func (b *Backend) ToHost(src model.Tensor, dst []float32) { copy(dst, ten(src).Data) }

func (b *Backend) FromHost(dst model.Tensor, src []float32) { copy(ten(dst).Data, src) }

func ten(t model.Tensor) *Tensor {
	ct, ok := t.(*Tensor)
	if !ok {
		panic(fmt.Sprintf("cpu: tensor of type %T does not belong to the CPU backend", t))
	}
	return ct
}

// Weight is a model tensor kept in its GGUF format. Rows are the output
// features (product of dims after ne0), Cols the input features (ne0).
type Weight struct {
	info       gguf.TensorInfo
	raw        []byte // points into the caller's buffer (the GGUF mmap)
	rows, cols int
	rowBytes   int
	f32        []float32 // F32 weights decoded once (norms, biases, small matrices)
	kern       rowKernel
	kern4      rowKernel4 // nil when there is no four-row kernel
	// scale is the second-level scale (model.ScaledLoader): output row r
	// is multiplied by scale[r/scaleRows]; nil means 1.
	scale     []float32
	scaleRows int
}

func (w *Weight) Info() gguf.TensorInfo { return w.info }

func wt(w model.Weight) *Weight {
	cw, ok := w.(*Weight)
	if !ok {
		panic(fmt.Sprintf("cpu: weight of type %T does not belong to the CPU backend", w))
	}
	return cw
}

// LoadWeight wraps raw without copying it: raw must stay valid (the GGUF
// file open) as long as the weight is used.
func (b *Backend) LoadWeight(info gguf.TensorInfo, raw []byte) (model.Weight, error) {
	t := info.Type
	if !t.Known() || !gguf.DequantizeSupported(t) {
		return nil, fmt.Errorf("cpu: tensor %q has type %s, which the CPU backend does not support (supported: %s)", info.Name, t, supportedTypes())
	}
	if len(info.Dims) == 0 {
		return nil, fmt.Errorf("cpu: tensor %q has no dimensions", info.Name)
	}
	// Sizes come from the file: check them against raw in uint64 before
	// any int conversion, so corrupt dims cannot wrap into a short slice.
	if n := info.Bytes(); n > uint64(len(raw)) {
		return nil, fmt.Errorf("cpu: tensor %q (%s %v): %d bytes of data, want %d; the model file is corrupt", info.Name, t, info.Dims, len(raw), n)
	}
	if info.Dims[0]%uint64(t.BlockElems()) != 0 {
		return nil, fmt.Errorf("cpu: tensor %q: row length %d is not a multiple of the %s block size %d", info.Name, info.Dims[0], t, t.BlockElems())
	}
	// Bytes fits in len(raw), and every type stores at least 2 bits per
	// element, so cols and rows*cols fit in int.
	cols := int(info.Dims[0])
	rows := int(info.Elements() / max(info.Dims[0], 1))
	rowBytes := cols / t.BlockElems() * t.BlockBytes()
	w := &Weight{info: info, raw: raw[:rows*rowBytes], rows: rows, cols: cols, rowBytes: rowBytes}
	if t == gguf.F32 && rows*cols > 0 {
		// View the file's bytes as floats when the host is little-endian
		// and the data aligned (GGUF aligns tensors to 32 bytes); copy otherwise.
		if littleEndian && uintptr(unsafe.Pointer(&raw[0]))%4 == 0 {
			w.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), rows*cols)
		} else {
			w.f32 = make([]float32, rows*cols)
			for i := range w.f32 {
				w.f32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		}
	}
	w.kern = kernelFor(t)
	w.kern4 = fastKernels4[t]
	return w, nil
}

// floats returns an F32/F16/BF16 vector weight (norm, bias) as float32.
func (w *Weight) floats() []float32 {
	if w.f32 == nil {
		v := make([]float32, w.rows*w.cols)
		if err := gguf.Dequantize(w.info.Type, w.raw, v); err != nil {
			panic(err)
		}
		w.f32 = v
	}
	return w.f32
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func supportedTypes() string {
	s := ""
	for _, t := range []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1,
		gguf.Q8_0, gguf.Q8_1, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.Q8_K, gguf.MXFP4, gguf.NVFP4, gguf.FP8_E4M3, gguf.FP8_E4M3_B32} {
		if gguf.DequantizeSupported(t) {
			if s != "" {
				s += ", "
			}
			s += t.String()
		}
	}
	return s
}

// Embed copies (dequantizes) rows tokens[i] of table into dst.
func (b *Backend) Embed(dst model.Tensor, table model.Weight, tokens []int32) {
	d, w := ten(dst), wt(table)
	b.pool.parallel(len(tokens), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := int(tokens[i])
			if t < 0 || t >= w.rows {
				panic(fmt.Sprintf("cpu: token id %d outside the vocabulary of %d", t, w.rows))
			}
			if err := gguf.Dequantize(w.info.Type, w.raw[t*w.rowBytes:(t+1)*w.rowBytes], d.row(i)); err != nil {
				panic(err)
			}
			if w.scale != nil {
				scaleBy(d.row(i), w.scale[t/w.scaleRows])
			}
		}
	})
}

// RMSNorm: dst = x / sqrt(mean(x²) + eps) * w, row by row.
func (b *Backend) RMSNorm(dst, x model.Tensor, w model.Weight, eps float32) {
	d, s, g := ten(dst), ten(x), wt(w).floats()
	b.pool.parallel(s.rows, 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsnorm(d.row(r), s.row(r), g, eps)
		}
	})
}

func rmsnorm(dst, x, g []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	g = g[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * inv * g[i]
	}
}

// HeadRMSNorm normalises each headDim slice of every row in place.
func (b *Backend) HeadRMSNorm(x model.Tensor, w model.Weight, headDim int, eps float32) {
	s, g := ten(x), wt(w).floats()
	b.pool.parallel(s.rows, 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := s.row(r)
			for h := 0; h+headDim <= len(row); h += headDim {
				rmsnorm(row[h:h+headDim], row[h:h+headDim], g, eps)
			}
		}
	})
}

// AddBias adds the bias vector to every row.
func (b *Backend) AddBias(x model.Tensor, bias model.Weight) {
	s, v := ten(x), wt(bias).floats()
	for r := 0; r < s.rows; r++ {
		row := s.row(r)
		for i := range row {
			row[i] += v[i]
		}
	}
}

// SwiGLU: dst = silu(gate) * up.
func (b *Backend) SwiGLU(dst, gate, up model.Tensor) {
	d, g, u := ten(dst), ten(gate), ten(up)
	b.pool.parallel(len(d.Data), 4096, func(lo, hi int) { swiglu(d.Data[lo:hi], g.Data[lo:hi], u.Data[lo:hi]) })
}

func swiglu(d, g, u []float32) {
	u = u[:len(d)]
	g = g[:len(d)]
	for i := range d {
		x := g[i]
		d[i] = x / (1 + float32(math.Exp(float64(-x)))) * u[i]
	}
}

// Add: dst += x.
func (b *Backend) Add(dst, x model.Tensor) {
	d, s := ten(dst), ten(x)
	src := s.Data[:len(d.Data)]
	for i := range d.Data {
		d.Data[i] += src[i]
	}
}

// GatherRows copies rows[i] of src into row i of dst (model.RowGatherer).
func (b *Backend) GatherRows(dst, src model.Tensor, rows []int) {
	d, s := ten(dst), ten(src)
	for i, r := range rows {
		copy(d.row(i), s.row(r))
	}
}
