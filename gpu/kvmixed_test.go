package gpu

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// A pool whose K and V dtypes differ is refused before anything touches
// the device (so this runs without a GPU, on a Ctx that has none), with
// the message that says what works where; the CPU backend runs them.
func TestAllocKVRefusesMixedDTypes(t *testing.T) {
	base := kvcache.Layout{Layers: 2, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 4}
	for _, p := range [][2]kvcache.DType{{kvcache.BF16, kvcache.FP8E4M3}, {kvcache.FP8E4M3, kvcache.BF16}, {kvcache.F16, kvcache.FP8E5M2}} {
		l := base.WithDTypes(p[0], p[1])
		kv, err := (&Ctx{}).AllocKV(l)
		if kv != nil || err == nil {
			t.Fatalf("%s: allocated", l.DTypeName())
		}
		want := "different K and V dtypes (" + l.DTypeName() + ") run on the CPU backend only"
		if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "--device cpu") || strings.Contains(msg, "\n") {
			t.Errorf("%s: %q; want one line with %q and the way out", l.DTypeName(), msg, want)
		}
	}
}
