package hfmodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/safetensors"
	"github.com/ftchat/ftchat/internal/safefile"
)

// MaxJSON bounds config.json, generation_config.json and a chat template file.
const MaxJSON = 16 << 20

// DirKey is the metadata key of a virtual file that holds the checkpoint
// directory: its tokenizer is read from DirKey/tokenizer.json.
const DirKey = "ftchat.hf.dir"

// IsCheckpoint reports whether path is a directory holding a config.json.
func IsCheckpoint(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	st, err = os.Stat(filepath.Join(path, "config.json"))
	return err == nil && st.Mode().IsRegular()
}

// eosKey holds generation_config.json's eos_token_id (one or a list).
const eosKey = "ftchat.hf.eos_ids"

// EOSIDs returns the eos_token_id of the checkpoint's generation_config.json
// (nil when absent): the ids that end generation besides the tokenizer's.
func EOSIDs(f *gguf.File) []int32 {
	v, _ := f.Ints(eosKey)
	out := make([]int32, 0, len(v))
	for _, x := range v {
		out = append(out, int32(x))
	}
	return out
}

// Dir returns the checkpoint directory of a file made by Open.
func Dir(f *gguf.File) (string, bool) {
	return f.String(DirKey)
}

// src is one checkpoint tensor: its shard and header entry.
type src struct {
	f *safetensors.File
	t safetensors.Tensor
}

// checkpoint is the tensors of all shards by (normalised) name.
type checkpoint struct {
	dir     string
	shards  []*safetensors.File
	tensors map[string]src
}

func (ck *checkpoint) close() error {
	var first error
	for _, s := range ck.shards {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// normName maps the names of composite (vision-language) checkpoints onto
// the text model's; ok is false for tensors the text model does not use.
func normName(n string) (string, bool) {
	for _, p := range []string{"model.visual.", "visual.", "mtp.", "model.mtp.", "vision_tower.", "model.vision_tower.", "multi_modal_projector."} {
		if strings.HasPrefix(n, p) {
			return "", false
		}
	}
	if r, ok := strings.CutPrefix(n, "model.language_model."); ok {
		return "model." + r, true
	}
	if r, ok := strings.CutPrefix(n, "language_model.model."); ok {
		return "model." + r, true
	}
	if r, ok := strings.CutPrefix(n, "language_model."); ok {
		return r, true
	}
	return n, true
}

func openCheckpoint(dir string) (*checkpoint, error) {
	ck := &checkpoint{dir: dir, tensors: map[string]src{}}
	single := filepath.Join(dir, "model.safetensors")
	index := filepath.Join(dir, safetensors.IndexName)
	var names []string
	var want map[string]string
	if _, err := os.Stat(index); err == nil {
		ix, err := safetensors.ReadIndex(index)
		if err != nil {
			return nil, err
		}
		names, want = ix.Shards, ix.WeightMap
	} else if _, err := os.Stat(single); err == nil {
		names = []string{"model.safetensors"}
	} else {
		hint := ""
		if m, _ := filepath.Glob(filepath.Join(dir, "*.bin")); len(m) > 0 {
			hint = " (PyTorch .bin pickles are not read: convert them to safetensors)"
		}
		return nil, fmt.Errorf("%s: no model.safetensors or %s in the checkpoint directory%s", dir, safetensors.IndexName, hint)
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			ck.close()
			return nil, fmt.Errorf("%s: %s names shard %s, which is missing (incomplete download?)", dir, safetensors.IndexName, n)
		}
		f, err := safetensors.Open(p)
		if err != nil {
			ck.close()
			return nil, err
		}
		ck.shards = append(ck.shards, f)
		for _, t := range f.Tensors {
			if want != nil && want[t.Name] != n {
				continue // the index assigns it to another shard (or not at all)
			}
			name, ok := normName(t.Name)
			if !ok {
				continue
			}
			if prev, dup := ck.tensors[name]; dup {
				ck.close()
				return nil, fmt.Errorf("%s: tensor %s is in both %s and %s", dir, name, filepath.Base(prev.f.Path), n)
			}
			ck.tensors[name] = src{f, t}
		}
	}
	for name, shard := range want {
		n, ok := normName(name)
		if !ok {
			continue
		}
		if _, ok := ck.tensors[n]; !ok {
			ck.close()
			return nil, fmt.Errorf("%s: %s puts tensor %s in %s, which does not hold it (mismatched shards?)", dir, safetensors.IndexName, name, shard)
		}
	}
	return ck, nil
}

// Open reads the checkpoint in dir and returns it as a virtual GGUF file
// (close it to unmap the shards).
func Open(dir string) (*gguf.File, error) {
	cpath := filepath.Join(dir, "config.json")
	cb, err := safefile.ReadFile(cpath, MaxJSON, "config.json")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: not a Hugging Face checkpoint directory: config.json is missing", dir)
		}
		return nil, err
	}
	cfg, arch, err := parseConfig(cpath, cb)
	if err != nil {
		return nil, err
	}
	if err := cfg.readHFQuantConfig(dir); err != nil {
		return nil, err
	}
	ck, err := openCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	m := &mapper{ck: ck, c: cfg, arch: arch}
	kv, err := m.metadata()
	if err == nil {
		err = m.tensors()
	}
	if err == nil {
		var extra []gguf.KV
		extra, err = sideFiles(dir)
		kv = append(kv, extra...)
	}
	if err == nil {
		var extra []gguf.KV
		extra, err = m.kvScales()
		kv = append(kv, extra...)
	}
	if err != nil {
		ck.close()
		return nil, err
	}
	kv = append(kv, gguf.KV{Key: DirKey, Value: dir})
	f, err := gguf.NewVirtual(dir, kv, m.infos, m.releasing(), ck.close)
	if err != nil {
		ck.close()
		return nil, err
	}
	return f, nil
}

