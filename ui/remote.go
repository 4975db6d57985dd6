package ui

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// remoteSegments is the status pane of a remote engine (ftchat --engine):
// the server's KV pool as its /metrics reports it (shared by all its
// clients), its request counts, and the rates measured here.
func remoteSegments(s engine.Stats) [][]string {
	var pool []string
	switch {
	case s.TokensCapacity > 0:
		frac := float64(s.TokensUsed) / float64(s.TokensCapacity)
		pool = []string{
			"server KV " + bar(frac, 16) + fmt.Sprintf(" %3.0f%%", frac*100),
			formatInt(int64(s.TokensUsed)) + " / " + formatInt(int64(s.TokensCapacity)) + " tok (all clients)",
		}
		if s.PoolBytes > 0 {
			pool = append(pool, formatBytes(s.BytesUsed)+" / "+formatBytes(s.PoolBytes))
		}
	case s.RemoteKV != "":
		pool = []string{"server KV: " + s.RemoteKV + " reports no pool size"}
	default:
		pool = []string{"server KV: not reported (no /metrics)"}
	}
	kv := []string{}
	if s.KVDType != "" && s.KVDType != "remote" {
		kv = append(kv, "kv "+s.KVDType)
	}
	if s.CapacityRatio > 0 {
		kv = append(kv, "capacity ×"+strconv.FormatFloat(s.CapacityRatio, 'f', 2, 64)+" of bf16")
	}
	if s.RequestsRunning >= 0 {
		kv = append(kv, fmt.Sprintf("%d running", s.RequestsRunning))
	}
	if s.RequestsQueued >= 0 {
		kv = append(kv, fmt.Sprintf("%d queued", s.RequestsQueued))
	}
	if s.RemoteKV != "" {
		kv = append(kv, "from "+s.RemoteKV+" /metrics")
	}
	model := s.Model
	if model == "" {
		model = "?"
	}
	run := []string{
		"first token " + formatDuration(s.FirstToken),
		"prefill " + formatRate(s.PrefillTokensPerS) + " tok/s",
		"decode " + formatRate(s.DecodeTokensPerS) + " tok/s",
		s.Device,
		model,
	}
	return [][]string{pool, kv, run}
}

// formatDuration is a latency for the status pane: 210 ms, 1.4 s, "-".
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	}
}

// remoteStatsTable is /stats for a remote engine.
func remoteStatsTable(s engine.Stats) string {
	source := s.RemoteKV
	if source == "" {
		source = "not reported (the server has no /metrics ftchat reads)"
	}
	reqs := func(n int) string {
		if n < 0 {
			return "-"
		}
		return formatInt(int64(n))
	}
	rows := [][2]string{
		{"model", s.Model},
		{"engine", s.Remote},
		{"kv numbers from", source},
		{"kv dtype", s.KVDType},
		{"server tokens used / capacity", formatInt(int64(s.TokensUsed)) + " / " + formatInt(int64(s.TokensCapacity)) + " (all its clients)"},
		{"server pages used / total", formatInt(int64(s.PagesUsed)) + " / " + formatInt(int64(s.PagesTotal))},
		{"server requests running", reqs(s.RequestsRunning)},
		{"server requests queued", reqs(s.RequestsQueued)},
		{"first token (last turn)", formatDuration(s.FirstToken)},
		{"prefill tok/s (last turn)", formatRate(s.PrefillTokensPerS) + " (measured here: prompt tokens / time to first token)"},
		{"decode tok/s (last turn)", formatRate(s.DecodeTokensPerS) + " (measured here)"},
		{"last turn prompt tokens", formatInt(int64(s.LastPrefillTokens)) + " (not served from the server's prefix cache)"},
		{"last turn total time", s.LastTurnDuration.Round(time.Millisecond).String()},
		{"prompt tokens (total)", formatInt(s.PrefillTokens)},
		{"cached prompt tokens (total)", formatInt(s.ReusedTokens)},
		{"generated (total)", formatInt(s.DecodeTokens)},
	}
	w := 0
	for _, r := range rows {
		w = max(w, len(r[0]))
	}
	out := ""
	for i, r := range rows {
		if i > 0 {
			out += "\n"
		}
		out += fmt.Sprintf("%-*s  %s", w, r[0], r[1])
	}
	return out
}
