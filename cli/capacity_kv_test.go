package cli

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// The --cache-type-k/-v row counts each half in its own dtype: SmolLM2's
// shape (30 layers, 3 kv heads, head_dim 64) has a bf16 half of 30*3*128 =
// 11,520 B/token and an fp8 half of 30*3*(64+4) = 6,120.
func TestCapacityPairRow(t *testing.T) {
	l := kvcache.Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 64}
	const budget = 7 << 30
	bf16Tokens := int(budget/(64*23040)) * 64
	for _, c := range []struct {
		o            engine.Options
		name, scales string
		bpt          int
		err          string
	}{
		{engine.Options{KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3"}, "k=bf16 v=fp8_e4m3", "dynamic", 17640, ""},
		{engine.Options{KVDType: "fp8_e5m2", KVDTypeV: "fp16"}, "k=fp8_e5m2 v=fp16", "dynamic", 17640, ""},
		{engine.Options{KVDTypeK: "fp16"}, "k=fp16 v=bf16", "none", 23040, ""},
		{engine.Options{KVDTypeK: "int8"}, "", "", 0, `--cache-type-k "int8" is not supported`},
	} {
		row, ok, err := capacityPairRow(c.o, l, budget, 0, 0, kvcache.RecurrentState{}, bf16Tokens)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c.o, err, c.err)
			}
			continue
		}
		tokens := int(budget/(64*int64(c.bpt))) * 64
		if err != nil || !ok || row.DType != c.name || row.ScaleMode != c.scales || row.BytesPerToken != c.bpt ||
			row.Tokens != tokens || row.RatioVsBF16 != float64(tokens)/float64(bf16Tokens) {
			t.Errorf("%+v: %+v ok=%v err=%v; want %s %s %d B/token, %d tokens", c.o, row, ok, err, c.name, c.scales, c.bpt, tokens)
		}
	}
	// No flags, or both halves alike: nothing to add (the table has it).
	for _, o := range []engine.Options{{}, {KVDTypeK: "fp8", KVDTypeV: "fp8_e4m3"}} {
		if _, ok, err := capacityPairRow(o, l, budget, 0, 0, kvcache.RecurrentState{}, bf16Tokens); ok || err != nil {
			t.Errorf("%+v: ok=%v err=%v, want no row", o, ok, err)
		}
	}
}
