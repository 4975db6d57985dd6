package model_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// withMetadata writes a copy of a testdata model with one metadata key
// set (or removed when v is nil) and returns its path.
func withMetadata(t *testing.T, fixture, key string, v any) string {
	t.Helper()
	name := "bad-" + strings.ReplaceAll(key, ".", "_") + ".gguf"
	return writeEdited(t, fixture, name, func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		var out []gguf.KV
		found := false
		for _, e := range kv {
			if e.Key == key {
				found = true
				if v == nil {
					continue
				}
				e.Value = v
			}
			out = append(out, e)
		}
		if !found && v != nil {
			out = append(out, gguf.KV{Key: key, Value: v})
		}
		return out, ts
	})
}

// TestBadHyperparametersNamedAtLoad guards ReadConfig against shape and
// numeric metadata that used to be taken as is: a block_count of 2^40
// (makeslice panic / out of memory in Load), a context_length of 2^63
// (shown as a negative number), NaN or zero epsilon, a negative rope base,
// head counts that are zero or do not divide. Each is refused with a
// message naming the file and the key.
func TestBadHyperparametersNamedAtLoad(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		fixture, key string
		v            any
	}{
		{"tiny_llama3.gguf", "llama.block_count", uint64(1) << 40},
		{"tiny_llama3.gguf", "llama.block_count", uint64(1) << 50},
		{"tiny_llama3.gguf", "llama.block_count", uint32(0)},
		{"tiny_llama3.gguf", "llama.block_count", uint32(100)}, // more blocks than tensors
		{"tiny_llama3.gguf", "llama.block_count", "2"},
		{"tiny_llama3.gguf", "llama.embedding_length", uint32(0)},
		{"tiny_llama3.gguf", "llama.embedding_length", uint64(1) << 62},
		{"tiny_llama3.gguf", "llama.attention.head_count", uint32(0)},
		{"tiny_llama3.gguf", "llama.attention.head_count", uint64(1) << 40},
		{"tiny_llama3.gguf", "llama.attention.head_count_kv", uint32(0)},
		{"tiny_llama3.gguf", "llama.attention.head_count_kv", uint32(3)},
		{"tiny_llama3.gguf", "llama.attention.key_length", uint64(1) << 40},
		{"tiny_llama3.gguf", "llama.context_length", uint64(1) << 63},
		{"tiny_llama3.gguf", "llama.context_length", int64(-5)},
		{"tiny_llama3.gguf", "llama.context_length", uint32(0)},
		{"tiny_llama3.gguf", "llama.attention.layer_norm_rms_epsilon", nan},
		{"tiny_llama3.gguf", "llama.attention.layer_norm_rms_epsilon", inf},
		{"tiny_llama3.gguf", "llama.attention.layer_norm_rms_epsilon", float32(0)},
		{"tiny_llama3.gguf", "llama.attention.layer_norm_rms_epsilon", float32(-1e-5)},
		{"tiny_llama3.gguf", "llama.attention.layer_norm_rms_epsilon", 1e-300},
		{"tiny_llama3.gguf", "llama.rope.freq_base", float32(-10000)},
		{"tiny_llama3.gguf", "llama.rope.freq_base", float32(0)},
		{"tiny_llama3.gguf", "llama.rope.freq_base", nan},
		{"tiny_llama3.gguf", "llama.rope.freq_base", inf},
		{"tiny_llama3.gguf", "llama.rope.scaling.factor", nan},
		{"tiny_qwen3.gguf", "qwen3.rope.dimension_count", uint32(0)},
		{"tiny_qwen3moe.gguf", "qwen3moe.expert_count", uint64(1) << 40},
		{"tiny_qwen3moe.gguf", "qwen3moe.expert_used_count", uint32(0)},
		{"tiny_qwen35moe.gguf", "qwen35moe.ssm.conv_kernel", uint32(0)},
		{"tiny_qwen35moe.gguf", "qwen35moe.ssm.inner_size", uint32(65)},
		{"tiny_qwen35moe.gguf", "qwen35moe.attention.recurrent_layers", []bool{true, false}},
		{"tiny_qwen35moe_old.gguf", "qwen35moe.full_attention_interval", nil},
		{"tiny_qwen35moe_mtp.gguf", "qwen35moe.nextn_predict_layers", uint32(5)},
		{"tiny_qwen35.gguf", "qwen35.ssm.state_size", uint64(1) << 40},
		{"tiny_qwen3next.gguf", "qwen3next.ssm.group_count", uint32(3)},
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			path := withMetadata(t, c.fixture, c.key, c.v)
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			check := func(what string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), strings.SplitN(c.key, ".", 2)[1]) {
					t.Errorf("%s with %s = %v: error %v, want one naming the file and the key", what, c.key, c.v, err)
				}
			}
			_, err = model.ReadConfig(f)
			check("ReadConfig", err)
			if err == nil {
				return // Load would allocate what the bad value asks for
			}
			_, err = model.Load(f, be)
			check("Load", err)
		})
	}
	for _, fx := range []string{"tiny_llama3.gguf", "tiny_qwen2.gguf", "tiny_qwen3.gguf", "tiny_qwen3moe.gguf",
		"tiny_qwen35moe.gguf", "tiny_qwen35moe_mtp.gguf", "tiny_qwen35moe_old.gguf", "tiny_qwen35.gguf", "tiny_qwen3next.gguf"} {
		f, err := gguf.Open(filepath.Join("testdata", fx))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := model.Load(f, be); err != nil {
			t.Errorf("%s: valid model refused: %v", fx, err)
		}
		f.Close()
	}
}
