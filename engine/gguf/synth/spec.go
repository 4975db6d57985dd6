// Package synth writes random-weight GGUF models of real shapes (SmolLM2,
// Llama 3.x, Qwen2/Qwen3/Qwen3-MoE, the Qwen3.5/3.6 hybrids) with llama.cpp's key and tensor names
// and a small byte-level BPE tokenizer, for tests and benchmarks that need a
// full-size model without downloading one.
package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/ftchat/ftchat/engine/gguf"
)

// Llama3Rope is Llama 3.x rope scaling. llama.cpp carries it as the
// rope_freqs.weight tensor (per-frequency divisors), which synth writes;
// only the original context length is stored as a key.
type Llama3Rope struct {
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalContext                       int
}

// Spec describes a synthetic model.
type Spec struct {
	Name     string // general.name
	Arch     string // "llama", "qwen2", "qwen3", "qwen3moe", "qwen35" or "qwen35moe"
	Layers   int
	Dim      int // embedding length
	FF       int // feed-forward length (dense)
	Heads    int
	KVHeads  int
	HeadDim  int
	Vocab    int
	Context  int
	Tied     bool // no output.weight: the output projection reuses token_embd
	RopeBase float64
	RMSEps   float64
	Llama3   *Llama3Rope

	Experts, ExpertsUsed, ExpertFF int // qwen3moe, qwen35moe
	SharedFF                       int // qwen35moe: the shared expert's feed-forward length

	// Hybrid (qwen35, qwen35moe): Gated DeltaNet blocks, with gated full
	// attention in every FullAttnEvery-th block (i % FullAttnEvery ==
	// FullAttnEvery-1), as llama.cpp's converter lays them out.
	SSM *SSM
	// RopeDims is rope.dimension_count (partial rotary); 0 means HeadDim.
	RopeDims int
	// RopeSections is rope.dimension_sections (qwen35*, whose loader needs it).
	RopeSections [4]int32

	TokenizerPre string // tokenizer.ggml.pre
	// WeightType is the type of the matrices; norms, biases and the MoE
	// router stay F32. With NVFP4 every NVFP4 matrix also gets its F32
	// <name>.scale (per expert for stacked experts) and the embeddings are
	// Q8_0 (NVFP4 checkpoints keep them unquantized); MXFP4 keeps Q8_0
	// embeddings too.
	WeightType gguf.Type
}

// SSM is the Gated DeltaNet geometry of a hybrid model (llama.cpp's ssm.* keys).
type SSM struct {
	ConvKernel    int // ssm.conv_kernel
	KeyHeads      int // ssm.group_count
	ValueHeads    int // ssm.time_step_rank
	HeadDim       int // ssm.state_size: key and value head dim
	FullAttnEvery int // full_attention_interval
}

// hybrid reports whether the arch is a Gated DeltaNet hybrid.
func (s Spec) hybrid() bool { return s.Arch == "qwen35" || s.Arch == "qwen35moe" }

// moe reports whether the FFN is a mixture of experts.
func (s Spec) moe() bool { return s.Arch == "qwen3moe" || s.Arch == "qwen35moe" }

// Recurrent reports whether block l is a Gated DeltaNet block.
func (s Spec) Recurrent(l int) bool {
	return s.SSM != nil && (l+1)%s.SSM.FullAttnEvery != 0
}

func (s Spec) ropeDims() int {
	if s.RopeDims > 0 {
		return s.RopeDims
	}
	return s.HeadDim
}

