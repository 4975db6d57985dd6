package engine

import (
	"context"
	"testing"
)

// TestStatsFP8CapacityIsWhatTheSwitchGives guards issue 15 item 14: the
// status pane's "fp8 would hold N tok" in bf16 must be the capacity that
// /kvdtype fp8_e4m3 then has.
func TestStatsFP8CapacityIsWhatTheSwitchGives(t *testing.T) {
	e := load(t, Options{KVTokens: 2048, KVDType: "bf16"})
	before := e.Stats()
	if before.FP8TokensCapacity <= before.TokensCapacity {
		t.Fatalf("bf16 pool of %d tokens: FP8TokensCapacity = %d, want more", before.TokensCapacity, before.FP8TokensCapacity)
	}
	if err := e.Reconfigure(context.Background(), "fp8_e4m3", nil); err != nil {
		t.Fatal(err)
	}
	after := e.Stats()
	if after.TokensCapacity != before.FP8TokensCapacity {
		t.Errorf("fp8_e4m3 holds %d tokens, the bf16 status said %d", after.TokensCapacity, before.FP8TokensCapacity)
	}
	if after.FP8TokensCapacity != 0 {
		t.Errorf("in fp8_e4m3 FP8TokensCapacity = %d, want 0", after.FP8TokensCapacity)
	}
}