// sideFiles reads the chat template (tokenizer_config.json's chat_template,
// or chat_template.jinja beside it) and the eos ids of generation_config.json.
func sideFiles(dir string) ([]gguf.KV, error) {
	var kv []gguf.KV
	tmpl := ""
	if b, err := safefile.ReadFile(filepath.Join(dir, "tokenizer_config.json"), MaxJSON, "tokenizer_config.json"); err == nil {
		var tc struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &tc); err != nil {
			return nil, fmt.Errorf("%s/tokenizer_config.json: not valid JSON: %w", dir, err)
		}
		tmpl = templateOf(tc.ChatTemplate)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if tmpl == "" {
		b, err := safefile.ReadFile(filepath.Join(dir, "chat_template.jinja"), MaxJSON, "chat template")
		if err == nil {
			tmpl = string(b)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if tmpl != "" {
		kv = append(kv, gguf.KV{Key: "tokenizer.chat_template", Value: tmpl})
	}
	if b, err := safefile.ReadFile(filepath.Join(dir, "generation_config.json"), MaxJSON, "generation_config.json"); err == nil {
		var gc struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(b, &gc); err != nil {
			return nil, fmt.Errorf("%s/generation_config.json: not valid JSON: %w", dir, err)
		}
		if ids := idsOf(gc.EOS); len(ids) > 0 {
			kv = append(kv, gguf.KV{Key: eosKey, Value: ids})
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return kv, nil
}

// templateOf takes a chat_template that is a string, or a list of
// {name, template} of which "default" (else the first) is used.
func templateOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return ""
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template
		}
	}
	return list[0].Template
}

// idsOf reads an int or a list of ints.
func idsOf(raw json.RawMessage) []int32 {
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}
	}
	var many []int32
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

// ---------------------------------------------------------------- tensors

// xform says how a checkpoint tensor becomes a GGUF one.
type xform int

const (
	asIs      xform = iota // same bytes, dims reversed
	toF32                  // decoded to F32
	plusOne                // F32, 1 + w (Qwen3.5 zero-centred norms)
	negExp                 // F32, -exp(w) (A_log -> ssm_a)
	permQK                 // rows permuted for adjacent-pair RoPE (llama q/k)
	vRows                  // rows: the value-head block reordered grouped -> tiled
	vCols                  // columns reordered grouped -> tiled (ssm_out)
	vConv                  // conv [C,1,K] -> F32 [K] rows per channel, v channels reordered
	vVecF32                // per-value-head vector, reordered, F32 (dt_bias)
	vNegExp                // A_log: -exp, reordered, F32
	stackExp               // per-expert matrices stacked
	splitGate              // fused gate_up [E, 2ff, D]: first half
	splitUp                // second half
	splitQKV               // qwen3next in_proj_qkvz, per key head [q k v z]: the q, k, v rows
	splitZ                 // the z rows
	convF32                // conv [C,1,K] -> F32 [K] rows per channel, no reorder (qwen3next)
)

