package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// rewrite copies a GGUF, letting edit change its metadata and tensors.
func rewrite(t *testing.T, src string, edit func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kv []gguf.KV
	for _, k := range f.Keys() {
		if k == "general.alignment" {
			continue
		}
		v, _ := f.Value(k)
		kv = append(kv, gguf.KV{Key: k, Value: v})
	}
	var ts []gguf.WriteTensor
	for _, ti := range f.Tensors {
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, gguf.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: data})
	}
	kv, ts = edit(kv, ts)
	out := filepath.Join(t.TempDir(), "edited.gguf")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(w, kv, ts); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return out
}

func setKV(kv []gguf.KV, key string, v any) []gguf.KV {
	for i := range kv {
		if kv[i].Key == key {
			kv[i].Value = v
			return kv
		}
	}
	return append(kv, gguf.KV{Key: key, Value: v})
}

func dropKV(kv []gguf.KV, prefix string) []gguf.KV {
	var out []gguf.KV
	for _, e := range kv {
		if !strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// TestBadModelFilesGiveOneClearMessage: each broken model is refused at
// Load with an error naming the file and the problem, never a panic.
func TestBadModelFilesGiveOneClearMessage(t *testing.T) {
	base := synthModel(t, "qwen3-tiny", gguf.F32)
	raw, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.gguf")
	os.WriteFile(truncated, raw[:len(raw)/2], 0o644)
	cases := []struct {
		name string
		path string
		want []string
	}{
		{"missing file", filepath.Join(t.TempDir(), "nope.gguf"), []string{"nope.gguf", "not found"}},
		{"truncated", truncated, []string{"truncated.gguf"}},
		{"unknown architecture", rewrite(t, base, func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return setKV(kv, "general.architecture", "mamba"), ts
		}), []string{"edited.gguf", "mamba", "llama"}},
		{"missing tokenizer", rewrite(t, base, func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return dropKV(kv, "tokenizer.ggml.tokens"), ts
		}), []string{"edited.gguf", "tokenizer"}},
		{"unsupported tensor type", rewrite(t, base, func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if strings.HasSuffix(ts[i].Name, "attn_q.weight") {
					// Q8_K (ggml's activation-only type): valid geometry, not a weight format we run.
					n := ts[i].Dims[0] * ts[i].Dims[1]
					ts[i].Type, ts[i].Data = gguf.Q8_K, make([]byte, n/256*292)
					ts[i].Dims = []uint64{256, n / 256}
					break
				}
			}
			return kv, ts
		}), []string{"edited.gguf", "attn_q.weight"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Load(context.Background(), Options{Model: tc.path, Device: "cpu"}, nil)
			if err == nil {
				e.Close()
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if strings.Count(msg, "\n") > 0 {
				t.Errorf("error spans several lines: %q", msg)
			}
		})
	}
}

func TestFitCheckCoversTheModelContext(t *testing.T) {
	e := load(t, Options{ContextLen: 64, KVTokens: 4096})
	err := e.FitCheck(greedy(0, Message{Role: "user", Content: longText(100)}))
	var ctxErr *ContextFullError
	if !errors.As(err, &ctxErr) || ctxErr.ContextLen != 64 {
		t.Fatalf("want ContextFullError, got %v", err)
	}
	var full *kvcache.PoolFullError
	if !errors.As(err, &full) || full.Fit != 64 {
		t.Fatalf("the error should unwrap to the numbers: %v", err)
	}
	if err := e.FitCheck(greedy(0, Message{Role: "user", Content: "hi"})); err != nil {
		t.Fatalf("a short prompt fits: %v", err)
	}
}
