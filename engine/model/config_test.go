package model_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

func TestReadConfigFixtures(t *testing.T) {
	tests := []struct {
		file string
		want model.Config
	}{
		{"tiny_llama3.gguf", model.Config{Arch: "llama", Layers: 2, Dim: 64, FF: 128, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 512, TiedEmbeddings: true}},
		{"tiny_qwen2.gguf", model.Config{Arch: "qwen2", Layers: 2, Dim: 64, FF: 128, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 512, QKVBias: true, TiedEmbeddings: true}},
		{"tiny_qwen3.gguf", model.Config{Arch: "qwen3", Layers: 2, Dim: 64, FF: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Vocab: 512, QKNorm: true}},
		{"tiny_qwen3moe.gguf", model.Config{Arch: "qwen3moe", Layers: 2, Dim: 64, FF: 128, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 512, QKNorm: true, Experts: 8, ExpertsUsed: 2, ExpertFF: 32, NormTopK: true}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := model.ReadConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			g := c
			g.Name, g.ContextLen, g.NormEps, g.Rope, g.WeightBytes, g.AttnLayers = "", 0, 0, model.Rope{}, 0, 0
			if g.Arch != tc.want.Arch || g.Layers != tc.want.Layers || g.Dim != tc.want.Dim || g.FF != tc.want.FF ||
				g.Heads != tc.want.Heads || g.KVHeads != tc.want.KVHeads || g.HeadDim != tc.want.HeadDim ||
				g.Vocab != tc.want.Vocab || g.QKVBias != tc.want.QKVBias || g.QKNorm != tc.want.QKNorm ||
				g.Experts != tc.want.Experts || g.ExpertsUsed != tc.want.ExpertsUsed || g.ExpertFF != tc.want.ExpertFF ||
				g.NormTopK != tc.want.NormTopK || g.TiedEmbeddings != tc.want.TiedEmbeddings {
				t.Errorf("config\n got %+v\nwant %+v", g, tc.want)
			}
			if c.AttnLayers != c.Layers || c.WeightBytes <= 0 || c.ContextLen <= 0 {
				t.Errorf("AttnLayers %d, WeightBytes %d, ContextLen %d", c.AttnLayers, c.WeightBytes, c.ContextLen)
			}
			if c.Rope.NeoX != (c.Arch != "llama") || c.Rope.Dim != c.HeadDim {
				t.Errorf("rope %+v", c.Rope)
			}
		})
	}
}

// The Llama 3 fixture carries rope_freqs.weight as llama.cpp's converter
// writes it; computing the factors from the metadata must agree.
func TestLlama3FreqFactorsMatchRopeFreqs(t *testing.T) {
	f, err := gguf.Open(filepath.Join("testdata", "tiny_llama3.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := model.ReadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rope.FreqFactors == nil {
		t.Fatal("rope_freqs.weight not read")
	}
	got := model.Llama3FreqFactors(c.Rope.Dim, c.Rope.Base, 32, 1, 4, 8192)
	for i := range got {
		if d := got[i] - c.Rope.FreqFactors[i]; d > 1e-5*c.Rope.FreqFactors[i] || -d > 1e-5*c.Rope.FreqFactors[i] {
			t.Errorf("factor %d: computed %v, file %v", i, got[i], c.Rope.FreqFactors[i])
		}
	}
	scaled := 0
	for _, v := range got {
		if v != 1 {
			scaled++
		}
	}
	if scaled == 0 {
		t.Error("fixture does not exercise scaling (all factors 1)")
	}
}

// rewrite copies the tiny qwen3 fixture with edits to metadata and tensors.
func rewrite(t *testing.T, editKV func([]gguf.KV) []gguf.KV, editT func([]gguf.WriteTensor) []gguf.WriteTensor) string {
	t.Helper()
	return writeEdited(t, "tiny_qwen3.gguf", "edited.gguf", func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		kv = slices.DeleteFunc(kv, func(e gguf.KV) bool { return strings.HasPrefix(e.Key, "GGUF.") })
		if editKV != nil {
			kv = editKV(kv)
		}
		if editT != nil {
			ts = editT(ts)
		}
		return kv, ts
	})
}

