// Package hfsynth writes random-weight Hugging Face checkpoint directories
// of real model shapes (engine/gguf/synth's presets): config.json,
// hf_quant_config.json, sharded safetensors with their index, and the tiny
// byte-level tokenizer of the HF test fixtures (embedded, so the ftchat
// binary alone can write one on a machine without the repository). It
// exists to load and plan full-size checkpoints, such as a 35B-A3B-shaped
// ModelOpt NVFP4 MIXED_PRECISION export, without downloading one.
package hfsynth

import (
	"bufio"
	"embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
)

//go:embed tokenizer/tokenizer.json tokenizer/tokenizer_config.json
var tokenizerFS embed.FS

// Quantizations Write knows.
const (
	// BF16: every matrix BF16.
	BF16 = "bf16"
	// NVFP4Mixed is ModelOpt MIXED_PRECISION as nvidia/Qwen3.6-35B-A3B-NVFP4
	// splits it: routed and shared experts NVFP4 (U8 codes, E4M3 block
	// scales per 16, F32 weight_scale_2), attention q/k/v/o and Gated
	// DeltaNet in_proj_qkv/in_proj_z/out_proj per-tensor FP8 E4M3 (scalar
	// weight_scale), in_proj_a/b, embeddings, lm_head, routers and norms BF16.
	NVFP4Mixed = "nvfp4-mixed"
	// FP8Block is quant_method "fp8" with weight_block_size [128, 128], as
	// DeepSeek-V3 and the Qwen FP8 exports write it: every linear layer
	// (attention, Gated DeltaNet projections, routed and shared experts)
	// F8_E4M3 with an F32 weight_scale_inv of [ceil(out/128), ceil(in/128)]
	// (a code times its block's value is the weight); embeddings, lm_head,
	// routers, conv and norms BF16.
	FP8Block = "fp8-block"
)

// fp8BlockSize is FP8Block's weight_block_size (rows and columns).
const fp8BlockSize = 128

// Quants lists the quantizations Write accepts.
func Quants() []string { return []string{BF16, NVFP4Mixed, FP8Block} }

// ShardBytes bounds a shard's tensor data (real exports use ~5 GB).
const ShardBytes = 4 << 30

type dtype string

const (
	dBF16 dtype = "BF16"
	dF32  dtype = "F32"
	dU8   dtype = "U8"
	dF8   dtype = "F8_E4M3"
)

func (d dtype) size() int64 {
	switch d {
	case dF32:
		return 4
	case dBF16:
		return 2
	}
	return 1
}

// fill kinds: what random values a tensor holds.
type fill int

const (
	fillWeight     fill = iota // BF16 of magnitude 2^-9 .. 2^-4, random sign
	fillNorm                   // BF16 small values around 0 (zero-centred norms: the loader adds 1)
	fillALog                   // BF16 log of 1..16
	fillOne                    // BF16 1 (dt_bias)
	fillCodes                  // random bytes (E2M1 code pairs)
	fillFP8                    // E4M3 codes, NaN codes excluded
	fillBlockScale             // E4M3 block scales in 64..448
	fillScaleInv               // F32 FP8 block scales: 0.1/448 times 1/32 .. 1.25
	fillScalar                 // one F32 value (val)
)

type tensor struct {
	name  string
	dt    dtype
	shape []int64
	fill  fill
	val   float32
}

