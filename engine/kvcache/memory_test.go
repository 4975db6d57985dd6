package kvcache

import (
	"fmt"
	"strings"
	"testing"
)

// TestHostPoolRefusedBeyondAvailableMemory guards NewHostStore against
// pool sizes the machine cannot hold: --kv-tokens 1000000000000 used to
// panic in makeslice, 10000000 (230 GB for SmolLM2) to abort out of
// memory. The pool is planned first and refused with what it needs and
// what the machine has.
func TestHostPoolRefusedBeyondAvailableMemory(t *testing.T) {
	defer func(f func() (int64, bool)) { hostMemory = f }(hostMemory)
	smol := func(tokens int, dt DType) Layout { // SmolLM2-135M geometry
		return Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 64, Pages: PagesForTokens(tokens, 64), DType: dt}
	}
	cases := []struct {
		name   string
		l      Layout
		avail  int64
		known  bool
		want   string // "" = accepted
		wantNo string
	}{
		{"1e12 tokens", smol(1e12, BF16), 24 << 30, true, "needs 21457672.12 GiB, this machine has 24.00 GiB available", ""},
		{"1e7 tokens", smol(1e7, BF16), 24 << 30, true, "needs 214.58 GiB", ""},
		{"1e7 tokens fp8", smol(1e7, FP8E4M3), 24 << 30, true, "lower --kv-tokens/--ctx-size", "use --kv-cache-dtype"},
		{"unknown memory", smol(1e7, BF16), 0, false, "cannot be read", ""},
		{"fits", smol(8192, BF16), 24 << 30, true, "", ""},
		{"fits fallback", smol(8192, FP8E4M3), 0, false, "", ""},
	}
	if err := CheckHostBudget(1<<62, 23040, BF16); err == nil || !strings.Contains(err.Error(), "more than 8 EiB") {
		t.Errorf("CheckHostBudget(2^62 tokens): %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hostMemory = func() (int64, bool) { return c.avail, c.known }
			s, err := NewHostStore(c.l)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
				if len(s.layers) != c.l.Layers {
					t.Fatal("store not built")
				}
			case err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "KV pool of "+fmt.Sprint(c.l.Tokens())+" tokens") ||
				c.wantNo != "" && strings.Contains(err.Error(), c.wantNo):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestAvailableMemoryReadsThisMachine: on Linux the real value is read.
func TestAvailableMemoryReadsThisMachine(t *testing.T) {
	n, ok := AvailableMemory()
	if ok && n <= 0 {
		t.Errorf("AvailableMemory = %d, %v", n, ok)
	}
	t.Logf("available: %s (known %v)", FormatBytes(n), ok)
}
