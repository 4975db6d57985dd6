// Package hfmodel reads a Hugging Face checkpoint directory (config.json,
// model.safetensors or a sharded model.safetensors.index.json,
// tokenizer.json, tokenizer_config.json, generation_config.json) and
// presents it as a *gguf.File (gguf.NewVirtual) with the metadata keys and
// tensor names llama.cpp's converter would write, so that engine/model,
// the tokenizer and the chat template load it unchanged.
//
// The converter's transforms are applied at load time: Q/K rows permuted
// for llama's adjacent-pair RoPE; for Qwen3.5 (qwen35, qwen35moe) +1 on
// the zero-centred norms (not the Gated DeltaNet norm), ssm_a = -exp(A_log),
// the value heads reordered from grouped to tiled, the conv kernel
// squeezed; for qwen3next the same without the reorder, in_proj_qkvz split
// into attn_qkv and attn_gate; experts stacked into [n_expert, ff, dim].
// Matrices keep their stored dtype (F32, F16, BF16) and alias the mapped
// shards unless a transform has to rewrite them; 1-D tensors, the conv
// kernel and the routers are converted to F32, as the converter does.
// Per-tensor FP8 E4M3 weights stay FP8 (FP8_E4M3 with a <name>.scale),
// per-row and block-scaled ones become FP8_E4M3_B32 (scales in the blocks,
// fp8block.go), other FP8 weights are dequantized to F32 (fp8.go); NVFP4 weights are repacked into
// ggml NVFP4 blocks with a <name>.scale tensor (nvfp4.go).
package hfmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// hfConfig is the subset of config.json (or its text_config) we read.
type hfConfig struct {
	Architectures []string        `json:"architectures"`
	ModelType     string          `json:"model_type"`
	TextConfig    json.RawMessage `json:"text_config"`

	HiddenSize            int        `json:"hidden_size"`
	IntermediateSize      int        `json:"intermediate_size"`
	NumHiddenLayers       int        `json:"num_hidden_layers"`
	NumAttentionHeads     int        `json:"num_attention_heads"`
	NumKeyValueHeads      int        `json:"num_key_value_heads"`
	HeadDim               int        `json:"head_dim"`
	VocabSize             int        `json:"vocab_size"`
	MaxPositionEmbeddings int        `json:"max_position_embeddings"`
	RMSNormEps            float64    `json:"rms_norm_eps"`
	RopeTheta             float64    `json:"rope_theta"`
	RopeParameters        *ropeParam `json:"rope_parameters"`
	RopeScaling           *ropeParam `json:"rope_scaling"`
	PartialRotaryFactor   float64    `json:"partial_rotary_factor"`
	AttentionBias         bool       `json:"attention_bias"`
	SlidingWindow         *int       `json:"sliding_window"`
	UseSlidingWindow      *bool      `json:"use_sliding_window"`

	NumExperts                   int   `json:"num_experts"`
	NumLocalExperts              int   `json:"num_local_experts"`
	NumExpertsPerTok             int   `json:"num_experts_per_tok"`
	MoeIntermediateSize          int   `json:"moe_intermediate_size"`
	NormTopKProb                 *bool `json:"norm_topk_prob"`
	SharedExpertIntermediateSize int   `json:"shared_expert_intermediate_size"`
	DecoderSparseStep            int   `json:"decoder_sparse_step"`
	MlpOnlyLayers                []int `json:"mlp_only_layers"`

	LayerTypes            []string `json:"layer_types"`
	FullAttentionInterval int      `json:"full_attention_interval"`
	LinearNumKeyHeads     int      `json:"linear_num_key_heads"`
	LinearNumValueHeads   int      `json:"linear_num_value_heads"`
	LinearKeyHeadDim      int      `json:"linear_key_head_dim"`
	LinearValueHeadDim    int      `json:"linear_value_head_dim"`
	LinearConvKernelDim   int      `json:"linear_conv_kernel_dim"`

	QuantizationConfig json.RawMessage `json:"quantization_config"`
	NameOrPath         string          `json:"_name_or_path"`

	// fp8Block is the [rows, cols] block of 2-D FP8 weight scales
	// (weight_block_size, or a compressed-tensors block_structure); zero
	// when the config names none (scales are then per tensor or per row).
	fp8Block [2]int
	fp8      bool // quantization_config declares FP8 weights
	nvfp4    fp4Layout
}

