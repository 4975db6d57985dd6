package gpu

import (
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Every tensor type the CPU engine can decode (the GGUF ids and ftchat's
// internal FP8 types) must have GPU kernels.
func TestTypesCoverCPU(t *testing.T) {
	types := []gguf.Type{gguf.FP8_E4M3, gguf.FP8_E4M3_B32}
	for tt := gguf.Type(0); tt < 64; tt++ {
		types = append(types, tt)
	}
	for _, tt := range types {
		if gguf.DequantizeSupported(tt) {
			if _, ok := kernelSuffix[tt]; !ok {
				t.Errorf("%s is supported by the CPU engine but has no GPU kernels", tt)
			}
		}
	}
}

// copyBatch must not share slices with the caller's batch: ops run later,
// after the caller may have reused them.
func TestCopyBatchIsDeep(t *testing.T) {
	b := &model.Batch{Tokens: []int32{1, 2}, Pos: []int32{5, 6},
		Seqs: []model.SeqSpan{{Offset: 0, Cached: 5, NewTokens: 2, Pages: []int32{3, 4}}}}
	c := copyBatch(b)
	b.Tokens[0], b.Pos[0], b.Seqs[0].Pages[0], b.Seqs[0].Cached = 9, 9, 9, 9
	if c.Tokens[0] != 1 || c.Pos[0] != 5 || c.Seqs[0].Pages[0] != 3 || c.Seqs[0].Cached != 5 {
		t.Errorf("copy shares memory with the original: %+v", c)
	}
}