var presets = map[string]Spec{
	"smollm2-135m": {
		Name: "SmolLM2 135M (synthetic)", Arch: "llama", Layers: 30, Dim: 576, FF: 1536, Heads: 9, KVHeads: 3, HeadDim: 64,
		Vocab: 49152, Context: 8192, Tied: true, RopeBase: 100000, RMSEps: 1e-5, TokenizerPre: "smollm",
	},
	"llama-3.2-1b": {
		Name: "Llama 3.2 1B (synthetic)", Arch: "llama", Layers: 16, Dim: 2048, FF: 8192, Heads: 32, KVHeads: 8, HeadDim: 64,
		Vocab: 128256, Context: 131072, Tied: true, RopeBase: 500000, RMSEps: 1e-5, TokenizerPre: "smollm",
		Llama3: &Llama3Rope{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192},
	},
	"llama-3.1-8b": {
		Name: "Llama 3.1 8B (synthetic)", Arch: "llama", Layers: 32, Dim: 4096, FF: 14336, Heads: 32, KVHeads: 8, HeadDim: 128,
		Vocab: 128256, Context: 131072, Tied: false, RopeBase: 500000, RMSEps: 1e-5, TokenizerPre: "smollm",
		Llama3: &Llama3Rope{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192},
	},
	"qwen2-tiny": {
		Name: "Qwen2 tiny (synthetic)", Arch: "qwen2", Layers: 2, Dim: 256, FF: 512, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: 512, Context: 4096, Tied: true, RopeBase: 1000000, RMSEps: 1e-6, TokenizerPre: "qwen2",
	},
	"qwen3-tiny": {
		Name: "Qwen3 tiny (synthetic)", Arch: "qwen3", Layers: 2, Dim: 256, FF: 512, Heads: 4, KVHeads: 2, HeadDim: 128,
		Vocab: 512, Context: 4096, Tied: true, RopeBase: 1000000, RMSEps: 1e-6, TokenizerPre: "qwen2",
	},
	"qwen3moe-tiny": {
		Name: "Qwen3 MoE tiny (synthetic)", Arch: "qwen3moe", Layers: 2, Dim: 256, FF: 512, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: 512, Context: 4096, Tied: false, RopeBase: 1000000, RMSEps: 1e-6, TokenizerPre: "qwen2",
		Experts: 8, ExpertsUsed: 2, ExpertFF: 256,
	},
	// Qwen3-30B-A3B: llama.cpp's qwen3moe always renormalises the top-k
	// weights (norm_topk_prob true), as does ftchat without a key.
	"qwen3-30b-a3b": {
		Name: "Qwen3 30B-A3B (synthetic)", Arch: "qwen3moe", Layers: 48, Dim: 2048, FF: 6144, Heads: 32, KVHeads: 4, HeadDim: 128,
		Vocab: 151936, Context: 40960, Tied: false, RopeBase: 1000000, RMSEps: 1e-6, TokenizerPre: "qwen2",
		Experts: 128, ExpertsUsed: 8, ExpertFF: 768,
	},
	// Qwen3.6-35B-A3B (same shape as Qwen3.5-35B-A3B), as the current
	// converter writes it with --no-mtp: 40 blocks, full attention in every
	// 4th, 256 experts top-8 + a shared expert.
	"qwen3.6-35b-a3b": {
		Name: "Qwen3.6 35B-A3B (synthetic)", Arch: "qwen35moe", Layers: 40, Dim: 2048, Heads: 16, KVHeads: 2, HeadDim: 256,
		Vocab: 248320, Context: 262144, Tied: false, RopeBase: 10000000, RMSEps: 1e-6, TokenizerPre: "qwen35",
		Experts: 256, ExpertsUsed: 8, ExpertFF: 512, SharedFF: 512,
		SSM:      &SSM{ConvKernel: 4, KeyHeads: 16, ValueHeads: 32, HeadDim: 128, FullAttnEvery: 4},
		RopeDims: 64, RopeSections: [4]int32{11, 11, 10, 0},
	},
	// The Qwen3.6-35B-A3B block shapes (every dimension, 256 experts, the
	// real vocabulary) in 4 blocks (3 Gated DeltaNet + 1 attention): the
	// GPU-vs-CPU whole-model test of a real-shaped hybrid MoE at a size the
	// CPU reference runs in seconds.
	"qwen3.6-35b-a3b-4l": {
		Name: "Qwen3.6 35B-A3B shape, 4 blocks (synthetic)", Arch: "qwen35moe", Layers: 4, Dim: 2048, Heads: 16, KVHeads: 2, HeadDim: 256,
		Vocab: 248320, Context: 262144, Tied: false, RopeBase: 10000000, RMSEps: 1e-6, TokenizerPre: "qwen35",
		Experts: 256, ExpertsUsed: 8, ExpertFF: 512, SharedFF: 512,
		SSM:      &SSM{ConvKernel: 4, KeyHeads: 16, ValueHeads: 32, HeadDim: 128, FullAttnEvery: 4},
		RopeDims: 64, RopeSections: [4]int32{11, 11, 10, 0},
	},
	// Qwen3.5-9B: dense hybrid, 32 blocks, FFN 12288.
	"qwen3.5-9b": {
		Name: "Qwen3.5 9B (synthetic)", Arch: "qwen35", Layers: 32, Dim: 4096, FF: 12288, Heads: 16, KVHeads: 4, HeadDim: 256,
		Vocab: 248320, Context: 262144, Tied: false, RopeBase: 10000000, RMSEps: 1e-6, TokenizerPre: "qwen35",
		SSM:      &SSM{ConvKernel: 4, KeyHeads: 16, ValueHeads: 32, HeadDim: 128, FullAttnEvery: 4},
		RopeDims: 64, RopeSections: [4]int32{11, 11, 10, 0},
	},
	"qwen35moe-tiny": {
		Name: "Qwen3.5 MoE tiny (synthetic)", Arch: "qwen35moe", Layers: 4, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: 512, Context: 4096, Tied: false, RopeBase: 10000000, RMSEps: 1e-6, TokenizerPre: "qwen35",
		Experts: 8, ExpertsUsed: 2, ExpertFF: 128, SharedFF: 128,
		SSM:      &SSM{ConvKernel: 4, KeyHeads: 2, ValueHeads: 4, HeadDim: 32, FullAttnEvery: 4},
		RopeDims: 16, RopeSections: [4]int32{3, 3, 2, 0},
	},
	"qwen35-tiny": {
		Name: "Qwen3.5 tiny (synthetic)", Arch: "qwen35", Layers: 4, Dim: 256, FF: 512, Heads: 4, KVHeads: 2, HeadDim: 64,
		Vocab: 512, Context: 4096, Tied: true, RopeBase: 10000000, RMSEps: 1e-6, TokenizerPre: "qwen35",
		SSM:      &SSM{ConvKernel: 4, KeyHeads: 2, ValueHeads: 4, HeadDim: 32, FullAttnEvery: 4},
		RopeDims: 16, RopeSections: [4]int32{3, 3, 2, 0},
	},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the named preset with weight type t.
func Preset(name string, t gguf.Type) (Spec, error) {
	s, ok := presets[name]
	if !ok {
		return Spec{}, fmt.Errorf("synth: unknown preset %q (known: %v)", name, Presets())
	}
	if s.Llama3 != nil {
		l := *s.Llama3
		s.Llama3 = &l
	}
	if s.SSM != nil {
		m := *s.SSM
		s.SSM = &m
	}
	s.WeightType = t
	return s, s.Validate()
}

// Validate checks that the spec describes a model the writer can produce.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch s.Arch {
	case "llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe":
	default:
		bad("unsupported arch %q (llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe)", s.Arch)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", s.Layers}, {"Dim", s.Dim}, {"FF", s.FF}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads},
		{"HeadDim", s.HeadDim}, {"Vocab", s.Vocab}, {"Context", s.Context}} {
		if f.v == 0 && f.name == "FF" && s.Arch == "qwen35moe" {
			continue // no dense FFN: the converter writes no feed_forward_length
		}
		if f.v <= 0 {
			bad("%s must be positive, got %d", f.name, f.v)
		}
	}
	if s.hybrid() {
		m := s.SSM
		switch {
		case m == nil:
			bad("%s needs SSM (the Gated DeltaNet geometry)", s.Arch)
		case m.ConvKernel < 2 || m.KeyHeads <= 0 || m.ValueHeads <= 0 || m.ValueHeads%m.KeyHeads != 0 ||
			m.HeadDim <= 0 || m.HeadDim%32 != 0 || m.FullAttnEvery < 2:
			bad("invalid SSM %+v (ConvKernel >= 2, ValueHeads a multiple of KeyHeads, HeadDim a multiple of 32, FullAttnEvery >= 2)", *m)
		case s.Layers < m.FullAttnEvery:
			bad("Layers %d has no full-attention block (FullAttnEvery %d)", s.Layers, m.FullAttnEvery)
		}
		if r := s.ropeDims(); r%2 != 0 || r > s.HeadDim {
			bad("RopeDims %d must be even and at most HeadDim %d", r, s.HeadDim)
		}
		if sum := s.RopeSections[0] + s.RopeSections[1] + s.RopeSections[2] + s.RopeSections[3]; int(sum) != s.ropeDims()/2 {
			bad("RopeSections %v must sum to RopeDims/2 = %d", s.RopeSections, s.ropeDims()/2)
		}
	} else if s.SSM != nil || s.RopeDims != 0 || s.RopeSections != [4]int32{} {
		bad("SSM, RopeDims and RopeSections are only valid for qwen35 and qwen35moe")
	}
	if s.KVHeads > 0 && s.Heads%s.KVHeads != 0 {
		bad("Heads %d is not a multiple of KVHeads %d", s.Heads, s.KVHeads)
	}
	if s.HeadDim%2 != 0 {
		bad("HeadDim %d must be even for rope", s.HeadDim)
	}
	if s.Dim%32 != 0 || s.FF%32 != 0 || s.HeadDim%32 != 0 || s.ExpertFF%32 != 0 || s.SharedFF%32 != 0 {
		bad("Dim, FF, HeadDim, ExpertFF and SharedFF must be multiples of 32")
	}
	if s.Vocab < baseVocabSize() {
		bad("Vocab %d is below the %d tokens of the built-in tokenizer", s.Vocab, baseVocabSize())
	}
	if s.RopeBase <= 0 || s.RMSEps <= 0 {
		bad("RopeBase and RMSEps must be positive")
	}
	if s.moe() {
		if s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts || s.ExpertFF <= 0 {
			bad("%s needs 0 < ExpertsUsed <= Experts and ExpertFF > 0", s.Arch)
		}
		if s.Arch == "qwen35moe" && s.SharedFF <= 0 {
			bad("qwen35moe needs SharedFF > 0 (the shared expert)")
		}
	} else if s.Experts != 0 {
		bad("Experts is only valid for qwen3moe and qwen35moe")
	}
	if s.SharedFF != 0 && s.Arch != "qwen35moe" {
		bad("SharedFF is only valid for qwen35moe")
	}
	if l := s.Llama3; l != nil && (l.Factor <= 0 || l.HighFreqFactor <= l.LowFreqFactor || l.OriginalContext <= 0) {
		bad("invalid Llama3 rope scaling %+v", *l)
	}
	if !gguf.QuantizeSupported(s.WeightType) {
		bad("weight type %s cannot be generated (use F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4 or NVFP4)", s.WeightType)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("synth: invalid spec: %w", err)
	}
	return nil
}