func (t tensor) bytes() int64 {
	n := t.dt.size()
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// Layer quantizations for hf_quant_config.json.
type layerQuant struct {
	Algo      string `json:"quant_algo"`
	GroupSize int    `json:"group_size,omitempty"`
}

// plan lists the tensors of spec under quant, and the quantized layers.
func plan(s synth.Spec, quant string) ([]tensor, map[string]layerQuant, error) {
	if s.Arch != "qwen35moe" || s.SSM == nil {
		return nil, nil, fmt.Errorf("hfsynth: preset %q is %s; only qwen35moe (Qwen3.5/3.6 MoE hybrid) presets are written", s.Name, s.Arch)
	}
	switch quant {
	case BF16, NVFP4Mixed, FP8Block:
	default:
		return nil, nil, fmt.Errorf("hfsynth: unknown quantization %q (known: %v)", quant, Quants())
	}
	D, V := int64(s.Dim), int64(s.Vocab)
	hk, hv, dk := int64(s.SSM.KeyHeads), int64(s.SSM.ValueHeads), int64(s.SSM.HeadDim)
	H, KV, hd := int64(s.Heads), int64(s.KVHeads), int64(s.HeadDim)
	E, ff, sf := int64(s.Experts), int64(s.ExpertFF), int64(s.SharedFF)
	if quant == NVFP4Mixed {
		for _, c := range []int64{D, ff, sf, hv * dk, H * hd} {
			if c%64 != 0 {
				return nil, nil, fmt.Errorf("hfsynth: NVFP4 needs input widths that are multiples of 64; %s has one of %d", s.Name, c)
			}
		}
	}
	var ts []tensor
	q := map[string]layerQuant{}
	add := func(name string, dt dtype, f fill, shape ...int64) {
		ts = append(ts, tensor{name: name, dt: dt, shape: shape, fill: f})
	}
	// linear adds a projection [out, in] in its layer's format.
	linear := func(base, algo string, out, in int64) {
		switch {
		case quant == BF16 || algo == "" && quant != FP8Block:
			add(base+".weight", dBF16, fillWeight, out, in)
		case quant == FP8Block:
			add(base+".weight", dF8, fillFP8, out, in)
			const b = fp8BlockSize
			add(base+".weight_scale_inv", dF32, fillScaleInv, (out+b-1)/b, (in+b-1)/b)
		case algo == "FP8":
			add(base+".weight", dF8, fillFP8, out, in)
			ts = append(ts, tensor{name: base + ".weight_scale", dt: dF32, fill: fillScalar, val: 0.1 / 448},
				tensor{name: base + ".input_scale", dt: dF32, fill: fillScalar, val: 1.0 / 448})
			q["model."+base[len("model.language_model."):]] = layerQuant{Algo: "FP8"}
		default: // NVFP4
			add(base+".weight", dU8, fillCodes, out, in/2)
			add(base+".weight_scale", dF8, fillBlockScale, out, in/16)
			ts = append(ts, tensor{name: base + ".weight_scale_2", dt: dF32, fill: fillScalar, val: 0.1 / (6 * 448) / 4},
				tensor{name: base + ".input_scale", dt: dF32, fill: fillScalar, val: 1.0 / (6 * 448)})
			q["model."+base[len("model.language_model."):]] = layerQuant{Algo: "NVFP4", GroupSize: 16}
		}
	}
	const m = "model.language_model."
	add(m+"embed_tokens.weight", dBF16, fillWeight, V, D)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", m, l)
		add(p+"input_layernorm.weight", dBF16, fillNorm, D)
		add(p+"post_attention_layernorm.weight", dBF16, fillNorm, D)
		if s.Recurrent(l) {
			a := p + "linear_attn."
			qkv := 2*hk*dk + hv*dk
			linear(a+"in_proj_qkv", "FP8", qkv, D)
			linear(a+"in_proj_z", "FP8", hv*dk, D)
			linear(a+"in_proj_b", "", hv, D)
			linear(a+"in_proj_a", "", hv, D)
			add(a+"conv1d.weight", dBF16, fillWeight, qkv, 1, int64(s.SSM.ConvKernel))
			add(a+"dt_bias", dBF16, fillOne, hv)
			add(a+"A_log", dBF16, fillALog, hv)
			add(a+"norm.weight", dBF16, fillOne, dk)
			linear(a+"out_proj", "FP8", D, hv*dk)
		} else {
			a := p + "self_attn."
			linear(a+"q_proj", "FP8", 2*H*hd, D) // query and output gate
			linear(a+"k_proj", "FP8", KV*hd, D)
			linear(a+"v_proj", "FP8", KV*hd, D)
			linear(a+"o_proj", "FP8", D, H*hd)
			add(a+"q_norm.weight", dBF16, fillNorm, hd)
			add(a+"k_norm.weight", dBF16, fillNorm, hd)
		}
		f := p + "mlp."
		add(f+"gate.weight", dBF16, fillWeight, E, D)
		for e := int64(0); e < E; e++ {
			x := fmt.Sprintf("%sexperts.%d.", f, e)
			linear(x+"gate_proj", "NVFP4", ff, D)
			linear(x+"up_proj", "NVFP4", ff, D)
			linear(x+"down_proj", "NVFP4", D, ff)
		}
		if sf > 0 {
			linear(f+"shared_expert.gate_proj", "NVFP4", sf, D)
			linear(f+"shared_expert.up_proj", "NVFP4", sf, D)
			linear(f+"shared_expert.down_proj", "NVFP4", D, sf)
			add(f+"shared_expert_gate.weight", dBF16, fillWeight, 1, D)
		}
	}
	add(m+"norm.weight", dBF16, fillNorm, D)
	if !s.Tied {
		add("lm_head.weight", dBF16, fillWeight, V, D)
	}
	return ts, q, nil
}

