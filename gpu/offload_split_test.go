package gpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
)

// TestSplitCPUSlots checks the split path's CPU share: the default from
// the measured rates, Placement.SplitCPU, FTCHAT_SPLIT_CPU and its errors.
func TestSplitCPUSlots(t *testing.T) {
	t.Setenv("FTCHAT_CPU_INTDOT", "")
	for _, c := range []struct {
		k            int
		gpuGBs, cpuG float64
		want         int
	}{
		{8, splitMappedGBs, splitCPUGBs, 1},    // 8·11/48 = 1.8: the CPU's 1 slot (161 µs) beside the device's 7 (336 µs)
		{8, splitMappedGBs, splitCPUIntGBs, 3}, // 8·27.5/64.5 = 3.4
		{8, 10, 30, 6},                         // 8·30/40 = 6
		{8, 1, 1000, 7},                        // the device keeps one slot
		{2, splitMappedGBs, splitCPUGBs, 1},    // at least one for the CPU
		{1, splitMappedGBs, splitCPUGBs, 0},    // top-1: nothing to split
	} {
		if got := splitCPUSlots(c.k, c.gpuGBs, c.cpuG); got != c.want {
			t.Errorf("splitCPUSlots(%d, %g, %g) = %d, want %d", c.k, c.gpuGBs, c.cpuG, got, c.want)
		}
	}
	for _, c := range []struct {
		p       Placement
		env     string
		k, want int
		err     string
	}{
		{Placement{}, "", 8, 1, ""},
		{Placement{CPUIntDot: true}, "", 8, 3, ""},
		{Placement{SplitCPU: 2}, "5", 8, 2, ""},
		{Placement{}, "5", 8, 5, ""},
		{Placement{}, "0", 8, 0, ""},
		{Placement{}, "12", 8, 8, ""},
		{Placement{}, "x", 8, 0, `FTCHAT_SPLIT_CPU="x"`},
		{Placement{}, "-1", 8, 0, `FTCHAT_SPLIT_CPU="-1"`},
	} {
		t.Setenv("FTCHAT_SPLIT_CPU", c.env)
		got, err := c.p.splitCPU(c.k)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v, FTCHAT_SPLIT_CPU=%q: error %v, want one naming %s", c.p, c.env, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v, FTCHAT_SPLIT_CPU=%q: %d slots, %v; want %d", c.p, c.env, got, err, c.want)
		}
	}
	g := &Backend{}
	if err := g.SetPlacement(Placement{HostExperts: []bool{true}, Run: HostSplit, SplitCPU: -1}); err == nil {
		t.Error("SplitCPU -1 accepted")
	}
	if err := g.SetPlacement(Placement{HostExperts: []bool{true}, Run: hostRunEnd}); err == nil {
		t.Error("an unknown run mode accepted")
	}
}

