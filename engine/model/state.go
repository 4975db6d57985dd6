package model

// Hybrid models (qwen35, qwen35moe, qwen3next) mix softmax-attention layers,
// which keep their K/V in the paged pool, with Gated DeltaNet layers, which
// keep a fixed-size recurrent state per sequence instead. This file is the
// contract between the model code, the engine (which owns slots) and the
// backends (which own the state memory and run the recurrent ops).

// StateLayout is the geometry of the recurrent-state storage. Every slot
// holds, for each recurrent layer, a conv state of (ConvKernel-1) inputs
// per channel and one KeyDim x ValueDim delta-rule matrix per value head,
// all float32 (the recurrence accumulates in float32 in the reference).
type StateLayout struct {
	Layers       int // recurrent (Gated DeltaNet) layers
	Slots        int // state slots: live sequences plus snapshots
	ConvChannels int // channels of the short causal conv: 2*KeyHeads*KeyDim + ValueHeads*ValueDim
	ConvKernel   int // conv kernel width K (the state keeps the last K-1 inputs)
	ValueHeads   int // one delta-rule state matrix per value head
	KeyDim       int
	ValueDim     int
}

// ConvFloats is the conv state of one layer of one slot.
func (l StateLayout) ConvFloats() int { return (l.ConvKernel - 1) * l.ConvChannels }

// DeltaFloats is the delta-rule state of one layer of one slot.
func (l StateLayout) DeltaFloats() int { return l.ValueHeads * l.KeyDim * l.ValueDim }

// BytesPerSlot is the state of one sequence, all recurrent layers.
func (l StateLayout) BytesPerSlot() int64 {
	return 4 * int64(l.Layers) * (int64(l.ConvFloats()) + int64(l.DeltaFloats()))
}

// Bytes is the whole state storage.
func (l StateLayout) Bytes() int64 { return int64(l.Slots) * l.BytesPerSlot() }

// GatedDeltaNet is one recurrent layer as the backend ops see it.
//
// The conv output row of a token is [q (KeyHeads*KeyDim) | k (KeyHeads*KeyDim)
// | v (ValueHeads*ValueDim)]. Per value head j with key head kh(j):
//
//	beta = sigmoid(b_j), g = A_j * softplus(a_j + DtBias_j)   (A stored as -exp(A_log))
//	q, k = l2norm(q_kh), l2norm(k_kh) (x * rsqrt(sum x^2 + 1e-6)); q *= 1/sqrt(KeyDim)
//	S = exp(g) * S;  u = beta * (v_j - S^T k);  S = S + k u^T;  o_j = S^T q
//
// S is the slot's KeyDim x ValueDim matrix for head j, stored row-major
// [KeyDim][ValueDim].
type GatedDeltaNet struct {
	KeyHeads, ValueHeads int
	KeyDim, ValueDim     int
	// Tiled: value head j reads key head j % KeyHeads (qwen35 and qwen35moe
	// GGUFs, whose converter reorders the value heads). Otherwise j reads
	// key head j / (ValueHeads/KeyHeads) (qwen3next GGUFs, HF order).
	Tiled  bool
	A      Weight // [ValueHeads] f32, -exp(A_log)
	DtBias Weight // [ValueHeads] f32
}

// SeqSpan.State (see Batch) names the slot a sequence's recurrent ops read
// and update; non-hybrid models ignore it.

// StateBackend is implemented by backends that run hybrid models. Layer
// arguments count recurrent layers only (0..StateLayout.Layers-1). Ops run
// over the sequences of b in order; each sequence's rows read the state its
// slot holds (the tokens before SeqSpan.Cached) and leave the state after
// its last row in the slot.
type StateBackend interface {
	AllocState(l StateLayout) error
	FreeState()
	// ClearState zeroes a slot: a sequence that starts at position 0.
	ClearState(slot int)
	// CopyState copies every layer of slot src into slot dst (snapshots).
	CopyState(dst, src int)

	// CausalConv: x is [tokens][ConvChannels] (the pre-conv projection).
	// dst[t][c] = silu(sum_{i<K} w[i][c] * in[t-K+1+i][c]), where inputs
	// before a sequence's first row come from its slot's conv state (zeros
	// after ClearState); afterwards the state holds the last K-1 inputs.
	// w has GGUF dims [K, ConvChannels] (ne0 = K), f32.
	CausalConv(dst, x Tensor, w Weight, layer int, b *Batch)
	// GatedDeltaRule: qkv is the conv output, alpha and beta the
	// [tokens][ValueHeads] decay and beta logits; dst is
	// [tokens][ValueHeads*ValueDim]. Prefill may use a chunked form; the
	// result must match the token-by-token recurrence.
	GatedDeltaRule(dst, qkv, alpha, beta Tensor, g *GatedDeltaNet, layer int, b *Batch)
	// GatedRMSNorm: for each headDim slice, dst = rmsnorm(x) * w * silu(z)
	// (norm before gate; w is [headDim], used as stored, no +1). The model
	// passes a dst distinct from x and z (as for CausalConv and
	// GatedDeltaRule: only SigmoidMul works in place).
	GatedRMSNorm(dst, x, z Tensor, w Weight, headDim int, eps float32)
	// SigmoidMul: x *= sigmoid(gate). gate is x's shape, or [tokens][1]
	// (one gate per row, the shared expert's gate).
	SigmoidMul(x, gate Tensor)
	// SplitHeads: src is [tokens][heads*2*headDim] with each head's
	// [first | second] halves side by side (qwen35 attention's q and
	// output gate); dst1 and dst2 get [tokens][heads*headDim].
	SplitHeads(dst1, dst2, src Tensor, heads, headDim int)
}
