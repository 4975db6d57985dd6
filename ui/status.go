package ui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

// formatInt writes n with thousands separators: 131,072.
func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatBytes uses binary units with three significant digits: 786 MiB, 2.50 GiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v := float64(n)
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i := -1
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, units[i])
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, units[i])
	default:
		return fmt.Sprintf("%.2f %s", v, units[i])
	}
}

// formatRate shows tokens per second, or "-" before anything was measured.
func formatRate(r float64) string {
	switch {
	case r <= 0:
		return "-"
	case r >= 100:
		return formatInt(int64(r + 0.5))
	default:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
}

// bar draws a fixed-width usage bar of frac in [0,1].
func bar(frac float64, width int) string {
	if width < 1 {
		return ""
	}
	frac = min(max(frac, 0), 1)
	full := int(frac*float64(width) + 0.5)
	if frac > 0 && full == 0 {
		full = 1 // something used is never shown as empty
	}
	return "▕" + strings.Repeat("█", full) + strings.Repeat("░", width-full) + "▏"
}

// statusSegments are the status pane's items, grouped in lines that wrap
// as a whole when the terminal is narrow.
func statusSegments(s engine.Stats) [][]string {
	if s.Remote != "" {
		return remoteSegments(s) // ftchat --engine: the server's numbers
	}
	// The bar and its percentage count tokens, like the numbers beside
	// them (pages would disagree: a page is used by its first token).
	frac := 0.0
	if s.TokensCapacity > 0 {
		frac = float64(s.TokensUsed) / float64(s.TokensCapacity)
	}
	pool := []string{
		"KV " + bar(frac, 16) + fmt.Sprintf(" %3.0f%%", frac*100),
		formatInt(int64(s.TokensUsed)) + " / " + formatInt(int64(s.TokensCapacity)) + " tok",
		formatBytes(s.BytesUsed) + " / " + formatBytes(s.PoolBytes),
	}
	if s.StateLayers > 0 {
		// Hybrid model: the recurrent state, apart from the KV (which
		// counts the attention layers only), fixed per sequence.
		pool = append(pool, stateSegment(s))
	}
	dtype := s.KVDType
	if dtype == "" {
		dtype = "?"
	}
	ratio := "-"
	if s.CapacityRatio > 0 {
		ratio = "×" + strconv.FormatFloat(s.CapacityRatio, 'f', 2, 64)
	}
	kv := []string{
		"kv " + dtype,
		"now " + formatBytes(s.BytesUsed) + " vs bf16 " + formatBytes(s.BytesBF16),
		"capacity " + ratio + " of bf16",
	}
	if s.CapacityRatio <= 1 && s.FP8TokensCapacity > 0 {
		// bf16 or fp16: comparing with bf16 says nothing; say what the
		// switch to fp8 would give in the same memory.
		kv = []string{
			"kv " + dtype,
			"fp8 would hold " + formatInt(int64(s.FP8TokensCapacity)) + " tok",
			"/kvdtype fp8_e4m3",
		}
		if s.TokensCapacity > 0 {
			kv[1] += " (×" + strconv.FormatFloat(float64(s.FP8TokensCapacity)/float64(s.TokensCapacity), 'f', 2, 64) + ")"
		}
	}
	budget := "" // no --gpu-memory budget (CPU): nothing to show
	if s.BudgetBytes > 0 {
		budget = "budget " + formatBytes(s.BudgetBytes)
	}
	model := s.Model
	if model == "" {
		model = "?"
	}
	run := []string{
		"prefill " + formatRate(s.PrefillTokensPerS) + " tok/s",
		"decode " + formatRate(s.DecodeTokensPerS) + " tok/s",
		s.Device,
		budget,
		model,
	}
	if s.ExpertLayersHost > 0 {
		return [][]string{pool, kv, placementSegments(s), run}
	}
	return [][]string{pool, kv, run}
}

// placementSegments are the status pane's expert-placement items, shown
// only when some layers' routed experts live in host RAM: the plan (the
// KV as the pool allocated it) and how the host experts ran.
func placementSegments(s engine.Stats) []string {
	gpu := fmt.Sprintf("GPU: dense %s, experts %d/%d layers (%s), KV %s", formatBytes(s.DenseBytes),
		s.ExpertLayers-s.ExpertLayersHost, s.ExpertLayers, formatBytes(s.ExpertBytesDevice), formatBytes(s.PoolBytes))
	if s.StateBytes > 0 {
		gpu += ", state " + formatBytes(s.StateBytes)
	}
	gpu += ", workspace " + formatBytes(s.WorkspaceBytes)
	if s.StagingBytes > 0 {
		gpu += ", staging " + formatBytes(s.StagingBytes)
	}
	segs := []string{
		gpu,
		fmt.Sprintf("RAM: experts %d %s (%s)", s.ExpertLayersHost, plural(s.ExpertLayersHost, "layer", "layers"), formatBytes(s.ExpertBytesHost)),
		hostCalls(s),
		"PCIe " + streamedPerToken(s),
	}
	if hit, ok := expertHitRate(s); ok {
		segs = append(segs, "expert cache "+hit+" hit")
	}
	return segs
}

// streamedPerToken is the expert bytes streamed to the GPU per token the
// engine processed (prefilled or decoded): "12.3 MiB/tok", "-" before any.
func streamedPerToken(s engine.Stats) string {
	tokens := s.PrefillTokens + s.DecodeTokens
	if tokens <= 0 {
		return "-"
	}
	return formatBytes(s.ExpertStreamedBytes/tokens) + "/tok"
}

// expertHitRate is the expert cache's hit rate, when it was looked up.
func expertHitRate(s engine.Stats) (string, bool) {
	n := s.ExpertCacheHits + s.ExpertCacheMisses
	if n <= 0 {
		return "", false
	}
	return strconv.FormatFloat(100*float64(s.ExpertCacheHits)/float64(n), 'f', 1, 64) + "%", true
}

// stateSegment is the status pane's recurrent-state item of a hybrid
// model: "state 62.8 MiB/seq, 4 slots = 251 MiB" (/stats has the rest).
func stateSegment(s engine.Stats) string {
	return fmt.Sprintf("state %s/seq, %d %s = %s", formatBytes(s.StateBytesPerSeq), s.StateSlots,
		plural(s.StateSlots, "slot", "slots"), formatBytes(s.StateBytes))
}

// statusLines lays out the status pane for width columns.
func statusLines(s engine.Stats, width int, st styles) []string {
	return layoutSegments(statusSegments(s), width, st)
}

// statusLinesPrefill is the status pane while a prompt is prefilled: the
// engine's stats still predate the turn, so the bar shows the tokens
// cached before it plus the prefill's progress (done of total new
// tokens), the part still to compute shaded; the notice line has the
// numbers (issue 15 item 14: the bar stood still).
func statusLinesPrefill(s engine.Stats, done, total, width int, st styles) []string {
	groups := statusSegments(s)
	if total > 0 && s.TokensCapacity > 0 {
		c := float64(s.TokensCapacity)
		doneFrac := float64(s.TokensUsed+done) / c
		pool := groups[0]
		pool[0] = "KV " + prefillBar(doneFrac, float64(s.TokensUsed+total)/c, 16) + fmt.Sprintf(" %3.0f%%", min(doneFrac, 1)*100)
	}
	return layoutSegments(groups, width, st)
}

// prefillBar is bar with a second, shaded part from done to upto: what
// the running prefill is about to fill.
func prefillBar(done, upto float64, width int) string {
	done, upto = min(max(done, 0), 1), min(max(upto, 0), 1)
	full := int(done*float64(width) + 0.5)
	if done > 0 && full == 0 {
		full = 1
	}
	pend := max(int(upto*float64(width)+0.5)-full, 0)
	if upto > done && pend == 0 && full < width {
		pend = 1
	}
	return "▕" + strings.Repeat("█", full) + strings.Repeat("▒", pend) + strings.Repeat("░", width-full-pend) + "▏"
}

// layoutSegments joins each group's items with " · ", wrapping a group
// onto more lines when it is wider than width.
func layoutSegments(groups [][]string, width int, st styles) []string {
	sep := st.dim.Render(" · ")
	var out []string
	for _, group := range groups {
		line, w := "", 0
		for _, seg := range group {
			if seg == "" {
				continue
			}
			sw := ansi.StringWidth(seg)
			if w > 0 && w+3+sw > width {
				out = append(out, line)
				line, w = "", 0
			}
			if w > 0 {
				line += sep
				w += 3
			}
			line += seg
			w += sw
		}
		if w > 0 {
			out = append(out, ansi.Truncate(line, width, "…"))
		}
	}
	return out
}

// statsTable is the full /stats output.
func statsTable(s engine.Stats) string {
	if s.Remote != "" {
		return remoteStatsTable(s)
	}
	rows := [][2]string{
		{"model", s.Model},
		{"device", s.Device},
		{"kv dtype", s.KVDType},
		{"page size", formatInt(int64(s.PageSize)) + " tokens"},
		{"pages used / total", formatInt(int64(s.PagesUsed)) + " / " + formatInt(int64(s.PagesTotal))},
		{"tokens used / capacity", formatInt(int64(s.TokensUsed)) + " / " + formatInt(int64(s.TokensCapacity))},
		{"bytes per token", formatInt(int64(s.BytesPerToken)) + kvLayersNote(s)},
		{"kv bytes used", formatBytes(s.BytesUsed) + " (" + formatInt(s.BytesUsed) + " B)"},
		{"same tokens in bf16", formatBytes(s.BytesBF16) + " (" + formatInt(s.BytesBF16) + " B)"},
		{"capacity ratio vs bf16", strconv.FormatFloat(s.CapacityRatio, 'f', 3, 64)},
		{"pool bytes", formatBytes(s.PoolBytes)},
		{"weights bytes", formatBytes(s.WeightsBytes)},
		{"memory budget", budgetString(s.BudgetBytes)},
	}
	if s.StateLayers > 0 {
		rows = append(rows, [][2]string{
			{"state per sequence", fmt.Sprintf("%s (%s B: %d recurrent layers, float32, any length and KV dtype)",
				formatBytes(s.StateBytesPerSeq), formatInt(s.StateBytesPerSeq), s.StateLayers)},
			{"state slots", fmt.Sprintf("%d live + %d snapshots of %d (%s)", s.StateSlotsLive, s.StateSnapshots, s.StateSlots, formatBytes(s.StateBytes))},
			{"state resumed (total)", fmt.Sprintf("%s from a snapshot, %s from token 0", formatInt(s.StateRestores), formatInt(s.StateRestarts))},
		}...)
	}
	if s.ExpertLayersHost > 0 {
		rows = append(rows, placementRows(s)...)
	}
	rows = append(rows, [][2]string{
		{"prefill tok/s (last turn)", formatRate(s.PrefillTokensPerS)},
		{"decode tok/s (last turn)", formatRate(s.DecodeTokensPerS)},
		{"last turn prefill", prefillTime(s)},
		{"last turn total time", s.LastTurnDuration.Round(time.Millisecond).String() + " (prefill and decode)"},
		{"prefilled (total)", formatInt(s.PrefillTokens)},
		{"reused from cache (total)", formatInt(s.ReusedTokens)},
		{"decoded (total)", formatInt(s.DecodeTokens)},
	}...)
	w := 0
	for _, r := range rows {
		w = max(w, len(r[0]))
	}
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%-*s  %s", w, r[0], r[1])
	}
	return b.String()
}

