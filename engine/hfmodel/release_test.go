package hfmodel_test

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/hfmodel/hfsynth"
	"github.com/ftchat/ftchat/internal/mmapfile"
)

// TestReleasedPagesAreNotRead loads checkpoints whose built tensors give
// back the shard pages they were built from (hfsynth's qwen35moe-tiny in
// each quantization, and the fixtures) with mmapfile.Guard on, so that any
// later read of a released range (by another build, the backend or the
// forward pass) kills the test binary at the read; runs a prefill on the
// CPU; and requires the logits bit for bit equal to a fresh load that gives
// nothing back. On Linux the hfsynth checkpoints must give pages back.
func TestReleasedPagesAreNotRead(t *testing.T) {
	spec, err := synth.Preset("qwen35moe-tiny", gguf.BF16)
	if err != nil {
		t.Fatal(err)
	}
	type ckpt struct{ name, dir string }
	var cks []ckpt
	for _, q := range hfsynth.Quants() {
		dir := filepath.Join(t.TempDir(), q)
		if err := hfsynth.Write(dir, spec, q, 3, nil); err != nil {
			t.Fatal(err)
		}
		cks = append(cks, ckpt{"qwen35moe-tiny-" + q, dir})
	}
	for _, arch := range archs {
		cks = append(cks, ckpt{arch, filepath.Join("testdata", arch)})
	}
	toks := []int32{1, 7, 42, 3, 99, 250, 5, 17}
	for _, ck := range cks {
		t.Run(ck.name, func(t *testing.T) {
			load := func(release bool) ([]float32, int64) {
				defer hfmodel.SetReleaseSources(release)()
				defer mmapfile.Guard(mmapfile.Guard(release))
				before := hfmodel.ReleasedBytes()
				f, err := hfmodel.Open(ck.dir)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				lg, _ := logits(t, f, toks)
				return lg, hfmodel.ReleasedBytes() - before
			}
			got, released := load(true)
			want, kept := load(false)
			if kept != 0 {
				t.Errorf("a load with releasing off gave back %d bytes", kept)
			}
			t.Logf("%s: gave back %d bytes of shard pages", ck.name, released)
			if runtime.GOOS == "linux" && ck.dir != filepath.Join("testdata", ck.name) && released == 0 {
				t.Error("nothing given back")
			}
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("logit %d is %v after giving pages back, %v without", i, got[i], want[i])
				}
			}
		})
	}
}
