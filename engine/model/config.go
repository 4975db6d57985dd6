package model

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

// Config is the architecture of a model, read from GGUF metadata.
type Config struct {
	Arch       string // general.architecture: llama, qwen2, qwen3, qwen3moe
	Name       string // general.name, if present
	Layers     int    // transformer blocks
	AttnLayers int    // blocks that hold KV (all of them for these families)
	Dim        int    // embedding length
	FF         int    // feed-forward length (dense layers)
	Heads      int
	KVHeads    int
	HeadDim    int
	Vocab      int
	ContextLen int // trained context length
	NormEps    float32
	Rope       Rope

	QKVBias bool // qwen2: biases on q, k, v
	QKNorm  bool // qwen3: RMSNorm per head on q and k

	Experts     int // MoE: experts per layer (0 = dense)
	ExpertsUsed int // MoE: top-k
	ExpertFF    int // MoE: feed-forward length of one expert
	NormTopK    bool

	TiedEmbeddings bool  // no output.weight: logits use token_embd
	WeightBytes    int64 // bytes of all tensors as stored in the file
}

// family describes what differs between the supported architectures.
type family struct {
	neox    bool // rope pairs (i, i+d/2); GGUF llama uses adjacent pairs
	qkvBias bool
	qkNorm  bool
	moe     bool
}

var families = map[string]family{
	"llama":    {},
	"qwen2":    {neox: true, qkvBias: true},
	"qwen3":    {neox: true, qkNorm: true},
	"qwen3moe": {neox: true, qkNorm: true, moe: true},
}

// Supported lists the architectures this package runs.
func Supported() []string {
	s := make([]string, 0, len(families))
	for k := range families {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ReadConfig reads the model configuration from f's metadata.
func ReadConfig(f *gguf.File) (Config, error) {
	arch, ok := f.String("general.architecture")
	if !ok {
		return Config{}, fmt.Errorf("%s: no general.architecture in the metadata; is this a model GGUF?", f.Path)
	}
	fam, ok := families[arch]
	if !ok {
		return Config{}, fmt.Errorf("%s: architecture %q is not supported (supported: %s)", f.Path, arch, strings.Join(Supported(), ", "))
	}
	c := Config{Arch: arch, QKVBias: fam.qkvBias, QKNorm: fam.qkNorm}
	c.Name, _ = f.String("general.name")
	var missing []string
	req := func(key string) int {
		v, ok := f.Uint(arch + "." + key)
		if !ok {
			missing = append(missing, arch+"."+key)
		}
		return int(v)
	}
	opt := func(key string, def int) int {
		if v, ok := f.Uint(arch + "." + key); ok {
			return int(v)
		}
		return def
	}
	c.Layers = req("block_count")
	c.AttnLayers = c.Layers
	c.Dim = req("embedding_length")
	c.Heads = req("attention.head_count")
	c.ContextLen = opt("context_length", 2048)
	if len(missing) > 0 {
		return Config{}, fmt.Errorf("%s: metadata is missing %s", f.Path, strings.Join(missing, ", "))
	}
	if c.Heads <= 0 || c.Dim <= 0 || c.Layers <= 0 {
		return Config{}, fmt.Errorf("%s: invalid shape: %d layers, dim %d, %d heads", f.Path, c.Layers, c.Dim, c.Heads)
	}
	c.FF = opt("feed_forward_length", 0)
	c.KVHeads = opt("attention.head_count_kv", c.Heads)
	c.HeadDim = opt("attention.key_length", c.Dim/c.Heads)
	if v := opt("attention.value_length", c.HeadDim); v != c.HeadDim {
		return Config{}, fmt.Errorf("%s: value_length %d differs from key_length %d; not supported", f.Path, v, c.HeadDim)
	}
	if c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 || c.HeadDim <= 0 || c.HeadDim%2 != 0 {
		return Config{}, fmt.Errorf("%s: invalid attention shape: %d heads, %d kv heads, head dim %d", f.Path, c.Heads, c.KVHeads, c.HeadDim)
	}
	eps := 1e-5
	if v, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		eps = v
	}
	c.NormEps = float32(eps)

	base := 10000.0
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		base = v
	}
	c.Rope = Rope{Dim: opt("rope.dimension_count", c.HeadDim), Base: base, NeoX: fam.neox}
	if c.Rope.Dim <= 0 || c.Rope.Dim > c.HeadDim || c.Rope.Dim%2 != 0 {
		return Config{}, fmt.Errorf("%s: rope dimension %d does not fit head dim %d", f.Path, c.Rope.Dim, c.HeadDim)
	}
	if err := readRopeScaling(f, arch, &c.Rope); err != nil {
		return Config{}, err
	}

	if fam.moe {
		c.Experts = opt("expert_count", 0)
		c.ExpertsUsed = opt("expert_used_count", 0)
		c.ExpertFF = opt("expert_feed_forward_length", c.FF)
		c.NormTopK = true // Qwen3-MoE checkpoints set norm_topk_prob
		if v, ok := f.Bool(arch + ".expert_weights_norm"); ok {
			c.NormTopK = v
		}
		if c.Experts <= 0 || c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts || c.ExpertFF <= 0 {
			return Config{}, fmt.Errorf("%s: invalid MoE shape: %d experts, %d used, expert ff %d", f.Path, c.Experts, c.ExpertsUsed, c.ExpertFF)
		}
	}

	if ti, ok := f.Tensor("token_embd.weight"); ok && len(ti.Dims) == 2 {
		c.Vocab = int(ti.Dims[1])
	} else {
		return Config{}, fmt.Errorf("%s: tensor token_embd.weight is missing or not 2-D", f.Path)
	}
	_, hasOut := f.Tensor("output.weight")
	c.TiedEmbeddings = !hasOut
	for _, ti := range f.Tensors {
		c.WeightBytes += int64(ti.Bytes())
	}
	return c, nil
}