type ropeParam struct {
	RopeType            string  `json:"rope_type"`
	Type                string  `json:"type"`
	RopeTheta           float64 `json:"rope_theta"`
	Factor              float64 `json:"factor"`
	LowFreqFactor       float64 `json:"low_freq_factor"`
	HighFreqFactor      float64 `json:"high_freq_factor"`
	OriginalMaxPos      int     `json:"original_max_position_embeddings"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
}

// archOf maps model_type (of the text config) to a GGUF architecture.
var archOf = map[string]string{
	"llama":             "llama",
	"mistral":           "llama", // Llama's blocks; refused below when sliding-window attention is on
	"qwen2":             "qwen2",
	"qwen3":             "qwen3",
	"qwen3_moe":         "qwen3moe",
	"qwen3_5":           "qwen35",
	"qwen3_5_text":      "qwen35",
	"qwen3_5_moe":       "qwen35moe",
	"qwen3_5_moe_text":  "qwen35moe",
	"qwen3_6_moe":       "qwen35moe",
	"qwen3_6_moe_text":  "qwen35moe",
	"qwen3_5moe":        "qwen35moe",
	"qwen3_5_moe_model": "qwen35moe",
	"qwen3_next":        "qwen3next",
}

func supportedTypes() string {
	var s []string
	for k := range archOf {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// parseConfig reads config.json; a composite config (text_config) gives
// its text part, with the outer architectures kept.
func parseConfig(path string, b []byte) (*hfConfig, string, error) {
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, "", fmt.Errorf("%s: not valid JSON: %w", path, err)
	}
	if len(c.TextConfig) > 0 && !bytes.Equal(bytes.TrimSpace(c.TextConfig), []byte("null")) {
		var t hfConfig
		if err := json.Unmarshal(c.TextConfig, &t); err != nil {
			return nil, "", fmt.Errorf("%s: text_config: %w", path, err)
		}
		t.Architectures = c.Architectures
		if len(t.QuantizationConfig) == 0 {
			t.QuantizationConfig = c.QuantizationConfig
		}
		t.NameOrPath = c.NameOrPath
		c = t
	}
	arch, ok := archOf[c.ModelType]
	if !ok {
		return nil, "", fmt.Errorf("%s: model_type %q is not supported (supported: %s)", path, c.ModelType, supportedTypes())
	}
	if c.ModelType == "qwen2" && c.UseSlidingWindow != nil && *c.UseSlidingWindow {
		return nil, "", fmt.Errorf("%s: use_sliding_window: sliding-window attention is not supported (only full attention)", path)
	}
	if c.ModelType == "mistral" && c.SlidingWindow != nil && *c.SlidingWindow > 0 && *c.SlidingWindow < c.MaxPositionEmbeddings {
		return nil, "", fmt.Errorf("%s: sliding_window %d: sliding-window attention is not supported (only full attention)", path, *c.SlidingWindow)
	}
	if err := c.readQuant(path); err != nil {
		return nil, "", err
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.NumExperts == 0 {
		c.NumExperts = c.NumLocalExperts
	}
	var bad []string
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.VocabSize}} {
		if f.v <= 0 || f.v > maxShape {
			bad = append(bad, fmt.Sprintf("%s %d", f.name, f.v))
		}
	}
	if len(bad) > 0 {
		return nil, "", fmt.Errorf("%s: invalid or missing %s (each must be from 1 to %d)", path, strings.Join(bad, ", "), maxShape)
	}
	if c.IntermediateSize < 0 || c.IntermediateSize > maxShape || c.MoeIntermediateSize < 0 || c.MoeIntermediateSize > maxShape ||
		c.SharedExpertIntermediateSize < 0 || c.SharedExpertIntermediateSize > maxShape || c.NumExperts < 0 || c.NumExperts > maxShape {
		return nil, "", fmt.Errorf("%s: an intermediate size or expert count is out of range", path)
	}
	if c.NumHiddenLayers > maxLayers {
		return nil, "", fmt.Errorf("%s: num_hidden_layers %d is beyond any model (%d)", path, c.NumHiddenLayers, maxLayers)
	}
	if math.IsNaN(c.RMSNormEps) || c.RMSNormEps < 0 || c.RMSNormEps > 1 {
		return nil, "", fmt.Errorf("%s: rms_norm_eps %v must be a small positive number", path, c.RMSNormEps)
	}
	return &c, arch, nil
}

const (
	maxShape  = 1 << 24
	maxLayers = 1 << 16
)

// rope returns theta, the rotated fraction and the scaling parameters.
func (c *hfConfig) rope() (theta, partial float64, sc *ropeParam) {
	theta, partial = c.RopeTheta, c.PartialRotaryFactor
	for _, p := range []*ropeParam{c.RopeParameters, c.RopeScaling} {
		if p == nil {
			continue
		}
		if theta == 0 && p.RopeTheta > 0 {
			theta = p.RopeTheta
		}
		if partial == 0 && p.PartialRotaryFactor > 0 {
			partial = p.PartialRotaryFactor
		}
		t := p.RopeType
		if t == "" {
			t = p.Type
		}
		if t != "" && t != "default" && sc == nil {
			sc = p
		}
	}
	if theta == 0 {
		theta = 10000
	}
	if partial == 0 && c.ModelType == "qwen3_next" {
		partial = 0.25 // Qwen3NextConfig's default, as the converter assumes
	}
	if partial == 0 {
		partial = 1
	}
	return theta, partial, sc
}