// writeEdited writes testdata/fixture, re-encoded by editGGUF with edit, to
// a temporary file called name and returns its path.
func writeEdited(t *testing.T, fixture, name string, edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, editGGUF(t, raw, edit), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadErrors(t *testing.T) {
	setKV := func(key string, val any) func([]gguf.KV) []gguf.KV {
		return func(kv []gguf.KV) []gguf.KV {
			for i := range kv {
				if kv[i].Key == key {
					kv[i].Value = val
				}
			}
			return kv
		}
	}
	dropKV := func(key string) func([]gguf.KV) []gguf.KV {
		return func(kv []gguf.KV) []gguf.KV {
			out := kv[:0]
			for _, e := range kv {
				if e.Key != key {
					out = append(out, e)
				}
			}
			return out
		}
	}
	editTensor := func(name string, fn func(*gguf.WriteTensor)) func([]gguf.WriteTensor) []gguf.WriteTensor {
		return func(ts []gguf.WriteTensor) []gguf.WriteTensor {
			out := ts[:0]
			for i := range ts {
				if ts[i].Name == name {
					if fn == nil {
						continue
					}
					fn(&ts[i])
				}
				out = append(out, ts[i])
			}
			return out
		}
	}
	tests := []struct {
		name  string
		kv    func([]gguf.KV) []gguf.KV
		ts    func([]gguf.WriteTensor) []gguf.WriteTensor
		wants []string
	}{
		{"unknown architecture", setKV("general.architecture", "mamba"), nil,
			[]string{"edited.gguf", `architecture "mamba" is not supported`, "llama, qwen2, qwen3, qwen35, qwen35moe, qwen3moe, qwen3next"}},
		{"missing block count", dropKV("qwen3.block_count"), nil, []string{"edited.gguf", "qwen3.block_count"}},
		{"missing tensor", nil, editTensor("blk.1.attn_k_norm.weight", nil), []string{"edited.gguf", "blk.1.attn_k_norm.weight is missing"}},
		{"wrong shape", nil, editTensor("blk.0.ffn_up.weight", func(w *gguf.WriteTensor) {
			w.Dims = []uint64{64, 64}
			w.Data = w.Data[:len(w.Data)/2]
		}), []string{"blk.0.ffn_up.weight has shape [64 64], want [64 128]"}},
		{"unsupported tensor type", nil, editTensor("blk.0.attn_q.weight", func(w *gguf.WriteTensor) {
			w.Type = gguf.Q8_K // the one type gguf knows but cannot dequantize
			w.Dims = []uint64{256, 32}
			w.Data = make([]byte, 32*gguf.Q8_K.BlockBytes())
		}), []string{"edited.gguf", "blk.0.attn_q.weight", "Q8_K", "not support"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := rewrite(t, tc.kv, tc.ts)
			f, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			be := cpu.New(cpu.Options{Threads: 1})
			defer be.Close()
			_, err = model.Load(f, be)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			t.Log(err)
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestForwardRejectsBadBatches(t *testing.T) {
	m, _ := loadModel(t, filepath.Join("testdata", "tiny_qwen2.gguf"), 1, false)
	s := newSession(t, m, 32, 1)
	tests := []struct {
		name string
		b    model.Batch
		rows []int
		want string
	}{
		{"empty", model.Batch{}, nil, "empty batch"},
		{"token out of vocab", model.Batch{Tokens: []int32{600}, Pos: []int32{0}, Seqs: []model.SeqSpan{{NewTokens: 1, Pages: s.pages}}}, nil, "outside the vocabulary"},
		{"positions", model.Batch{Tokens: []int32{1}, Pos: []int32{0, 1}}, nil, "positions"},
		{"uncovered rows", model.Batch{Tokens: []int32{1, 2}, Pos: []int32{0, 1}, Seqs: []model.SeqSpan{{NewTokens: 1, Pages: s.pages}}}, nil, "cover"},
		{"position gap", model.Batch{Tokens: []int32{1}, Pos: []int32{5}, Seqs: []model.SeqSpan{{Cached: 3, NewTokens: 1, Pages: s.pages}}}, nil, "position 5, want 3"},
		{"page table too short", model.Batch{Tokens: []int32{1}, Pos: []int32{20}, Seqs: []model.SeqSpan{{Cached: 20, NewTokens: 1, Pages: s.pages[:1]}}}, nil, "needs 2 pages"},
		{"page id outside pool", model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seqs: []model.SeqSpan{{NewTokens: 1, Pages: []int32{99}}}}, nil, "page id 99"},
		{"logits row", model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seqs: []model.SeqSpan{{NewTokens: 1, Pages: s.pages}}}, []int{1}, "logits row 1"},
	}
	for _, tc := range tests {
		if _, err := m.Forward(&tc.b, tc.rows); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
