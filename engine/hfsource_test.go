package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// hfDir assembles a checkpoint directory from engine/hfmodel/testdata: the
// weights of arch plus the shared tokenizer files.
func hfDir(t *testing.T, parent, arch string, tokenizer bool) string {
	t.Helper()
	td := filepath.Join("hfmodel", "testdata")
	dst := filepath.Join(parent, arch)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(td, arch))); err != nil {
		t.Fatal(err)
	}
	if tokenizer {
		if err := os.CopyFS(dst, os.DirFS(filepath.Join(td, "tokenizer"))); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestLoadCheckpointDirectory: --model DIR loads a Hugging Face checkpoint
// with its tokenizer.json and chat template, the tokenizer encodes the
// fixture text to transformers' ids, and a chat turn generates.
func TestLoadCheckpointDirectory(t *testing.T) {
	for _, arch := range []string{"llama", "qwen35moe", "qwen3next"} {
		t.Run(arch, func(t *testing.T) {
			dir := hfDir(t, t.TempDir(), arch, true)
			e, err := Load(context.Background(), Options{Model: dir, Device: "cpu", KVTokens: 512}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var fx struct {
				Text   string  `json:"text"`
				Tokens []int32 `json:"tokens"`
			}
			b, err := os.ReadFile(filepath.Join("hfmodel", "testdata", arch+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &fx); err != nil {
				t.Fatal(err)
			}
			ids := e.Tokenizer().Encode(fx.Text, false)
			if len(ids) != len(fx.Tokens) {
				t.Fatalf("%d ids, transformers %d", len(ids), len(fx.Tokens))
			}
			for i := range ids {
				if ids[i] != fx.Tokens[i] {
					t.Fatalf("id %d is %d, transformers %d", i, ids[i], fx.Tokens[i])
				}
			}
			if e.Info().Arch != arch || e.Info().Template != "gguf" {
				t.Errorf("info %+v", e.Info())
			}
			p, err := e.RenderPrompt(Request{Messages: []Message{{Role: "user", Content: "hi"}}})
			if err != nil || !strings.Contains(p, "<|im_start|>user\nhi<|im_end|>") {
				t.Fatalf("prompt %q, %v", p, err)
			}
			_, done := collect(t, e.NewSession().Generate(context.Background(), greedy(4, Message{Role: "user", Content: "hi"})))
			if done.Stop != StopEOS && done.Stop != StopMaxTokens {
				t.Fatalf("stop = %s", done.Stop)
			}
		})
	}
}

// TestLoadCheckpointFromHFCache: ORG/NAME resolves to the snapshot that
// refs/main names in the Hugging Face cache layout.
func TestLoadCheckpointFromHFCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	base := filepath.Join(cache, "models--tiny-org--tiny-llama")
	hfDir(t, filepath.Join(base, "snapshots"), "llama", true)
	if err := os.Rename(filepath.Join(base, "snapshots", "llama"), filepath.Join(base, "snapshots", "0123456789abcdef0123456789abcdef01234567")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "refs", "main"), []byte("0123456789abcdef0123456789abcdef01234567\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Load(context.Background(), Options{Model: "tiny-org/tiny-llama", Device: "cpu", KVTokens: 256}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasSuffix(e.Info().Path, filepath.Join("snapshots", "0123456789abcdef0123456789abcdef01234567")) || !strings.Contains(e.Info().Name, "tiny-org/tiny-llama") {
		t.Fatalf("path %s, name %s", e.Info().Path, e.Info().Name)
	}
}

// TestCheckpointWithoutTokenizer names the missing file.
func TestCheckpointWithoutTokenizer(t *testing.T) {
	dir := hfDir(t, t.TempDir(), "qwen2", false)
	_, err := Load(context.Background(), Options{Model: dir, Device: "cpu", KVTokens: 256}, nil)
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json is missing") {
		t.Fatalf("err = %v", err)
	}
}

// addTensors appends F32 tensors to a safetensors file's header and data.
func addTensors(t *testing.T, path string, add map[string][]float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var h map[string]any
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	for name, v := range add {
		start := len(data)
		for _, x := range v {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(x))
		}
		h[name] = map[string]any{"dtype": "F32", "shape": []int{len(v)}, "data_offsets": []int{start, len(data)}}
	}
	js, _ := json.Marshal(h)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	if err := os.WriteFile(path, append(append(out, js...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointKVScales: --kv-scales checkpoint takes the k_scale/v_scale
// tensors of an FP8 checkpoint (per layer here, widened to the KV heads).
func TestCheckpointKVScales(t *testing.T) {
	dir := hfDir(t, t.TempDir(), "llama_fp8_tensor", true)
	addTensors(t, filepath.Join(dir, "model.safetensors"), map[string][]float32{
		"model.layers.0.self_attn.k_scale": {0.5}, "model.layers.0.self_attn.v_scale": {0.25},
		"model.layers.1.self_attn.k_scale": {0.125}, "model.layers.1.self_attn.v_scale": {2},
	})
	e, err := Load(context.Background(), Options{Model: dir, Device: "cpu", KVTokens: 256, KVDType: "fp8_e4m3", KVScales: "checkpoint"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	wantK, wantV := []float32{0.5, 0.5, 0.125, 0.125}, []float32{0.25, 0.25, 2, 2}
	if e.layout.Scales != kvcache.StaticScales || fmt.Sprint(e.layout.KScale) != fmt.Sprint(wantK) || fmt.Sprint(e.layout.VScale) != fmt.Sprint(wantV) {
		t.Fatalf("scales %v k %v v %v", e.layout.Scales, e.layout.KScale, e.layout.VScale)
	}
	_, done := collect(t, e.NewSession().Generate(context.Background(), greedy(3, Message{Role: "user", Content: "hi"})))
	if done.Stop != StopEOS && done.Stop != StopMaxTokens {
		t.Fatalf("stop = %s", done.Stop)
	}

	// Without the tensors, and with one layer's missing, the message says so.
	plain := hfDir(t, t.TempDir(), "llama", true)
	_, err = Load(context.Background(), Options{Model: plain, Device: "cpu", KVTokens: 256, KVDType: "fp8_e4m3", KVScales: "checkpoint"}, nil)
	if err == nil || !strings.Contains(err.Error(), "has no k_scale/v_scale tensors") {
		t.Fatalf("err = %v", err)
	}
	part := hfDir(t, t.TempDir(), "llama", true)
	addTensors(t, filepath.Join(part, "model.safetensors"), map[string][]float32{
		"model.layers.0.self_attn.k_scale": {0.5}, "model.layers.0.self_attn.v_scale": {0.25}})
	_, err = Load(context.Background(), Options{Model: part, Device: "cpu", KVTokens: 256}, nil)
	if err == nil || !strings.Contains(err.Error(), "k_scale/v_scale for 1 attention layers but not for layer 1") {
		t.Fatalf("err = %v", err)
	}
}

// TestGenerationConfigEOS: generation_config.json's eos_token_id, an int
// or a list, joins the tokenizer's stop set when a directory loads; an id
// outside the vocabulary is refused naming the file.
func TestGenerationConfigEOS(t *testing.T) {
	const plain = 42 // a byte token, not an end marker by itself
	for _, c := range []struct {
		name, eos string
		stops     []int32
		notStops  []int32
		err       string
	}{
		{"int", `313`, []int32{313}, []int32{plain}, ""},
		{"list", `[313, 42]`, []int32{313, plain}, nil, ""},
		{"absent", ``, []int32{313}, []int32{plain}, ""},
		{"outside vocabulary", `[313, 5000]`, nil, nil, "generation_config.json: eos_token_id: end-of-generation id 5000 is outside the vocabulary of 320"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := hfDir(t, t.TempDir(), "llama", true)
			gc := `{"pad_token_id": 311}`
			if c.eos != "" {
				gc = `{"eos_token_id": ` + c.eos + `, "pad_token_id": 311}`
			}
			if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gc), 0o644); err != nil {
				t.Fatal(err)
			}
			e, err := Load(context.Background(), Options{Model: dir, Device: "cpu", KVTokens: 64}, nil)
			if c.err != "" {
				if err == nil {
					e.Close()
					t.Fatal("loaded")
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q does not say %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			tok := e.Tokenizer()
			for _, id := range c.stops {
				if !tok.IsEOG(id) {
					t.Errorf("id %d does not stop generation (EOGs %v)", id, tok.EOGs())
				}
			}
			for _, id := range c.notStops {
				if tok.IsEOG(id) {
					t.Errorf("id %d stops generation (EOGs %v)", id, tok.EOGs())
				}
			}
		})
	}
}

// TestLoadNVFP4CheckpointDirectory: NVFP4 checkpoints (compressed-tensors;
// ModelOpt MIXED_PRECISION with FP8 attention) load through the engine on
// the CPU and a chat turn generates.
func TestLoadNVFP4CheckpointDirectory(t *testing.T) {
	for name, arch := range map[string]string{"qwen3moe_nvfp4_ct": "qwen3moe", "qwen35moe_nvfp4_mixed": "qwen35moe"} {
		t.Run(name, func(t *testing.T) {
			dir := hfDir(t, t.TempDir(), name, true)
			e, err := Load(context.Background(), Options{Model: dir, Device: "cpu", KVTokens: 256}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if e.Info().Arch != arch {
				t.Errorf("arch %q, want %q", e.Info().Arch, arch)
			}
			_, done := collect(t, e.NewSession().Generate(context.Background(), greedy(4, Message{Role: "user", Content: "hi"})))
			if done.Stop != StopEOS && done.Stop != StopMaxTokens {
				t.Fatalf("stop = %s", done.Stop)
			}
		})
	}
}
