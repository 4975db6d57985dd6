package ui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

// hybridStats are the numbers of Qwen3.6-35B-A3B in fp8 with a short
// conversation: KV counts the 10 attention layers (10,400 B/token), the
// state is 62.81 MiB per sequence in each of 4 slots.
func hybridStats() engine.Stats {
	const per = 4 * 30 * (3*8192 + 32*128*128)
	return engine.Stats{
		Model: "Qwen3.6 35B-A3B", Device: "cuda:0 NVIDIA H200", KVDType: "fp8_e4m3", PageSize: 64,
		PagesTotal: 9817, PagesUsed: 20, TokensCapacity: 628288, TokensUsed: 1250,
		BytesPerToken: 10400, BytesUsed: 1250 * 10400, BytesBF16: 1250 * 20480, CapacityRatio: 20480.0 / 10400,
		PoolBytes: 9817 * 64 * 10400, BudgetBytes: 8 << 30, WeightsBytes: 1450000000,
		StateLayers: 30, StateBytesPerSeq: per, StateSlots: 4, StateSlotsLive: 1, StateSnapshots: 2, StateBytes: 4 * per,
		StateRestores: 1, PrefillTokens: 1300, ReusedTokens: 400, DecodeTokens: 350,
	}
}

// The status pane shows the recurrent state apart from the KV, only for
// hybrid models.
func TestStatusPaneShowsStateApartFromKV(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         engine.Stats
		want, not []string
	}{
		{"hybrid", hybridStats(), []string{"KV ▕", "1,250 / 628,288 tok", "state 62.8 MiB/seq, 4 slots = 251 MiB", "kv fp8_e4m3"}, nil},
		{"one slot", func() engine.Stats { s := hybridStats(); s.StateSlots, s.StateBytes = 1, s.StateBytesPerSeq; return s }(),
			[]string{"state 62.8 MiB/seq, 1 slot = 62.8 MiB"}, nil},
		{"not hybrid", engine.Stats{KVDType: "bf16", TokensCapacity: 8192}, []string{"KV ▕"}, []string{"state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ansi.Strip(strings.Join(statusLines(tc.s, 200, newStyles()), "\n"))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("status lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("status has %q:\n%s", n, got)
				}
			}
		})
	}
	// Narrow terminals wrap whole items: the state item stays whole.
	narrow := ansi.Strip(strings.Join(statusLines(hybridStats(), 60, newStyles()), "\n"))
	if !strings.Contains(narrow, "state 62.8 MiB/seq, 4 slots = 251 MiB") {
		t.Errorf("at 60 columns the state item is split:\n%s", narrow)
	}
}

// /stats of a hybrid model: KV per token (attention layers only) and the
// state per sequence, slots and resumes, each on its own line.
func TestStatsTableHybridGolden(t *testing.T) {
	checkGolden(t, "stats_hybrid", statsTable(hybridStats())+"\n")
	if strings.Contains(statsTable(engine.Stats{}), "state") {
		t.Error("/stats of a model without recurrent layers shows a state")
	}
}
