package gpu

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// deviceBytesRef is an independent count of what keeping the experts of
// the MoE blocks among the first h on the host costs the device.
func deviceBytesRef(in PlacementInput, h int) int64 {
	total := in.Dense + in.KV + in.State + in.Workspace + in.Reserve
	var largest int64
	for l, e := range in.Experts {
		if l < h {
			largest = max(largest, e)
		} else {
			total += e
		}
	}
	if largest > 0 && in.Run != HostCPU && in.Run != HostMapped {
		total += StreamStagingBytes(largest) // the backend's staging for the largest host layer
	}
	return total
}

func randomInput(r *rand.Rand) PlacementInput {
	const mib = int64(1) << 20
	blocks := r.IntN(64)
	in := PlacementInput{ExpertsPerBlock: 1 + r.IntN(512), Run: HostRun(r.IntN(4)), Dense: r.Int64N(8 << 10 * mib), KV: r.Int64N(8 << 10 * mib),
		Workspace: r.Int64N(2 << 10 * mib), Reserve: r.Int64N(512 * mib)}
	if r.IntN(2) == 0 {
		in.State = r.Int64N(1 << 10 * mib)
	}
	layer := 1 + r.Int64N(1<<10*mib)
	for range blocks {
		e := layer
		switch r.IntN(6) {
		case 0:
			e = 0 // a dense block among MoE ones
		case 1:
			e = 1 + r.Int64N(1<<10*mib) // uneven layers
		}
		in.Experts = append(in.Experts, e)
	}
	// Budgets around the interesting range: from below the fixed part to
	// above everything.
	var all int64
	for _, e := range in.Experts {
		all += e
	}
	in.Budget = r.Int64N(in.Dense + in.KV + in.State + in.Workspace + in.Reserve + all + 3*layer + 1)
	return in
}

func checkPlan(t *testing.T, in PlacementInput, p PlacementPlan, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrPlacement) || !errors.Is(err, ErrBudget) {
			t.Fatalf("%+v: error %v does not wrap ErrPlacement/ErrBudget", in, err)
		}
		return
	}
	h := p.NCPUMoE()
	for l := range in.Experts {
		if want := l < h && in.Experts[l] > 0; p.Placement.OnHost(l) != want {
			t.Fatalf("%+v: block %d on host %v, want %v (host blocks must be a prefix, MoE blocks only)", in, l, p.Placement.OnHost(l), want)
		}
		if want := in.ExpertsPerBlock; in.Experts[l] == 0 || p.Placement.OnHost(l) {
			want = 0
			if p.ExpertsOnDevice(l) != want {
				t.Fatalf("block %d: %d experts on the device, want %d", l, p.ExpertsOnDevice(l), want)
			}
		} else if p.ExpertsOnDevice(l) != want {
			t.Fatalf("block %d: %d experts on the device, want %d", l, p.ExpertsOnDevice(l), want)
		}
	}
	if got, want := p.DeviceBytes(), deviceBytesRef(in, h); got != want {
		t.Fatalf("%+v: plan counts %d device bytes, reference %d", in, got, want)
	}
	if p.DeviceBytes() > in.Budget || p.Spare != in.Budget-p.DeviceBytes() {
		t.Fatalf("%+v: device %d bytes, spare %d, of a %d budget", in, p.DeviceBytes(), p.Spare, in.Budget)
	}
	var host, dev int64
	for l, e := range in.Experts {
		if p.Placement.OnHost(l) {
			host += e
		} else {
			dev += e
		}
	}
	if host != p.HostExperts || dev != p.DeviceExperts || p.HostBlocks != p.Placement.HostLayers() {
		t.Fatalf("%+v: host %d/%d bytes, device %d/%d, host blocks %d/%d", in, p.HostExperts, host, p.DeviceExperts, dev, p.HostBlocks, p.Placement.HostLayers())
	}
	if (p.Staging > 0) != (p.HostBlocks > 0 && in.Run != HostCPU && in.Run != HostMapped) {
		t.Fatalf("staging %d with %d host blocks, run %d", p.Staging, p.HostBlocks, in.Run)
	}
}