// matrixType is the stored type of a matrix with rows of rowLen elements:
// the requested type, or a legacy fallback when the row length is not a
// multiple of its block size (as llama-quantize does).
func matrixType(want gguf.Type, rowLen int) gguf.Type {
	if rowLen%want.BlockElems() == 0 {
		return want
	}
	switch want {
	case gguf.Q4_K:
		return gguf.Q4_0
	case gguf.Q5_K:
		return gguf.Q5_0
	}
	return gguf.Q8_0 // Q6_K and anything else; every dim is a multiple of 32
}

// tensorPlan is one tensor to generate: its info and how to fill it.
type tensorPlan struct {
	info gguf.TensorInfo
	fill fillKind
	// scale is an NVFP4 matrix's second-level scale, one value per equal
	// group of rows (per expert), which the generator divides out before
	// quantizing; for its <name>.scale tensor (fillValues), the values.
	scale []float32
}

type fillKind int

const (
	fillWeight    fillKind = iota // normal(0, 0.02)
	fillNorm                      // 1 + normal(0, 0.02)
	fillRopeFreqs                 // deterministic Llama 3 factors
	fillSSMA                      // ssm_a = -exp(A_log): -A, A log-uniform in [1, 16]
	fillDtBias                    // ssm_dt.bias: softplus^-1(dt), dt log-uniform in [1e-3, 0.1]
	fillConv                      // ssm_conv1d: uniform(-0.5, 0.5), PyTorch's Conv1d init for 4 taps
	fillValues                    // the plan's scale values (an NVFP4 <name>.scale tensor)
)