// placementRows are /stats' lines on the expert placement, present only
// when some layers' routed experts live in host RAM.
func placementRows(s engine.Stats) [][2]string {
	pinned := "pageable"
	if s.ExpertHostPinned {
		pinned = "pinned"
	}
	rows := [][2]string{
		{"expert placement", strings.Join(placementSegments(s)[:2], "; ")},
		{"experts on GPU", fmt.Sprintf("%d of %d layers × %d experts (%s)", s.ExpertLayers-s.ExpertLayersHost, s.ExpertLayers, s.ExpertsPerLayer, formatBytes(s.ExpertBytesDevice))},
		{"experts in RAM", fmt.Sprintf("%d layers (%s, %s), run: %s", s.ExpertLayersHost, formatBytes(s.ExpertBytesHost), pinned, s.ExpertRun)},
		{"staging (GPU)", formatBytes(s.StagingBytes)},
		{"host expert calls", hostCallsDetail(s)},
		{"streamed to GPU", fmt.Sprintf("%s (%s)", formatBytes(s.ExpertStreamedBytes), streamedPerToken(s))},
		{"host expert time", fmt.Sprintf("%s on the CPU, %s copying", s.ExpertCPUTime.Round(time.Millisecond), s.ExpertStreamTime.Round(time.Millisecond))},
	}
	if s.ExpertStreamError != "" {
		rows = append(rows, [2]string{"streaming off", s.ExpertStreamError + " (those calls ran on the CPU)"})
	}
	if s.ExpertMapError != "" {
		rows = append(rows, [2]string{"mapped reads off", s.ExpertMapError + " (those calls ran on the CPU)"})
	}
	if s.ExpertPinError != "" {
		rows = append(rows, [2]string{"host experts not pinned", s.ExpertPinError})
	}
	if hit, ok := expertHitRate(s); ok {
		rows = append(rows, [2]string{"expert cache", fmt.Sprintf("%s hit (%s hits, %s misses)", hit, formatInt(s.ExpertCacheHits), formatInt(s.ExpertCacheMisses))})
	}
	return rows
}