// The budget property (issue 12): for random shapes and budgets the plan
// never exceeds the budget; the automatic plan keeps as many blocks on
// the device as fit (one more would not); forced modes keep their count;
// and a plan fails exactly when no placement of its kind fits.
func TestPlacementBudgetProperty(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		for range 1000 {
			in := randomInput(r)
			L := len(in.Experts)
			anyFits := false
			for h := 0; h <= L; h++ {
				anyFits = anyFits || deviceBytesRef(in, h) <= in.Budget
			}

			in.Mode = PlaceAuto
			p, err := PlanPlacement(in)
			checkPlan(t, in, p, err)
			if (err == nil) != anyFits {
				t.Fatalf("auto %+v: error %v, but a placement fits: %v", in, err, anyFits)
			}
			if err == nil {
				h := p.NCPUMoE()
				// Moving the last host block back to the device (the next
				// smaller prefix) must not fit: nothing more could go there.
				for k := 0; k < h; k++ {
					if deviceBytesRef(in, k) <= in.Budget {
						t.Fatalf("auto %+v: keeps %d blocks on the host but %d fit", in, h, k)
					}
				}
			}

			n := r.IntN(L + 3)
			in.Mode, in.HostBlocks = PlaceFirstN, n
			p, err = PlanPlacement(in)
			checkPlan(t, in, p, err)
			if fits := deviceBytesRef(in, n) <= in.Budget; (err == nil) != fits {
				t.Fatalf("--n-cpu-moe %d %+v: error %v, fits %v", n, in, err, fits)
			}
			if err == nil && p.NCPUMoE() > n {
				t.Fatalf("--n-cpu-moe %d: %d blocks on the host", n, p.NCPUMoE())
			}
			if err == nil {
				for l := range min(n, L) {
					if in.Experts[l] > 0 && !p.Placement.OnHost(l) {
						t.Fatalf("--n-cpu-moe %d: block %d on the device", n, l)
					}
				}
			}

			in.Mode, in.HostBlocks = PlaceAllHost, 0
			p, err = PlanPlacement(in)
			checkPlan(t, in, p, err)
			if fits := deviceBytesRef(in, L) <= in.Budget; (err == nil) != fits {
				t.Fatalf("--cpu-moe %+v: error %v, fits %v", in, err, fits)
			}
			if err == nil && p.DeviceExperts != 0 {
				t.Fatalf("--cpu-moe: %d expert bytes on the device", p.DeviceExperts)
			}
		}
	}
}