// Size returns the bytes of tensor data Write would write.
func Size(s synth.Spec, quant string) (int64, error) {
	ts, _, err := plan(s, quant)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range ts {
		n += t.bytes()
	}
	return n, nil
}

// Write creates dir (which must not exist or be empty) holding a random
// checkpoint of spec's shape under quant. Shards are written in parallel,
// each tensor's bytes drawn from its own generator seeded by (seed, index).
// progress, if not nil, gets (bytes written, total) from any goroutine.
func Write(dir string, s synth.Spec, quant string, seed uint64, progress func(done, total int64)) error {
	ts, q, err := plan(s, quant)
	if err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("hfsynth: %s exists and is not empty", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Shards: consecutive tensors up to ShardBytes each.
	var shards [][]int
	var cur []int
	var curBytes, total int64
	for i, t := range ts {
		if len(cur) > 0 && curBytes+t.bytes() > ShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, i)
		curBytes += t.bytes()
		total += t.bytes()
	}
	shards = append(shards, cur)
	names := make([]string, len(shards))
	weightMap := map[string]string{}
	for k, sh := range shards {
		names[k] = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(shards))
		for _, i := range sh {
			weightMap[ts[i].name] = names[k]
		}
	}
	if err := writeJSON(filepath.Join(dir, "model.safetensors.index.json"), map[string]any{
		"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}); err != nil {
		return err
	}
	if err := writeSide(dir, s, quant, q); err != nil {
		return err
	}
	var done atomic.Int64
	report := func(n int64) {
		if progress != nil {
			progress(done.Add(n), total)
		}
	}
	// Tensors are written by a pool of workers, one shard at a time per
	// worker; big shards are few, so each shard also fills its large
	// tensors in parallel chunks (writeShard).
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	next := atomic.Int64{}
	for w := 0; w < min(workers, len(shards)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(shards) {
					return
				}
				errs[k] = writeShard(filepath.Join(dir, names[k]), ts, shards[k], seed, max(1, workers/len(shards)), report)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeShard writes one safetensors file: the header (8-byte length, JSON
// padded with spaces to a multiple of 8), then each tensor's bytes.
func writeShard(path string, ts []tensor, idx []int, seed uint64, par int, report func(int64)) error {
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, i := range idx {
		t := ts[i]
		shape := t.shape
		if shape == nil {
			shape = []int64{}
		}
		hdr[t.name] = map[string]any{"dtype": string(t.dt), "shape": shape, "data_offsets": []int64{off, off + t.bytes()}}
		off += t.bytes()
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	w.Write(n[:])
	w.Write(js)
	const chunk = 16 << 20
	buf := make([]byte, par*chunk)
	for _, i := range idx {
		t := ts[i]
		size := t.bytes()
		// Chunk c of tensor i comes from generator (seed, i, c): the bytes
		// do not depend on how many chunks are filled at once.
		for c0 := int64(0); c0*chunk < size; c0 += int64(par) {
			var fw sync.WaitGroup
			end := min(size, (c0+int64(par))*chunk)
			b := buf[:end-c0*chunk]
			for j := 0; int64(j)*chunk < int64(len(b)); j++ {
				part := b[j*chunk : min(len(b), (j+1)*chunk)]
				fw.Add(1)
				go func(c int64) {
					defer fw.Done()
					fillBytes(part, t, rand.New(rand.NewPCG(seed, uint64(i)<<32|uint64(c))))
				}(c0 + int64(j))
			}
			fw.Wait()
			if _, err := w.Write(b); err != nil {
				f.Close()
				return err
			}
			report(int64(len(b)))
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fillBytes fills b (a whole number of elements of t) with t's values,
// eight bytes per draw of the generator where it can (gigabytes are
// written this way).
func fillBytes(b []byte, t tensor, r *rand.Rand) {
	switch t.fill {
	case fillScalar:
		binary.LittleEndian.PutUint32(b, math.Float32bits(t.val))
		return
	case fillScaleInv: // blocks an order of magnitude apart, as real exports have
		for i := 0; i+4 <= len(b); i += 4 {
			v := 0.1 / 448 * (0.25 + r.Float64()) * math.Ldexp(1, -r.IntN(4))
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(v)))
		}
		return
	case fillALog, fillOne: // small vectors
		for i := 0; i+2 <= len(b); i += 2 {
			v := float32(1)
			if t.fill == fillALog {
				v = float32(math.Log(1 + 15*r.Float64()))
			}
			binary.LittleEndian.PutUint16(b[i:], gguf.F32ToBF16(v))
		}
		return
	}
	var tail [8]byte
	for i := 0; i < len(b); i += 8 {
		x := r.Uint64()
		o := b[i:]
		if len(o) < 8 {
			o = tail[:]
		}
		switch t.fill {
		case fillCodes:
			binary.LittleEndian.PutUint64(o, x)
		case fillFP8: // any code but the NaNs 0x7F/0xFF
			for k := range 8 {
				c := byte(x >> (8 * k))
				if gguf.E4M3IsNaN(c) {
					c ^= 1
				}
				o[k] = c
			}
		case fillBlockScale: // E4M3 64 .. 416
			for k := range 8 {
				o[k] = 0x60 + byte(x>>(8*k))%0x1E
			}
		case fillWeight, fillNorm:
			// BF16 of random sign and mantissa, magnitude 2^-9 .. 2^-4
			// (weights) or 2^-10 .. 2^-5 (norm offsets).
			e := uint64(118)
			if t.fill == fillNorm {
				e = 117
			}
			for k := range 4 {
				h := x >> (16 * k)
				v := (h&1)<<15 | (e+(h>>1&7)%5)<<7 | h>>8&0x7F
				binary.LittleEndian.PutUint16(o[2*k:], uint16(v))
			}
		}
		if len(b)-i < 8 {
			copy(b[i:], tail[:len(b)-i])
		}
	}
}

// writeSide writes config.json (with FP8Block's quantization_config),
// hf_quant_config.json (NVFP4Mixed),
// generation_config.json and the tokenizer files.
func writeSide(dir string, s synth.Spec, quant string, q map[string]layerQuant) error {
	tokJSON, err := tokenizerFS.ReadFile("tokenizer/tokenizer.json")
	if err != nil {
		return err
	}
	tokCfg, err := tokenizerFS.ReadFile("tokenizer/tokenizer_config.json")
	if err != nil {
		return err
	}
	var tk struct {
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(tokJSON, &tk); err != nil {
		return err
	}
	ids := map[string]int{}
	for _, a := range tk.Added {
		ids[a.Content] = a.ID
	}
	eos, pad := ids["<|im_end|>"], ids["<|endoftext|>"]
	layerTypes := make([]string, s.Layers)
	for l := range layerTypes {
		layerTypes[l] = "full_attention"
		if s.Recurrent(l) {
			layerTypes[l] = "linear_attention"
		}
	}
	// The Qwen3.6-35B-A3B text config's keys, from the spec; the token ids
	// are the embedded tokenizer's (it has a few hundred tokens; the
	// embedding keeps the preset's vocabulary). No MTP weights are written.
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "architectures": []string{"Qwen3_5MoeForCausalLM"},
		"attention_bias": false, "attention_dropout": 0.0, "attn_output_gate": true,
		"bos_token_id": nil, "eos_token_id": eos, "pad_token_id": pad,
		"full_attention_interval": s.SSM.FullAttnEvery, "head_dim": s.HeadDim, "hidden_act": "silu",
		"hidden_size": s.Dim, "initializer_range": 0.02, "layer_types": layerTypes,
		"linear_conv_kernel_dim": s.SSM.ConvKernel, "linear_key_head_dim": s.SSM.HeadDim,
		"linear_num_key_heads": s.SSM.KeyHeads, "linear_num_value_heads": s.SSM.ValueHeads,
		"linear_value_head_dim": s.SSM.HeadDim, "max_position_embeddings": s.Context,
		"moe_intermediate_size": s.ExpertFF, "mtp_num_hidden_layers": 0, "num_attention_heads": s.Heads,
		"num_experts": s.Experts, "num_experts_per_tok": s.ExpertsUsed, "num_hidden_layers": s.Layers,
		"num_key_value_heads": s.KVHeads, "output_router_logits": false, "rms_norm_eps": s.RMSEps,
		"rope_parameters": map[string]any{
			"rope_type": "default", "rope_theta": s.RopeBase, "mrope_interleaved": true,
			"mrope_section":         []int32{s.RopeSections[0], s.RopeSections[1], s.RopeSections[2]},
			"partial_rotary_factor": float64(s.RopeDims) / float64(s.HeadDim),
		},
		"router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": s.SharedFF,
		"tie_word_embeddings": s.Tied, "use_cache": true, "vocab_size": s.Vocab,
	}
	cfg := map[string]any{
		"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": text, "tie_word_embeddings": s.Tied, "transformers_version": "5.24.0",
	}
	if quant == NVFP4Mixed {
		var exclude []string
		for l := 0; l < s.Layers; l++ {
			exclude = append(exclude, fmt.Sprintf("model.layers.%d.mlp.gate", l), fmt.Sprintf("model.layers.%d.mlp.shared_expert_gate", l))
		}
		exclude = append(exclude, "lm_head")
		sort.Strings(exclude)
		cfg["quantization_config"] = map[string]any{
			"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": exclude, "quantized_layers": q,
			"producer": map[string]string{"name": "modelopt", "version": "0.44.0"},
		}
		if err := writeJSON(filepath.Join(dir, "hf_quant_config.json"), map[string]any{
			"producer": map[string]string{"name": "modelopt", "version": "0.44.0"},
			"quantization": map[string]any{"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": nil,
				"exclude_modules": exclude, "quantized_layers": q},
		}); err != nil {
			return err
		}
	}
	if quant == FP8Block {
		cfg["quantization_config"] = map[string]any{
			"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
			"weight_block_size": []int{fp8BlockSize, fp8BlockSize},
		}
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), map[string]any{
		"eos_token_id": []int{eos, pad}, "pad_token_id": pad, "do_sample": true,
		"temperature": 0.6, "top_p": 0.95, "top_k": 20,
	}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokJSON, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tokCfg, 0o644)
}