// spec is one GGUF tensor: where its bytes come from and how they change.
type spec struct {
	name  string   // GGUF name
	from  []string // checkpoint names (several for stackExp)
	shape []uint64 // expected checkpoint shape of each source (row-major)
	x     xform
	f32   bool // force F32 output
	heads int  // permQK: the heads whose rows are permuted
	fp4   bool // the sources are NVFP4 (buildFP4)
}

type mapper struct {
	ck    *checkpoint
	c     *hfConfig
	arch  string
	infos []gguf.TensorInfo
	specs map[string]spec
	// fp4Scales are the <name>.scale tensors of NVFP4 and FP8_E4M3
	// weights by GGUF name.
	fp4Scales map[string][]float32
}

func (m *mapper) hybrid() bool {
	return m.arch == "qwen35" || m.arch == "qwen35moe" || m.arch == "qwen3next"
}
func (m *mapper) moe() bool {
	return m.arch == "qwen3moe" || m.arch == "qwen35moe" || m.arch == "qwen3next"
}

// recurrent reports which blocks are Gated DeltaNet blocks.
func (m *mapper) recurrent() []bool {
	c := m.c
	r := make([]bool, c.NumHiddenLayers)
	if len(c.LayerTypes) == c.NumHiddenLayers {
		for i, t := range c.LayerTypes {
			r[i] = t == "linear_attention"
		}
		return r
	}
	every := c.FullAttentionInterval
	if every <= 0 {
		every = 4
	}
	for i := range r {
		r[i] = (i+1)%every != 0
	}
	return r
}

func u(xs ...int) []uint64 {
	s := make([]uint64, len(xs))
	for i, x := range xs {
		s[i] = uint64(x)
	}
	return s
}

// tensors builds the GGUF tensor list from the config, checking each
// source tensor's presence, dtype and shape.
func (m *mapper) tensors() error {
	c := m.c
	// Each layer and each expert has tensors of its own: counts the
	// checkpoint cannot hold are refused before names are built for them.
	if n := len(m.ck.tensors); c.NumHiddenLayers > n || c.NumExperts > n {
		return fmt.Errorf("%s: config.json has %d layers and %d experts but the checkpoint holds only %d tensors", m.ck.dir, c.NumHiddenLayers, c.NumExperts, n)
	}
	D, H, KV, hd, V := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.VocabSize
	var specs []spec
	add := func(s spec) { specs = append(specs, s) }
	one := func(name, from string, shape []uint64, x xform) spec {
		return spec{name: name, from: []string{from}, shape: shape, x: x}
	}
	norm := asIs
	if m.hybrid() {
		norm = plusOne
	}
	add(one("token_embd.weight", "model.embed_tokens.weight", u(V, D), asIs))
	if _, ok := m.ck.tensors["lm_head.weight"]; ok {
		add(one("output.weight", "lm_head.weight", u(V, D), asIs))
	}
	add(one("output_norm.weight", "model.norm.weight", u(D), norm))
	rec := m.recurrent()
	qx := asIs
	if m.arch == "llama" {
		qx = permQK
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		add(one(b+"attn_norm.weight", p+"input_layernorm.weight", u(D), norm))
		if m.hybrid() {
			add(one(b+"post_attention_norm.weight", p+"post_attention_layernorm.weight", u(D), norm))
		} else {
			add(one(b+"ffn_norm.weight", p+"post_attention_layernorm.weight", u(D), norm))
		}
		a := p + "self_attn."
		switch {
		case m.hybrid() && rec[i]:
			if err := m.gdnSpecs(add, p+"linear_attn.", b); err != nil {
				return err
			}
		case m.hybrid():
			add(one(b+"attn_q.weight", a+"q_proj.weight", u(2*H*hd, D), asIs))
		default:
			s := one(b+"attn_q.weight", a+"q_proj.weight", u(H*hd, D), qx)
			s.heads = H
			add(s)
		}
		if !(m.hybrid() && rec[i]) {
			s := one(b+"attn_k.weight", a+"k_proj.weight", u(KV*hd, D), qx)
			s.heads = KV
			add(s)
			add(one(b+"attn_v.weight", a+"v_proj.weight", u(KV*hd, D), asIs))
			add(one(b+"attn_output.weight", a+"o_proj.weight", u(D, H*hd), asIs))
			if m.arch == "qwen2" || (m.arch == "llama" && c.AttentionBias) {
				for _, t := range []struct {
					n   string
					h   int
					dim int
				}{{"q", H, H * hd}, {"k", KV, KV * hd}, {"v", 0, KV * hd}} {
					x := toF32
					if m.arch == "llama" && t.n != "v" {
						x = permQK
					}
					s := one(b+"attn_"+t.n+".bias", a+t.n+"_proj.bias", u(t.dim), x)
					s.heads, s.f32 = t.h, true
					add(s)
				}
			}
			if m.arch != "llama" && m.arch != "qwen2" {
				add(one(b+"attn_q_norm.weight", a+"q_norm.weight", u(hd), norm))
				add(one(b+"attn_k_norm.weight", a+"k_norm.weight", u(hd), norm))
			}
		}
		if err := m.ffnSpecs(add, p+"mlp.", b); err != nil {
			return err
		}
	}
	m.specs = map[string]spec{}
	m.fp4Scales = map[string][]float32{}
	for _, s := range specs {
		_, fp4, err := m.fp4Of(s.from[0])
		if err != nil {
			return err
		}
		if fp4 {
			ti, scale, err := m.checkFP4(s)
			if err != nil {
				return err
			}
			s.fp4 = true
			m.specs[s.name] = s
			m.infos = append(m.infos, ti)
			if scale != nil {
				sn := gguf.ScaleTensorName(s.name)
				m.fp4Scales[sn] = scale
				m.infos = append(m.infos, gguf.TensorInfo{Name: sn, Dims: u(len(scale)), Type: gguf.F32})
			}
			continue
		}
		ti, err := m.check(s)
		if err != nil {
			return err
		}
		m.specs[s.name] = s
		m.infos = append(m.infos, ti)
		if ti.Type == gguf.FP8_E4M3 {
			scale, err := m.fp8Scales(s)
			if err != nil {
				return err
			}
			if scale != nil {
				sn := gguf.ScaleTensorName(s.name)
				m.fp4Scales[sn] = scale
				m.infos = append(m.infos, gguf.TensorInfo{Name: sn, Dims: u(len(scale)), Type: gguf.F32})
			}
		}
	}
	return nil
}

