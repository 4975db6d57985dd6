package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

// TestRemoteStatusPane: a remote engine's pane shows the server's numbers
// (or says it has none), never a local pool of zeros.
func TestRemoteStatusPane(t *testing.T) {
	base := engine.Stats{Model: "Qwen/Qwen3-8B", Device: "remote gpu:8000", KVDType: "remote", Remote: "http://gpu:8000/v1",
		RequestsRunning: -1, RequestsQueued: -1, FirstToken: 210 * time.Millisecond, PrefillTokensPerS: 4870, DecodeTokensPerS: 61.2}
	vllm := base
	vllm.RemoteKV, vllm.KVDType = "vLLM", "fp8"
	vllm.TokensCapacity, vllm.TokensUsed, vllm.RequestsRunning, vllm.RequestsQueued = 64000, 16000, 3, 1
	for _, tc := range []struct {
		name  string
		s     engine.Stats
		lines []string
	}{
		{"vLLM", vllm, []string{
			"server KV ▕████░░░░░░░░░░░░▏  25% · 16,000 / 64,000 tok (all clients)",
			"kv fp8 · 3 running · 1 queued · from vLLM /metrics",
			"first token 210 ms · prefill 4,870 tok/s · decode 61.2 tok/s · remote gpu:8000 · Qwen/Qwen3-8B",
		}},
		{"no metrics", base, []string{
			"server KV: not reported (no /metrics)",
			"first token 210 ms · prefill 4,870 tok/s · decode 61.2 tok/s · remote gpu:8000 · Qwen/Qwen3-8B",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statusLines(tc.s, 120, newStyles())
			for i := range got {
				got[i] = ansi.Strip(got[i])
			}
			if strings.Join(got, "\n") != strings.Join(tc.lines, "\n") {
				t.Errorf("status pane:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.lines, "\n"))
			}
			table := statsTable(tc.s)
			if !strings.Contains(table, "engine") || !strings.Contains(table, tc.s.Remote) || strings.Contains(table, "weights bytes") {
				t.Errorf("/stats:\n%s", table)
			}
			if w := contextWarning(tc.s); w != "" {
				t.Errorf("context warning on a remote engine: %s", w)
			}
		})
	}
}
