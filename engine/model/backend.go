package model

import (
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Tensor is a backend-owned row-major float32 activation matrix [Rows][Cols].
// Backends may keep it on a device; the host sees it only through ToHost.
type Tensor interface {
	Rows() int
	Cols() int
}

// Weight is a backend-owned model tensor kept in its file format
// (F32, F16, BF16, Q8_0, Q4_K, ...). Matmuls read it in that format.
type Weight interface {
	Info() gguf.TensorInfo
}

// Rope describes rotary position embedding for one model.
type Rope struct {
	Dim  int     // rotated dims per head (usually head_dim)
	Base float64 // theta
	// NeoX: rotate pairs (i, i+Dim/2) (Qwen, NeoX layout). Otherwise
	// adjacent pairs (2i, 2i+1), the GGUF llama layout.
	NeoX bool
	// FreqFactors divides each of the Dim/2 inverse frequencies (Llama 3
	// scaling, GGUF rope_freqs); nil means all ones.
	FreqFactors []float32
	// Scale multiplies positions (linear rope scaling); 0 means 1.
	Scale float32
}

// InvFreqs returns the Dim/2 rotation rates in float64:
// Scale / (FreqFactors[i] * Base^(2i/Dim)). Every backend computes its
// angles from these (pos * InvFreqs()[i]), so CPU and GPU rotate alike.
func (r Rope) InvFreqs() []float64 {
	f := make([]float64, r.Dim/2)
	scale := float64(r.Scale)
	if scale == 0 {
		scale = 1
	}
	for i := range f {
		f[i] = scale / math.Pow(r.Base, float64(2*i)/float64(r.Dim))
		if r.FreqFactors != nil {
			f[i] /= float64(r.FreqFactors[i])
		}
	}
	return f
}

// SeqSpan is one sequence's slice of a batch. Its NewTokens rows are
// contiguous in the batch, starting at row Offset, and sit at absolute
// positions Cached, Cached+1, ... Cached+NewTokens-1.
type SeqSpan struct {
	Offset    int
	Cached    int     // tokens already in the cache before this batch
	NewTokens int     // tokens written by this batch
	Pages     []int32 // page table: page id for token positions [i*PageSize, (i+1)*PageSize)
	State     int     // hybrid models: recurrent-state slot (StateBackend); ignored otherwise
}

// Batch describes the tokens of one forward step across sequences.
type Batch struct {
	Tokens []int32 // one per row
	Pos    []int32 // absolute position of each row
	Seqs   []SeqSpan
}

// MoE describes a mixture-of-experts feed-forward layer.
type MoE struct {
	Router         Weight // [n_expert, dim]
	Gate, Up, Down Weight // stacked experts: [n_expert, ff, dim], [n_expert, ff, dim], [n_expert, dim, ff]
	Experts, TopK  int
	NormTopK       bool // renormalise the top-k softmax weights to sum to 1
}

// Backend executes the coarse ops every architecture is written against.
// The CPU backend (engine/cpu) is the numerical reference; gpu implements
// the same contract. Ops are issued in order; ToHost synchronises.
//
// Shapes: activations are [tokens][features]; a weight W of GGUF dims
// [in, out] (ne0=in) maps x[in] to y[out] = W·x.
type Backend interface {
	Name() string

	LoadWeight(info gguf.TensorInfo, raw []byte) (Weight, error)
	NewTensor(rows, cols int) Tensor
	FreeTensor(Tensor)
	ToHost(src Tensor, dst []float32)
	FromHost(dst Tensor, src []float32)

	// AllocKV creates the paged KV storage for layout (replacing any previous one).
	AllocKV(layout kvcache.Layout) error
	FreeKV()

	Embed(dst Tensor, table Weight, tokens []int32)
	RMSNorm(dst, x Tensor, w Weight, eps float32)
	// HeadRMSNorm normalises each head_dim slice of x in place (Qwen3 q/k norm).
	HeadRMSNorm(x Tensor, w Weight, headDim int, eps float32)
	MatMul(dst, x Tensor, w Weight)
	AddBias(x Tensor, b Weight)
	// RoPE rotates x in place, each row at pos[row]; x holds heads of headDim.
	RoPE(x Tensor, pos []int32, headDim int, rope Rope)
	SwiGLU(dst, gate, up Tensor) // dst = silu(gate) * up
	Add(dst, x Tensor)           // dst += x

	// KVWrite applies RoPE to k, then stores k and v (each [tokens][kv_heads*head_dim])
	// into the pages of layer in the pool's dtype (fused rope+quantize+scatter).
	KVWrite(layer int, k, v Tensor, b *Batch, rope Rope)
	// Attention computes causal paged attention of q ([tokens][heads*head_dim],
	// already rotated) over everything the cache holds for each sequence up
	// to and including each row's position. Softmax and accumulation in float32.
	Attention(dst, q Tensor, layer int, b *Batch, heads int, scale float32)

	MoE(dst, x Tensor, m *MoE)
}
