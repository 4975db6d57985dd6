package model

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

// Config is the architecture of a model, read from GGUF metadata.
type Config struct {
	Arch       string // general.architecture: llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next
	Name       string // general.name, if present
	Layers     int    // transformer blocks the forward pass runs (block_count less the NextN MTP blocks)
	AttnLayers int    // blocks that hold KV: all of them, or the attention blocks of a hybrid model
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
	WeightBytes    int64 // bytes of the tensors Load uses, as stored in the file (not the skipped MTP blocks)

	// Hybrid families (qwen35, qwen35moe, qwen3next); zero otherwise.
	//
	// Recurrent[i] tells whether block i is a Gated DeltaNet block (its
	// state lives in StateLayout slots) or a gated-attention block (its
	// K/V in the paged pool). Recurrent blocks are numbered 0..L_rec-1 and
	// attention blocks 0..AttnLayers-1 among themselves, in block order:
	// those are the layer indices of the state and KV ops.
	Recurrent []bool
	SSM       SSM
	AttnGate  bool // attn_q rows per head are [q_h | gate_h]; the output is multiplied by sigmoid(gate)
	SharedFF  int  // MoE: shared-expert feed-forward length (0 = no shared expert)
	// NextN is the number of MTP (next-token prediction) blocks after the
	// trunk (nextn_predict_layers). They are neither loaded nor run.
	NextN int
}

// SSM is the Gated DeltaNet geometry of a hybrid model.
type SSM struct {
	ConvKernel int // ssm.conv_kernel
	KeyHeads   int // ssm.group_count
	ValueHeads int // ssm.time_step_rank
	KeyDim     int // ssm.state_size
	ValueDim   int // ssm.inner_size / ValueHeads
	// Tiled: value head j reads key head j % KeyHeads (qwen35, qwen35moe);
	// otherwise j / (ValueHeads/KeyHeads) (qwen3next).
	Tiled bool
}

// ConvChannels is the width of the conv input: q, k and v of all heads.
func (s SSM) ConvChannels() int { return 2*s.KeyHeads*s.KeyDim + s.ValueHeads*s.ValueDim }

// Hybrid reports whether the model has recurrent blocks: it then needs a
// StateBackend and state slots (StateLayout) besides the KV pool.
func (c Config) Hybrid() bool { return c.RecurrentLayers() > 0 }

// RecurrentLayers counts the Gated DeltaNet blocks.
func (c Config) RecurrentLayers() int {
	n := 0
	for _, r := range c.Recurrent {
		if r {
			n++
		}
	}
	return n
}

// LayerSummary describes the blocks for display: "30 layers", or for a
// hybrid model "40 layers (30 Gated DeltaNet + 10 attention; 1 MTP layer
// not run)".
func (c Config) LayerSummary() string {
	if !c.Hybrid() {
		return fmt.Sprintf("%d layers", c.Layers)
	}
	s := fmt.Sprintf("%d layers (%d Gated DeltaNet + %d attention", c.Layers, c.RecurrentLayers(), c.AttnLayers)
	switch c.NextN {
	case 0:
	case 1:
		s += "; 1 MTP layer not run"
	default:
		s += fmt.Sprintf("; %d MTP layers not run", c.NextN)
	}
	return s + ")"
}

// StateLayout is the recurrent-state geometry of slots sequences (live
// ones plus snapshots) for a hybrid model.
func (c Config) StateLayout(slots int) StateLayout {
	return StateLayout{Layers: c.RecurrentLayers(), Slots: slots, ConvChannels: c.SSM.ConvChannels(), ConvKernel: c.SSM.ConvKernel,
		ValueHeads: c.SSM.ValueHeads, KeyDim: c.SSM.KeyDim, ValueDim: c.SSM.ValueDim}
}

// family describes what differs between the supported architectures.
type family struct {
	neox    bool // rope pairs (i, i+d/2); GGUF llama uses adjacent pairs
	qkvBias bool
	qkNorm  bool
	moe     bool
	// hybrid: Gated DeltaNet + gated attention blocks (qwen35.go).
	hybrid bool
	tiled  bool // GDN value heads in tiled order (see SSM.Tiled)
}

