package engine

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// kvTypes are the storage dtypes of the two halves of the KV cache,
// resolved (never Auto). K and V may differ (--cache-type-k/-v, /kvdtype
// k=… v=…): keys feed the softmax through q·k, values are averaged by it,
// so they tolerate rounding differently (docs/kv-cache.md §10).
type kvTypes struct{ k, v kvcache.DType }

func (t kvTypes) String() string { return kvcache.PairName(t.k, t.v) }

// anyFP8: static scales (--kv-scales) mean something for at least one half.
func (t kvTypes) anyFP8() bool { return t.k.IsFP8() || t.v.IsFP8() }

// adviceDType is what memory advice compares against: a 16-bit half means
// fp8 would still save memory.
func (t kvTypes) adviceDType() kvcache.DType {
	if !t.k.IsFP8() {
		return t.k
	}
	return t.v
}

func layoutTypes(l kvcache.Layout) kvTypes { return kvTypes{l.KType(), l.VType()} }

// loadKVTypes resolves --kv-cache-dtype and the per-half overrides
// --cache-type-k / --cache-type-v (empty: follow --kv-cache-dtype).
func (e *Engine) loadKVTypes() (kvTypes, error) {
	return resolveKVOptions(e.opts)
}

func resolveKVOptions(o Options) (kvTypes, error) {
	base := kvcache.Auto
	if o.KVDType != "" {
		var err error
		if base, err = kvcache.ParseDType(o.KVDType); err != nil {
			return kvTypes{}, err
		}
	}
	half := func(flag, s string) (kvcache.DType, error) {
		if s == "" {
			return base.Resolve(kvcache.BF16), nil
		}
		d, err := kvcache.ParseDType(s)
		if err != nil || d == kvcache.Auto {
			return 0, fmt.Errorf("%s %q is not supported; supported: bf16, fp16, fp8_e4m3, fp8_e5m2 (empty follows --kv-cache-dtype)", flag, s)
		}
		return d, nil
	}
	k, err := half("--cache-type-k", o.KVDTypeK)
	if err != nil {
		return kvTypes{}, err
	}
	v, err := half("--cache-type-v", o.KVDTypeV)
	if err != nil {
		return kvTypes{}, err
	}
	return kvTypes{k, v}, nil
}

// validateKVTypes is Options.Validate's check of the K/V dtype options:
// every pairing of bf16, fp16, fp8_e4m3 and fp8_e5m2 is accepted on the
// CPU; --device cuda refuses a pair the GPU does not run (a 16-bit K with
// an fp8 V does; with --device auto the GPU refuses the others when it
// allocates the pool), and --kv-scales needs an fp8 half.
func (o Options) validateKVTypes(dev Device) error {
	t, err := resolveKVOptions(o)
	if err != nil {
		return err
	}
	if dev.Kind == "cuda" && !kvcache.GPUPairSupported(t.k, t.v) {
		return kvcache.MixedOnGPUError(t.k, t.v)
	}
	if o.KVScales != "" && !t.anyFP8() {
		return fmt.Errorf("--kv-scales %q needs an fp8 --kv-cache-dtype (fp8_e4m3 or fp8_e5m2) for K or V, not %s", o.KVScales, t)
	}
	return nil
}

// resolveKVSpec reads a /kvdtype (or Reconfigure) argument: one dtype for
// both halves, or "k=bf16 v=fp8_e4m3" (a half left out keeps its dtype);
// auto is the model's 16-bit compute dtype.
func (e *Engine) resolveKVSpec(spec string) (kvTypes, error) {
	k, v, err := kvcache.ParseDTypePair(spec, e.layout.KType(), e.layout.VType())
	if err != nil {
		return kvTypes{}, err
	}
	return kvTypes{k.Resolve(kvcache.BF16), v.Resolve(kvcache.BF16)}, nil
}

// storedAs reports whether the pool already stores K and V as t (with the
// same scale source), so a switch to t has nothing to move.
func (e *Engine) storedAs(t kvTypes) bool {
	return t == layoutTypes(e.layout) && (!t.anyFP8() || e.layout.Scales == kvcache.DynamicScales && e.opts.KVScales == "")
}

// expandScales fills l's static scales from sf for l's fp8 halves (each
// rescaled to its own format); a 16-bit half ignores them.
func expandScales(sf *kvcache.ScalesFile, l *kvcache.Layout) error {
	kd, vd := l.KType(), l.VType()
	if !kd.IsFP8() {
		kd = vd
	}
	if !vd.IsFP8() {
		vd = kd
	}
	k, _, err := sf.Expand(kd)
	if err != nil {
		return err
	}
	_, v, err := sf.Expand(vd)
	if err != nil {
		return err
	}
	l.Scales, l.KScale, l.VScale = kvcache.StaticScales, k, v
	return nil
}
