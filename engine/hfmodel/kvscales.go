package hfmodel

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Metadata keys of a checkpoint's static KV-cache scales (k_scale and
// v_scale per attention layer, as ModelOpt and compressed-tensors export
// them for an FP8 KV cache): K then V, [attention layer][n] with n = 1 (per
// layer) or the KV heads.
const (
	kScaleKey     = "ftchat.hf.k_scale"
	vScaleKey     = "ftchat.hf.v_scale"
	scaleHeadsKey = "ftchat.hf.kv_scale_heads"
)

// kvScaleNames are where exporters put a layer's K scale (V likewise).
var kvScaleNames = []string{"self_attn.k_scale", "self_attn.attn.k_scale", "self_attn.k_proj.k_scale", "self_attn.k_proj.output_scale"}

// kvScales reads the checkpoint's k_scale/v_scale tensors, if any: either
// every attention layer has both or none may.
func (m *mapper) kvScales() ([]gguf.KV, error) {
	rec := m.recurrent()
	var k, v []float32
	heads, found, missing := 0, 0, ""
	for i := 0; i < m.c.NumHiddenLayers; i++ {
		if m.hybrid() && rec[i] {
			continue
		}
		var got [2][]float32
		for j, kind := range []string{"k", "v"} {
			for _, n := range kvScaleNames {
				name := fmt.Sprintf("model.layers.%d.%s", i, replaceKV(n, kind))
				t, ok := m.ck.tensors[name]
				if !ok {
					continue
				}
				if _, ok := ggufType[t.t.DType]; !ok || t.t.Elements() == 0 || t.t.Elements() > uint64(m.c.NumKeyValueHeads) ||
					(t.t.Elements() != 1 && t.t.Elements() != uint64(m.c.NumKeyValueHeads)) {
					return nil, fmt.Errorf("%s: KV scale %s is %s %v; want F32/F16/BF16 with 1 or num_key_value_heads (%d) values", t.f.Path, name, t.t.DType, t.t.Shape, m.c.NumKeyValueHeads)
				}
				b, err := t.f.Data(t.t)
				if err == nil {
					got[j], err = floats(b, t.t.DType)
				}
				if err != nil {
					return nil, err
				}
				break
			}
		}
		if got[0] == nil || got[1] == nil {
			if missing == "" {
				missing = fmt.Sprintf("layer %d", i)
			}
			continue
		}
		if heads == 0 {
			heads = max(len(got[0]), len(got[1]))
		}
		for j := range got {
			if len(got[j]) != heads { // one layout for the file: widen per-layer values
				w := make([]float32, heads)
				for h := range w {
					w[h] = got[j][min(h, len(got[j])-1)]
				}
				got[j] = w
			}
		}
		k, v = append(k, got[0]...), append(v, got[1]...)
		found++
	}
	if found == 0 {
		return nil, nil
	}
	if missing != "" {
		return nil, fmt.Errorf("%s: the checkpoint has k_scale/v_scale for %d attention layers but not for %s", m.ck.dir, found, missing)
	}
	return []gguf.KV{{Key: kScaleKey, Value: k}, {Key: vScaleKey, Value: v}, {Key: scaleHeadsKey, Value: uint32(heads)}}, nil
}

func replaceKV(n, kind string) string {
	if kind == "k" {
		return n
	}
	out := []byte(n)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == 'k' && (out[i+1] == '_' || out[i+1] == '.') && (i == 0 || out[i-1] == '.') {
			out[i] = 'v'
		}
	}
	return string(out)
}

// KVScales returns the static KV scales of a file Open made from a
// checkpoint with k_scale/v_scale tensors (relative to E4M3's maximum, as
// vLLM reads them: x = code * scale); ok is false when it has none.
func KVScales(f *gguf.File, kvHeads int) (sf *kvcache.ScalesFile, ok bool) {
	kv, _ := f.Value(kScaleKey)
	vv, _ := f.Value(vScaleKey)
	k, ok1 := kv.([]float32)
	v, ok2 := vv.([]float32)
	n, ok3 := f.Uint(scaleHeadsKey)
	if !ok1 || !ok2 || !ok3 || n == 0 || len(k) != len(v) || len(k)%int(n) != 0 {
		return nil, false
	}
	sf = &kvcache.ScalesFile{Model: f.Path, DType: kvcache.FP8E4M3, Layers: len(k) / int(n), KVHeads: kvHeads}
	for l := 0; l < sf.Layers; l++ {
		sf.K = append(sf.K, k[l*int(n):(l+1)*int(n)])
		sf.V = append(sf.V, v[l*int(n):(l+1)*int(n)])
	}
	return sf, true
}
