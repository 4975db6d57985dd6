package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

// The hybrid families: qwen35 (dense FFN), qwen35moe and qwen3next (MoE
// with a shared expert). Blocks are either Gated DeltaNet (recurrent, state
// in StateBackend slots) or gated softmax attention (K/V in the paged pool):
//
//	h = x + Mixer(RMSNorm(x));  out = h + FFN(RMSNorm_post(h))
//
// Attention: attn_q gives per head [q | gate]; q, k are head-RMSNormed
// then rotated on the first Rope.Dim dims (NeoX); the attention output is
// multiplied by sigmoid(gate) before attn_output. Gated DeltaNet: attn_qkv
// -> causal conv + SiLU -> delta rule (StateBackend.GatedDeltaRule) ->
// RMSNorm(o)*ssm_norm*silu(attn_gate x) per value head -> ssm_out. The
// converter folds the +1 of the zero-centred norms into every norm weight
// except ssm_norm, and stores ssm_a as -exp(A_log): both are used as stored.

// Bounds on the Gated DeltaNet metadata, far above real models (conv 4,
// head dims 128), so that a corrupt file cannot ask for a state matrix
// per head larger than the file's tensors justify.
const (
	maxConvKernel = 64
	maxSSMHeadDim = 4096
)

// readHybrid reads the layer kinds and Gated DeltaNet geometry into c.
// c.Layers holds block_count on entry and the trunk's block count on return.
func readHybrid(f *gguf.File, r *keyReader, c *Config, fam family) error {
	arch := c.Arch
	blocks := c.Layers
	c.NextN = r.int("nextn_predict_layers", 0, 0, blocks-1)
	s := &c.SSM
	s.ConvKernel = r.int("ssm.conv_kernel", -1, 1, maxConvKernel)
	s.KeyDim = r.int("ssm.state_size", -1, 1, maxSSMHeadDim)
	s.KeyHeads = r.int("ssm.group_count", -1, 1, maxShape)
	s.ValueHeads = r.int("ssm.time_step_rank", -1, 1, maxShape)
	inner := r.int("ssm.inner_size", -1, 1, maxShape)
	if len(r.missing) > 0 {
		return fmt.Errorf("%s: metadata is missing %s", f.Path, strings.Join(r.missing, ", "))
	}
	if r.err != nil {
		return r.err
	}
	s.Tiled = fam.tiled
	if s.ValueHeads%s.KeyHeads != 0 || inner%s.ValueHeads != 0 {
		return fmt.Errorf("%s: invalid Gated DeltaNet shape: %s.ssm.time_step_rank %d (value heads) must be a multiple of ssm.group_count %d (key heads), and ssm.inner_size %d a multiple of the value heads",
			f.Path, arch, s.ValueHeads, s.KeyHeads, inner)
	}
	s.ValueDim = inner / s.ValueHeads
	if s.ValueDim > maxSSMHeadDim {
		return fmt.Errorf("%s: %s.ssm.inner_size %d over %d value heads gives a value head dim of %d; at most %d is supported", f.Path, arch, inner, s.ValueHeads, s.ValueDim, maxSSMHeadDim)
	}
	if int64(s.KeyHeads)*int64(s.KeyDim) > maxShape {
		return fmt.Errorf("%s: %s.ssm.group_count %d times ssm.state_size %d is beyond any model (%d)", f.Path, arch, s.KeyHeads, s.KeyDim, maxShape)
	}
	c.Layers = blocks - c.NextN
	c.Recurrent = make([]bool, c.Layers)
	key := arch + ".attention.recurrent_layers"
	if v, ok := f.Value(key); ok {
		kinds, isBools := v.([]bool)
		if !isBools || (len(kinds) != blocks && len(kinds) != c.Layers) {
			return fmt.Errorf("%s: %s is %s; it must be an array of %d booleans (one per block)", f.Path, key, showShort(v), blocks)
		}
		copy(c.Recurrent, kinds)
	} else {
		every := r.int("full_attention_interval", -1, 1, maxLayers)
		if len(r.missing) > 0 {
			return fmt.Errorf("%s: metadata has neither %s nor %s.full_attention_interval; cannot tell recurrent from attention blocks", f.Path, key, arch)
		}
		if r.err != nil {
			return r.err
		}
		for i := range c.Recurrent {
			c.Recurrent[i] = (i+1)%every != 0
		}
	}
	c.AttnLayers = c.Layers - c.RecurrentLayers()
	if c.AttnLayers == 0 || c.AttnLayers == c.Layers {
		return fmt.Errorf("%s: %s has %d attention and %d recurrent blocks; a hybrid model needs some of each", f.Path, arch, c.AttnLayers, c.Layers-c.AttnLayers)
	}
	c.AttnGate = true
	if fam.moe {
		c.SharedFF = r.int("expert_shared_feed_forward_length", 0, 0, maxShape)
		if r.err != nil {
			return r.err
		}
		if ti, ok := f.Tensor("blk.0.ffn_up_shexp.weight"); ok && c.SharedFF == 0 && len(ti.Dims) == 2 && ti.Dims[1] <= maxShape {
			c.SharedFF = int(ti.Dims[1])
		}
	}
	return nil
}

