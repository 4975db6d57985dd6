package cli

import (
	"fmt"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// capacityPairRow is the `bench capacity` row of the K/V pair that
// --cache-type-k / --cache-type-v ask for (each half in its own dtype:
// a bf16 half costs 2 bytes per element, an fp8 half 1 plus its float32
// row scale), sized in the same budget as the other rows. ok is false
// when neither flag is set or the pair is one of the standard rows.
func capacityPairRow(o engine.Options, l kvcache.Layout, budget, weights, workspace int64, st kvcache.RecurrentState, bf16Tokens int) (row CapacityRow, ok bool, err error) {
	if o.KVDTypeK == "" && o.KVDTypeV == "" {
		return row, false, nil
	}
	base := kvcache.BF16
	if o.KVDType != "" {
		d, err := kvcache.ParseDType(o.KVDType)
		if err != nil {
			return row, false, err
		}
		base = d.Resolve(kvcache.BF16)
	}
	half := func(flag, s string) (kvcache.DType, error) {
		if s == "" {
			return base, nil
		}
		d, err := kvcache.ParseDType(s)
		if err != nil || d == kvcache.Auto {
			return 0, fmt.Errorf("%s %q is not supported; supported: bf16, fp16, fp8_e4m3, fp8_e5m2", flag, s)
		}
		return d, nil
	}
	k, err := half("--cache-type-k", o.KVDTypeK)
	if err != nil {
		return row, false, err
	}
	v, err := half("--cache-type-v", o.KVDTypeV)
	if err != nil {
		return row, false, err
	}
	if k == v {
		return row, false, nil // already a row of the table
	}
	x := l.WithDTypes(k, v)
	pages, err := kvcache.PlanHybridPool(budget, weights, workspace, st, x)
	if err != nil {
		return row, false, err
	}
	x.Pages = pages
	mode := "none"
	if x.AnyFP8() {
		mode = kvcache.DynamicScales.String()
	}
	row = CapacityRow{DType: x.DTypeName(), ScaleMode: mode, BytesPerToken: x.BytesPerToken(),
		Pages: pages, Tokens: x.Tokens(), PoolBytes: kvcache.PoolBytes(x)}
	if bf16Tokens > 0 {
		row.RatioVsBF16 = float64(row.Tokens) / float64(bf16Tokens)
	}
	return row, true, nil
}
