package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestBudgetRefusesBeyondLimit(t *testing.T) {
	b := budget{limit: 8 << 30}
	if err := b.reserve(6<<30, "weights"); err != nil {
		t.Fatal(err)
	}
	err := b.reserve(3<<30, "KV pool")
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("want ErrBudget, got %v", err)
	}
	for _, want := range []string{"KV pool", "3.00 GiB", "6.00 GiB", "8.00 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := b.reserve(2<<30, "KV pool"); err != nil {
		t.Fatalf("exactly filling the budget must succeed: %v", err)
	}
	b.release(6 << 30)
	st := b.stats()
	if st.Used != 2<<30 || st.Peak != 8<<30 || st.Budget != 8<<30 {
		t.Errorf("stats = %+v", st)
	}
}

func TestPlanMemory(t *testing.T) {
	const gib = 1 << 30
	// Llama-3.2-1B shape, fp8 dynamic: 2*16*8*(64+4) bytes per token, pages of 16.
	page := int64(2*16*8*(64+4)) * 16
	tests := []struct {
		name                        string
		budget, weights, ws, res, p int64
		wantPages                   int
		wantErr                     bool
	}{
		{"rest to pool", 8 * gib, 2 * gib, gib / 2, gib / 4, page, int((8*gib - 2*gib - gib/2 - gib/4) / page), false},
		{"exactly one page", 10 + 3*page, 10, 0, 0, page, 3, false},
		{"weights too big", 8 * gib, 9 * gib, 0, 0, page, 0, true},
		{"bad input", 0, 0, 0, 0, page, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanMemory(tc.budget, tc.weights, tc.ws, tc.res, tc.p)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if p.Pages != tc.wantPages || p.Pool != int64(p.Pages)*tc.p {
				t.Errorf("pages = %d (pool %d), want %d", p.Pages, p.Pool, tc.wantPages)
			}
			if p.Weights+p.Workspace+p.Reserve+p.Pool > tc.budget {
				t.Errorf("plan %+v exceeds budget", p)
			}
		})
	}
	// A Llama-3.2-1B-shaped model (about 1.2 GiB of weights) under 8 GiB must
	// get a pool of at least 131072 fp8 tokens.
	p, err := PlanMemory(8*gib, 1300<<20, 512<<20, 256<<20, page)
	if err != nil {
		t.Fatal(err)
	}
	if tokens := p.Pages * 16; tokens < 131072 {
		t.Errorf("8 GiB plan holds %d fp8 tokens, want >= 131072", tokens)
	}
}

func TestLoadCUBLASMessage(t *testing.T) {
	path, err := LoadCUBLAS()
	if err != nil {
		if !strings.Contains(err.Error(), "cuBLAS") || path != "" {
			t.Errorf("unclear error %q (path %q)", err, path)
		}
		t.Logf("cuBLAS: %v", err)
		return
	}
	t.Logf("cuBLAS found at %s", path)
}