func (m *mapper) ffnSpecs(add func(spec), p, b string) error {
	c := m.c
	D := c.HiddenSize
	if !m.moe() {
		ff := c.IntermediateSize
		add(spec{name: b + "ffn_gate.weight", from: []string{p + "gate_proj.weight"}, shape: u(ff, D)})
		add(spec{name: b + "ffn_up.weight", from: []string{p + "up_proj.weight"}, shape: u(ff, D)})
		add(spec{name: b + "ffn_down.weight", from: []string{p + "down_proj.weight"}, shape: u(D, ff)})
		return nil
	}
	if (m.arch == "qwen3moe" || m.arch == "qwen3next") && (len(c.MlpOnlyLayers) > 0 || c.DecoderSparseStep > 1) {
		return fmt.Errorf("%s: config.json has dense layers among the MoE ones (mlp_only_layers %v, decoder_sparse_step %d); not supported",
			m.ck.dir, c.MlpOnlyLayers, c.DecoderSparseStep)
	}
	E, ff := c.NumExperts, c.MoeIntermediateSize
	if E <= 0 || ff <= 0 || c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > E {
		return fmt.Errorf("%s: config.json: invalid MoE shape: num_experts %d, num_experts_per_tok %d, moe_intermediate_size %d",
			m.ck.dir, E, c.NumExpertsPerTok, ff)
	}
	add(spec{name: b + "ffn_gate_inp.weight", from: []string{p + "gate.weight"}, shape: u(E, D), x: toF32, f32: true})
	e := p + "experts."
	if _, fused := m.ck.tensors[e+"gate_up_proj"]; fused {
		add(spec{name: b + "ffn_gate_exps.weight", from: []string{e + "gate_up_proj"}, shape: u(E, 2*ff, D), x: splitGate})
		add(spec{name: b + "ffn_up_exps.weight", from: []string{e + "gate_up_proj"}, shape: u(E, 2*ff, D), x: splitUp})
		add(spec{name: b + "ffn_down_exps.weight", from: []string{e + "down_proj"}, shape: u(E, D, ff)})
	} else {
		for _, w := range []struct {
			gg, hf string
			shape  []uint64
		}{{"gate", "gate_proj", u(ff, D)}, {"up", "up_proj", u(ff, D)}, {"down", "down_proj", u(D, ff)}} {
			s := spec{name: b + "ffn_" + w.gg + "_exps.weight", shape: w.shape, x: stackExp}
			for j := 0; j < E; j++ {
				s.from = append(s.from, fmt.Sprintf("%s%d.%s.weight", e, j, w.hf))
			}
			add(s)
		}
	}
	if sf := c.SharedExpertIntermediateSize; sf > 0 {
		sh := p + "shared_expert."
		add(spec{name: b + "ffn_gate_inp_shexp.weight", from: []string{p + "shared_expert_gate.weight"}, shape: u(1, D), x: toF32, f32: true})
		add(spec{name: b + "ffn_gate_shexp.weight", from: []string{sh + "gate_proj.weight"}, shape: u(sf, D)})
		add(spec{name: b + "ffn_up_shexp.weight", from: []string{sh + "up_proj.weight"}, shape: u(sf, D)})
		add(spec{name: b + "ffn_down_shexp.weight", from: []string{sh + "down_proj.weight"}, shape: u(D, sf)})
	}
	return nil
}