// readRopeScaling applies <arch>.rope.scaling.*: linear scaling scales
// positions; Llama 3 scaling divides frequencies by per-dimension factors,
// taken from the rope_freqs.weight tensor when the file has one (llama.cpp
// writes it) and computed from the metadata otherwise.
func readRopeScaling(f *gguf.File, arch string, r *Rope) error {
	typ, _ := f.String(arch + ".rope.scaling.type")
	factor, hasFactor := f.Float(arch + ".rope.scaling.factor")
	if ti, ok := f.Tensor("rope_freqs.weight"); ok {
		if ti.Type != gguf.F32 || ti.Elements() != uint64(r.Dim/2) {
			return fmt.Errorf("%s: rope_freqs.weight is %s with %d elements; want F32 with %d", f.Path, ti.Type, ti.Elements(), r.Dim/2)
		}
		raw, err := f.TensorData(ti)
		if err != nil {
			return err
		}
		r.FreqFactors = make([]float32, r.Dim/2)
		if err := gguf.Dequantize(gguf.F32, raw, r.FreqFactors); err != nil {
			return fmt.Errorf("%s: rope_freqs.weight: %w", f.Path, err)
		}
		return nil
	}
	switch typ {
	case "", "none":
		return nil
	case "linear":
		if hasFactor && factor > 0 {
			r.Scale = float32(1 / factor)
		}
		return nil
	case "llama3":
		if !hasFactor || factor <= 0 {
			return fmt.Errorf("%s: llama3 rope scaling without a positive %s.rope.scaling.factor", f.Path, arch)
		}
		orig, ok := f.Uint(arch + ".rope.scaling.original_context_length")
		if !ok || orig == 0 {
			return fmt.Errorf("%s: llama3 rope scaling without %s.rope.scaling.original_context_length", f.Path, arch)
		}
		lo, hi := 1.0, 4.0
		if v, ok := f.Float(arch + ".rope.scaling.low_freq_factor"); ok {
			lo = v
		}
		if v, ok := f.Float(arch + ".rope.scaling.high_freq_factor"); ok {
			hi = v
		}
		r.FreqFactors = Llama3FreqFactors(r.Dim, r.Base, factor, lo, hi, float64(orig))
		return nil
	}
	return fmt.Errorf("%s: rope scaling type %q is not supported (supported: none, linear, llama3)", f.Path, typ)
}

// Llama3FreqFactors computes the per-frequency divisors of Llama 3 rope
// scaling: high frequencies (short wavelengths) are kept, low ones divided
// by factor, and the band between interpolated smoothly.
func Llama3FreqFactors(dim int, base, factor, lowFreq, highFreq, origCtx float64) []float32 {
	ff := make([]float32, dim/2)
	lowWave, highWave := origCtx/lowFreq, origCtx/highFreq
	for i := range ff {
		wave := 2 * math.Pi * math.Pow(base, float64(2*i)/float64(dim))
		switch {
		case wave < highWave:
			ff[i] = 1
		case wave > lowWave:
			ff[i] = float32(factor)
		default:
			s := (origCtx/wave - lowFreq) / (highFreq - lowFreq)
			ff[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	return ff
}