// Tensors lists the tensors of the model in file order (offsets unset).
func (s Spec) Tensors() []gguf.TensorInfo {
	plan := s.plan()
	out := make([]gguf.TensorInfo, len(plan))
	for i, p := range plan {
		out[i] = p.info
	}
	return out
}

func (s Spec) plan() []tensorPlan {
	var p []tensorPlan
	add := func(name string, fill fillKind, t gguf.Type, dims ...int) {
		d := make([]uint64, len(dims))
		for i, v := range dims {
			d[i] = uint64(v)
		}
		p = append(p, tensorPlan{info: gguf.TensorInfo{Name: name, Dims: d, Type: t}, fill: fill})
	}
	mat := func(name string, dims ...int) {
		t := matrixType(s.WeightType, dims[0])
		add(name, fillWeight, t, dims...)
		if t == gguf.NVFP4 { // the weight, then its scale tensor, as the converter writes them
			sc := nvfp4Scales(name, dims)
			p[len(p)-1].scale = sc
			add(gguf.ScaleTensorName(name), fillValues, gguf.F32, len(sc))
			p[len(p)-1].scale = sc
		}
	}
	f32 := func(name string, fill fillKind, dims ...int) { add(name, fill, gguf.F32, dims...) }

	qDim, kvDim := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	if s.WeightType == gguf.NVFP4 || s.WeightType == gguf.MXFP4 {
		// NVFP4 checkpoints keep the embeddings unquantized; the
		// converter writes them at its --outtype. Q8_0 keeps the file small.
		add("token_embd.weight", fillWeight, gguf.Q8_0, s.Dim, s.Vocab)
	} else {
		mat("token_embd.weight", s.Dim, s.Vocab)
	}
	if s.Llama3 != nil {
		f32("rope_freqs.weight", fillRopeFreqs, s.HeadDim/2)
	}
	if s.hybrid() {
		s.hybridPlan(mat, f32)
		return p
	}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		f32(b+"attn_norm.weight", fillNorm, s.Dim)
		mat(b+"attn_q.weight", s.Dim, qDim)
		mat(b+"attn_k.weight", s.Dim, kvDim)
		mat(b+"attn_v.weight", s.Dim, kvDim)
		if s.Arch == "qwen2" {
			f32(b+"attn_q.bias", fillWeight, qDim)
			f32(b+"attn_k.bias", fillWeight, kvDim)
			f32(b+"attn_v.bias", fillWeight, kvDim)
		}
		if s.Arch == "qwen3" || s.Arch == "qwen3moe" {
			f32(b+"attn_q_norm.weight", fillNorm, s.HeadDim)
			f32(b+"attn_k_norm.weight", fillNorm, s.HeadDim)
		}
		mat(b+"attn_output.weight", qDim, s.Dim)
		f32(b+"ffn_norm.weight", fillNorm, s.Dim)
		if s.Arch == "qwen3moe" {
			f32(b+"ffn_gate_inp.weight", fillWeight, s.Dim, s.Experts)
			mat(b+"ffn_gate_exps.weight", s.Dim, s.ExpertFF, s.Experts)
			mat(b+"ffn_up_exps.weight", s.Dim, s.ExpertFF, s.Experts)
			mat(b+"ffn_down_exps.weight", s.ExpertFF, s.Dim, s.Experts)
		} else {
			mat(b+"ffn_gate.weight", s.Dim, s.FF)
			mat(b+"ffn_up.weight", s.Dim, s.FF)
			mat(b+"ffn_down.weight", s.FF, s.Dim)
		}
	}
	f32("output_norm.weight", fillNorm, s.Dim)
	if !s.Tied {
		mat("output.weight", s.Dim, s.Vocab)
	}
	return p
}

