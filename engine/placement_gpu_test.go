package engine

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/gpu"
)

// TestGPUExpertPlacement loads the 35B-A3B shape cut to 4 blocks (432 MiB
// of routed experts per block) under budgets and flags that keep experts
// in host RAM: the load fits the plan (the allocator would refuse
// otherwise), the stats carry the plan, and a decode runs the host blocks
// through the backend's host path (its counters move); with --expert-run
// split the decode steps split each host call between the GPU and the
// host cores (the split counters move, the 64-token prefill streams).
func TestGPUExpertPlacement(t *testing.T) {
	needGPU(t)
	path := synthModel(t, "qwen3.6-35b-a3b-4l", gguf.Q4_K)
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name string
		o    Options
		host int // host layers; 0: any from 1 to 4 (automatic)
	}{
		{"auto in 2.5 GiB", Options{GPUMemory: 5 * gib / 2, ContextLen: 4096}, 0}, // dense 0.62 GiB, 0.42 GiB a layer: 1 layer fits beside the staging
		{"--n-cpu-moe 2", Options{GPUMemory: 8 * gib, ContextLen: 4096, NCPUMoE: 2}, 2},
		{"--cpu-moe --expert-run cpu", Options{GPUMemory: 8 * gib, ContextLen: 4096, CPUMoE: true, ExpertRun: "cpu"}, 4},
		{"--n-cpu-moe 2 --expert-run split", Options{GPUMemory: 8 * gib, ContextLen: 4096, NCPUMoE: 2, ExpertRun: "split"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := loadOn(t, path, "cuda", "fp8_e4m3", tc.o)
			st := e.Stats()
			t.Logf("plan: %s; pool %d tokens", e.plan.Summary(), st.TokensCapacity)
			if tc.host > 0 && st.ExpertLayersHost != tc.host || st.ExpertLayersHost < 1 || st.ExpertLayers != 4 {
				t.Fatalf("%d of %d layers on the host, want %d", st.ExpertLayersHost, st.ExpertLayers, tc.host)
			}
			if st.TokensCapacity < tc.o.ContextLen {
				t.Errorf("pool of %d tokens, fewer than --ctx-size %d", st.TokensCapacity, tc.o.ContextLen)
			}
			prompt := make([]int32, 64)
			for i := range prompt {
				prompt[i] = int32(300 + i*7919%2000)
			}
			greedyRun(t, e, prompt, 8, nil)
			st = e.Stats()
			if st.ExpertCPUCalls+st.ExpertStreamCalls == 0 {
				t.Errorf("no MoE call ran on the host path: %+v", st)
			}
			if tc.o.ExpertRun == "cpu" && st.ExpertStreamCalls != 0 {
				t.Errorf("--expert-run cpu streamed %d calls", st.ExpertStreamCalls)
			}
			if tc.o.ExpertRun == "split" {
				// 8 decode steps (greedyRun), each one 1-row call per host
				// layer (a prefill chunk under 12 rows would add more).
				if st.ExpertRun != "split" || st.ExpertSplitCalls < int64(8*tc.host) || st.ExpertSplitTokens < st.ExpertSplitCalls ||
					st.ExpertSplitCPUSlots < 1 || st.ExpertSplitCPUTime <= 0 || st.ExpertMappedCalls != 0 || st.ExpertCPUCalls != 0 {
					t.Errorf("--expert-run split: stats %+v; want the decode calls split (%d host layers), none mapped or on the CPU", st, tc.host)
				}
			}
			ms := e.be.(*gpu.Backend).Device().MemStats()
			if ms.Peak > e.budget {
				t.Errorf("peak %d bytes over the %d budget", ms.Peak, e.budget)
			}
			if !strings.Contains(e.plan.Summary(), "RAM: experts") {
				t.Errorf("summary %q", e.plan.Summary())
			}
		})
	}
}
