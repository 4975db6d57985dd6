package kvcache

import "testing"

// FuzzParseDTypePair reads mutated /kvdtype arguments. A spec is either
// refused with an error, or it gives valid dtypes whose name
// (PairName) parses back to the same pair.
func FuzzParseDTypePair(f *testing.F) {
	for _, s := range []string{"fp8", "k=bf16 v=fp8_e4m3", "V=e5m2,K=fp16", "k=fp8_e4m3/v=bf16", "v=", "k==bf16", "=", " , ", "k=auto v=auto", "key=half value=e4m3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := ParseDTypePair(s, F16, FP8E5M2)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if !k.Valid() || !v.Valid() {
			t.Fatalf("%q: invalid dtypes %d, %d", s, k, v)
		}
		k, v = k.Resolve(BF16), v.Resolve(BF16)
		k2, v2, err := ParseDTypePair(PairName(k, v), Auto, Auto)
		if err != nil || k2 != k || v2 != v {
			t.Fatalf("%q -> %v %v, name %q parses to %v %v (%v)", s, k, v, PairName(k, v), k2, v2, err)
		}
	})
}
