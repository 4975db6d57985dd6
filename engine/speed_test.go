package engine

import (
	"context"
	"testing"
)

func TestBenchSpeedMeasuresAndFrees(t *testing.T) {
	e := load(t, Options{KVTokens: 1024})
	r, err := e.BenchSpeed(context.Background(), 300, 32, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.PrefillPerS <= 0 || r.DecodePerS <= 0 || r.KVDType != "bf16" {
		t.Fatalf("result %+v", r)
	}
	if r.PoolTokensUsed != 300+32+4 {
		t.Fatalf("pool held %d tokens during the run, want %d", r.PoolTokensUsed, 336)
	}
	if st := e.Stats(); st.PagesUsed != 0 {
		t.Fatalf("bench left %d pages in use", st.PagesUsed)
	}
	if _, err := e.BenchSpeed(context.Background(), 5000, 32, 4, 1); err == nil {
		t.Fatal("a depth beyond the pool must fail with a pool-full error")
	}
}
