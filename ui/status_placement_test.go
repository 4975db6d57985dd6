package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

// offloadStats are Qwen3.6-35B-A3B (Q4_K) under --gpu-memory 8GiB with fp8
// KV for 131,072 tokens: 9 of 40 layers' experts on the GPU, 31 in RAM,
// after a short turn (the placement as the planner gives it; the KV and
// state numbers are hybridStats').
func offloadStats() engine.Stats {
	s := hybridStats()
	const layer = 453378048 // one layer's 256 Q4_K experts
	s.ExpertLayers, s.ExpertLayersHost, s.ExpertsPerLayer = 40, 31, 256
	s.ExpertBytesDevice, s.ExpertBytesHost = 9*layer, 31*layer
	s.DenseBytes, s.WorkspaceBytes, s.StagingBytes = 1449551872, 186878976, 2*layer
	s.ExpertRun = "auto"
	s.ExpertCPUCalls, s.ExpertCPUTokens, s.ExpertStreamCalls, s.ExpertStreamTokens = 10850, 10850, 62, 1300
	s.ExpertStreamedBytes = 62 * layer
	s.ExpertCPUTime, s.ExpertStreamTime = 4321*time.Millisecond, 310*time.Millisecond
	return s
}

// The status pane and /stats show the plan and the host experts'
// counters only when some experts are in host RAM.
func TestStatusPaneShowsPlacement(t *testing.T) {
	got := ansi.Strip(strings.Join(statusLines(offloadStats(), 200, newStyles()), "\n"))
	for _, w := range []string{
		"GPU: dense 1.35 GiB, experts 9/40 layers (3.80 GiB), KV 6.09 GiB, state 251 MiB, workspace 178 MiB, staging 865 MiB",
		"RAM: experts 31 layers (13.1 GiB)", "host experts 10,850 cpu / 62 streamed calls", "PCIe 16.2 MiB/tok",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("status lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "expert cache") {
		t.Errorf("no cache lookups, yet a hit rate:\n%s", got)
	}
	s := offloadStats()
	s.ExpertCacheHits, s.ExpertCacheMisses = 700, 300
	if got := ansi.Strip(strings.Join(statusLines(s, 200, newStyles()), "\n")); !strings.Contains(got, "expert cache 70.0% hit") {
		t.Errorf("status lacks the hit rate:\n%s", got)
	}
	for _, s := range []engine.Stats{hybridStats(), {KVDType: "bf16", TokensCapacity: 8192}} {
		if got := ansi.Strip(strings.Join(statusLines(s, 200, newStyles()), "\n")); strings.Contains(got, "RAM:") || strings.Contains(got, "experts") {
			t.Errorf("nothing offloaded, yet a plan:\n%s", got)
		}
	}
	// Narrow: the items wrap whole.
	narrow := ansi.Strip(strings.Join(statusLines(offloadStats(), 80, newStyles()), "\n"))
	if !strings.Contains(narrow, "RAM: experts 31 layers (13.1 GiB)") {
		t.Errorf("at 80 columns the RAM item is split:\n%s", narrow)
	}
}

func TestStatsTablePlacementGolden(t *testing.T) {
	s := offloadStats()
	s.ExpertCacheHits, s.ExpertCacheMisses = 700, 300
	checkGolden(t, "stats_offload", statsTable(s)+"\n")
	s.ExpertStreamError = "gpu: staging for streamed experts (2 x 453379072 bytes): GPU memory budget exceeded"
	s.ExpertPinError = "cuMemHostRegister: CUDA_ERROR_NOT_PERMITTED"
	got := statsTable(s)
	for _, w := range []string{"streaming off  ", "(those calls ran on the CPU)", "host experts not pinned", "CUDA_ERROR_NOT_PERMITTED"} {
		if !strings.Contains(got, w) {
			t.Errorf("/stats lacks %q:\n%s", w, got)
		}
	}
}

// Mapped calls (the GPU reading experts in host RAM) are counted in the pane
// and in /stats once there are some; a map error is one /stats row.
func TestPlacementShowsMappedCalls(t *testing.T) {
	s := offloadStats()
	s.ExpertRun = "mapped"
	s.ExpertMappedCalls, s.ExpertMappedTokens = 3100, 3100
	pane := ansi.Strip(strings.Join(statusLines(s, 200, newStyles()), "\n"))
	if w := "host experts 3,100 mapped / 10,850 cpu / 62 streamed calls"; !strings.Contains(pane, w) {
		t.Errorf("status lacks %q:\n%s", w, pane)
	}
	s.ExpertMapError = "cuMemHostGetDevicePointer: CUDA_ERROR_NOT_SUPPORTED"
	table := statsTable(s)
	for _, w := range []string{"3,100 mapped (3,100 tokens), 10,850 on the CPU", "mapped reads off", "CUDA_ERROR_NOT_SUPPORTED (those calls ran on the CPU)"} {
		if !strings.Contains(table, w) {
			t.Errorf("/stats lacks %q:\n%s", w, table)
		}
	}
}

// Split calls (--expert-run split) are counted in the pane and in /stats,
// with the CPU's share, once there are some.
func TestPlacementShowsSplitCalls(t *testing.T) {
	s := offloadStats()
	s.ExpertRun = "split"
	s.ExpertSplitCalls, s.ExpertSplitTokens, s.ExpertSplitCPUSlots = 2900, 3000, 3
	s.ExpertSplitTime, s.ExpertSplitCPUTime = 1200*time.Millisecond, 700*time.Millisecond
	pane := ansi.Strip(strings.Join(statusLines(s, 200, newStyles()), "\n"))
	if w := "host experts 2,900 split / 0 mapped / 10,850 cpu / 62 streamed calls"; !strings.Contains(pane, w) {
		t.Errorf("status lacks %q:\n%s", w, pane)
	}
	table := statsTable(s)
	if w := "2,900 split GPU/CPU (3,000 tokens, 3 slots a token on the CPU, CPU 700ms of 1.2s), 10,850 on the CPU"; !strings.Contains(table, w) {
		t.Errorf("/stats lacks %q:\n%s", w, table)
	}
}
