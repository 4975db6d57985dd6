package engine

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/gpu"
)

// shapeOnlyModel writes a synth preset whose header (metadata and tensor
// infos) is real and whose tensor data is a hole (a sparse file of the
// model's full size), and opens it: the planner reads only the header.
func shapeOnlyModel(t *testing.T, preset string, wt gguf.Type) (*gguf.File, model.Config) {
	t.Helper()
	spec, err := synth.Preset(preset, wt)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := spec.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), preset+".gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := gguf.NewWriter(out, kv, spec.Tensors())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "tensors missing") {
		t.Fatalf("closing a header-only writer: %v", err)
	}
	hdr, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	infos := w.Tensors()
	last := infos[len(infos)-1]
	if err := out.Truncate(hdr + int64(last.Offset+last.Bytes()+31)/32*32); err != nil {
		t.Fatal(err)
	}
	out.Close()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := model.ReadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// Realistic plans: the Qwen3.6-35B-A3B shape in Q4_K and NVFP4 and
// Qwen3-30B-A3B in Q4_K under an 8 GiB budget, fp8 KV for a 131,072-token
// context (issue 12's headline), and what --cpu-moe and --n-cpu-moe give.
func TestPlanExpertsRealShapes(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		preset  string
		wt      gguf.Type
		opts    Options
		dt      kvcache.DType
		budget  int64
		devBlks int // layers whose experts stay on the GPU
		wantErr string
	}{
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{ContextLen: 131072}, kvcache.FP8E4M3, 8 * gib, 9, ""},
		{"qwen3.6-35b-a3b", gguf.NVFP4, Options{ContextLen: 131072}, kvcache.FP8E4M3, 8 * gib, 8, ""},
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{ContextLen: 131072, ExpertRun: "cpu"}, kvcache.FP8E4M3, 8 * gib, 11, ""}, // no staging: two more layers
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{ContextLen: 131072, CPUMoE: true}, kvcache.FP8E4M3, 8 * gib, 0, ""},
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{ContextLen: 131072, NCPUMoE: 36}, kvcache.FP8E4M3, 8 * gib, 4, ""},
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{ContextLen: 131072, NCPUMoE: 20}, kvcache.FP8E4M3, 8 * gib, 0, "--n-cpu-moe 31 fits (9 layers' experts on the GPU)"},
		// bf16 KV for the model's whole 262,144 tokens (5 GiB) leaves no
		// room for any expert in 8 GiB; in 7 GiB not even the rest fits.
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{}, kvcache.BF16, 8 * gib, 0, ""},
		{"qwen3.6-35b-a3b", gguf.Q4_K, Options{}, kvcache.BF16, 7 * gib, 0, "lower --ctx-size, use --kv-cache-dtype fp8_e4m3, or raise --gpu-memory"},
		{"qwen3-30b-a3b", gguf.Q4_K, Options{ContextLen: 32768}, kvcache.FP8E4M3, 8 * gib, 14, ""},
		// A budget that holds the whole model: nothing moves.
		{"qwen3-30b-a3b", gguf.Q4_K, Options{ContextLen: 32768}, kvcache.FP8E4M3, 40 * gib, 48, ""},
	} {
		name := tc.preset + "/" + tc.wt.String() + "/" + tc.dt.String()
		t.Run(name, func(t *testing.T) {
			f, c := shapeOnlyModel(t, tc.preset, tc.wt)
			w := ReadExpertWeights(f, c)
			if w.Dense+w.Total() < c.WeightBytes || w.Dense > c.WeightBytes/4 {
				t.Fatalf("dense %d + experts %d vs weights %d", w.Dense, w.Total(), c.WeightBytes)
			}
			p, err := PlanExperts(c, w, tc.opts, PlacementRequest{Budget: tc.budget, Used: 64 << 20, KV: c.KVLayout(DefaultPageSize, 1, tc.dt)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, gpu.ErrBudget) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				t.Logf("%v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", p.Summary())
			if p.DeviceBlocks != tc.devBlks || p.HostBlocks != c.Layers-tc.devBlks {
				t.Errorf("%d layers' experts on the GPU, %d in RAM; want %d", p.DeviceBlocks, p.HostBlocks, tc.devBlks)
			}
			if tc.opts.CPUMoE || tc.opts.NCPUMoE > 0 || p.HostBlocks == 0 {
				return
			}
			// Independently: every layer's experts weigh the same here, so
			// the automatic plan holds floor(left / layer) of them, left
			// being the budget after what comes before the experts.
			layer := w.PerBlock[0]
			ws := WorkspaceBytes(c, PlannedRows(DefaultPrefillChunk))
			kvTokens := tc.opts.ContextLen
			if kvTokens == 0 {
				kvTokens = c.ContextLen
			}
			kv := c.KVLayout(DefaultPageSize, kvcache.PagesForTokens(kvTokens, DefaultPageSize), tc.dt)
			var state int64
			if c.Hybrid() {
				state = c.StateLayout(DefaultStateSlots).Bytes()
			}
			left := tc.budget - 64<<20 - w.Dense - kvcache.PoolBytes(kv) - state - ws - GPUHeadroom(tc.budget)
			if tc.opts.ExpertRun != "cpu" {
				left -= gpu.StreamStagingBytes(layer)
			}
			if want := int(left / layer); p.DeviceBlocks != want {
				t.Errorf("%d layers on the GPU, the budget arithmetic gives %d", p.DeviceBlocks, want)
			}
			if p.DeviceBytes() > tc.budget-64<<20 {
				t.Errorf("plan %d bytes over the budget", p.DeviceBytes())
			}
			// The pool holds the requested context and more.
			l := c.KVLayout(DefaultPageSize, 1, tc.dt)
			if tok := int((p.Input.KV + p.Spare) / l.BytesPerPage() * int64(l.PageSize)); tok < tc.opts.ContextLen {
				t.Errorf("the pool holds %d tokens, fewer than --ctx-size %d", tok, tc.opts.ContextLen)
			}
			if (p.Staging > 0) != (p.HostBlocks > 0 && tc.opts.ExpertRun != "cpu") {
				t.Errorf("staging %d with %d host layers", p.Staging, p.HostBlocks)
			}
		})
	}
}

