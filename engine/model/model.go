package model

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Model is one loaded transformer, written once against Backend. Forward
// is not safe for concurrent use (it reuses activation buffers).
type Model struct {
	Config Config

	be                  Backend
	sb                  StateBackend // hybrid models: be's state ops
	embd, outNorm, outW Weight
	layers              []layer          // dense-attention families (llama.go)
	hlayers             []hybridLayer    // hybrid families (qwen35.go)
	bufs                map[int]*buffers // activation buffers by batch rows

	// CacheRows, when > 0, bounds the rows of all activation sets kept for
	// reuse together: a batch whose set would push the sum past it frees
	// the others first. The engine sets it, on the GPU, to the rows its
	// memory plan reserves activations for (a prefill chunk and a few
	// decode rows; engine WorkspaceBytes), so sets of earlier batch sizes
	// (a chunk, its remainder, decode rows) never pile up in memory the KV
	// pool was given.
	CacheRows int

	devLogits Tensor // the last ForwardLogits' rows (logits.go)
	gen       uint64 // forward steps so far: tells stale Logits
}

// Load reads the configuration and uploads every weight through be. The
// CPU backend keeps pointers into f's mmap: keep f open while the Model
// is in use. A hybrid model (Config.Hybrid) needs a be that implements
// StateBackend; its MTP blocks (Config.NextN) are not loaded.
func Load(f *gguf.File, be Backend) (*Model, error) {
	c, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: c, be: be, bufs: map[int]*buffers{}}
	if c.Hybrid() {
		sb, ok := be.(StateBackend)
		if !ok {
			return nil, fmt.Errorf("%s: the %s backend does not run %s yet (its Gated DeltaNet blocks need recurrent-state ops)", f.Path, be.Name(), c.Arch)
		}
		m.sb = sb
	}
	ld := loader{f: f, be: be}
	m.embd = ld.get("token_embd.weight", c.Dim, c.Vocab)
	m.outNorm = ld.get("output_norm.weight", c.Dim)
	if c.TiedEmbeddings {
		m.outW = m.embd
	} else {
		m.outW = ld.get("output.weight", c.Dim, c.Vocab)
	}
	if ld.err != nil {
		return nil, ld.err
	}
	if c.Hybrid() {
		err = m.loadHybrid(f, &ld)
	} else {
		err = m.loadDense(f, &ld)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// NeedsState reports whether Forward runs recurrent blocks: the backend is
// then a StateBackend with state allocated for Config.StateLayout, and
// every sequence of a batch names its slot in SeqSpan.State.
func (m *Model) NeedsState() bool { return m.Config.Hybrid() }

// loader fetches tensors, checks their shapes and keeps the first error.
type loader struct {
	f   *gguf.File
	be  Backend
	err error
}

func (ld *loader) get(name string, dims ...int) Weight {
	if ld.err != nil {
		return nil
	}
	ti, ok := ld.f.Tensor(name)
	if !ok {
		ld.err = fmt.Errorf("%s: tensor %s is missing", ld.f.Path, name)
		return nil
	}
	raw, err := ld.f.TensorData(ti)
	if err != nil {
		ld.err = fmt.Errorf("%s: tensor %s: %w", ld.f.Path, name, err)
		return nil
	}
	// The backend judges the type first: "unsupported type" is the more
	// useful message when both the type and the shape are unexpected.
	w, err := ld.loadWeight(ti, raw, dims)
	if err != nil {
		ld.err = fmt.Errorf("%s: %w", ld.f.Path, err)
		return nil
	}
	match := len(ti.Dims) == len(dims)
	for i := 0; match && i < len(dims); i++ {
		match = ti.Dims[i] == uint64(dims[i])
	}
	if !match {
		ld.err = fmt.Errorf("%s: tensor %s has shape %v, want %v", ld.f.Path, name, ti.Dims, dims)
		return nil
	}
	return w
}

// KVLayout is the KV pool geometry for this model.
func (c Config) KVLayout(pageSize, pages int, dt kvcache.DType) kvcache.Layout {
	return kvcache.Layout{Layers: c.AttnLayers, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		PageSize: pageSize, Pages: pages, DType: dt}
}

// Backend returns the backend the model runs on.
func (m *Model) Backend() Backend { return m.be }

// buffers are the activations of one batch size; each family uses the
// ones it needs.
type buffers struct {
	x, h, q, k, v, att, o, g, u, ffo Tensor
	// hybrid (qwen35.go)
	qg, gate, qkv, conv, z, dn, gn, alpha, beta, sg, su, sgate Tensor
	all                                                        []Tensor
}

func (t *buffers) alloc(be Backend, rows, cols int) Tensor {
	x := be.NewTensor(rows, cols)
	t.all = append(t.all, x)
	return x
}

func (m *Model) buffers(n int) *buffers {
	if b, ok := m.bufs[n]; ok {
		return b
	}
	rows := n
	for r := range m.bufs {
		rows += r
	}
	if len(m.bufs) >= 4 || (m.CacheRows > 0 && rows > m.CacheRows) { // prefill chunks vary; keep memory bounded
		m.Free()
	}
	c, be := m.Config, m.be
	ff := c.FF
	if c.Experts > 0 {
		ff = 1
	}
	b := &buffers{}
	b.x, b.h = b.alloc(be, n, c.Dim), b.alloc(be, n, c.Dim)
	b.q, b.k = b.alloc(be, n, c.Heads*c.HeadDim), b.alloc(be, n, c.KVHeads*c.HeadDim)
	b.v, b.att = b.alloc(be, n, c.KVHeads*c.HeadDim), b.alloc(be, n, c.Heads*c.HeadDim)
	b.o, b.g, b.u, b.ffo = b.alloc(be, n, c.Dim), b.alloc(be, n, ff), b.alloc(be, n, ff), b.alloc(be, n, c.Dim)
	if c.Hybrid() {
		m.allocHybrid(b, n)
	}
	m.bufs[n] = b
	return b
}

// Free releases the cached activation buffers and the device logits of
// the last ForwardLogits (weights stay loaded).
func (m *Model) Free() {
	m.dropDeviceLogits()
	for n, b := range m.bufs {
		for _, t := range b.all {
			m.be.FreeTensor(t)
		}
		delete(m.bufs, n)
	}
}

// RowGatherer is an optional Backend extension: dst[i] = src[rows[i]].
// Without it Forward gathers the rows that need logits through the host.
type RowGatherer interface {
	GatherRows(dst, src Tensor, rows []int)
}

// StepRecorder is an optional Backend extension: the ops of one small
// step (decode) are bracketed by BeginStep and EndStep so that the backend
// can issue them as a whole (the CUDA backend replays them as a graph).
type StepRecorder interface {
	BeginStep()
	EndStep()
}

// maxRecordedRows: steps of at most this many tokens are bracketed for a
// StepRecorder; prefill chunks are large kernels where launches cost little.
const maxRecordedRows = 16

// Forward runs one step over b (writing its K/V into the cache pages of
// each sequence) and returns the logits of the batch rows listed in
// logitsRows, row after row, each Config.Vocab floats. Decode asks for the
// last row only; perplexity evaluation can ask for every row. The KV pool
// must have been allocated with be.AllocKV.
//
// A hybrid model (NeedsState) also reads and advances each sequence's
// recurrent state in slot SeqSpan.State (distinct within a batch), which
// must hold the state after the sequence's first Cached tokens: Forward
// never clears or copies slots (ClearState before position 0 is the
// caller's). The state must have been allocated with
// StateBackend.AllocState(Config.StateLayout(slots)).
func (m *Model) Forward(b *Batch, logitsRows []int) ([]float32, error) {
	_, host, err := m.forward(b, logitsRows, false)
	return host, err
}

// forward is Forward; with keep the logits stay in a backend tensor
// (m.devLogits, returned) instead of being copied to the host.
func (m *Model) forward(b *Batch, logitsRows []int, keep bool) (dev Tensor, host []float32, err error) {
	if err := m.checkBatch(b, logitsRows); err != nil {
		return nil, nil, err
	}
	// Backends panic on states the batch check cannot see (a page table too
	// short for the pool's page size, no KV pool): report them as errors.
	defer func() {
		if r := recover(); r != nil {
			dev, host, err = nil, nil, fmt.Errorf("model: forward: %v", r)
		}
	}()
	m.dropDeviceLogits()
	be := m.be
	n := len(b.Tokens)
	if r, ok := be.(StepRecorder); ok && n <= maxRecordedRows {
		r.BeginStep()
		defer r.EndStep()
	}
	t := m.buffers(n)

	be.Embed(t.x, m.embd, b.Tokens)
	if m.hlayers != nil {
		m.forwardHybrid(b, t)
	} else {
		m.forwardDense(b, t)
	}
	if len(logitsRows) == 0 {
		return nil, nil, nil
	}
	out := m.logits(t.x, logitsRows)
	if keep {
		m.devLogits = out
		return out, nil, nil
	}
	defer be.FreeTensor(out)
	host = make([]float32, len(logitsRows)*m.Config.Vocab)
	be.ToHost(out, host)
	return nil, host, nil
}

// logits normalises the selected rows of x and projects them to the
// vocabulary, into a new tensor the caller frees.
func (m *Model) logits(x Tensor, rows []int) Tensor {
	c, be := m.Config, m.be
	sel := x
	if !isIdentity(rows, x.Rows()) {
		sel = be.NewTensor(len(rows), c.Dim)
		defer be.FreeTensor(sel)
		if g, ok := be.(RowGatherer); ok {
			g.GatherRows(sel, x, rows)
		} else {
			all := make([]float32, x.Rows()*c.Dim)
			be.ToHost(x, all)
			part := make([]float32, len(rows)*c.Dim)
			for i, r := range rows {
				copy(part[i*c.Dim:(i+1)*c.Dim], all[r*c.Dim:(r+1)*c.Dim])
			}
			be.FromHost(sel, part)
		}
	}
	h := be.NewTensor(len(rows), c.Dim)
	out := be.NewTensor(len(rows), c.Vocab)
	defer be.FreeTensor(h)
	be.RMSNorm(h, sel, m.outNorm, c.NormEps)
	be.MatMul(out, h, m.outW)
	return out
}

func isIdentity(rows []int, n int) bool {
	if len(rows) != n {
		return false
	}
	for i, r := range rows {
		if r != i {
			return false
		}
	}
	return true
}

// checkBatch rejects malformed batches with an error instead of a panic
// deep inside a backend.
func (m *Model) checkBatch(b *Batch, logitsRows []int) error {
	n := len(b.Tokens)
	if n == 0 {
		return fmt.Errorf("model: empty batch")
	}
	if len(b.Pos) != n {
		return fmt.Errorf("model: batch has %d tokens but %d positions", n, len(b.Pos))
	}
	for i, t := range b.Tokens {
		if t < 0 || int(t) >= m.Config.Vocab {
			return fmt.Errorf("model: token id %d at row %d is outside the vocabulary (0..%d)", t, i, m.Config.Vocab-1)
		}
	}
	covered := 0
	for si, s := range b.Seqs {
		if s.Offset != covered || s.NewTokens <= 0 || s.Offset+s.NewTokens > n {
			return fmt.Errorf("model: sequence %d covers rows [%d,%d) of a %d-row batch; sequences must tile the batch in order", si, s.Offset, s.Offset+s.NewTokens, n)
		}
		for i := 0; i < s.NewTokens; i++ {
			if int(b.Pos[s.Offset+i]) != s.Cached+i {
				return fmt.Errorf("model: sequence %d row %d has position %d, want %d", si, i, b.Pos[s.Offset+i], s.Cached+i)
			}
		}
		covered += s.NewTokens
	}
	if covered != n {
		return fmt.Errorf("model: sequences cover %d of %d batch rows", covered, n)
	}
	if m.NeedsState() {
		// The recurrent ops read and update each sequence's slot: two
		// sequences of one batch cannot share one.
		seen := make(map[int]int, len(b.Seqs))
		for si, s := range b.Seqs {
			if s.State < 0 {
				return fmt.Errorf("model: sequence %d has state slot %d; %s needs a recurrent-state slot per sequence", si, s.State, m.Config.Arch)
			}
			if prev, dup := seen[s.State]; dup {
				return fmt.Errorf("model: sequences %d and %d of one batch share state slot %d", prev, si, s.State)
			}
			seen[s.State] = si
		}
	}
	for _, r := range logitsRows {
		if r < 0 || r >= n {
			return fmt.Errorf("model: logits row %d outside the %d-row batch", r, n)
		}
	}
	return nil
}
