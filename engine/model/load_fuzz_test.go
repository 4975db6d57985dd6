package model_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// FuzzLoadModel feeds mutated model files through the whole load path
// (GGUF parse, ReadConfig, model.Load on the CPU backend, a KV pool and one
// forward step). Anything may be refused, with an error, but nothing may
// panic or allocate without bound: the seeds are real tiny models, so the
// mutations reach hyperparameters, tensor shapes and offsets.
func FuzzLoadModel(f *testing.F) {
	for _, name := range []string{"tiny_qwen2.gguf", "tiny_qwen3moe.gguf", "tiny_qwen35moe.gguf", "tiny_qwen3next.gguf"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	f.Cleanup(be.Close)
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := gguf.OpenBytes("fuzz.gguf", b)
		if err != nil {
			return
		}
		if _, err := model.ReadConfig(g); err != nil {
			if !strings.Contains(err.Error(), "fuzz.gguf") {
				t.Fatalf("config error does not name the file: %v", err)
			}
			return
		}
		m, err := model.Load(g, be)
		if err != nil {
			return
		}
		defer m.Free()
		// Every block has tensors in the file, and every weight byte is in
		// the file: a loaded model cannot be larger than what holds it.
		if c := m.Config; c.Layers > len(g.Tensors) || c.Vocab > 8*len(b) || c.Dim > 8*len(b) {
			t.Fatalf("loaded shapes a %d-byte file with %d tensors cannot hold: %+v", len(b), len(g.Tensors), c)
		}
		const page = 16
		if err := be.AllocKV(m.Config.KVLayout(page, 1, kvcache.BF16)); err != nil {
			return
		}
		if m.NeedsState() {
			// The state's size follows from tensors in the file, but is not
			// bounded by it (head dims multiply): cap it here.
			l := m.Config.StateLayout(1)
			if l.Bytes() > 64<<20 {
				return
			}
			if err := be.AllocState(l); err != nil {
				return
			}
			defer be.FreeState()
		}
		tokens := []int32{0, 1}
		batch := &model.Batch{Tokens: tokens, Pos: []int32{0, 1},
			Seqs: []model.SeqSpan{{NewTokens: len(tokens), Pages: []int32{0}}}}
		_, _ = m.Forward(batch, []int{1})
	})
}
