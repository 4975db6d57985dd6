package model

import (
	"fmt"
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Model is one loaded transformer, written once against Backend. Forward
// is not safe for concurrent use (it reuses activation buffers).
type Model struct {
	Config Config

	be                  Backend
	embd, outNorm, outW Weight
	layers              []layer
	bufs                map[int]*buffers // activation buffers by batch rows
}

type layer struct {
	attnNorm, wq, wk, wv, wo Weight
	bq, bk, bv               Weight // qwen2
	qNorm, kNorm             Weight // qwen3
	ffnNorm                  Weight
	gate, up, down           Weight // dense
	moe                      *MoE
}

// Load reads the configuration and uploads every weight through be. The
// CPU backend keeps pointers into f's mmap: keep f open while the Model
// is in use.
func Load(f *gguf.File, be Backend) (*Model, error) {
	c, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: c, be: be, bufs: map[int]*buffers{}}
	ld := loader{f: f, be: be}
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m.embd = ld.get("token_embd.weight", c.Dim, c.Vocab)
	m.outNorm = ld.get("output_norm.weight", c.Dim)
	if c.TiedEmbeddings {
		m.outW = m.embd
	} else {
		m.outW = ld.get("output.weight", c.Dim, c.Vocab)
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.attnNorm = ld.get(p+"attn_norm.weight", c.Dim)
		l.wq = ld.get(p+"attn_q.weight", c.Dim, qd)
		l.wk = ld.get(p+"attn_k.weight", c.Dim, kvd)
		l.wv = ld.get(p+"attn_v.weight", c.Dim, kvd)
		l.wo = ld.get(p+"attn_output.weight", qd, c.Dim)
		if c.QKVBias {
			l.bq = ld.get(p+"attn_q.bias", qd)
			l.bk = ld.get(p+"attn_k.bias", kvd)
			l.bv = ld.get(p+"attn_v.bias", kvd)
		}
		if c.QKNorm {
			l.qNorm = ld.get(p+"attn_q_norm.weight", c.HeadDim)
			l.kNorm = ld.get(p+"attn_k_norm.weight", c.HeadDim)
		}
		l.ffnNorm = ld.get(p+"ffn_norm.weight", c.Dim)
		if c.Experts > 0 {
			l.moe = &MoE{
				Router:  ld.get(p+"ffn_gate_inp.weight", c.Dim, c.Experts),
				Gate:    ld.get(p+"ffn_gate_exps.weight", c.Dim, c.ExpertFF, c.Experts),
				Up:      ld.get(p+"ffn_up_exps.weight", c.Dim, c.ExpertFF, c.Experts),
				Down:    ld.get(p+"ffn_down_exps.weight", c.ExpertFF, c.Dim, c.Experts),
				Experts: c.Experts, TopK: c.ExpertsUsed, NormTopK: c.NormTopK,
			}
		} else {
			if c.FF <= 0 {
				return nil, fmt.Errorf("%s: %s.feed_forward_length is missing", f.Path, c.Arch)
			}
			l.gate = ld.get(p+"ffn_gate.weight", c.Dim, c.FF)
			l.up = ld.get(p+"ffn_up.weight", c.Dim, c.FF)
			l.down = ld.get(p+"ffn_down.weight", c.FF, c.Dim)
		}
		if ld.err != nil {
			break
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	return m, nil
}

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
	w, err := ld.be.LoadWeight(ti, raw)
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

// buffers are the activations of one batch size.
type buffers struct {
	x, h, q, k, v, att, o, g, u, ffo Tensor
}

func (m *Model) buffers(n int) *buffers {
	if b, ok := m.bufs[n]; ok {
		return b
	}
	if len(m.bufs) >= 4 { // prefill chunks vary; keep memory bounded
		m.Free()
	}
	c, be := m.Config, m.be
	ff := c.FF
	if c.Experts > 0 {
		ff = 1
	}
	b := &buffers{
		x: be.NewTensor(n, c.Dim), h: be.NewTensor(n, c.Dim),
		q: be.NewTensor(n, c.Heads*c.HeadDim), k: be.NewTensor(n, c.KVHeads*c.HeadDim),
		v: be.NewTensor(n, c.KVHeads*c.HeadDim), att: be.NewTensor(n, c.Heads*c.HeadDim),
		o: be.NewTensor(n, c.Dim), g: be.NewTensor(n, ff), u: be.NewTensor(n, ff), ffo: be.NewTensor(n, c.Dim),
	}
	m.bufs[n] = b
	return b
}

// Free releases the cached activation buffers (weights stay loaded).
func (m *Model) Free() {
	for n, b := range m.bufs {
		for _, t := range []Tensor{b.x, b.h, b.q, b.k, b.v, b.att, b.o, b.g, b.u, b.ffo} {
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
func (m *Model) Forward(b *Batch, logitsRows []int) (logits []float32, err error) {
	if err := m.checkBatch(b, logitsRows); err != nil {
		return nil, err
	}
	// Backends panic on states the batch check cannot see (a page table too
	// short for the pool's page size, no KV pool): report them as errors.
	defer func() {
		if r := recover(); r != nil {
			logits, err = nil, fmt.Errorf("model: forward: %v", r)
		}
	}()
	c, be := m.Config, m.be
	n := len(b.Tokens)
	if r, ok := be.(StepRecorder); ok && n <= maxRecordedRows {
		r.BeginStep()
		defer r.EndStep()
	}
	t := m.buffers(n)
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))

	be.Embed(t.x, m.embd, b.Tokens)
	for i := range m.layers {
		l := &m.layers[i]
		be.RMSNorm(t.h, t.x, l.attnNorm, c.NormEps)
		be.MatMul(t.q, t.h, l.wq)
		be.MatMul(t.k, t.h, l.wk)
		be.MatMul(t.v, t.h, l.wv)
		if c.QKVBias {
			be.AddBias(t.q, l.bq)
			be.AddBias(t.k, l.bk)
			be.AddBias(t.v, l.bv)
		}
		if c.QKNorm {
			be.HeadRMSNorm(t.q, l.qNorm, c.HeadDim, c.NormEps)
			be.HeadRMSNorm(t.k, l.kNorm, c.HeadDim, c.NormEps)
		}
		be.RoPE(t.q, b.Pos, c.HeadDim, c.Rope)
		be.KVWrite(i, t.k, t.v, b, c.Rope)
		be.Attention(t.att, t.q, i, b, c.Heads, scale)
		be.MatMul(t.o, t.att, l.wo)
		be.Add(t.x, t.o)

		be.RMSNorm(t.h, t.x, l.ffnNorm, c.NormEps)
		if l.moe != nil {
			be.MoE(t.ffo, t.h, l.moe)
		} else {
			be.MatMul(t.g, t.h, l.gate)
			be.MatMul(t.u, t.h, l.up)
			be.SwiGLU(t.g, t.g, t.u)
			be.MatMul(t.ffo, t.g, l.down)
		}
		be.Add(t.x, t.ffo)
	}
	if len(logitsRows) == 0 {
		return nil, nil
	}
	return m.logits(t.x, logitsRows), nil
}

// logits normalises the selected rows of x and projects them to the vocabulary.
func (m *Model) logits(x Tensor, rows []int) []float32 {
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
	defer be.FreeTensor(out)
	be.RMSNorm(h, sel, m.outNorm, c.NormEps)
	be.MatMul(out, h, m.outW)
	res := make([]float32, len(rows)*c.Vocab)
	be.ToHost(out, res)
	return res
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
	for _, r := range logitsRows {
		if r < 0 || r >= n {
			return fmt.Errorf("model: logits row %d outside the %d-row batch", r, n)
		}
	}
	return nil
}
