package kvcache

import (
	"strings"
	"testing"
)

// The recurrent state of a hybrid model comes off the budget before the
// pool; a budget too small for it, or for it and one page, says so with
// the numbers.
func TestPlanHybridPool(t *testing.T) {
	// Qwen3.6-35B-A3B: 10 attention layers, 2 KV heads, head_dim 256;
	// 30 GDN layers of 3*8192 conv + 32*128*128 delta floats.
	l := Layout{Layers: 10, KVHeads: 2, HeadDim: 256, PageSize: 64, DType: BF16}
	per := int64(4 * 30 * (3*8192 + 32*128*128))
	st := RecurrentState{Slots: 4, PerSlot: per}
	if got := st.String(); got != "4 slots × 62.81 MiB = 251.25 MiB" {
		t.Errorf("String() = %q", got)
	}
	const gib = 1 << 30
	for _, tc := range []struct {
		name                string
		budget, weights, ws int64
		st                  RecurrentState
		dt                  DType
		wantPages           int
		wantErr, wantErrNot string
	}{
		{"no state is PlanPool", 2 * gib, gib, 0, RecurrentState{}, BF16, gib / (20480 * 64), "", ""},
		{"state comes off first, bf16", 2 * gib, gib, 0, st, BF16, int((gib - st.Bytes()) / (20480 * 64)), "", ""},
		{"state comes off first, fp8", 2 * gib, gib, 0, st, FP8E4M3, int((gib - st.Bytes()) / (10400 * 64)), "", ""},
		{"too small for the state", gib + 100<<20, gib, 0, st, BF16, 0, "leave 100.00 MiB, less than the recurrent state of the hybrid model (4 slots × 62.81 MiB = 251.25 MiB", "KV page"},
		{"weights alone too big", gib, gib + 100<<20, 0, st, BF16, 0, "weights 1.10 GiB + workspace 0 B exceed it by 100.00 MiB, before the recurrent state of the hybrid model (4 slots × 62.81 MiB = 251.25 MiB) and any KV page", ""},
		{"state fits, no page", gib + st.Bytes() + 1000, gib, 0, st, BF16, 0, "+ recurrent state 4 slots × 62.81 MiB = 251.25 MiB leave 1000 B, less than one KV page (64 tokens of bf16 = 1.25 MiB)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := l
			x.DType = tc.dt
			pages, err := PlanHybridPool(tc.budget, tc.weights, tc.ws, tc.st, x)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || tc.wantErrNot != "" && strings.Contains(err.Error(), tc.wantErrNot) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || pages != tc.wantPages {
				t.Fatalf("pages %d, %v; want %d", pages, err, tc.wantPages)
			}
		})
	}
}
