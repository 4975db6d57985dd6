package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

// TestStatusPaneSavingsAndBar guards issue 15 item 14: in bf16 the savings
// line said nothing useful, "no budget" was jargon, and the bar's
// percentage counted pages while the numbers beside it counted tokens.
func TestStatusPaneSavingsAndBar(t *testing.T) {
	base := engine.Stats{
		Model: "m", Device: "cpu (2 threads)", PageSize: 64,
		PagesTotal: 128, PagesUsed: 2, TokensCapacity: 8192, TokensUsed: 70,
		BytesUsed: 70 * 100, BytesBF16: 70 * 100,
	}
	tests := []struct {
		name      string
		mut       func(s *engine.Stats)
		want, not []string
	}{
		{"bf16 says what fp8 gives", func(s *engine.Stats) { s.KVDType, s.CapacityRatio, s.FP8TokensCapacity = "bf16", 1, 15360 },
			[]string{"kv bf16", "fp8 would hold 15,360 tok (×1.88)", "/kvdtype fp8_e4m3"}, []string{"vs bf16", "capacity ×1.00"}},
		{"fp8 shows its savings", func(s *engine.Stats) { s.KVDType, s.CapacityRatio, s.BytesUsed = "fp8_e4m3", 1.88, 70*53 },
			[]string{"kv fp8_e4m3", "vs bf16", "capacity ×1.88 of bf16"}, []string{"would hold"}},
		{"no budget on the CPU is not shown", func(s *engine.Stats) { s.KVDType = "bf16" }, nil, []string{"budget"}},
		{"a budget is shown", func(s *engine.Stats) { s.BudgetBytes = 8 << 30 }, []string{"budget 8.00 GiB"}, nil},
		// 70 of 8,192 tokens is 1% (the 2 of 128 pages would say 2%).
		{"bar counts tokens", nil, []string{"   1% · 70 / 8,192 tok"}, []string{"2%"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			if tt.mut != nil {
				tt.mut(&s)
			}
			got := ansi.Strip(strings.Join(statusLines(s, 200, newStyles()), "\n"))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("status lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("status has %q:\n%s", n, got)
				}
			}
		})
	}
}

// TestStatsSeparatesPrefillFromTurnTime guards issue 15 item 15: /stats
// labelled the whole turn's time (prefill and decode) as prefill time.
func TestStatsSeparatesPrefillFromTurnTime(t *testing.T) {
	s := engine.Stats{LastPrefillTokens: 500, PrefillTokensPerS: 1000, DecodeTokensPerS: 50, LastTurnDuration: 2500 * time.Millisecond}
	got := strings.Join(strings.Fields(statsTable(s)), " ") // columns vary in width
	for _, w := range []string{"last turn prefill 500 tokens in 500ms", "last turn total time 2.5s (prefill and decode)"} {
		if !strings.Contains(got, w) {
			t.Errorf("/stats lacks %q:\n%s", w, got)
		}
	}
}
