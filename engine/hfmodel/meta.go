package hfmodel

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

// metadata returns the GGUF keys the converter would write for the config.
func (m *mapper) metadata() ([]gguf.KV, error) {
	c, a := m.c, m.arch
	k := func(key string, v any) gguf.KV { return gguf.KV{Key: a + "." + key, Value: v} }
	name := displayName(m.ck.dir, c.NameOrPath)
	ctx := c.MaxPositionEmbeddings
	if ctx <= 0 {
		ctx = 2048
	}
	eps := c.RMSNormEps
	if eps == 0 {
		eps = 1e-6
	}
	theta, partial, sc := c.rope()
	rdim := int(float64(c.HeadDim) * partial)
	kv := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.name", Value: name},
		k("block_count", uint32(c.NumHiddenLayers)),
		k("context_length", uint32(ctx)),
		k("embedding_length", uint32(c.HiddenSize)),
		k("feed_forward_length", uint32(c.IntermediateSize)),
		k("attention.head_count", uint32(c.NumAttentionHeads)),
		k("attention.head_count_kv", uint32(c.NumKeyValueHeads)),
		k("attention.key_length", uint32(c.HeadDim)),
		k("attention.value_length", uint32(c.HeadDim)),
		k("attention.layer_norm_rms_epsilon", float32(eps)),
		k("rope.freq_base", float32(theta)),
		k("rope.dimension_count", uint32(rdim)),
	}
	if sc != nil {
		t := sc.RopeType
		if t == "" {
			t = sc.Type
		}
		switch t {
		case "linear":
			kv = append(kv, k("rope.scaling.type", "linear"), k("rope.scaling.factor", float32(sc.Factor)))
		case "llama3":
			kv = append(kv, k("rope.scaling.type", "llama3"), k("rope.scaling.factor", float32(sc.Factor)),
				k("rope.scaling.original_context_length", uint32(sc.OriginalMaxPos)),
				k("rope.scaling.low_freq_factor", float32(sc.LowFreqFactor)),
				k("rope.scaling.high_freq_factor", float32(sc.HighFreqFactor)))
		default:
			return nil, fmt.Errorf("%s: config.json rope scaling %q is not supported (supported: default, linear, llama3)", m.ck.dir, t)
		}
	}
	if m.moe() {
		kv = append(kv, k("expert_count", uint32(c.NumExperts)), k("expert_used_count", uint32(c.NumExpertsPerTok)),
			k("expert_feed_forward_length", uint32(c.MoeIntermediateSize)))
		norm := true
		if c.NormTopKProb != nil {
			norm = *c.NormTopKProb
		}
		kv = append(kv, k("expert_weights_norm", norm))
		if c.SharedExpertIntermediateSize > 0 {
			kv = append(kv, k("expert_shared_feed_forward_length", uint32(c.SharedExpertIntermediateSize)))
		}
	}
	if m.hybrid() {
		if rdim <= 0 || rdim%2 != 0 {
			return nil, fmt.Errorf("%s: config.json partial_rotary_factor %v gives %d rotary dims of head_dim %d; must be even and positive", m.ck.dir, partial, rdim, c.HeadDim)
		}
		kv = append(kv,
			k("ssm.conv_kernel", uint32(c.LinearConvKernelDim)),
			k("ssm.state_size", uint32(c.LinearKeyHeadDim)),
			k("ssm.group_count", uint32(c.LinearNumKeyHeads)),
			k("ssm.time_step_rank", uint32(c.LinearNumValueHeads)),
			k("ssm.inner_size", uint32(c.LinearNumValueHeads*c.LinearValueHeadDim)),
			k("attention.recurrent_layers", m.recurrent()))
		if c.FullAttentionInterval > 0 {
			kv = append(kv, k("full_attention_interval", uint32(c.FullAttentionInterval)))
		}
	}
	return kv, nil
}

// displayName is ORG/NAME for a snapshot in the HF cache layout
// (models--ORG--NAME/snapshots/REV), else a relative _name_or_path, else
// the directory's name.
func displayName(dir, nameOrPath string) string {
	clean := filepath.Clean(dir)
	if filepath.Base(filepath.Dir(clean)) == "snapshots" {
		repo := filepath.Base(filepath.Dir(filepath.Dir(clean)))
		if r, ok := strings.CutPrefix(repo, "models--"); ok {
			if org, name, ok := strings.Cut(r, "--"); ok {
				return org + "/" + name
			}
		}
	}
	if nameOrPath != "" && !filepath.IsAbs(nameOrPath) && !strings.HasPrefix(nameOrPath, ".") {
		return nameOrPath
	}
	return filepath.Base(clean)
}
