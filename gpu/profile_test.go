package gpu

import (
	"strings"
	"testing"
)

// TestProfileReport checks the profile table without a GPU: decode-step
// rows come first, sorted by time, per step; rates are bytes and FLOPs
// over the kernel time; rows outside steps are totals.
func TestProfileReport(t *testing.T) {
	p := newProfiler()
	p.steps = 4
	p.stats[profKey{phase: profStep, name: "gemvx_q4_k", grid: Dim3{X: 256}}] = &profStat{calls: 8, ms: 0.04, bytes: 8 * 1e6}
	p.stats[profKey{phase: profStep, name: "rmsnorm", grid: Dim3{X: 1}}] = &profStat{calls: 4, ms: 0.008}
	p.stats[profKey{phase: profOutside, name: "gemml_q4_k", grid: Dim3{X: 16, Y: 4}}] = &profStat{calls: 1, ms: 0.5, flops: 5e9}
	var sb strings.Builder
	p.report(&sb, "test GPU")
	out := sb.String()
	for _, want := range []string{
		"test GPU, 4 decode steps, kernel time 12.0 µs per step",
		// 8 calls over 4 steps, 40 µs in all: 5 µs a call, 10 per step; 8 MB in 40 µs = 200 GB/s.
		"| gemvx_q4_k | 256x1x1 | 2.00 | 5.00 | 10.0 | 83.3% | 200 |  |",
		"| rmsnorm | 1x1x1 | 1.00 | 2.00 | 2.0 | 16.7% |  |  |",
		// 5 GFLOP in 0.5 ms = 10 TFLOP/s.
		"| gemml_q4_k | 16x4x1 | 1 | 500.00 | 500.0 | 100.0% |  | 10.0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "gemvx_q4_k") > strings.Index(out, "rmsnorm") {
		t.Errorf("step rows not sorted by time:\n%s", out)
	}
}