func (m *mapper) gdnSpecs(add func(spec), p, b string) error {
	c := m.c
	D := c.HiddenSize
	hk, hv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	if hk <= 0 || hv <= 0 || dk <= 0 || dv <= 0 || K <= 0 || hv%hk != 0 || hk > maxShape || hv > maxShape || dk > maxShape || dv > maxShape || K > 64 {
		return fmt.Errorf("%s: config.json: invalid linear attention shape: linear_num_key_heads %d, linear_num_value_heads %d (a multiple of the key heads), head dims %d/%d, conv kernel %d",
			m.ck.dir, hk, hv, dk, dv, K)
	}
	qkv := 2*hk*dk + hv*dv
	if m.arch == "qwen3next" {
		// HF order, interleaved value-head mapping: no reorder; q, k, v
		// and z come fused per key head and are split as the converter does.
		qkvz := u(qkv+hv*dv, D)
		add(spec{name: b + "attn_qkv.weight", from: []string{p + "in_proj_qkvz.weight"}, shape: qkvz, x: splitQKV})
		add(spec{name: b + "attn_gate.weight", from: []string{p + "in_proj_qkvz.weight"}, shape: qkvz, x: splitZ})
		add(spec{name: b + "ssm_ba.weight", from: []string{p + "in_proj_ba.weight"}, shape: u(2*hv, D)})
		add(spec{name: b + "ssm_conv1d.weight", from: []string{p + "conv1d.weight"}, shape: u(qkv, 1, K), x: convF32, f32: true})
		add(spec{name: b + "ssm_dt.bias", from: []string{p + "dt_bias"}, shape: u(hv), x: toF32, f32: true})
		add(spec{name: b + "ssm_a", from: []string{p + "A_log"}, shape: u(hv), x: negExp, f32: true})
		add(spec{name: b + "ssm_norm.weight", from: []string{p + "norm.weight"}, shape: u(dv), x: toF32, f32: true})
		add(spec{name: b + "ssm_out.weight", from: []string{p + "out_proj.weight"}, shape: u(D, hv*dv)})
		return nil
	}
	add(spec{name: b + "attn_qkv.weight", from: []string{p + "in_proj_qkv.weight"}, shape: u(qkv, D), x: vRows})
	add(spec{name: b + "attn_gate.weight", from: []string{p + "in_proj_z.weight"}, shape: u(hv*dv, D), x: vRows})
	add(spec{name: b + "ssm_beta.weight", from: []string{p + "in_proj_b.weight"}, shape: u(hv, D), x: vRows})
	add(spec{name: b + "ssm_alpha.weight", from: []string{p + "in_proj_a.weight"}, shape: u(hv, D), x: vRows})
	add(spec{name: b + "ssm_conv1d.weight", from: []string{p + "conv1d.weight"}, shape: u(qkv, 1, K), x: vConv, f32: true})
	add(spec{name: b + "ssm_dt.bias", from: []string{p + "dt_bias"}, shape: u(hv), x: vVecF32, f32: true})
	add(spec{name: b + "ssm_a", from: []string{p + "A_log"}, shape: u(hv), x: vNegExp, f32: true})
	add(spec{name: b + "ssm_norm.weight", from: []string{p + "norm.weight"}, shape: u(dv), x: toF32, f32: true})
	add(spec{name: b + "ssm_out.weight", from: []string{p + "out_proj.weight"}, shape: u(D, hv*dv), x: vCols})
	return nil
}