// TestHostExpertSplit runs MoE calls over host-resident experts on the
// split path (HostSplit) for Q4_K and NVFP4 with per-expert second-level
// scales, 1 row (the device's GEMVs queued before the host wait, and
// packed as for more rows: splitEarly off) and 3 rows, with 1, 2 and all 4
// of the top-4 slots on the CPU,
// directly and recorded as decode steps (three steps: captured, then
// replayed with new inputs), the output poisoned with NaN first. It must
// match the experts in device memory (forced to the float32 decode GEMVs)
// and the CPU backend's MoE within 1e-4 (tolMoEGemv): the same sum, but
// the device adds its slots in another order (its GEMVs stride over fewer
// slots) and then the CPU's partial sum, whose dots are the CPU kernels'.
// On the integer-dot path the CPU's slots carry 8-bit activations (~0.5%
// each in gate/up and down): within 3e-2 of the float references, where a
// wrong or stale expert is an O(1) error.
func TestHostExpertSplit(t *testing.T) {
	d := openTestDevice(t)
	dev := newTestBackend(t)
	ref := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(ref.Close)
	t.Setenv("FTCHAT_SPLIT_CPU", "")
	r := rand.New(rand.NewPCG(61, 62))
	const E, dim, ff, K = 16, 512, 256, 4
	for _, tc := range []moeCase{{gguf.Q4_K, gguf.Q4_K}, {gguf.NVFP4, gguf.NVFP4}} {
		hm := newHostMoE(r, 2, tc, E, dim, ff)
		if tc.gu == gguf.NVFP4 {
			for i := 1; i < 4; i++ {
				hm.scales[i] = make([]float32, E)
				for e := range hm.scales[i] {
					hm.scales[i][e] = float32(0.5 + r.Float64())
				}
			}
		}
		dm, cm := hm.load(t, dev, K), hm.load(t, ref, K)
		for _, intDot := range []bool{false, true} {
			for _, kc := range []int{1, 2, K} {
				for _, recorded := range []bool{false, true} {
					name := fmt.Sprintf("%s/intdot=%v/cpu=%d/recorded=%v", tc.gu, intDot, kc, recorded)
					g, err := NewBackend(d, BackendOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if err := g.SetPlacement(Placement{HostExperts: []bool{false, false, true}, Run: HostSplit, SplitCPU: kc, CPUIntDot: intDot}); err != nil {
						t.Fatal(err)
					}
					gm := hm.load(t, g, K)
					tol := tolMoEGemv
					if intDot && tc.gu == gguf.Q4_K {
						tol = 3e-2
					}
					calls := 0
					for _, rc := range []struct {
						n     int
						early bool
					}{{1, true}, {1, false}, {3, true}} {
						n := rc.n
						splitEarly = rc.early
						steps := 1
						if recorded {
							steps = 3
						}
						for step := range steps {
							x := randVec(r, n*dim, 1)
							gx, gy := g.NewTensor(n, dim), g.NewTensor(n, dim)
							g.FromHost(gx, x)
							g.FromHost(gy, nanVec(n*dim))
							if recorded {
								g.BeginStep()
							}
							g.MoE(gy, gx, gm)
							if recorded {
								g.EndStep()
							}
							calls++
							got := make([]float32, n*dim)
							g.ToHost(gy, got)
							if err := g.Err(); err != nil {
								t.Fatalf("%s n=%d: %v", name, n, err)
							}
							g.FreeTensor(gx)
							g.FreeTensor(gy)

							moeForce.Store(1)
							wantDev := make([]float32, n*dim)
							dx, dy := dev.NewTensor(n, dim), dev.NewTensor(n, dim)
							dev.FromHost(dx, x)
							dev.MoE(dy, dx, dm)
							dev.ToHost(dy, wantDev)
							dev.FreeTensor(dx)
							dev.FreeTensor(dy)
							moeForce.Store(0)
							if err := dev.Err(); err != nil {
								t.Fatal(err)
							}
							wantCPU := make([]float32, n*dim)
							cx, cy := ref.NewTensor(n, dim), ref.NewTensor(n, dim)
							ref.FromHost(cx, x)
							ref.MoE(cy, cx, cm)
							ref.ToHost(cy, wantCPU)

							for _, w := range []struct {
								what string
								v    []float32
							}{{"device-resident experts", wantDev}, {"the CPU backend", wantCPU}} {
								e, err := relErr(got, w.v)
								if err != nil || e > tol {
									t.Errorf("%s n=%d early=%v step %d: relative error %.3g against %s, %v (tolerance %g)", name, n, rc.early, step, e, w.what, err, tol)
								} else if step == 0 {
									t.Logf("%s n=%d early=%v: relative error %.2g against %s", name, n, rc.early, e, w.what)
								}
							}
						}
					}
					splitEarly = true
					st := g.OffloadStats()
					if st.SplitCalls != int64(calls) || st.SplitTokens != int64(calls/3*(1+1+3)) || st.SplitCPUSlots != kc ||
						st.MappedCalls != 0 || st.CPUCalls != 0 || st.MappedLayers != 1 || st.SplitCPUTime <= 0 || st.SplitTime < st.SplitCPUTime {
						t.Errorf("%s: stats %+v; want %d split calls with %d CPU slots, on the one mapped layer, none mapped or on the CPU alone", name, st, calls, kc)
					}
					if recorded {
						gs, err := g.GraphStats()
						if err != nil {
							t.Fatal(err)
						}
						t.Logf("%s: graphs %+v", name, gs)
					}
					if err := g.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}