var families = map[string]family{
	"llama":     {},
	"qwen2":     {neox: true, qkvBias: true},
	"qwen3":     {neox: true, qkNorm: true},
	"qwen3moe":  {neox: true, qkNorm: true, moe: true},
	"qwen35":    {neox: true, qkNorm: true, hybrid: true, tiled: true},
	"qwen35moe": {neox: true, qkNorm: true, moe: true, hybrid: true, tiled: true},
	"qwen3next": {neox: true, qkNorm: true, moe: true, hybrid: true},
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
	r := keyReader{f: f, arch: arch}
	c.Layers = r.int("block_count", -1, 1, maxLayers)
	c.AttnLayers = c.Layers
	c.Dim = r.int("embedding_length", -1, 1, maxShape)
	c.Heads = r.int("attention.head_count", -1, 1, maxShape)
	c.ContextLen = r.int("context_length", 2048, 1, math.MaxInt32)
	c.FF = r.int("feed_forward_length", 0, 0, maxShape)
	if len(r.missing) > 0 {
		return Config{}, fmt.Errorf("%s: metadata is missing %s", f.Path, strings.Join(r.missing, ", "))
	}
	if r.err != nil {
		return Config{}, r.err
	}
	// Each block has at least 9 tensors (norms, q, k, v, output, FFN):
	// a block count the file cannot hold is corrupt, not a huge model.
	if c.Layers > len(f.Tensors)/9 {
		return Config{}, fmt.Errorf("%s: %s.block_count is %d but the file has only %d tensors (each block needs at least 9); the file is corrupt",
			f.Path, arch, c.Layers, len(f.Tensors))
	}
	if fam.hybrid {
		if err := readHybrid(f, &r, &c, fam); err != nil {
			return Config{}, err
		}
	}
	c.KVHeads = r.int("attention.head_count_kv", c.Heads, 1, maxShape)
	if _, ok := f.Value(arch + ".attention.key_length"); !ok && c.Dim%c.Heads != 0 {
		return Config{}, fmt.Errorf("%s: %s.embedding_length %d is not a multiple of %s.attention.head_count %d and no key_length is given",
			f.Path, arch, c.Dim, arch, c.Heads)
	}
	c.HeadDim = r.int("attention.key_length", c.Dim/c.Heads, 1, maxShape)
	vl := r.int("attention.value_length", c.HeadDim, 1, maxShape)
	if r.err != nil {
		return Config{}, r.err
	}
	if vl != c.HeadDim {
		return Config{}, fmt.Errorf("%s: value_length %d differs from key_length %d; not supported", f.Path, vl, c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 {
		return Config{}, fmt.Errorf("%s: invalid attention shape: %d heads, %d kv heads (%s.attention.head_count_kv must divide head_count), head dim %d (must be even)",
			f.Path, c.Heads, c.KVHeads, arch, c.HeadDim)
	}
	eps, err := r.float("attention.layer_norm_rms_epsilon", 1e-5, 0, 1, "a small positive number, typically 1e-5 or 1e-6")
	if err != nil {
		return Config{}, err
	}
	c.NormEps = float32(eps)
	if c.NormEps <= 0 { // a positive float64 below float32's range
		return Config{}, fmt.Errorf("%s: %s.attention.layer_norm_rms_epsilon %g is too small for float32; typically 1e-5 or 1e-6", f.Path, arch, eps)
	}

	base, err := r.float("rope.freq_base", 10000, 1, math.MaxFloat64, "a finite number above 1, typically 10000 to 1000000")
	if err != nil {
		return Config{}, err
	}
	c.Rope = Rope{Dim: r.int("rope.dimension_count", c.HeadDim, 1, maxShape), Base: base, NeoX: fam.neox}
	if r.err != nil {
		return Config{}, r.err
	}
	if c.Rope.Dim > c.HeadDim || c.Rope.Dim%2 != 0 {
		return Config{}, fmt.Errorf("%s: rope dimension %d does not fit head dim %d", f.Path, c.Rope.Dim, c.HeadDim)
	}
	if err := readRopeScaling(f, arch, &c.Rope); err != nil {
		return Config{}, err
	}

	if fam.moe {
		c.Experts = r.int("expert_count", 0, 1, maxExperts)
		c.ExpertsUsed = r.int("expert_used_count", 0, 1, maxExperts)
		c.ExpertFF = r.int("expert_feed_forward_length", c.FF, 1, maxShape)
		if r.err != nil {
			return Config{}, r.err
		}
		c.NormTopK = true // Qwen3-MoE checkpoints set norm_topk_prob
		if v, ok := f.Bool(arch + ".expert_weights_norm"); ok && arch != "qwen35moe" {
			c.NormTopK = v // Qwen3.5-MoE always renormalises
		}
		if c.Experts <= 0 || c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts || c.ExpertFF <= 0 {
			return Config{}, fmt.Errorf("%s: invalid MoE shape: %d experts, %d used, expert ff %d", f.Path, c.Experts, c.ExpertsUsed, c.ExpertFF)
		}
	}

	ti, ok := f.Tensor("token_embd.weight")
	if !ok || len(ti.Dims) != 2 {
		return Config{}, fmt.Errorf("%s: tensor token_embd.weight is missing or not 2-D", f.Path)
	}
	// Token ids are int32.
	if ti.Dims[1] == 0 || ti.Dims[1] > math.MaxInt32 {
		return Config{}, fmt.Errorf("%s: tensor token_embd.weight has %d rows; the vocabulary must have 1 to %d tokens", f.Path, ti.Dims[1], math.MaxInt32)
	}
	c.Vocab = int(ti.Dims[1])
	_, hasOut := f.Tensor("output.weight")
	c.TiedEmbeddings = !hasOut
	for _, ti := range f.Tensors {
		if b, ok := blockOf(ti.Name); ok && b >= c.Layers {
			continue // an MTP block: not loaded
		}
		c.WeightBytes += int64(ti.Bytes()) // gguf.Open checked each lies in the file
	}
	return c, nil
}

// blockOf returns N of a "blk.N." tensor name.
func blockOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n >= 0
}

// Bounds on shape metadata, far above any real model, so that products of
// two of them fit in an int and a corrupt value is named rather than
// allocated.
const (
	maxShape   = 1 << 24
	maxLayers  = 1 << 16
	maxExperts = 1 << 16
)

// keyReader reads <arch>.<key> metadata, keeping the missing required keys
// and the first invalid value.
type keyReader struct {
	f       *gguf.File
	arch    string
	missing []string
	err     error
}

// int reads an integer key in [lo, hi]; def is used when the key is
// absent, and def < 0 makes it required.
func (r *keyReader) int(key string, def, lo, hi int) int {
	name := r.arch + "." + key
	raw, present := r.f.Value(name)
	if !present {
		if def < 0 {
			r.missing = append(r.missing, name)
			return 0
		}
		return def
	}
	v, ok := r.f.Uint(name)
	if r.err == nil && (!ok || v < uint64(lo) || v > uint64(hi)) {
		r.err = fmt.Errorf("%s: %s is %s; it must be an integer from %d to %d", r.f.Path, name, show(raw), lo, hi)
	}
	if r.err != nil {
		return 0
	}
	return int(v)
}

// float reads a float key that must be finite and in (lo, hi]; def when absent.
func (r *keyReader) float(key string, def, lo, hi float64, want string) (float64, error) {
	name := r.arch + "." + key
	raw, present := r.f.Value(name)
	if !present {
		return def, nil
	}
	v, ok := r.f.Float(name)
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v <= lo || v > hi {
		return 0, fmt.Errorf("%s: %s is %s; it must be %s", r.f.Path, name, show(raw), want)
	}
	return v, nil
}

// readRopeScaling applies <arch>.rope.scaling.*: linear scaling scales
// positions; Llama 3 scaling divides frequencies by per-dimension factors,
// taken from the rope_freqs.weight tensor when the file has one (llama.cpp
// writes it) and computed from the metadata otherwise.
func readRopeScaling(f *gguf.File, arch string, r *Rope) error {
	typ, _ := f.String(arch + ".rope.scaling.type")
	factor, hasFactor := f.Float(arch + ".rope.scaling.factor")
	if hasFactor && !(factor > 0 && !math.IsInf(factor, 0)) {
		return fmt.Errorf("%s: %s.rope.scaling.factor is %v; it must be a finite positive number", f.Path, arch, factor)
	}
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
		// The smooth band divides by hi-lo.
		if !(lo > 0 && hi > lo && !math.IsInf(hi, 0)) {
			return fmt.Errorf("%s: %s.rope.scaling.low_freq_factor %v and high_freq_factor %v: need finite 0 < low < high (typically 1 and 4)", f.Path, arch, lo, hi)
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

// show formats a metadata value with its GGUF type, quoting strings.
func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("the string %q", s)
	}
	return fmt.Sprintf("%v (%T)", v, v)
}
