package synth

import (
	"bytes"
	"cmp"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ftchat/ftchat/engine/gguf"

	"github.com/ftchat/ftchat/internal/testmodel"
)

func generate(t *testing.T, preset string, typ gguf.Type, seed uint64) (*gguf.File, string) {
	t.Helper()
	spec, err := Preset(preset, typ)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), preset+".gguf")
	var last, total int
	if err := Write(path, spec, seed, func(d, tot int) { last, total = d, tot }); err != nil {
		t.Fatal(err)
	}
	if last != total || total == 0 {
		t.Errorf("progress ended at %d of %d", last, total)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("output file mode: %v %v", st.Mode(), err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func TestTinyPresets(t *testing.T) {
	cases := []struct {
		preset string
		typ    gguf.Type
		extra  []string // tensor names that must exist in block 0
	}{
		{"qwen3-tiny", gguf.Q4_K, []string{"attn_q_norm.weight", "attn_k_norm.weight", "ffn_gate.weight"}},
		{"qwen3-tiny", gguf.F32, nil},
		{"qwen3moe-tiny", gguf.Q8_0, []string{"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}},
		{"qwen2-tiny", gguf.Q6_K, []string{"attn_q.bias", "attn_k.bias", "attn_v.bias"}},
	}
	for _, c := range cases {
		t.Run(c.preset+"/"+c.typ.String(), func(t *testing.T) {
			spec, _ := Preset(c.preset, c.typ)
			f, _ := generate(t, c.preset, c.typ, 7)
			arch, _ := f.String("general.architecture")
			if arch != spec.Arch {
				t.Fatalf("architecture %q", arch)
			}
			for key, want := range map[string]uint64{
				"block_count": uint64(spec.Layers), "embedding_length": uint64(spec.Dim),
				"feed_forward_length": uint64(spec.FF), "attention.head_count": uint64(spec.Heads),
				"attention.head_count_kv": uint64(spec.KVHeads), "attention.key_length": uint64(spec.HeadDim),
				"attention.value_length": uint64(spec.HeadDim), "rope.dimension_count": uint64(spec.HeadDim),
				"context_length": uint64(spec.Context), "vocab_size": uint64(spec.Vocab),
			} {
				if got, ok := f.Uint(arch + "." + key); !ok || got != want {
					t.Errorf("%s.%s = %d %v, want %d", arch, key, got, ok, want)
				}
			}
			if eps, _ := f.Float(arch + ".attention.layer_norm_rms_epsilon"); float32(eps) != float32(spec.RMSEps) {
				t.Errorf("rms eps %v", eps)
			}
			if spec.Arch == "qwen3moe" {
				for key, want := range map[string]uint64{"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 256} {
					if got, _ := f.Uint(arch + "." + key); got != want {
						t.Errorf("%s = %d, want %d", key, got, want)
					}
				}
			}
			for _, name := range c.extra {
				if _, ok := f.Tensor("blk.0." + name); !ok {
					t.Errorf("missing blk.0.%s", name)
				}
			}
			if !reflect.DeepEqual(f.Tensors, withOffsets(spec.Tensors(), f.Tensors)) {
				t.Error("file tensors differ from Spec.Tensors()")
			}
			_, hasOut := f.Tensor("output.weight")
			if hasOut == spec.Tied {
				t.Errorf("output.weight present=%v with Tied=%v", hasOut, spec.Tied)
			}
			checkTokenizer(t, f, spec.Vocab)
			checkWeights(t, f, spec)
		})
	}
}

// withOffsets copies the offsets of got into want, for comparing the rest.
func withOffsets(want, got []gguf.TensorInfo) []gguf.TensorInfo {
	if len(want) != len(got) {
		return want
	}
	for i := range want {
		want[i].Offset = got[i].Offset
	}
	return want
}

func checkTokenizer(t *testing.T, f *gguf.File, vocabSize int) {
	t.Helper()
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != vocabSize {
		t.Fatalf("tokens: %d, %v", len(toks), ok)
	}
	types, ok := f.Ints("tokenizer.ggml.token_type")
	if !ok || len(types) != vocabSize {
		t.Fatalf("token types: %d, %v", len(types), ok)
	}
	if m, _ := f.String("tokenizer.ggml.model"); m != "gpt2" {
		t.Errorf("tokenizer model %q", m)
	}
	if toks[1] != TokenIMStart || toks[2] != TokenIMEnd || types[1] != 3 {
		t.Errorf("special tokens %q %q type %d", toks[1], toks[2], types[1])
	}
	id := map[string]int{}
	for i, s := range toks {
		if _, dup := id[s]; dup {
			t.Fatalf("duplicate token %q", s)
		}
		id[s] = i
	}
	// every byte has a single-symbol token; space is "Ġ", newline "Ċ"
	syms := byteSymbols()
	for b, s := range syms {
		if utf8.RuneCountInString(s) != 1 {
			t.Fatalf("byte %d symbol %q", b, s)
		}
		if _, ok := id[s]; !ok {
			t.Fatalf("byte %d symbol %q missing", b, s)
		}
	}
	if syms[' '] != "Ġ" || syms['\n'] != "Ċ" || syms['a'] != "a" {
		t.Errorf("byte symbols: space %q newline %q", syms[' '], syms['\n'])
	}
	merges, _ := f.Strings("tokenizer.ggml.merges")
	for _, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		if _, ok2 := id[a+b]; !ok || !ok2 {
			t.Errorf("merge %q has no result token", m)
		}
	}
	if tmpl, _ := f.String("tokenizer.chat_template"); !strings.Contains(tmpl, "<|im_start|>") {
		t.Errorf("chat template %q", tmpl)
	}
	if eos, _ := f.Uint("tokenizer.ggml.eos_token_id"); toks[eos] != TokenIMEnd {
		t.Errorf("eos is %q", toks[eos])
	}
}

// dequantTensor returns tensor ti of f as float32s.
func dequantTensor(t *testing.T, f *gguf.File, ti gguf.TensorInfo) []float32 {
	t.Helper()
	raw, err := f.TensorData(ti)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, ti.Elements())
	if err := gguf.Dequantize(ti.Type, raw, x); err != nil {
		t.Fatal(err)
	}
	return x
}

// checkWeights dequantizes every tensor and checks the value statistics.
func checkWeights(t *testing.T, f *gguf.File, spec Spec) {
	t.Helper()
	for _, ti := range f.Tensors {
		x := dequantTensor(t, f, ti)
		var sum, sq float64
		for _, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s has non-finite values", ti.Name)
			}
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		n := float64(len(x))
		mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
		wantMean := 0.0
		if strings.HasSuffix(ti.Name, "norm.weight") {
			wantMean = 1
		}
		// std within 15% of WeightStd (quantization adds a little), mean within 5 sigma.
		if math.Abs(mean-wantMean) > 5*WeightStd/math.Sqrt(n) || math.Abs(std-WeightStd) > 0.15*WeightStd {
			t.Errorf("%s (%s, %d values): mean %.5f std %.5f", ti.Name, ti.Type, len(x), mean, std)
		}
		isMatrix := len(ti.Dims) >= 2 && !strings.HasSuffix(ti.Name, "ffn_gate_inp.weight")
		if !isMatrix && ti.Type != gguf.F32 {
			t.Errorf("%s is %s, want F32", ti.Name, ti.Type)
		}
		if isMatrix && ti.Type != matrixType(spec.WeightType, int(ti.Dims[0])) {
			t.Errorf("%s is %s", ti.Name, ti.Type)
		}
	}
}

func TestDeterministic(t *testing.T) {
	spec, _ := Preset("qwen3moe-tiny", gguf.Q4_K)
	var a, b, c bytes.Buffer
	if err := WriteTo(&a, spec, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteTo(&b, spec, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteTo(&c, spec, 2, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("same seed gave different files")
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) || a.Len() != c.Len() {
		t.Error("different seeds gave identical files (or different sizes)")
	}
}

// TestSmolLM2MatchesReal compares the preset's tensor plan and key types
// with the real SmolLM2 GGUF (skipped when it is absent).
func TestSmolLM2MatchesReal(t *testing.T) {
	path := testmodel.Require(t)
	real, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	spec, err := Preset("smollm2-135m", gguf.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	plan := spec.Tensors()
	var gotNames, realNames []string
	for _, ti := range plan {
		gotNames = append(gotNames, ti.Name)
		rt, ok := real.Tensor(ti.Name)
		if !ok {
			t.Errorf("real model has no %s", ti.Name)
			continue
		}
		if !slices.Equal(rt.Dims, ti.Dims) {
			t.Errorf("%s: dims %v, real %v", ti.Name, ti.Dims, rt.Dims)
		}
	}
	for _, ti := range real.Tensors {
		realNames = append(realNames, ti.Name)
	}
	slices.Sort(gotNames)
	slices.Sort(realNames)
	if !slices.Equal(gotNames, realNames) {
		t.Errorf("tensor sets differ: %d vs %d", len(gotNames), len(realNames))
	}
	kv, err := spec.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range kv {
		rv, ok := real.Value(e.Key)
		if !ok {
			continue // keys the real file lacks (key_length, ...) are fine
		}
		if reflect.TypeOf(rv) != reflect.TypeOf(e.Value) {
			t.Errorf("%s: type %T, real %T", e.Key, e.Value, rv)
		}
		switch e.Key {
		case "general.name", "general.file_type", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
			"tokenizer.ggml.merges", "tokenizer.chat_template":
			continue
		}
		if !reflect.DeepEqual(rv, e.Value) {
			t.Errorf("%s = %v, real %v", e.Key, e.Value, rv)
		}
	}
}

func TestLargePresetPlans(t *testing.T) {
	cases := []struct {
		preset  string
		tensors int
		bytes   uint64 // at Q4_K
	}{
		// 16 layers * 9 + token_embd + rope_freqs + output_norm (tied)
		{"llama-3.2-1b", 16*9 + 3, 0},
		// 32 layers * 9 + token_embd + rope_freqs + output_norm + output
		{"llama-3.1-8b", 32*9 + 4, 0},
	}
	for _, c := range cases {
		spec, err := Preset(c.preset, gguf.Q4_K)
		if err != nil {
			t.Fatal(err)
		}
		var params, size uint64
		for _, ti := range spec.Tensors() {
			params += ti.Elements()
			size += ti.Bytes()
		}
		if n := len(spec.Tensors()); n != c.tensors {
			t.Errorf("%s: %d tensors, want %d", c.preset, n, c.tensors)
		}
		t.Logf("%s: %.3fB params, %.2f GiB at Q4_K", c.preset, float64(params)/1e9, float64(size)/(1<<30))
	}
	s8, _ := Preset("llama-3.1-8b", gguf.Q4_K)
	var params uint64
	for _, ti := range s8.Tensors() {
		params += ti.Elements()
	}
	if params != 8030261312 { // Llama-3.1-8B's published parameter count (+64 rope factors)
		t.Errorf("8b params %d", params)
	}
}

func TestRopeFreqFactors(t *testing.T) {
	l := Llama3Rope{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	f := RopeFreqFactors(128, 500000, l)
	if len(f) != 64 || f[0] != 1 || f[63] != 8 {
		t.Fatalf("factors %v", f)
	}
	for i := 1; i < len(f); i++ {
		if f[i] < f[i-1] {
			t.Fatalf("factors not monotonic at %d: %v", i, f)
		}
	}
	// the blend region exists and lies strictly between 1 and Factor
	mid := 0
	for _, v := range f {
		if v > 1 && v < 8 {
			mid++
		}
	}
	if mid == 0 {
		t.Error("no smoothly scaled frequencies")
	}
}

func TestPresetErrors(t *testing.T) {
	if _, err := Preset("gpt-5", gguf.Q4_K); err == nil || !strings.Contains(err.Error(), "smollm2-135m") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := Preset("qwen3-tiny", gguf.Q2_K); err == nil || !strings.Contains(err.Error(), "Q2_K") {
		t.Errorf("Q2_K: %v", err)
	}
	spec, _ := Preset("qwen3-tiny", gguf.F16)
	spec.Vocab = 10
	spec.KVHeads = 3
	err := spec.Validate()
	if err == nil || !strings.Contains(err.Error(), "Vocab") || !strings.Contains(err.Error(), "KVHeads") {
		t.Errorf("Validate: %v", err)
	}
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "x.gguf"), spec, 1, nil); err == nil {
		t.Error("Write accepted an invalid spec")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed Write left files behind: %v", entries)
	}
	if err := WritePreset(filepath.Join(t.TempDir(), "x.gguf"), "qwen3-tiny", "q3_x", 1, nil); err == nil || !strings.Contains(err.Error(), "q3_x") {
		t.Errorf("WritePreset with a bad type: %v", err)
	}
	if err := WritePreset(filepath.Join(t.TempDir(), "x.gguf"), "nope", "q8_0", 1, nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("WritePreset with a bad preset: %v", err)
	}
	out := filepath.Join(t.TempDir(), "ok.gguf")
	if err := WritePreset(out, "qwen3-tiny", "q8_0", 1, nil); err != nil {
		t.Errorf("WritePreset: %v", err)
	}
	if err := WritePreset(filepath.Join(t.TempDir(), "missing-dir", "x.gguf"), "qwen3-tiny", "q8_0", 1, nil); err == nil {
		t.Error("WritePreset into a missing directory succeeded")
	}
	if !slices.Contains(Presets(), "llama-3.1-8b") || len(Presets()) != len(presets) {
		t.Errorf("Presets() = %v", Presets())
	}
}

// BenchmarkWrite writes a full-size model into $FTCHAT_SYNTH_BENCH_DIR
// (skipped when unset): FTCHAT_SYNTH_BENCH_PRESET (default llama-3.1-8b)
// at FTCHAT_SYNTH_BENCH_TYPE (default Q4_K).
func BenchmarkWrite(b *testing.B) {
	dir := os.Getenv("FTCHAT_SYNTH_BENCH_DIR")
	if dir == "" {
		b.Skip("FTCHAT_SYNTH_BENCH_DIR not set")
	}
	preset := cmp.Or(os.Getenv("FTCHAT_SYNTH_BENCH_PRESET"), "llama-3.1-8b")
	typ, err := gguf.ParseType(cmp.Or(os.Getenv("FTCHAT_SYNTH_BENCH_TYPE"), "Q4_K"))
	if err != nil {
		b.Fatal(err)
	}
	spec, err := Preset(preset, typ)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, preset+"."+typ.String()+".gguf")
	for b.Loop() {
		var total int
		if err := Write(path, spec, 1, func(_, t int) { total = t }); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(total))
	}
}