// hybridPlan lists the qwen35/qwen35moe tensors with the names and shapes
// (ggml order) of llama.cpp's src/models/qwen35moe.cpp load_arch_tensors,
// with the converter's types: F32 for norms, ssm_conv1d, ssm_a, ssm_dt,
// the router and the shared-expert gate; the weight type for matrices.
func (s Spec) hybridPlan(mat func(string, ...int), f32 func(string, fillKind, ...int)) {
	m := s.SSM
	qDim, kvDim := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	keyDim, valueDim := m.KeyHeads*m.HeadDim, m.ValueHeads*m.HeadDim
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		f32(b+"attn_norm.weight", fillNorm, s.Dim)
		if s.Recurrent(l) {
			mat(b+"attn_qkv.weight", s.Dim, 2*keyDim+valueDim)
			mat(b+"attn_gate.weight", s.Dim, valueDim)
			mat(b+"ssm_beta.weight", s.Dim, m.ValueHeads)
			mat(b+"ssm_alpha.weight", s.Dim, m.ValueHeads)
			f32(b+"ssm_conv1d.weight", fillConv, m.ConvKernel, 2*keyDim+valueDim)
			f32(b+"ssm_dt.bias", fillDtBias, m.ValueHeads)
			f32(b+"ssm_a", fillSSMA, m.ValueHeads)
			f32(b+"ssm_norm.weight", fillNorm, m.HeadDim)
			mat(b+"ssm_out.weight", valueDim, s.Dim)
		} else {
			mat(b+"attn_q.weight", s.Dim, 2*qDim) // per head [query | gate]
			mat(b+"attn_k.weight", s.Dim, kvDim)
			mat(b+"attn_v.weight", s.Dim, kvDim)
			f32(b+"attn_q_norm.weight", fillNorm, s.HeadDim)
			f32(b+"attn_k_norm.weight", fillNorm, s.HeadDim)
			mat(b+"attn_output.weight", qDim, s.Dim)
		}
		f32(b+"post_attention_norm.weight", fillNorm, s.Dim)
		if s.Arch == "qwen35moe" {
			f32(b+"ffn_gate_inp.weight", fillWeight, s.Dim, s.Experts)
			mat(b+"ffn_gate_exps.weight", s.Dim, s.ExpertFF, s.Experts)
			mat(b+"ffn_up_exps.weight", s.Dim, s.ExpertFF, s.Experts)
			mat(b+"ffn_down_exps.weight", s.ExpertFF, s.Dim, s.Experts)
			f32(b+"ffn_gate_inp_shexp.weight", fillWeight, s.Dim, 1) // the converter's [n_embd, 1]
			mat(b+"ffn_gate_shexp.weight", s.Dim, s.SharedFF)
			mat(b+"ffn_up_shexp.weight", s.Dim, s.SharedFF)
			mat(b+"ffn_down_shexp.weight", s.SharedFF, s.Dim)
		} else {
			mat(b+"ffn_gate.weight", s.Dim, s.FF)
			mat(b+"ffn_up.weight", s.Dim, s.FF)
			mat(b+"ffn_down.weight", s.FF, s.Dim)
		}
	}
	f32("output_norm.weight", fillNorm, s.Dim)
	if !s.Tied {
		mat("output.weight", s.Dim, s.Vocab)
	}
}

