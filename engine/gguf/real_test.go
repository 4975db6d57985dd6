package gguf

import (
	"testing"

	"github.com/ftchat/ftchat/internal/testmodel"
)

func testModelPath(t testing.TB) string { return testmodel.Require(t) }

func TestRealSmolLM2(t *testing.T) {
	path := testModelPath(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 || f.Alignment != 32 {
		t.Errorf("version %d alignment %d, want 3, 32", f.Version, f.Alignment)
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("general.architecture = %q", s)
	}
	for key, want := range map[string]uint64{
		"llama.block_count": 30, "llama.embedding_length": 576, "llama.feed_forward_length": 1536,
		"llama.attention.head_count": 9, "llama.attention.head_count_kv": 3, "llama.context_length": 8192,
		"llama.vocab_size": 49152, "llama.rope.dimension_count": 64,
	} {
		if got, ok := f.Uint(key); !ok || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, ok, want)
		}
	}
	if v, ok := f.Float("llama.rope.freq_base"); !ok || v != 100000 {
		t.Errorf("rope.freq_base = %v %v", v, ok)
	}
	if v, ok := f.Float("llama.attention.layer_norm_rms_epsilon"); !ok || float32(v) != 1e-5 {
		t.Errorf("rms eps = %v %v", v, ok)
	}
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != 49152 || toks[0] != "<|endoftext|>" || toks[1] != "<|im_start|>" {
		t.Errorf("tokens: ok=%v len=%d", ok, len(toks))
	}
	tt, ok := f.Ints("tokenizer.ggml.token_type")
	if !ok || len(tt) != 49152 || tt[0] != 3 {
		t.Errorf("token_type: ok=%v len=%d", ok, len(tt))
	}
	if len(f.Tensors) != 272 { // 30 layers * 9 + token_embd + output_norm
		t.Errorf("%d tensors, want 272", len(f.Tensors))
	}
	counts := map[Type]int{}
	for _, ti := range f.Tensors {
		counts[ti.Type]++
	}
	if counts[F32] != 61 || counts[Q4_1] != 210 || counts[Q8_0] != 1 {
		t.Errorf("type counts %v", counts)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || emb.Type != Q8_0 || len(emb.Dims) != 2 || emb.Dims[0] != 576 || emb.Dims[1] != 49152 {
		t.Fatalf("token_embd.weight = %+v", emb)
	}
	raw, err := f.TensorData(emb)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(raw)) != 576*49152/32*34 {
		t.Errorf("token_embd bytes %d", len(raw))
	}
	if err := f.Validate(nil); err != nil {
		t.Error(err)
	}
	if err := f.Validate([]Type{F32, Q8_0}); err == nil {
		t.Error("Validate without Q4_1 accepted Q4_1 tensors")
	}
}

func BenchmarkOpenReal(b *testing.B) {
	p := testModelPath(b)
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
