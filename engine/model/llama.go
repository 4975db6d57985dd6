package model

import (
	"fmt"
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
)

// The dense-attention transformer: llama, qwen2 (q/k/v biases), qwen3
// (q/k head RMSNorm) and qwen3moe (qwen3 with MoE FFNs). Every block is
//
//	h = x + Attention(RMSNorm(x));  out = h + FFN(RMSNorm(h))

type layer struct {
	attnNorm, wq, wk, wv, wo Weight
	bq, bk, bv               Weight // qwen2
	qNorm, kNorm             Weight // qwen3
	ffnNorm                  Weight
	ffn
}

// ffn is a block's feed-forward: the routed experts (moe), or the dense
// gate/up/down.
type ffn struct {
	gate, up, down Weight
	moe            *MoE
}

// forward computes t.ffo from the normalised t.h: the routed experts, or
// the dense SwiGLU feed-forward.
func (f *ffn) forward(be Backend, t *buffers) {
	if f.moe != nil {
		be.MoE(t.ffo, t.h, f.moe)
		return
	}
	swiGLUFFN(be, t.ffo, t.g, t.u, t.h, f.gate, f.up, f.down)
}

// swiGLUFFN is out = down·(silu(gate·h) * (up·h)), with g and u the
// scratch for the two projections (the dense feed-forward and the
// hybrid blocks' shared expert).
func swiGLUFFN(be Backend, out, g, u, h Tensor, gate, up, down Weight) {
	matMulShared(be, h, []Tensor{g, u}, []Weight{gate, up})
	be.SwiGLU(g, g, u)
	be.MatMul(out, g, down)
}

// loadDense loads the blocks of a dense-attention model.
func (m *Model) loadDense(f *gguf.File, ld *loader) error {
	c := m.Config
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
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
		var err error
		if l.ffn, err = ld.getFFN(p, &c); err != nil {
			return err
		}
		if ld.err != nil {
			return ld.err
		}
	}
	return nil
}

// getFFN loads the feed-forward of the block whose tensor names start with
// p (the dense and the hybrid blocks name them alike): the routed experts
// when the model has them, else the dense gate/up/down, for which
// feed_forward_length must be set.
func (ld *loader) getFFN(p string, c *Config) (ffn, error) {
	if c.Experts > 0 {
		return ffn{moe: &MoE{
			Router:  ld.get(p+"ffn_gate_inp.weight", c.Dim, c.Experts),
			Gate:    ld.get(p+"ffn_gate_exps.weight", c.Dim, c.ExpertFF, c.Experts),
			Up:      ld.get(p+"ffn_up_exps.weight", c.Dim, c.ExpertFF, c.Experts),
			Down:    ld.get(p+"ffn_down_exps.weight", c.ExpertFF, c.Dim, c.Experts),
			Experts: c.Experts, TopK: c.ExpertsUsed, NormTopK: c.NormTopK,
		}}, nil
	}
	if c.FF <= 0 {
		return ffn{}, fmt.Errorf("%s: %s.feed_forward_length is missing", ld.f.Path, c.Arch)
	}
	var f ffn
	f.gate = ld.get(p+"ffn_gate.weight", c.Dim, c.FF)
	f.up = ld.get(p+"ffn_up.weight", c.Dim, c.FF)
	f.down = ld.get(p+"ffn_down.weight", c.FF, c.Dim)
	return f, nil
}

// forwardDense runs the blocks over b; t.x holds the embeddings on entry
// and the last hidden state on return.
func (m *Model) forwardDense(b *Batch, t *buffers) {
	c, be := m.Config, m.be
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	for i := range m.layers {
		l := &m.layers[i]
		if i == 0 { // later blocks' attention norm is fused with the residual add before it
			be.RMSNorm(t.h, t.x, l.attnNorm, c.NormEps)
		}
		matMulShared(be, t.h, []Tensor{t.q, t.k, t.v}, []Weight{l.wq, l.wk, l.wv})
		if c.QKVBias {
			be.AddBias(t.q, l.bq)
			be.AddBias(t.k, l.bk)
			be.AddBias(t.v, l.bv)
		}
		var qNorm, kNorm Weight
		if c.QKNorm {
			qNorm, kNorm = l.qNorm, l.kNorm
		}
		ropeKVWrite(be, i, t.q, t.k, t.v, qNorm, kNorm, c.HeadDim, c.NormEps, b, c.Rope)
		be.Attention(t.att, t.q, i, b, c.Heads, scale)
		be.MatMul(t.o, t.att, l.wo)
		addRMSNorm(be, t.h, t.x, t.o, l.ffnNorm, c.NormEps)
		l.ffn.forward(be, t)
		if i+1 < len(m.layers) {
			addRMSNorm(be, t.h, t.x, t.ffo, m.layers[i+1].attnNorm, c.NormEps)
		} else {
			be.Add(t.x, t.ffo)
		}
	}
}
