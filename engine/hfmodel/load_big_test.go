package hfmodel_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/model"
)

// TestLoadTime times Open + model.Load (CPU) of the checkpoint directory
// in FTCHAT_HF_DIR, and of the GGUF in FTCHAT_HF_GGUF when given, and logs
// the peak RSS; skipped without them.
func TestLoadTime(t *testing.T) {
	dir := os.Getenv("FTCHAT_HF_DIR")
	if dir == "" {
		t.Skip("set FTCHAT_HF_DIR to a checkpoint directory (and FTCHAT_HF_GGUF to its GGUF) to time loading")
	}
	load := func(name string, open func() (*gguf.File, error)) {
		t0 := time.Now()
		f, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		t1 := time.Now()
		be := cpu.New(cpu.Options{Threads: 2})
		defer be.Close()
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: open %v, model.Load %v, %s, weights %.1f MiB, peak RSS so far %s", name, t1.Sub(t0).Round(time.Millisecond),
			time.Since(t1).Round(time.Millisecond), m.Config.LayerSummary(), float64(m.Config.WeightBytes)/(1<<20), peakRSS())
	}
	load("checkpoint "+dir, func() (*gguf.File, error) { return hfmodel.Open(dir) })
	if p := os.Getenv("FTCHAT_HF_GGUF"); p != "" {
		load("GGUF "+p, func() (*gguf.File, error) { return gguf.Open(p) })
	}
}

func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