// nvfp4Scales returns the second-level scales of an NVFP4 matrix: ModelOpt's
// weight_scale_2 = amax / (6 * 448) for amax ≈ 5 WeightStd, so the block
// scales use the whole UE4M3 range as in real checkpoints, varied by ±25%
// per tensor and per expert (dims[2]) from the name.
func nvfp4Scales(name string, dims []int) []float32 {
	n := 1
	if len(dims) == 3 {
		n = dims[2]
	}
	rng := rand.New(rand.NewPCG(chunkSeed(name, 0), 0x5ca1e))
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(5 * WeightStd / (6 * 448) * (0.75 + 0.5*rng.Float64()))
	}
	return s
}

// fileType is llama.cpp's general.file_type for a model of mostly type t.
func fileType(t gguf.Type) uint32 {
	switch t {
	case gguf.F32:
		return 0
	case gguf.F16:
		return 1
	case gguf.Q4_0:
		return 2
	case gguf.Q4_1:
		return 3
	case gguf.Q8_0:
		return 7
	case gguf.Q5_0:
		return 8
	case gguf.Q5_1:
		return 9
	case gguf.Q4_K:
		return 14 // Q4_K_S
	case gguf.Q5_K:
		return 16 // Q5_K_S
	case gguf.Q6_K:
		return 18
	case gguf.BF16:
		return 32
	case gguf.MXFP4:
		return 38 // MOSTLY_MXFP4_MOE
	case gguf.NVFP4:
		return 39 // MOSTLY_NVFP4
	}
	return 0
}