func TestPlacementEdgeCases(t *testing.T) {
	const gib = int64(1) << 30
	base := PlacementInput{Dense: gib, KV: gib, Workspace: gib / 2, Reserve: gib / 4, ExpertsPerBlock: 8}
	with := func(f func(*PlacementInput)) PlacementInput { in := base; f(&in); return in }
	cases := []struct {
		name       string
		in         PlacementInput
		wantErr    string
		host, devB int
	}{
		{"no MoE blocks, fits", with(func(in *PlacementInput) { in.Budget = 3 * gib }), "", 0, 0},
		{"no MoE blocks, does not fit", with(func(in *PlacementInput) { in.Budget = 2 * gib }), "exceed the 2.00 GiB available", 0, 0},
		{"exactly the budget, all on device", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib}
			in.Budget = base.fixed() + 2*gib
		}), "", 0, 2},
		{"one byte short: one block to the host costs staging", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + 4*gib - 1
		}), "", 3, 1},
		{"single MoE block: staging makes the host plan dearer", with(func(in *PlacementInput) {
			in.Experts = []int64{gib}
			in.Budget = base.fixed() + gib
		}), "", 0, 1},
		{"single MoE block just short", with(func(in *PlacementInput) {
			in.Experts = []int64{gib}
			in.Budget = base.fixed() + gib - 1
		}), "even with every layer's experts in host RAM", 0, 0},
		{"dense blocks in between", with(func(in *PlacementInput) {
			in.Experts = []int64{0, gib, 0, gib, gib, gib}
			in.Budget = base.fixed() + 3*gib + 1<<20 // 1 MiB over: room for the staging slots' alignment
		}), "", 3, 1},
		{"--expert-run cpu: no staging, so one host block fits", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + 4*gib - 1
			in.Run = HostCPU
		}), "", 1, 3},
		{"--expert-run mapped: no staging either", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + 4*gib - 1
			in.Run = HostMapped
		}), "", 1, 3},
		{"--cpu-moe", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib}
			in.Budget = 100 * gib
			in.Mode = PlaceAllHost
		}), "", 2, 0},
		{"--n-cpu-moe beyond the blocks", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib}
			in.Budget = 100 * gib
			in.Mode, in.HostBlocks = PlaceFirstN, 99
		}), "", 2, 0},
		{"--n-cpu-moe too few", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + 3*gib + 1<<20
			in.Mode, in.HostBlocks = PlaceFirstN, 1
		}), "--n-cpu-moe 3 fits (1 layers' experts on the GPU)", 0, 0},
		{"--n-cpu-moe where none is needed", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + 4*gib
			in.Mode, in.HostBlocks = PlaceFirstN, 1
		}), "without the flag every layer's experts fit on the GPU", 0, 0},
		{"--n-cpu-moe, nothing fits", with(func(in *PlacementInput) {
			in.Experts = []int64{gib, gib, gib, gib}
			in.Budget = base.fixed() + gib
			in.Mode, in.HostBlocks = PlaceFirstN, 1
		}), "no count of host layers fits", 0, 0},
		{"negative", with(func(in *PlacementInput) { in.Experts = []int64{-1}; in.Budget = gib }), "invalid placement input", 0, 0},
		{"zero budget", with(func(in *PlacementInput) { in.Experts = []int64{gib} }), "exceed the 0 B available", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanPlacement(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, tc.in, p, err)
			if p.HostBlocks != tc.host || p.DeviceBlocks != tc.devB {
				t.Errorf("host %d device %d blocks, want %d and %d: %s", p.HostBlocks, p.DeviceBlocks, tc.host, tc.devB, p.Summary())
			}
		})
	}
}

func TestExpertTensorBlock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block int
		ok    bool
	}{
		{"blk.0.ffn_gate_exps.weight", 0, true},
		{"blk.39.ffn_down_exps.weight", 39, true},
		{"blk.7.ffn_up_exps.scale", 7, true},
		{"blk.3.ffn_gate_up_exps.weight", 3, true},
		{"blk.3.ffn_gate_shexp.weight", 0, false},
		{"blk.3.ffn_gate_inp.weight", 0, false},
		{"blk.03.ffn_up_exps.weight", 0, false},
		{"blk.-1.ffn_up_exps.weight", 0, false},
		{"blk.x.ffn_up_exps.weight", 0, false},
		{"ffn_up_exps.weight", 0, false},
		{"blk.2.ffn_up_exps.bias", 0, false},
	} {
		b, ok := ExpertTensorBlock(tc.name)
		if b != tc.block || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, b, ok, tc.block, tc.ok)
		}
	}
}

// FuzzPlanPlacement: any input either is refused or gives a plan within
// its budget (no overflow, no panic).
func FuzzPlanPlacement(f *testing.F) {
	f.Add(int64(8<<30), int64(1<<30), int64(1<<30), int64(1<<28), int64(1<<29), int64(1<<28), int64(1<<28), 40, uint8(0), 0, uint8(0))
	f.Add(int64(-1), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1), 1, uint8(2), 5, uint8(1))
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), 3, uint8(1), 1, uint8(2))
	f.Fuzz(func(t *testing.T, budget, dense, kv, state, ws, reserve, layer int64, blocks int, mode uint8, n int, run uint8) {
		if blocks < 0 || blocks > 256 {
			return
		}
		in := PlacementInput{Budget: budget, Dense: dense, KV: kv, State: state, Workspace: ws, Reserve: reserve,
			Mode: PlacementMode(mode % 4), HostBlocks: n, Run: HostRun(run % 4), ExpertsPerBlock: 8}
		for l := range blocks {
			in.Experts = append(in.Experts, layer+int64(l%3))
		}
		p, err := PlanPlacement(in)
		if err == nil && (p.DeviceBytes() > in.Budget || p.DeviceBytes() < 0 || p.Spare < 0) {
			t.Fatalf("%+v: device %d bytes, spare %d", in, p.DeviceBytes(), p.Spare)
		}
	})
}