// A model that loaded before placement existed loads the same: when the
// requested context cannot fit even with every expert in RAM but the
// whole model fits with a page of KV, every expert stays on the GPU.
func TestPlanExpertsKeepsAModelThatFits(t *testing.T) {
	const gib = int64(1) << 30
	f, c := shapeOnlyModel(t, "qwen3-30b-a3b", gguf.Q4_K)
	w := ReadExpertWeights(f, c)
	// bf16 KV for 262,144 tokens of Qwen3-30B-A3B is 24 GiB; the model
	// (~17 GiB) fits a 20 GiB budget with ~2 GiB of pool.
	p, err := PlanExperts(c, w, Options{ContextLen: 262144}, PlacementRequest{Budget: 20 * gib, KV: c.KVLayout(DefaultPageSize, 1, kvcache.BF16)})
	if err != nil {
		t.Fatal(err)
	}
	if p.HostBlocks != 0 || p.Staging != 0 {
		t.Errorf("%s: experts moved to RAM for a model that fits", p.Summary())
	}
	if p.Spare <= 0 {
		t.Errorf("no room left for the pool: %+v", p)
	}
	// Forcing the placement still works.
	p, err = PlanExperts(c, w, Options{ContextLen: 4096, NCPUMoE: 4}, PlacementRequest{Budget: 20 * gib, KV: c.KVLayout(DefaultPageSize, 1, kvcache.BF16)})
	if err != nil || p.HostBlocks != 4 || p.NCPUMoE() != 4 {
		t.Fatalf("--n-cpu-moe 4: %v %+v", err, p)
	}
	// The flags are checked here too (bench capacity plans without Validate).
	if _, err := PlanExperts(c, w, Options{CPUMoE: true, NCPUMoE: 2}, PlacementRequest{Budget: 20 * gib, KV: c.KVLayout(DefaultPageSize, 1, kvcache.BF16)}); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("--cpu-moe with --n-cpu-moe: %v", err)
	}
	// A dense model has nothing to place.
	fd, cd := shapeOnlyModel(t, "qwen3-tiny", gguf.Q8_0)
	if p, err := PlanExperts(cd, ReadExpertWeights(fd, cd), Options{}, PlacementRequest{Budget: 8 * gib, KV: cd.KVLayout(DefaultPageSize, 1, kvcache.BF16)}); p != nil || err != nil {
		t.Errorf("dense model: plan %v, error %v", p, err)
	}
}

func TestExpertOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{ExpertRun: "auto"}, ""},
		{Options{ExpertRun: "CPU"}, ""},
		{Options{ExpertRun: "stream", NCPUMoE: 12}, ""},
		{Options{CPUMoE: true}, ""},
		{Options{ExpertRun: "gpu"}, `--expert-run "gpu": supported values are auto, cpu`},
		{Options{NCPUMoE: -1}, "--n-cpu-moe -1: must be 0"},
		{Options{CPUMoE: true, NCPUMoE: 3}, "--cpu-moe and --n-cpu-moe 3: give one"},
	} {
		err := tc.o.Validate(Hardware{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

func TestExpertFlagsIgnored(t *testing.T) {
	moe := model.Config{Arch: "qwen35moe", Experts: 256}
	dense := model.Config{Arch: "llama"}
	for _, tc := range []struct {
		o     Options
		onGPU bool
		c     model.Config
		want  string
	}{
		{Options{}, false, moe, ""},
		{Options{ExpertRun: "auto"}, false, moe, ""},
		{Options{CPUMoE: true}, true, moe, ""},
		{Options{CPUMoE: true}, false, moe, "--cpu-moe is ignored on the CPU"},
		{Options{NCPUMoE: 8, ExpertRun: "cpu"}, false, moe, "--n-cpu-moe 8 and --expert-run cpu are ignored on the CPU"},
		{Options{NCPUMoE: 8}, true, dense, "--n-cpu-moe 8 is ignored: llama has no routed MoE experts"},
	} {
		got := expertFlagsIgnored(tc.o, tc.onGPU, tc.c)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%+v on GPU %v: %q, want %q", tc.o, tc.onGPU, got, tc.want)
		}
	}
}

func TestComputeDTypeIgnored(t *testing.T) {
	for _, tc := range []struct {
		cd    string
		onGPU bool
		want  string
	}{
		{"", false, ""},
		{"auto", false, ""},
		{"fp16", true, ""},
		{"bf16", true, ""},
		{"nonsense", false, ""}, // Validate refuses it before the load
		{"fp16", false, "--compute-dtype fp16 is ignored on the CPU"},
		{"BF16", false, "--compute-dtype bf16 is ignored on the CPU"},
	} {
		got := computeDTypeIgnored(Options{ComputeDType: tc.cd}, tc.onGPU)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%q on GPU %v: %q, want %q", tc.cd, tc.onGPU, got, tc.want)
		}
	}
}

// The KV plan keeps the staging of streamed experts free beside the
// workspace; without host experts it is planKV as before.
func TestPlanKVStaging(t *testing.T) {
	const gib = int64(1) << 30
	c := qwen36MoE35B()
	st := kvcache.RecurrentState{Slots: 4, PerSlot: 65863680}
	base, err := planKV(8*gib, 3*gib, 5*gib, c, 264, st)
	if err != nil {
		t.Fatal(err)
	}
	same, err := planKVStaging(8*gib, 3*gib, 5*gib, c, 264, st, 0)
	if err != nil || same != base {
		t.Fatalf("no staging: %d, %v; planKV %d", same, err, base)
	}
	staged, err := planKVStaging(8*gib, 3*gib, 5*gib, c, 264, st, 864<<20)
	if err != nil {
		t.Fatal(err)
	}
	if base-staged != 864<<20 {
		t.Errorf("staging took %d bytes of the pool, want %d", base-staged, 864<<20)
	}
}

func TestParseExpertRun(t *testing.T) {
	for s, want := range map[string]gpu.HostRun{"": gpu.HostAuto, "auto": gpu.HostAuto, "cpu": gpu.HostCPU, " Stream ": gpu.HostStream, "split": gpu.HostSplit, "cpu-decode": gpu.HostCPUDecode} {
		if got, err := ParseExpertRun(s); err != nil || got != want {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
}

// Tensor names are untrusted: block numbers past the trunk, overlong or
// odd ones never index past the per-block table.
func TestReadExpertWeightsOddNames(t *testing.T) {
	f, c := shapeOnlyModel(t, "qwen3moe-tiny", gguf.Q8_0)
	base := ReadExpertWeights(f, c)
	for _, name := range []string{"blk.99999999999.ffn_up_exps.weight", "blk.2147483648.ffn_gate_exps.weight", "blk.007.ffn_down_exps.weight", "blk..ffn_up_exps.weight"} {
		g := *f
		g.Tensors = append(slices.Clone(f.Tensors), gguf.TensorInfo{Name: name, Dims: []uint64{32, 2}, Type: gguf.F32})
		w := ReadExpertWeights(&g, c)
		if w.Total() != base.Total() || len(w.PerBlock) != c.Layers {
			t.Errorf("%s: experts %d (was %d), %d blocks", name, w.Total(), base.Total(), len(w.PerBlock))
		}
	}
}

// On the CPU the placement flags change nothing (a warning says they are
// ignored), and a bad --expert-run is refused before the model loads.
func TestExpertFlagsOnCPULoad(t *testing.T) {
	path := synthModel(t, "qwen3moe-tiny", gguf.Q8_0)
	e := loadOn(t, path, "cpu", "bf16", Options{CPUMoE: true, KVTokens: 256})
	if st := e.Stats(); st.ExpertLayersHost != 0 || st.ExpertLayers != 0 || e.plan != nil {
		t.Errorf("CPU load with --cpu-moe has a placement: %+v", st)
	}
	if n := e.Info().Notes; len(n) != 1 || !strings.Contains(n[0], "--cpu-moe is ignored on the CPU") {
		t.Errorf("notes %q, want the --cpu-moe warning", n)
	}
	_, err := Load(context.Background(), Options{Model: path, Device: "cpu", ExpertRun: "gpu"}, nil)
	if err == nil || !strings.Contains(err.Error(), `--expert-run "gpu"`) {
		t.Errorf("--expert-run gpu: %v", err)
	}
}