// Metadata returns the GGUF key/values of the model, tokenizer included.
func (s Spec) Metadata() ([]gguf.KV, error) {
	v, err := buildVocab(s.Vocab)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	a := s.Arch + "."
	kv := []gguf.KV{
		{Key: "general.architecture", Value: s.Arch},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: s.Name},
		{Key: "general.file_type", Value: fileType(s.WeightType)},
		{Key: "general.quantization_version", Value: uint32(2)},
		{Key: a + "vocab_size", Value: uint32(s.Vocab)},
		{Key: a + "context_length", Value: uint32(s.Context)},
		{Key: a + "embedding_length", Value: uint32(s.Dim)},
	}
	if s.FF > 0 {
		kv = append(kv, gguf.KV{Key: a + "feed_forward_length", Value: uint32(s.FF)})
	}
	kv = append(kv, []gguf.KV{
		{Key: a + "block_count", Value: uint32(s.Layers)},
		{Key: a + "attention.head_count", Value: uint32(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + "attention.key_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.value_length", Value: uint32(s.HeadDim)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(s.RMSEps)},
		{Key: a + "rope.freq_base", Value: float32(s.RopeBase)},
		{Key: a + "rope.dimension_count", Value: uint32(s.ropeDims())},
	}...)
	if s.Llama3 != nil {
		kv = append(kv, gguf.KV{Key: a + "rope.scaling.original_context_length", Value: uint32(s.Llama3.OriginalContext)})
	}
	if s.moe() {
		kv = append(kv,
			gguf.KV{Key: a + "expert_count", Value: uint32(s.Experts)},
			gguf.KV{Key: a + "expert_used_count", Value: uint32(s.ExpertsUsed)},
			gguf.KV{Key: a + "expert_feed_forward_length", Value: uint32(s.ExpertFF)},
		)
	}
	if s.SharedFF > 0 {
		kv = append(kv, gguf.KV{Key: a + "expert_shared_feed_forward_length", Value: uint32(s.SharedFF)})
	}
	if m := s.SSM; m != nil {
		// Types as gguf-py writes them: uint32 scalars, int32 sections, bool flags.
		recurrent := make([]bool, s.Layers)
		for l := range recurrent {
			recurrent[l] = s.Recurrent(l)
		}
		kv = append(kv,
			gguf.KV{Key: a + "rope.dimension_sections", Value: s.RopeSections[:]},
			gguf.KV{Key: a + "ssm.conv_kernel", Value: uint32(m.ConvKernel)},
			gguf.KV{Key: a + "ssm.state_size", Value: uint32(m.HeadDim)},
			gguf.KV{Key: a + "ssm.group_count", Value: uint32(m.KeyHeads)},
			gguf.KV{Key: a + "ssm.time_step_rank", Value: uint32(m.ValueHeads)},
			gguf.KV{Key: a + "ssm.inner_size", Value: uint32(m.ValueHeads * m.HeadDim)},
			gguf.KV{Key: a + "attention.recurrent_layers", Value: recurrent},
			gguf.KV{Key: a + "full_attention_interval", Value: uint32(m.FullAttnEvery)},
		)
	}
	kv = append(kv,
		gguf.KV{Key: "tokenizer.ggml.model", Value: "gpt2"},
		gguf.KV{Key: "tokenizer.ggml.pre", Value: s.TokenizerPre},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: v.tokens},
		gguf.KV{Key: "tokenizer.ggml.token_type", Value: v.types},
		gguf.KV{Key: "tokenizer.ggml.merges", Value: v.merges},
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		gguf.KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: uint32(2)},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: false},
		gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: false},
		gguf.KV{Key: "tokenizer.chat_template", Value: ChatTemplate},
	)
	return kv, nil
}

// RopeFreqFactors returns the Llama 3 per-frequency divisors that llama.cpp
// stores in rope_freqs.weight: 1 for high frequencies, Factor for low ones,
// and a smooth blend in between.
func RopeFreqFactors(headDim int, base float64, l Llama3Rope) []float32 {
	lowWavelen := float64(l.OriginalContext) / l.LowFreqFactor
	highWavelen := float64(l.OriginalContext) / l.HighFreqFactor
	out := make([]float32, headDim/2)
	for i := range out {
		freq := 1 / math.Pow(base, float64(2*i)/float64(headDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(l.Factor)
		default:
			smooth := (float64(l.OriginalContext)/wavelen - l.LowFreqFactor) / (l.HighFreqFactor - l.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/l.Factor + smooth))
		}
	}
	return out
}