// kvLayersNote says, for a hybrid model, that the KV numbers count the
// attention layers only.
func kvLayersNote(s engine.Stats) string {
	if s.StateLayers > 0 {
		return " (attention layers only)"
	}
	return ""
}

// prefillTime is the latest turn's prefill: its tokens and, from the
// engine's prefill rate, its time (the turn's duration includes decoding).
func prefillTime(s engine.Stats) string {
	n := formatInt(int64(s.LastPrefillTokens)) + " tokens"
	if s.LastPrefillTokens > 0 && s.PrefillTokensPerS > 0 {
		d := time.Duration(float64(s.LastPrefillTokens) / s.PrefillTokensPerS * float64(time.Second))
		n += " in " + d.Round(time.Millisecond).String()
	}
	return n
}

func budgetString(b int64) string {
	if b <= 0 {
		return "none (all device memory / CPU)"
	}
	return formatBytes(b)
}

// plural picks the word for n: 1 line, 2 lines.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// hostCalls is the pane's count of host-expert MoE calls by how they ran;
// mapped calls show only once there are some, so a pane without them reads
// as before mapped reads existed.
func hostCalls(s engine.Stats) string {
	if s.ExpertSplitCalls > 0 {
		return fmt.Sprintf("host experts %s split / %s mapped / %s cpu / %s streamed calls",
			formatInt(s.ExpertSplitCalls), formatInt(s.ExpertMappedCalls), formatInt(s.ExpertCPUCalls), formatInt(s.ExpertStreamCalls))
	}
	if s.ExpertMappedCalls > 0 {
		return fmt.Sprintf("host experts %s mapped / %s cpu / %s streamed calls",
			formatInt(s.ExpertMappedCalls), formatInt(s.ExpertCPUCalls), formatInt(s.ExpertStreamCalls))
	}
	return fmt.Sprintf("host experts %s cpu / %s streamed calls", formatInt(s.ExpertCPUCalls), formatInt(s.ExpertStreamCalls))
}

// hostCallsDetail is /stats' row of the same counts with their tokens.
func hostCallsDetail(s engine.Stats) string {
	d := fmt.Sprintf("%s on the CPU (%s tokens), %s streamed (%s tokens)",
		formatInt(s.ExpertCPUCalls), formatInt(s.ExpertCPUTokens), formatInt(s.ExpertStreamCalls), formatInt(s.ExpertStreamTokens))
	if s.ExpertMappedCalls > 0 {
		d = fmt.Sprintf("%s mapped (%s tokens), ", formatInt(s.ExpertMappedCalls), formatInt(s.ExpertMappedTokens)) + d
	}
	if s.ExpertSplitCalls > 0 {
		d = fmt.Sprintf("%s split GPU/CPU (%s tokens, %d slots a token on the CPU, CPU %s of %s), ", formatInt(s.ExpertSplitCalls),
			formatInt(s.ExpertSplitTokens), s.ExpertSplitCPUSlots, s.ExpertSplitCPUTime.Round(time.Millisecond), s.ExpertSplitTime.Round(time.Millisecond)) + d
	}
	return d
}