// showShort is show for values that may be long arrays.
func showShort(v any) string {
	s := show(v)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// hybridLayer is one block of a hybrid model.
type hybridLayer struct {
	recurrent bool
	index     int // among the blocks of its kind: the state or KV layer

	attnNorm, postNorm Weight
	// attention
	wq, wk, wv, wo, qNorm, kNorm Weight
	// Gated DeltaNet
	wqkv, wz, wbeta, walpha, conv, ssmNorm, ssmOut Weight
	gdn                                            *GatedDeltaNet
	// FFN: dense (qwen35) or MoE with a shared expert
	ffn
	shGate, shUp, shDown, shGateInp Weight
}

// loadHybrid loads the trunk's blocks; MTP blocks after it are skipped.
func (m *Model) loadHybrid(f *gguf.File, ld *loader) error {
	c := m.Config
	s := c.SSM
	key, value := s.KeyHeads*s.KeyDim, s.ValueHeads*s.ValueDim
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	nRec, nAttn := 0, 0
	m.hlayers = make([]hybridLayer, c.Layers)
	for i := range m.hlayers {
		l := &m.hlayers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.recurrent = c.Recurrent[i]
		l.attnNorm = ld.get(p+"attn_norm.weight", c.Dim)
		l.postNorm = ld.get(p+"post_attention_norm.weight", c.Dim)
		if l.recurrent {
			l.index = nRec
			nRec++
			if _, legacy := f.Tensor(p + "ssm_in.weight"); legacy {
				if _, ok := f.Tensor(p + "attn_qkv.weight"); !ok && ld.err == nil {
					return fmt.Errorf("%s: %s block %d stores its projections fused as ssm_in (the layout of older llama.cpp converters), which ftchat does not read; convert the model again with a current convert_hf_to_gguf.py", f.Path, c.Arch, i)
				}
			}
			l.wqkv = ld.get(p+"attn_qkv.weight", c.Dim, 2*key+value)
			l.wz = ld.get(p+"attn_gate.weight", c.Dim, value)
			if c.Arch == "qwen3next" {
				l.wbeta, l.walpha = ld.getBetaAlpha(p+"ssm_ba.weight", c.Dim, s.KeyHeads, s.ValueHeads/s.KeyHeads)
			} else {
				l.wbeta = ld.get(p+"ssm_beta.weight", c.Dim, s.ValueHeads)
				l.walpha = ld.get(p+"ssm_alpha.weight", c.Dim, s.ValueHeads)
			}
			l.conv = ld.getF32(p+"ssm_conv1d.weight", s.ConvKernel, s.ConvChannels())
			l.gdn = &GatedDeltaNet{KeyHeads: s.KeyHeads, ValueHeads: s.ValueHeads, KeyDim: s.KeyDim, ValueDim: s.ValueDim, Tiled: s.Tiled,
				A: ld.getF32(p+"ssm_a", s.ValueHeads), DtBias: ld.getF32(p+"ssm_dt.bias", s.ValueHeads)}
			l.ssmNorm = ld.get(p+"ssm_norm.weight", s.ValueDim)
			l.ssmOut = ld.get(p+"ssm_out.weight", value, c.Dim)
		} else {
			l.index = nAttn
			nAttn++
			l.wq = ld.get(p+"attn_q.weight", c.Dim, 2*qd)
			l.wk = ld.get(p+"attn_k.weight", c.Dim, kvd)
			l.wv = ld.get(p+"attn_v.weight", c.Dim, kvd)
			l.wo = ld.get(p+"attn_output.weight", qd, c.Dim)
			l.qNorm = ld.get(p+"attn_q_norm.weight", c.HeadDim)
			l.kNorm = ld.get(p+"attn_k_norm.weight", c.HeadDim)
		}
		if c.Experts > 0 {
			if _, fused := f.Tensor(p + "ffn_gate_up_exps.weight"); fused && ld.err == nil {
				return fmt.Errorf("%s: block %d stores its experts' gate and up fused (ffn_gate_up_exps, convert_hf_to_gguf.py --fuse-gate-up-exps), which ftchat does not read; convert without that option", f.Path, i)
			}
		}
		var err error
		if l.ffn, err = ld.getFFN(p, &c); err != nil {
			return err
		}
		if c.Experts > 0 && c.SharedFF > 0 {
			l.shGateInp = ld.getVec(p+"ffn_gate_inp_shexp.weight", c.Dim)
			l.shGate = ld.get(p+"ffn_gate_shexp.weight", c.Dim, c.SharedFF)
			l.shUp = ld.get(p+"ffn_up_shexp.weight", c.Dim, c.SharedFF)
			l.shDown = ld.get(p+"ffn_down_shexp.weight", c.SharedFF, c.Dim)
		}
		if ld.err != nil {
			return ld.err
		}
	}
	return nil
}

// getF32 is get for tensors the ops read as float32 (conv kernel, A,
// dt bias): the converter writes them F32, and other types are refused.
func (ld *loader) getF32(name string, dims ...int) Weight {
	w := ld.get(name, dims...)
	if w != nil && w.Info().Type != gguf.F32 {
		ld.err = fmt.Errorf("%s: tensor %s is %s; it must be F32", ld.f.Path, name, w.Info().Type)
		return nil
	}
	return w
}

// getVec loads a [n] vector weight that the converter may also write as
// [n, 1], as a [n] weight: a one-output matrix for MatMul.
func (ld *loader) getVec(name string, n int) Weight {
	if ti, ok := ld.f.Tensor(name); ok && len(ti.Dims) == 2 && ti.Dims[1] == 1 {
		return ld.get(name, n, 1)
	}
	return ld.get(name, n)
}

// getBetaAlpha splits qwen3next's ssm_ba, whose rows are grouped per key
// head g as [beta (r) | alpha (r)] (r value heads per key head), into a
// beta and an alpha weight of keyHeads*r rows each, value head g*r+i in
// row g*r+i. Rows are whole blocks in every GGUF type, so this reorders
// bytes without decoding them.
func (ld *loader) getBetaAlpha(name string, dim, keyHeads, r int) (beta, alpha Weight) {
	if ld.err != nil {
		return nil, nil
	}
	ti, ok := ld.f.Tensor(name)
	if !ok {
		if _, split := ld.f.Tensor(strings.Replace(name, "ssm_ba", "ssm_beta", 1)); split {
			ld.err = fmt.Errorf("%s: tensor %s is missing (this qwen3next file has ssm_beta/ssm_alpha instead, a layout ftchat does not read for qwen3next)", ld.f.Path, name)
		} else {
			ld.err = fmt.Errorf("%s: tensor %s is missing", ld.f.Path, name)
		}
		return nil, nil
	}
	nv := keyHeads * r
	if len(ti.Dims) != 2 || ti.Dims[0] != uint64(dim) || ti.Dims[1] != uint64(2*nv) || !ti.Type.Known() || dim%ti.Type.BlockElems() != 0 {
		ld.err = fmt.Errorf("%s: tensor %s has shape %v (%s), want [%d %d]", ld.f.Path, name, ti.Dims, ti.Type, dim, 2*nv)
		return nil, nil
	}
	raw, err := ld.f.TensorData(ti)
	if err != nil {
		ld.err = fmt.Errorf("%s: tensor %s: %w", ld.f.Path, name, err)
		return nil, nil
	}
	rb := dim / ti.Type.BlockElems() * ti.Type.BlockBytes()
	if len(raw) < 2*nv*rb {
		ld.err = fmt.Errorf("%s: tensor %s: %d bytes of data, want %d", ld.f.Path, name, len(raw), 2*nv*rb)
		return nil, nil
	}
	part := func(suffix string, first int) Weight {
		buf := make([]byte, nv*rb)
		for g := range keyHeads {
			for i := range r {
				src := g*2*r + first + i
				copy(buf[(g*r+i)*rb:(g*r+i+1)*rb], raw[src*rb:(src+1)*rb])
			}
		}
		info := gguf.TensorInfo{Name: strings.Replace(name, "ssm_ba", suffix, 1), Dims: []uint64{uint64(dim), uint64(nv)}, Type: ti.Type}
		w, err := ld.loadPart(ti, info, buf, nil)
		if err != nil && ld.err == nil {
			ld.err = fmt.Errorf("%s: %w", ld.f.Path, err)
		}
		return w
	}
	beta, alpha = part("ssm_beta", 0), part("ssm_alpha", r)
	if ld.err != nil {
		return nil, nil
	}
	return beta, alpha
}

// allocHybrid adds the hybrid model's activations to t.
func (m *Model) allocHybrid(t *buffers, n int) {
	c := m.Config
	s := c.SSM
	value := s.ValueHeads * s.ValueDim
	t.qg = t.alloc(m.be, n, 2*c.Heads*c.HeadDim)
	t.gate = t.alloc(m.be, n, c.Heads*c.HeadDim)
	t.qkv = t.alloc(m.be, n, s.ConvChannels())
	t.conv = t.alloc(m.be, n, s.ConvChannels())
	t.z = t.alloc(m.be, n, value)
	t.dn = t.alloc(m.be, n, value)
	t.gn = t.alloc(m.be, n, value) // the contract does not promise GatedRMSNorm in place
	t.alpha = t.alloc(m.be, n, s.ValueHeads)
	t.beta = t.alloc(m.be, n, s.ValueHeads)
	if c.SharedFF > 0 {
		t.sg = t.alloc(m.be, n, c.SharedFF)
		t.su = t.alloc(m.be, n, c.SharedFF)
		t.sgate = t.alloc(m.be, n, 1)
	}
}

// forwardHybrid runs the blocks of a hybrid model over b; t.x holds the
// embeddings on entry and the last hidden state on return.
func (m *Model) forwardHybrid(b *Batch, t *buffers) {
	c, be, sb := m.Config, m.be, m.sb
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	for i := range m.hlayers {
		l := &m.hlayers[i]
		if i == 0 { // later blocks' attention norm is fused with the residual add before it
			be.RMSNorm(t.h, t.x, l.attnNorm, c.NormEps)
		}
		if l.recurrent {
			matMulShared(be, t.h, []Tensor{t.qkv, t.z}, []Weight{l.wqkv, l.wz})
			be.MatMul(t.beta, t.h, l.wbeta)
			be.MatMul(t.alpha, t.h, l.walpha)
			sb.CausalConv(t.conv, t.qkv, l.conv, l.index, b)
			sb.GatedDeltaRule(t.dn, t.conv, t.alpha, t.beta, l.gdn, l.index, b)
			sb.GatedRMSNorm(t.gn, t.dn, t.z, l.ssmNorm, c.SSM.ValueDim, c.NormEps)
			be.MatMul(t.o, t.gn, l.ssmOut)
		} else {
			matMulShared(be, t.h, []Tensor{t.qg, t.k, t.v}, []Weight{l.wq, l.wk, l.wv})
			sb.SplitHeads(t.q, t.gate, t.qg, c.Heads, c.HeadDim)
			ropeKVWrite(be, l.index, t.q, t.k, t.v, l.qNorm, l.kNorm, c.HeadDim, c.NormEps, b, c.Rope)
			be.Attention(t.att, t.q, l.index, b, c.Heads, scale)
			sb.SigmoidMul(t.att, t.gate)
			be.MatMul(t.o, t.att, l.wo)
		}
		addRMSNorm(be, t.h, t.x, t.o, l.postNorm, c.NormEps)
		l.ffn.forward(be, t)
		if l.moe != nil && l.shGate != nil {
			swiGLUFFN(be, t.o, t.sg, t.su, t.h, l.shGate, l.shUp, l.shDown)
			be.MatMul(t.sgate, t.h, l.shGateInp)
			sb.SigmoidMul(t.o, t.sgate)
			be.Add(t.ffo, t.o)
		}
		if i+1 < len(m.hlayers) {
			addRMSNorm(be, t.h, t.x, t.ffo, m.hlayers[i+1].attnNorm, c.NormEps)
		} else {
			be.Add(t.x, t.ffo)
		}
	}
}