var ggufType = map[safetensors.DType]gguf.Type{safetensors.F32: gguf.F32, safetensors.F16: gguf.F16, safetensors.BF16: gguf.BF16}

// check validates a spec's sources and returns the GGUF tensor info.
func (m *mapper) check(s spec) (gguf.TensorInfo, error) {
	var dt safetensors.DType
	for i, n := range s.from {
		t, ok := m.ck.tensors[n]
		if !ok {
			return gguf.TensorInfo{}, fmt.Errorf("%s: tensor %s is missing from the checkpoint (config.json model_type %q needs it)", m.ck.dir, n, m.c.ModelType)
		}
		if _, ok := ggufType[t.t.DType]; !ok {
			if !isFP8(t.t.DType) {
				return gguf.TensorInfo{}, fmt.Errorf("%s: tensor %s has dtype %s; supported: F32, F16, BF16, and F8_E4M3/F8_E5M2 with a scale",
					t.f.Path, n, t.t.DType)
			}
			if _, err := m.scaleOf(n, t.t); err != nil {
				return gguf.TensorInfo{}, err
			}
		}
		if i == 0 {
			dt = t.t.DType
		} else if t.t.DType != dt {
			return gguf.TensorInfo{}, fmt.Errorf("%s: tensor %s is %s but %s is %s; the experts of one layer must share a dtype", t.f.Path, n, t.t.DType, s.from[0], dt)
		}
		want := s.shape
		if !slices.Equal(t.t.Shape, want) && !(s.x == asIs && len(want) == 1 && len(t.t.Shape) == 2 && t.t.Shape[0] == 1 && t.t.Shape[1] == want[0]) &&
			!(len(want) == 2 && want[0] == 1 && len(t.t.Shape) == 1 && t.t.Shape[0] == want[1]) {
			return gguf.TensorInfo{}, fmt.Errorf("%s: tensor %s has shape %v but config.json implies %v (dtype/shape mismatch with the config)",
				t.f.Path, n, t.t.Shape, want)
		}
	}
	typ, ok := ggufType[dt]
	if !ok || s.f32 || len(s.shape) == 1 || s.x == toF32 || s.x == plusOne || s.x == negExp {
		typ = gguf.F32
	}
	fp8 := dt == safetensors.F8E4M3 && m.keepsFP8(s)
	// GGUF dims are the row-major shape reversed.
	sh := s.shape
	var dims []uint64
	switch s.x {
	case vConv, convF32:
		dims = u(int(sh[2]), int(sh[0]))
	case splitQKV, splitZ:
		dims = []uint64{sh[1], uint64(len(m.qkvzRows(s.x == splitZ)))}
	case stackExp:
		dims = []uint64{sh[1], sh[0], uint64(len(s.from))}
	case splitGate, splitUp:
		dims = []uint64{sh[2], sh[1] / 2, sh[0]}
	default:
		for i := len(sh) - 1; i >= 0; i-- {
			dims = append(dims, sh[i])
		}
		if len(sh) == 2 && sh[0] == 1 && s.f32 { // shared_expert_gate [1, D] -> [D]
			dims = dims[:1]
		}
	}
	if fp8 && dims[0]%32 == 0 {
		typ = gguf.FP8_E4M3
	} else if dt == safetensors.F8E4M3 && m.keepsBlockFP8(s) {
		typ = gguf.FP8_E4M3_B32 // per-row or block scales (fp8block.go)
	}
	return gguf.TensorInfo{Name: s.name, Dims: dims, Type: typ}, nil
}

// data serves the virtual file's tensor bytes: aliases of the mapped
// shards, or transformed tensors built on each call.
func (m *mapper) data(ti gguf.TensorInfo) ([]byte, error) {
	if sc, ok := m.fp4Scales[ti.Name]; ok {
		return f32bytes(sc), nil
	}
	s, ok := m.specs[ti.Name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %s", m.ck.dir, ti.Name)
	}
	if s.fp4 {
		b, err := m.buildFP4(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", m.ck.dir, s.from[0], err)
		}
		return b, nil
	}
	if ti.Type == gguf.FP8_E4M3_B32 {
		return m.buildFP8B32(s) // its errors name the shard and the tensor
	}
	t := m.ck.tensors[s.from[0]]
	if typ, ok := ggufType[t.t.DType]; ok && s.x == asIs && typ == ti.Type {
		return t.f.Data(t.t) // aliases the mapped shard
	}
	var b []byte
	var err error
	if ti.Type == gguf.FP8_E4M3 && s.x == asIs {
		b, err = t.f.Data(t.t) // the codes as they are: aliases the shard
	} else {
		// Not cached: the CPU backend keeps the slice it is given (which
		// keeps it alive), a device backend copies it and lets it go.
		b, err = m.build(s, ti)
	}
	if err == nil && ti.Type == gguf.FP8_E4M3 {
		err = checkFP8Codes(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", m.ck.dir, s.from[0], err)
	}
	return b, nil
}

// raw returns a checkpoint tensor's bytes; FP8 weights come dequantized
// to F32 unless codes (the output is FP8_E4M3: the codes as they are).
func (m *mapper) raw(name string, codes bool) ([]byte, safetensors.DType, error) {
	t := m.ck.tensors[name]
	if isFP8(t.t.DType) && !codes {
		b, err := m.dequantFP8(name, t)
		return b, safetensors.F32, err
	}
	b, err := t.f.Data(t.t)
	return b, t.t.DType, err
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floats decodes a checkpoint tensor to float32.
func floats(b []byte, dt safetensors.DType) ([]float32, error) {
	out := make([]float32, len(b)/dt.Size())
	return out, gguf.Dequantize(ggufType[dt], b, out)
}

// f32bytes returns v as little-endian bytes: v's own memory on a
// little-endian host (a converted tensor is not copied a second time), a
// copy elsewhere. v must not change afterwards.
func f32bytes(v []float32) []byte {
	if littleEndian && len(v) > 0 {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// vPerm returns, for each tiled value head j, the grouped head it holds:
// head j = r*H_k + g holds grouped head g*(H_v/H_k) + r.
func (m *mapper) vPerm() []int {
	hk, hv := m.c.LinearNumKeyHeads, m.c.LinearNumValueHeads
	p := make([]int, hv)
	for j := range p {
		p[j] = (j%hk)*(hv/hk) + j/hk
	}
	return p
}

// rowPerm returns the source row of each output row when the block of
// hv heads of per rows starting at row off is reordered by vPerm.
func (m *mapper) rowPerm(rows, off, per int) []int {
	p := make([]int, rows)
	for i := range p {
		p[i] = i
	}
	for j, g := range m.vPerm() {
		for r := 0; r < per; r++ {
			p[off+j*per+r] = off + g*per + r
		}
	}
	return p
}

// qkPerm is the rope row permutation of a q/k projection of heads heads.
func qkPerm(rows, heads int) []int {
	hd := rows / heads
	perm := make([]int, rows)
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			for j := 0; j < 2; j++ {
				perm[h*hd+2*i+j] = h*hd + j*hd/2 + i
			}
		}
	}
	return perm
}

// vRowPerm reorders the value-head rows of a Gated DeltaNet input
// projection of rows rows: the last H_v·d_v rows (qkv, z) or all H_v (a, b).
func (m *mapper) vRowPerm(rows int) []int {
	c := m.c
	off, per := 0, 1
	if rows != c.LinearNumValueHeads {
		per = c.LinearValueHeadDim
		off = rows - c.LinearNumValueHeads*per
	}
	return m.rowPerm(rows, off, per)
}

// qkvzRows lists the rows of qwen3next's in_proj_qkvz, grouped per key
// head as [q(d_k) k(d_k) v(r·d_v) z(r·d_v)] with r = H_v/H_k, that make
// attn_qkv (all q, then all k, then all v) or, with z, attn_gate.
func (m *mapper) qkvzRows(z bool) []int {
	c := m.c
	hk, dk, vz := c.LinearNumKeyHeads, c.LinearKeyHeadDim, c.LinearNumValueHeads/c.LinearNumKeyHeads*c.LinearValueHeadDim
	per := 2*dk + 2*vz
	span := func(off, n int) []int {
		var rows []int
		for g := 0; g < hk; g++ {
			for i := 0; i < n; i++ {
				rows = append(rows, g*per+off+i)
			}
		}
		return rows
	}
	if z {
		return span(2*dk+vz, vz)
	}
	return append(append(span(0, dk), span(dk, dk)...), span(2*dk, vz)...)
}

// gather returns the rows of b (rowBytes each) listed in rows, in order.
func gather(b []byte, rowBytes int, rows []int) []byte {
	out := make([]byte, 0, len(rows)*rowBytes)
	for _, r := range rows {
		out = append(out, b[r*rowBytes:(r+1)*rowBytes]...)
	}
	return out
}

func permute(b []byte, rowBytes int, perm []int) []byte {
	out := make([]byte, len(b))
	for i, src := range perm {
		copy(out[i*rowBytes:(i+1)*rowBytes], b[src*rowBytes:(src+1)*rowBytes])
	}
	return out
}

func (m *mapper) build(s spec, ti gguf.TensorInfo) ([]byte, error) {
	c := m.c
	codes := ti.Type == gguf.FP8_E4M3
	b, dt, err := m.raw(s.from[0], codes)
	if err != nil {
		return nil, err
	}
	es := dt.Size()
	sh := s.shape
	cols := 1
	if len(sh) >= 2 {
		cols = int(sh[len(sh)-1])
	}
	rows := len(b) / es / cols
	asF32 := func(v []byte) ([]byte, error) {
		if ti.Type != gguf.F32 || dt == safetensors.F32 {
			return v, nil
		}
		f, err := floats(v, dt)
		return f32bytes(f), err
	}
	switch s.x {
	case asIs, toF32:
		return asF32(b)
	case plusOne, negExp, vNegExp:
		f, err := floats(b, dt)
		if err != nil {
			return nil, err
		}
		for i := range f {
			if s.x == plusOne {
				f[i]++
			} else {
				f[i] = float32(-math.Exp(float64(f[i])))
			}
		}
		if s.x == vNegExp {
			return permute(f32bytes(f), 4, m.rowPerm(len(f), 0, 1)), nil
		}
		return f32bytes(f), nil
	case permQK:
		// HF rows per head are [first half | second half] of the rotary
		// pairs; GGUF llama rotates adjacent pairs: row h*hd + 2i + j
		// takes row h*hd + j*hd/2 + i.
		return asF32(permute(b, cols*es, qkPerm(rows, s.heads)))
	case vRows:
		return asF32(permute(b, cols*es, m.vRowPerm(rows)))
	case vVecF32:
		v, err := asF32(b)
		if err != nil {
			return nil, err
		}
		return permute(v, 4, m.rowPerm(len(v)/4, 0, 1)), nil
	case vConv:
		v, err := asF32(b) // [C][1][K]: one row of K per channel
		if err != nil {
			return nil, err
		}
		C, K := int(sh[0]), int(sh[2])
		per := c.LinearValueHeadDim
		return permute(v, 4*K, m.rowPerm(C, C-c.LinearNumValueHeads*per, per)), nil
	case convF32:
		return asF32(b)
	case splitQKV, splitZ:
		return asF32(gather(b, cols*es, m.qkvzRows(s.x == splitZ)))
	case vCols:
		per := c.LinearValueHeadDim
		cp := m.rowPerm(cols, 0, per)
		out := make([]byte, len(b))
		for r := 0; r < rows; r++ {
			row := b[r*cols*es : (r+1)*cols*es]
			o := out[r*cols*es : (r+1)*cols*es]
			for i, src := range cp {
				copy(o[i*es:(i+1)*es], row[src*es:(src+1)*es])
			}
		}
		return asF32(out)
	case stackExp:
		out := make([]byte, 0, len(b)*len(s.from))
		for _, n := range s.from {
			e, _, err := m.raw(n, codes)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return asF32(out)
	case splitGate, splitUp:
		E, ff2, D := int(sh[0]), int(sh[1]), int(sh[2])
		half := ff2 / 2 * D * es
		out := make([]byte, 0, E*half)
		for e := 0; e < E; e++ {
			base := e * ff2 * D * es
			if s.x == splitUp {
				base += half
			}
			out = append(out, b[base:base+half]...)
		}
		return asF32(out)
	}
	return nil, fmt.Errorf("unknown transform %d", s.x)
}
